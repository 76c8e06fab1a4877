"""Command line: parse, call the library, write results/ and print a summary.

One module per subcommand: search.py, pareto.py (with sweep.py), plan.py (export, explain, plot),
validate.py, calibrate.py, prices.py, listing.py; what they share is args.py and recipes.py.

Exit status: 0 success, 1 `fasop validate --max-mape` exceeded, 2 bad input (one line on
stderr), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 141 stdout closed early.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from fasop import __version__
from fasop.cli.args import Parser, one_line
from fasop.core.errors import FasopError


_MODULES = {"search": "fasop.cli.search", "pareto": "fasop.cli.pareto", "list": None, "export": "fasop.cli.plan",
            "explain": "fasop.cli.plan", "plot": "fasop.cli.plan", "validate": "fasop.cli.validate",
            "prices": "fasop.cli.prices", "calibrate": "fasop.cli.calibrate"}
"""Each subcommand's module, in the order `fasop --help` lists them (imported on first use: `fasop
list` does not pay for the search)."""


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
        elif module == "fasop.cli.plan":
            importlib.import_module("fasop.cli.plan").add_plan_parsers(sub)
        else:
            importlib.import_module(module).add_parser(sub)
    return parser


def _add_list_parser(sub) -> None:
    p = sub.add_parser("list", help="the shipped model or cluster specs, one line each",
                       description="List the specs fasop ships (usable by name with --model / --cluster).")
    p.add_argument("what", choices=("models", "clusters"), nargs="?", help="one of them (default: both)")


def _list(args: argparse.Namespace) -> int:
    from fasop.cli.listing import spec_lines

    kinds = [args.what] if args.what else ["models", "clusters"]
    for kind in kinds:
        if len(kinds) > 1:
            print(f"{kind}:" if kind == kinds[0] else f"\n{kind}:")
        for line in spec_lines(kind):
            print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    from fasop.core.workers import exit_status, sigterm_as_interrupt

    argv = sys.argv[1:] if argv is None else argv
    try:
        with sigterm_as_interrupt():
            args = build_parser(argv[0] if argv else None).parse_args(argv)
            if args.command in ("export", "explain", "plot"):
                from fasop.cli.plan import run_plan_command

                return run_plan_command(args)
            if args.command == "list":
                return _list(args)
            return importlib.import_module(_MODULES[args.command]).run(args)
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
