"""The `fasop` command: one module per subcommand (`search`, `pareto` with `sweep`, `plan` for
explain/plot/export, `validate`, `prices`, `listing`), what they share (`args`, `recipes`) and
`main` (parse, call the library, write; one-line errors, exit statuses, signals). The only layer
that imports argparse or prints.

May import: every layer.
"""

from fasop.cli.command import main

__all__ = ["main"]
