"""What the subcommands share: argparse with one-line errors, checked integer types, the spec,
run-length and execution options, progress on stderr, and short forms for printed tables.

Imported by command.py and the subcommand modules of fasop/cli/ (the only modules that import argparse).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from fasop.core import limits
from fasop.core.errors import FasopError

PROGRESS_S = 5.0
"""Without a terminal, a progress line on stderr every this many seconds (none for shorter runs)."""
HINT_S = 60.0
"""A ProgressBar's hint is printed once the work has run this long."""


class Parser(argparse.ArgumentParser):
    """argparse with its errors in one line (`fasop search: error: ...`), exit status 2, and no
    abbreviated options: argparse would take `fasop plot --out x.png` as --out-dir (a directory
    named x.png) and `fasop pareto --out x.csv` as --out-prefix (x.csv_pareto.csv); unabbreviated,
    each is refused with a did-you-mean."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        self.subcommands: list = []
        """The add_subparsers actions of this parser (their .choices: name -> sub-parser)."""
        super().__init__(*args, **kwargs)

    def add_subparsers(self, **kwargs):
        action = super().add_subparsers(**kwargs)
        self.subcommands.append(action)
        return action

    def error(self, message: str):
        hint = self._did_you_mean(message)
        self.exit(2, f"{self.prog}: error: {one_line(message)}{hint} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        self.seen = list(sys.argv[1:] if args is None else args)  # its subcommand: whose options a hint names
        return super().parse_known_args(args, namespace)

    def _did_you_mean(self, message: str) -> str:
        """`; did you mean --partitioner?` for an unrecognized option: the options of the
        subcommand given (else of this parser and all its subcommands) it begins (`--out` for
        --out-dir), else the closest (difflib's ratio >= 0.6), read from their help text (argparse
        has no public list of a parser's options; argument groups' are included)."""
        import difflib

        prefix = "unrecognized arguments: "
        if not message.startswith(prefix):
            return ""
        subs = {name: sub for action in self.subcommands for name, sub in action.choices.items()}
        given = [subs[token] for token in getattr(self, "seen", [])[:1] if token in subs]
        parsers = [self] + (given or list(subs.values()))
        known = {option for p in parsers for option in re.findall(r"--[A-Za-z0-9][\w-]*", p.format_help())}
        hints = []
        for token in message[len(prefix):].split():
            if token.startswith("--"):
                option = token.split("=")[0][:100]
                longer = sorted(o for o in known if o.startswith(option) and o != option)
                hints += longer[:1] or difflib.get_close_matches(option, sorted(known - {option}), n=1, cutoff=0.6)
        return f"; did you mean {' / '.join(hints[:3])}?" if hints else ""


def one_line(text: str, limit: int = 2000) -> str:
    """`text` as one printable line of at most `limit` characters."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


def int_at_least(minimum: int, what: str, maximum: int | None = None):
    """An argparse type: an integer from minimum to maximum, else `expected <what>, got '<text>'`."""
    def parse(text: str) -> int:
        digits = text.strip().lstrip("+-0")
        try:
            value = int(text) if len(digits) <= 30 else None  # no int() of a 10,000-digit number
        except ValueError:
            value = None
        if value is None and len(digits) > 30 and text.strip().lstrip("+").isdigit():
            value = 10**30
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {one_line(repr(text), 80)}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"at most {maximum:,}, fasop's ceiling (README: Limits), "
                                             f"got {one_line(text, 40)}")
        return value
    return parse


positive_int = int_at_least(1, "a positive integer")
non_negative_int = int_at_least(0, "an integer >= 0")


TOKENS_PER_PARAMETER = 20
"""The default length of a run of a catalog model (one scored from its architecture): 20 training
tokens per parameter, the compute-optimal ratio of Hoffmann et al. 2022 ("Chinchilla", Table 3);
counted over all parameters, experts included. FASOP's profiled specs keep FASOP's 12,500,000
iterations."""


