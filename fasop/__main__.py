"""`python -m fasop`: the `fasop` command."""

import sys

from fasop.cli.command import main

if __name__ == "__main__":
    sys.exit(main())
