import sys

from fasop.cli import main

sys.exit(main())