def token_count(text: str) -> int:
    """An argparse type: a whole number of tokens, written out or as `15e12` / `1.5e13`."""
    from decimal import Decimal, InvalidOperation

    cleaned = text.strip().replace("_", "")
    try:
        value = Decimal(cleaned) if len(cleaned) <= 40 else None
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite() or value < 1 or value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"expected a whole number of tokens (e.g. 15e12), got {one_line(repr(text), 80)}")
    if value > limits.TOKENS:
        raise argparse.ArgumentTypeError(f"at most {limits.TOKENS:.0e}, fasop's ceiling (README: Limits), "
                                         f"got {one_line(text, 40)}")
    return int(value)


def add_length(parser: argparse.ArgumentParser, default_iterations: int) -> None:
    """--tokens or --iterations: how long the training run is; --seq-len and --global-batch-size:
    what a step is (search and pareto)."""
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--tokens", type=token_count,
                        help="training tokens, e.g. 15e12; iterations = ceil(tokens / (global batch x sequence "
                        f"length)). Default for a catalog model: {TOKENS_PER_PARAMETER} tokens per parameter "
                        "(Chinchilla); for FASOP's profiled specs: --iterations's default")
    length.add_argument("--iterations", type=int_at_least(1, "a positive integer", limits.ITERATIONS),
                        help=f"training steps for train_cost_usd and train_time_h (FASOP's specs: default "
                        f"{default_iterations:,})")
    add_step_shape(parser)


def add_step_shape(parser: argparse.ArgumentParser) -> None:
    """--seq-len and --global-batch-size, over the model spec's `training:` values."""
    parser.add_argument("--seq-len", type=int_at_least(1, "a positive integer", limits.SEQUENCE_LENGTH),
                        metavar="TOKENS", help="tokens per sequence (default: the model spec's sequence_length)")
    parser.add_argument("--global-batch-size", type=int_at_least(1, "a positive integer", limits.GLOBAL_BATCH_SIZE),
                        metavar="SEQUENCES", help="sequences per step, so tokens per step = this x --seq-len "
                        "(default: the model spec's global_batch_size)")


def with_step_shape(model, seq_len: int | None, global_batch_size: int | None, where: str = "--seq-len"):
    """`model` with another sequence length and/or global batch (None: the spec's). A profiled
    model (FASOP's specs) was measured at its own sequence length: another is refused."""
    from dataclasses import replace

    if seq_len is not None and seq_len != model.sequence_length and model.profile is not None:
        raise FasopError(f"{where}: {model.path}'s profile was measured at sequence length {model.sequence_length}; "
                         f"got {seq_len} (a model from a HuggingFace config takes any)")
    changes = {k: v for k, v in (("sequence_length", seq_len), ("global_batch_size", global_batch_size))
               if v is not None}
    return replace(model, **changes) if changes else model


def model_of(args: argparse.Namespace):
    """The --model spec with --seq-len / --global-batch-size applied."""
    from fasop.specs.load import load_model

    return with_step_shape(load_model(args.model), getattr(args, "seq_len", None),
                           getattr(args, "global_batch_size", None))


def default_tokens(model) -> int | None:
    """TOKENS_PER_PARAMETER x the parameters of a catalog model; None for FASOP's profiled specs."""
    if model.architecture is None or model.profile is not None:
        return None
    from fasop.estimators.analytic.layers import total_params

    return min(TOKENS_PER_PARAMETER * round(total_params(model.architecture)), limits.TOKENS)


def length_notes(args: argparse.Namespace, model) -> list[str]:
    """What the run assumed that the user did not say: the training length of a catalog model
    without --tokens / --iterations, and a bare config.json's sequence length and batch."""
    lines = []
    if model.path.endswith(".json"):
        assumed = [f"{what} {value:,}" for what, value, flag in (
            ("sequence length", model.sequence_length, "seq_len"),
            ("global batch", model.global_batch_size, "global_batch_size")) if getattr(args, flag, None) is None]
        if assumed:
            lines.append(f"note: {model.path} is a bare config.json: assumed {' and '.join(assumed)} "
                         "(--seq-len, --global-batch-size to change)")
    tokens = default_tokens(model)
    if tokens is not None and not args.tokens and not args.iterations:
        lines.append(f"note: training length: {TOKENS_PER_PARAMETER} tokens per parameter (Chinchilla), "
                     f"{tokens:.3g} tokens = {iterations_of(args, model):,} iterations of "
                     f"{model.global_batch_size:,} x {model.sequence_length:,} tokens (--tokens or --iterations "
                     "to change)")
    return lines


