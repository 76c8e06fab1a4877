"""Command line: parse, call the library, write results/ and print a summary.

Exit status: 0 success, 2 bad input (one line on stderr), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fasop.errors import FasopError

DEFAULT_SHOWN = 5


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from fasop.estimate import PARTITIONERS
    from fasop.search import DEFAULT_ITERATIONS, PLACEMENTS

    parser = argparse.ArgumentParser(prog="fasop", description="Plan and price Transformer training on "
                                     "heterogeneous GPU clusters.")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("search", help="rank every parallelisation plan for one inventory of nodes",
                       description="Enumerate tp/dp/pp/micro-batch/placement plans for the given nodes, "
                       "estimate each, and write them ranked by step time.")
    s.add_argument("--model", required=True, help="name in model_specs/ or path to a model YAML")
    s.add_argument("--cluster", required=True, help="name in cluster_specs/ or path to a cluster YAML")
    s.add_argument("--nodes", required=True, metavar="TYPE=COUNT[,TYPE=COUNT...]",
                   help="the inventory, e.g. a100=1,a10=3 (node 0 first)")
    s.add_argument("--heterogeneous", action="store_true", help="allow mixed node types and search their placements")
    s.add_argument("--placements", choices=PLACEMENTS, default="cyclic",
                   help="node orders to try: cyclic = FASOP's rotations of the --nodes list")
    s.add_argument("--partitioner", choices=PARTITIONERS, default="fasop-minmax",
                   help="layer split: fasop-minmax = FASOP's greedy balancing")
    s.add_argument("--iterations", type=_positive_int, default=DEFAULT_ITERATIONS,
                   help=f"training steps for train_cost_usd and train_time_h (default {DEFAULT_ITERATIONS:,})")
    s.add_argument("--out", help="CSV to write (default results/<model>_<cluster>_<nodes>.csv)")
    s.add_argument("--show", type=int, default=DEFAULT_SHOWN, help="plans to print (default %(default)s)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _search(args)
    except FasopError as exc:
        print(f"fasop: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fasop: interrupted; nothing written", file=sys.stderr)
        return 130


def _search(args: argparse.Namespace) -> int:
    from fasop.report import csv_text, search_rows, write_atomic
    from fasop.search import parse_nodes, search
    from fasop.specs import load_cluster, load_model

    model = load_model(args.model)
    cluster = load_cluster(args.cluster)
    inventory = parse_nodes(args.nodes, cluster)
    out = Path(args.out) if args.out else Path("results") / (
        f"{model.name}_{Path(cluster.path).stem}_{args.nodes.replace('=', 'x').replace(',', '-')}.csv")
    with _progress_bar(args.no_progress, "estimating") as progress:
        result = search(model, cluster, inventory, heterogeneous=args.heterogeneous, placements=args.placements,
                        partitioner=args.partitioner, iterations=args.iterations, progress=progress)
    columns, rows = search_rows(result, model.sequence_length)
    write_atomic(out, csv_text(columns, rows))
    _print_summary(result, rows, args.show, model.name, Path(cluster.path).stem)
    print(f"wrote {out}")
    return 0


class _progress_bar:
    """tqdm on stderr, shown only on a terminal; yields a progress(done, total) callback."""

    def __init__(self, disabled: bool, label: str):
        self.disabled, self.label, self.bar = disabled, label, None

    def __enter__(self):
        if self.disabled or not sys.stderr.isatty():
            return None
        from tqdm import tqdm

        def update(done: int, total: int) -> None:
            if self.bar is None:
                self.bar = tqdm(total=total, desc=self.label, unit="step", leave=False, file=sys.stderr)
            self.bar.update(done - self.bar.n)

        return update

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False


def _print_summary(result, rows: list[dict], show: int, model_name: str, cluster_name: str) -> None:
    counts = {}
    for node in result.inventory:
        counts[node.name] = counts.get(node.name, 0) + 1
    inventory = " + ".join(f"{n}x{name}" for name, n in counts.items())
    gpus = sum(n.gpus_per_node for n in result.inventory)
    print(f"{model_name} on {inventory} ({gpus} GPUs, {cluster_name}): {len(rows)} plans, "
          f"{result.num_oom} out of memory")
    fitting = [r for r in rows if not r["is_oom"]][:show]
    if not fitting:
        print("no plan fits in GPU memory")
        return
    header = ("rank", "tp", "dp", "pp", "mbs", "step_s", "samples/s", "usd/step", "train_h", "train_usd",
              "mem_GiB", "placement", "partition")
    table = [header] + [(
        str(r["rank"]), str(r["tp"]), str(r["dp"]), str(r["pp"]), str(r["mbs"]), f"{r['step_time_s']:.4f}",
        f"{r['samples_per_s']:.1f}", f"{r['usd_per_step']:.5f}", f"{r['train_time_h']:,.1f}",
        f"{r['train_cost_usd']:,.0f}", f"{r['oom_gpumem_gib']:.2f}", _abbreviate(r["node_placement"]),
        r["partition"]) for r in fitting]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        cells = [c.rjust(w) if i < 11 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())


def _abbreviate(placement: str) -> str:
    """a10-a10-a10-a100 -> 3xa10-a100 (runs of equal node types collapsed)."""
    out, names = [], placement.split("-")
    i = 0
    while i < len(names):
        j = i
        while j < len(names) and names[j] == names[i]:
            j += 1
        out.append(names[i] if j - i == 1 else f"{j - i}x{names[i]}")
        i = j
    return "-".join(out)


if __name__ == "__main__":
    sys.exit(main())
