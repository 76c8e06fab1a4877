"""Command line: parse, call the library, write results/ and print a summary.

One module per subcommand: cli_search.py, cli_pareto.py (with cli_sweep.py), cli_plan.py
(export, explain, plot), cli_validate.py, cli_prices.py; what they share is cli_args.py.

Exit status: 0 success, 1 `fasop validate --max-mape` exceeded, 2 bad input (one line on
stderr), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 141 stdout closed early.
"""

from __future__ import annotations

import argparse
import os
import sys

from fasop import __version__
from fasop.cli_args import Parser, one_line
from fasop.errors import FasopError


def build_parser() -> argparse.ArgumentParser:
    from fasop import cli_pareto, cli_plan, cli_prices, cli_search, cli_validate

    parser = Parser(prog="fasop", description="Plan and price Transformer training on "
                    "heterogeneous GPU clusters.")
    parser.add_argument("--version", action="version", version=f"fasop {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_search.add_parser(sub)
    cli_pareto.add_parser(sub)
    _add_list_parser(sub)
    cli_plan.add_plan_parsers(sub)
    cli_validate.add_parser(sub)
    cli_prices.add_parser(sub)
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
    from fasop import cli_pareto, cli_prices, cli_search, cli_validate
    from fasop.workers import exit_status, sigterm_as_interrupt

    commands = {"search": cli_search.run, "pareto": cli_pareto.run, "list": _list, "validate": cli_validate.run,
                "prices": cli_prices.run}
    try:
        with sigterm_as_interrupt():
            args = build_parser().parse_args(argv)
            if args.command in ("export", "explain", "plot"):
                from fasop.cli_plan import run_plan_command

                return run_plan_command(args)
            return commands[args.command](args)
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