def iterations_of(args: argparse.Namespace, model) -> int:
    """Training steps: --iterations, or --tokens (default: default_tokens, else DEFAULT_ITERATIONS)."""
    from fasop.search.engine import DEFAULT_ITERATIONS

    tokens = args.tokens or (None if args.iterations else default_tokens(model))
    if not tokens:
        return args.iterations or DEFAULT_ITERATIONS
    from fasop.pareto.sweep import iterations_for_tokens

    iterations = iterations_for_tokens(tokens, global_batch_size=model.global_batch_size,
                                       sequence_length=model.sequence_length)
    if iterations > limits.ITERATIONS:
        raise FasopError(f"--tokens: {iterations:.3g} iterations, more than fasop's ceiling of "
                         f"{limits.ITERATIONS:.0e} (README: Limits)")
    return iterations


def run_tag(args: argparse.Namespace, placements: str = "all") -> str:
    """What distinguishes a run beyond model, cluster and nodes, for default output names, so runs
    stop overwriting each other: `_placements-grouped` (other than the command's default `placements`), `_spot`,
    `_tokens1.5e+13` / `_iterations1000`, `_seq8192`, `_gbs1024`, each recipe flag given (`_recompute-full`, `_zero-1-2`, `_hsdp-on`, `_cp-1-2`, `_ep-8`, ...) and a calibration overlay
    (`_calibrated-sc21`); '' for none."""
    # (--heterogeneous is not tagged: mixed nodes need it and one node type searches the same plans without it)
    parts = [f"placements-{args.placements}"] if getattr(args, "placements", placements) != placements else []
    parts += ["spot"] if getattr(args, "spot", False) else []
    if getattr(args, "tokens", None):
        parts.append(f"tokens{args.tokens:.6g}")
    elif getattr(args, "iterations", None):
        parts.append(f"iterations{args.iterations}")
    if getattr(args, "seq_len", None):
        parts.append(f"seq{args.seq_len}")
    if getattr(args, "global_batch_size", None):
        parts.append(f"gbs{args.global_batch_size}")
    for flag in ("recompute", "zero", "sequence_parallel", "virtual_stages", "precision", "main_grads",
                 "optimizer_states", "mtp_layers", "cuda_graphs", "offload_layers", "recompute_layers", "bf16_layers",
                 "cp_comm", "hsdp", "cp", "ep", "etp"):
        values = getattr(args, flag, None)
        if values is not None:
            shown = ("on" if v is True else "off" if v is False else v for v in values)   # --hsdp on,off
            parts.append(f"{flag.replace('_', '-')}-{'-'.join(map(str, shown))}")
    if getattr(args, "calibration", None):
        parts.append(f"calibrated-{Path(args.calibration).stem}")
    return "".join("_" + p for p in parts)


def workers_of(requested: int) -> int:
    from fasop.core.workers import clamp_workers

    workers, note = clamp_workers(requested)
    if note:
        print(note, file=sys.stderr)
    return workers


def add_specs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="name in model_specs/ or path to a model YAML")
    parser.add_argument("--cluster", required=True, help="name in cluster_specs/ or path to a cluster YAML")


def add_execution(parser: argparse.ArgumentParser, workers_help: str = "estimate in N processes (same output as 1; "
                   "default %(default)s)", default_workers: int = 1) -> None:
    """How the search runs: processes, partitioner budget, progress bar (search and pareto)."""
    parser.add_argument("--workers", type=positive_int, default=default_workers, metavar="N", help=workers_help)
    parser.add_argument("--partition-budget", type=int_at_least(1, "a positive integer", limits.PARTITION_BUDGET),
                        metavar="NODES",
                        help="cap the optimal partitioner's effort: search-tree nodes per plan, past which it keeps "
                        "the best split found and reports its gap to the best bound (partition_gap_pct). Default: "
                        "no cap, every split proven optimal where it can be (a short exact branch and bound, a local "
                        "search from its split, the branch and bound again proving only that nothing is faster, then a "
                        "MILP certificate for small programs)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (on a terminal) or progress "
                        f"lines (otherwise, every {PROGRESS_S:g} s)")


