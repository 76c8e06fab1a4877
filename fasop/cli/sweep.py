"""`fasop pareto`'s sweep options and driver: pruning, buyer limits, checkpoint and resume,
executor (local processes or Ray). cli/pareto.py registers the options and calls
`run_sweep`; the library parts are fasop.pareto.pruning, fasop.pareto.buyer, fasop.pareto.checkpoint, fasop.pareto.executors."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from fasop.core.errors import FasopError


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    from fasop.pareto.executors import EXECUTORS
    from fasop.pareto.pruning import ROUND_SIZE
    from fasop.pareto.ray_executor import CONNECT_TIMEOUT_S

    limits = p.add_argument_group("buyer limits (compositions outside are not searched)")
    limits.add_argument("--max-gpus", type=int, metavar="N", help="at most N GPUs in all")
    limits.add_argument("--max-usd-per-hour", type=float, metavar="USD",
                        help="at most USD per hour for the whole composition (on the --spot basis if given)")
    limits.add_argument("--min-gpu-memory-gib", type=float, metavar="GIB",
                        help="only node types whose GPUs have at least GIB usable memory (memory_limit_gib)")
    limits.add_argument("--min-total-memory-gib", type=float, metavar="GIB",
                        help="at least GIB of GPU memory over all the composition's GPUs")
    run = p.add_argument_group("how the sweep runs")
    run.add_argument("--exhaustive", action="store_true",
                     help="search every composition in full (default: skip those proved off the frontier, "
                     "reported status=pruned; the frontier, knee and answers are the same)")
    run.add_argument("--round-size", type=int, default=ROUND_SIZE, metavar="N",
                     help="compositions searched per pruning round (default %(default)s; larger keeps more "
                     "workers busy, prunes less; output depends on it, never on --workers or --executor)")
    run.add_argument("--resume", action="store_true",
                     help="continue an interrupted sweep from PREFIX_pareto.checkpoint (same bytes as an "
                     "uninterrupted run)")
    run.add_argument("--executor", choices=EXECUTORS, default="local",
                     help="local: --workers processes on this machine (default); ray: tasks on a Ray cluster "
                     "(pip install 'fasop[ray]'; docs/pareto.md, 'Catalog scale')")
    run.add_argument("--ray-address", metavar="ADDRESS",
                     help="Ray cluster to use with --executor ray: HEAD_IP:6379, ray://HEAD_IP:10001 or auto "
                     "(default: $RAY_ADDRESS, else a private Ray instance started for the run; docs/ray.md)")
    run.add_argument("--ray-connect-timeout", type=_timeout, default=CONNECT_TIMEOUT_S, metavar="S",
                     help="with --ray-address: give up when the address cannot be reached within S seconds "
                     "(default %(default)g)")


MAX_CONNECT_TIMEOUT_S = 3600.0
"""--ray-connect-timeout at most an hour: past it, a typo (1e9, inf) that would wait for ever."""


def _timeout(text: str) -> float:
    """--ray-connect-timeout: seconds in (0, MAX_CONNECT_TIMEOUT_S]; 0, nan, inf and the like refused here."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value <= MAX_CONNECT_TIMEOUT_S):   # false for nan
        raise argparse.ArgumentTypeError(f"expected seconds in (0, {MAX_CONNECT_TIMEOUT_S:g}], got {text[:40]!r}")
    return value


def buyer_limits(args: argparse.Namespace):
    from fasop.pareto.buyer import BuyerLimits

    if args.max_gpus is not None and args.max_gpus < 1:
        raise FasopError(f"--max-gpus: must be >= 1, got {args.max_gpus}")
    return BuyerLimits(max_gpus=args.max_gpus, max_usd_per_hour=args.max_usd_per_hour,
                       min_gpu_memory_gib=args.min_gpu_memory_gib, min_total_memory_gib=args.min_total_memory_gib)


def run_sweep(args: argparse.Namespace, model, cluster, comps, iterations: int, workers: int, checkpoint_path: Path,
              progress, estimator_options: dict | None = None) -> tuple[list, KeyboardInterrupt | None, dict]:
    """Sweep `comps` as the options say: (results in composition order, the interrupt (Ctrl-C or
    SIGTERM) that stopped it or None, counts {"pruned": n, "resumed": n}). estimator_options: the
    recipes given for the analytic estimator (cli_recipes.options). The checkpoint stays:
    the caller removes it once a complete sweep's result is on disk."""
    from fasop.pareto import sweep
    from fasop.pareto.checkpoint import Checkpoint, fingerprint
    from fasop.pareto.executors import make_executor
    from fasop.pareto.pruning import pruned_sweep

    job = sweep.sweep_job(model, cluster, comps, placements=args.placements, partitioner=args.partitioner,
                           iterations=iterations, spot=args.spot, top=1, partition_budget=args.partition_budget,
                           estimator_options=estimator_options)
    if args.round_size < 1:
        raise FasopError(f"--round-size: must be >= 1, got {args.round_size}")
    prune = not args.exhaustive
    checkpoint = Checkpoint(checkpoint_path, fingerprint(job, tuple(comps), prune, args.round_size),
                            resume=args.resume, compositions=comps)
    if args.resume and not checkpoint.resumed:
        print(f"note: --resume: no checkpoint at {checkpoint_path}; starting from the beginning", file=sys.stderr)
    executor = make_executor(job, args.executor, workers, args.ray_address, args.ray_connect_timeout)
    if args.executor == "ray":
        print(f"note: --executor ray: {executor.description}", file=sys.stderr)
    results, interrupted = {}, None
    try:
        for index, result in pruned_sweep(job, comps, executor, prune=prune, round_size=args.round_size,
                                          done=checkpoint.done, record=checkpoint.record, progress=progress):
            results[index] = result
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM (workers.sigterm_as_interrupt)
        interrupted = exc
    finally:
        checkpoint.close()  # removed by the caller once the complete result is written
    counts = {"pruned": sum(r.status == "pruned" for r in results.values()),
              "resumed": len(checkpoint.done) if checkpoint.resumed else 0}
    return [results[i] for i in sorted(results)], interrupted, counts
