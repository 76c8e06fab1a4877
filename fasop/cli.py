"""Command line: parse, call the library, write results/ and print a summary.

One module per subcommand: cli_search.py, cli_pareto.py (with cli_sweep.py), cli_plan.py
(export, explain, plot), cli_validate.py, cli_prices.py; what they share is cli_args.py.

Exit status: 0 success, 1 `fasop validate --max-mape` exceeded, 2 bad input (one line on
stderr), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 141 stdout closed early.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from fasop import __version__
from fasop.cli_args import Parser, one_line
from fasop.errors import FasopError


_MODULES = {"search": "cli_search", "pareto": "cli_pareto", "list": None, "export": "cli_plan", "explain": "cli_plan",
            "plot": "cli_plan", "validate": "cli_validate", "prices": "cli_prices"}
"""Each subcommand's module (fasop.cli_*), in the order `fasop --help` lists them."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or with `command` only of that one (its module's): what
    `fasop COMMAND ...` needs, without importing the other subcommands' modules."""
    parser = Parser(prog="fasop", description="Plan and price Transformer training on "
                    "heterogeneous GPU clusters.")
    parser.add_argument("--version", action="version", version=f"fasop {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in dict.fromkeys(_MODULES[name] for name in ([command] if command in _MODULES else _MODULES)):
        if module is None:
            _add_list_parser(sub)
        elif module == "cli_plan":
            importlib.import_module("fasop.cli_plan").add_plan_parsers(sub)
        else:
            importlib.import_module(f"fasop.{module}").add_parser(sub)
    return parser


def _add_list_parser(sub) -> None:
    p = sub.add_parser("list", help="the shipped model or cluster specs, one line each",
                       description="List the specs fasop ships (usable by name with --model / --cluster).")
    p.add_argument("what", choices=("models", "clusters"))


def _list(args: argparse.Namespace) -> int:
    from fasop.listing import spec_lines

    for line in spec_lines(args.what):
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    from fasop.workers import exit_status, sigterm_as_interrupt

    argv = sys.argv[1:] if argv is None else argv
    try:
        with sigterm_as_interrupt():
            args = build_parser(argv[0] if argv else None).parse_args(argv)
            if args.command in ("export", "explain", "plot"):
                from fasop.cli_plan import run_plan_command

                return run_plan_command(args)
            if args.command == "list":
                return _list(args)
            return importlib.import_module(f"fasop.{_MODULES[args.command]}").run(args)
    except FasopError as exc:
        print(f"fasop: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print("fasop: interrupted; nothing written", file=sys.stderr)
        return exit_status(exc)
    except BrokenPipeError:  # e.g. `fasop search ... | head`: files are written, stdout was closed early
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