def partitioner_note(args: argparse.Namespace, cluster) -> str:
    """Sets --partitioner's default (optimal); a note when --partitioner or --partition-budget was
    given for a cluster whose estimator splits the layers its own way (the analytic estimator's
    `balanced` split: stage times balanced across GPU types, each stage within its memory), where
    they change nothing."""
    given = [flag for flag, value in (("--partitioner", args.partitioner), ("--partition-budget", args.partition_budget))
             if value is not None]
    args.partitioner = args.partitioner or "optimal"
    if not given or cluster.analytic is None:
        return ""
    return (f"note: {' and '.join(given)} do nothing with the {cluster.estimator} estimator of {Path(cluster.path).name}: "
            "it balances each plan's layers over its stages itself (partition_method balanced; docs/analytic.md)")


class ProgressBar:
    """Progress on stderr: tqdm on a terminal; otherwise a line every PROGRESS_S seconds (none
    for a run that ends sooner). Yields a progress(done, total) callback. `hint`: a line printed once
    when the work is still running after HINT_S seconds (what to do about a long run)."""

    def __init__(self, disabled: bool, label: str, unit: str = "plans", hint: str = ""):
        self.disabled, self.label, self.unit, self.bar, self.hint = disabled, label, unit, None, hint
        self.start = time.monotonic()

    def _hinted(self, done: int, total: int, write) -> None:
        if self.hint and done < total and time.monotonic() - self.start >= HINT_S:
            write(self.hint)
            self.hint = ""

    def __enter__(self):
        if self.disabled:
            return None
        if not sys.stderr.isatty():
            return self._lines()
        from tqdm import tqdm

        def update(done: int, total: int) -> None:
            if self.bar is None:
                self.bar = tqdm(total=total, desc=self.label, unit=self.unit.rstrip("s"), leave=False, file=sys.stderr)
            self.bar.update(done - self.bar.n)
            self._hinted(done, total, lambda line: tqdm.write(line, file=sys.stderr))

        return update

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False

    def _lines(self):
        start = last = self.start

        def update(done: int, total: int) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= PROGRESS_S and done < total:
                last = now
                print(f"fasop: {self.label}: {done:,} of {total:,} {self.unit} ({100 * done / max(total, 1):.0f} %, "
                      f"{now - start:,.0f} s)", file=sys.stderr, flush=True)
                self._hinted(done, total, lambda line: print(line, file=sys.stderr, flush=True))

        return update


def add_calibration(parser: argparse.ArgumentParser) -> None:
    """--calibration OVERLAY.yaml: `fasop calibrate`'s fitted physical parameters (docs/calibrate.md)."""
    parser.add_argument("--calibration", metavar="OVERLAY.yaml",
                        help="apply a `fasop calibrate` overlay (fitted GPU efficiencies, per-layer overheads, link "
                        "shares) to the analytic estimator's constants; see docs/calibrate.md")


def calibrated(args: argparse.Namespace, cluster):
    """`cluster` with the --calibration overlay applied to its analytic constants (itself without
    one); refused for a cluster whose estimator has no such constants."""
    return overlaid(cluster, args.calibration, "--calibration") if getattr(args, "calibration", None) else cluster


def overlaid(cluster, path: str, label: str):
    """`cluster` with the `fasop calibrate` overlay at `path` applied to its analytic constants; errors
    (a cluster whose estimator has none, an overlay that does not load) name `label` first."""
    from dataclasses import replace

    from fasop.specs.calibration import apply_calibration, load_calibration

    if cluster.analytic is None:
        raise FasopError(f"{label}: the {cluster.estimator} estimator of {cluster.path} has no physical "
                         "constants to calibrate (use a cluster with estimator: analytic, e.g. --cluster aws)")
    try:
        calibration = load_calibration(path)
    except FasopError as exc:
        raise FasopError(f"{label}: {exc}") from None
    return replace(cluster, analytic=apply_calibration(calibration, cluster.analytic))
