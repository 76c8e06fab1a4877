"""The estimator matches FASOP's intermediate values, piece by piece, on five worked candidates.

tests/data/worked_examples.txt is a copy of shared/reference/fasop/worked_examples.txt: values
printed from inside the original program for five (model, tp, dp, pp, mbs, placement)
candidates on the fasop-paper cluster (placement letters: A = an a100 node, B = an a10 node).
Each block is rebuilt as a Plan with the shipped specs and compared stage by stage, so that a
mismatch in the final step time points at the piece that caused it.

Tolerance: times are printed to 9 decimals (relative 1e-6, absolute 1e-9 for tiny values such
as a 4.9864e-05 s transfer); memory to 6 decimals (absolute 1e-6 GiB).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest

from conftest import DATA
from fasop.estimators.fasop2024 import comm as fasop2024_comm
from fasop.estimators.fasop2024.estimator import Fasop2024Estimator
from fasop.plans.plan import Plan
from fasop.specs.load import load_cluster, load_model
from fasop.specs.types import GIB, TRANSFORMER_KINDS

LETTERS = {"A": "a100", "B": "a10"}
MODELS = {"gpt2XL": "gpt2xl", "bert": "bert"}
f32 = np.float32


def close(expected: float):
    return pytest.approx(expected, rel=1e-6, abs=1e-9)


@dataclass
class Example:
    title: str
    model: str
    tp: int
    dp: int
    pp: int
    mbs: int
    placement: str
    num_microbatches: int
    values: dict

    def __str__(self) -> str:
        return self.title


LITERAL_LINES = (  # (line prefix, value key, marker after which a Python literal follows)
    ("gpu_type_lst", "gpu_types", "):"),
    ("partition:", "partition", ":"),
    ("stage comp time", "stage_compute", "c_i:"),
    ("stage for_send", "send_fwd", "):"),
    ("stage back_send", "send_bwd", "):"),
    ("stage end times", "stage_end", "):"),
    ("dp_cost_list", "dp_cost", "stage:"),
)


def _parse_block(block: str) -> Example:
    lines = block.strip().splitlines()
    head = re.fullmatch(r"(\S+) tp=(\d+) dp=(\d+) pp=(\d+) mbs=(\d+) placement=([AB]+) num_mb=(\d+)", lines[0])
    assert head, lines[0]
    name, tp, dp, pp, mbs, placement, num_mb = head.groups()
    values: dict = {}

    def after(line: str, marker: str) -> str:
        return line.split(marker, 1)[1].strip()

    for line in lines[1:]:
        literal = next(((key, marker) for prefix, key, marker in LITERAL_LINES if line.startswith(prefix)), None)
        if literal:
            values[literal[0]] = ast.literal_eval(after(line, literal[1]))
        elif line.startswith(("cost_e_a100", "cost_e_a10 ")):
            gpu = "A100" if line.startswith("cost_e_a100") else "A10"
            values[f"layer_costs_{gpu}"] = {k: float(v) for k, v in re.findall(r"(first|transformer|last)=([\d.e-]+)", line)}
        elif line.startswith("cost_c"):
            values["p2p"] = [] if "pp=1" in line else ast.literal_eval(after(line, "):"))
        elif line.startswith("embedding all-reduce"):
            values["embedding"] = float(after(line, ":"))
        elif line.startswith("EstimatePeakMemory"):
            m = re.search(r"is_oom=(\w+) oom_gpumem=([\d.]+) is_zero_oom=(\w+) zero_gpumem=([\d.]+)", line)
            values["memory"] = (m[1] == "True", float(m[2]), m[3] == "True", float(m[4]))
        elif line.startswith("estimated time"):
            m = re.search(r"= ([\d.]+); pipeline time = ([\d.]+); DP col = ([\d.]+)", line)
            values["step"], values["pipeline"], values["dp_column"] = map(float, m.groups())
        else:
            raise AssertionError(f"unparsed line: {line}")
    return Example(lines[0], MODELS[name], int(tp), int(dp), int(pp), int(mbs), placement, int(num_mb), values)


def _examples() -> list[Example]:
    text = (DATA / "worked_examples.txt").read_text()
    return [_parse_block(block) for block in text.split("=== ")[1:]]


EXAMPLES = _examples()
KEYS = {"gpu_types", "layer_costs_A100", "layer_costs_A10", "p2p", "partition", "stage_compute", "send_fwd",
        "send_bwd", "stage_end", "dp_cost", "embedding", "memory", "step", "pipeline", "dp_column"}


def test_every_block_parsed_completely():
    """Guards the tests below against a parser that silently skips a line kind."""
    assert len(EXAMPLES) == 5
    for example in EXAMPLES:
        assert set(example.values) == KEYS, example


@cache
def _setup(model_name: str, num_nodes: int):
    """Estimator for one a100 node + a10 nodes (the heterogeneous inventory of §1)."""
    model, cluster = load_model(model_name), load_cluster("fasop-paper")
    inventory = (cluster.node_types["a100"],) + (cluster.node_types["a10"],) * (num_nodes - 1)
    return model, cluster, Fasop2024Estimator(model, cluster, inventory)


def _run(example: Example):
    return _run_block(EXAMPLES.index(example))


@cache
def _run_block(index: int):
    example = EXAMPLES[index]
    model, cluster, estimator = _setup(example.model, len(example.placement))
    placement = tuple(cluster.node_types[LETTERS[c]] for c in example.placement)
    plan = Plan(tp=example.tp, dp=example.dp, pp=example.pp, mbs=example.mbs,
                global_batch_size=model.global_batch_size, placement=placement)
    return model, estimator, plan, estimator.prepare(plan), estimator.estimate(plan)


per_example = pytest.mark.parametrize("example", EXAMPLES, ids=str)


@per_example
def test_plan_shape(example):
    _, _, plan, _, _ = _run(example)
    assert plan.num_gpus == 4 * len(example.placement)  # 4-GPU nodes, every GPU used
    assert plan.num_microbatches == example.num_microbatches


@per_example
def test_stage_gpu_types(example):
    """slowest-gpu-per-stage (§2)."""
    *_, estimate = _run(example)
    assert [t.gpu for t in estimate.stage_node_types] == example.values["gpu_types"]


@per_example
@pytest.mark.parametrize("gpu", ["A100", "A10"])
def test_layer_costs(example, gpu):
    """Per-layer fwd+bwd of the first, a transformer and the last entry (§3: 3 x profile x scaling)."""
    _, estimator, plan, _, _ = _run(example)
    seconds = estimator.compute.layer_costs(gpu, plan.tp, plan.mbs).seconds
    expected = example.values[f"layer_costs_{gpu}"]
    assert (seconds[0], seconds[1], seconds[-1]) == (close(expected["first"]), close(expected["transformer"]),
                                                     close(expected["last"]))


@per_example
def test_p2p_per_boundary(example):
    """§4, and the sends the schedule charges: stage 0 forward, last stage backward."""
    _, _, plan, prepared, _ = _run(example)
    assert list(prepared.p2p) == [close(c) for c in example.values["p2p"]]
    send_fwd = [prepared.p2p[0] if i == 0 and plan.pp > 1 else 0.0 for i in range(plan.pp)]
    send_bwd = [prepared.p2p[-1] if i == plan.pp - 1 and plan.pp > 1 else 0.0 for i in range(plan.pp)]
    assert send_fwd == [close(c) for c in example.values["send_fwd"]]
    assert send_bwd == [close(c) for c in example.values["send_bwd"]]


@per_example
def test_partition_and_stage_compute(example):
    """§6 greedy min-max split, and each stage's summed compute time."""
    *_, estimate = _run(example)
    assert list(estimate.partition) == example.values["partition"]
    assert list(estimate.stage_compute_s) == [close(c) for c in example.values["stage_compute"]]


@per_example
def test_stage_end_times(example):
    """§5 1F1B: when each stage finishes; pipeline time = stage 0's."""
    *_, estimate = _run(example)
    assert list(estimate.stage_end_s) == [close(e) for e in example.values["stage_end"]]
    assert estimate.pipeline_time_s == close(example.values["pipeline"])


@per_example
def test_dp_cost_per_stage(example):
    """§7: every stage all-reduces stage 0's parameters, accumulated here by hand in float32:
    (12h^2 + 20800)/tp per transformer layer, plus h*v for the first embedding or head."""
    model, _, plan, _, estimate = _run(example)
    h, v = model.hidden_size, model.vocab_size
    params, seen_embedding = f32(0), False
    for kind in model.layer_kinds[:estimate.partition[0]]:
        if kind in TRANSFORMER_KINDS:
            params = params + f32((12 * h * h + 20800) / plan.tp)
        elif not seen_embedding:
            params, seen_embedding = params + f32(h * v), True
    ring = fasop2024_comm.dp_ring_bandwidth(plan)
    costs = [float(fasop2024_comm.dp_allreduce_seconds(plan, params, ring, t.intra_node_shared, 2)) for t in estimate.stage_node_types]
    assert costs == [close(c) for c in example.values["dp_cost"]]
    assert estimate.dp_allreduce_s == close(example.values["dp_column"])


@per_example
def test_embedding_allreduce(example):
    model, _, plan, _, estimate = _run(example)
    assert float(fasop2024_comm.embedding_allreduce_seconds(plan, model)) == close(example.values["embedding"])
    assert estimate.embedding_allreduce_s == close(example.values["embedding"])


@per_example
def test_memory(example):
    """§8: peak GiB per GPU without and with ZeRO, and the flags (none of the five is OOM, so the
    reported numbers are the largest stage's, rounded to 4 decimals)."""
    *_, estimate = _run(example)
    is_oom, oom_gib, is_zero_oom, zero_gib = example.values["memory"]
    memory = estimate.memory
    assert (memory.is_oom, memory.is_zero_oom) == (is_oom, is_zero_oom)
    assert max(memory.stage_bytes) / GIB == pytest.approx(oom_gib, abs=1e-6)
    assert max(memory.stage_zero_bytes) / GIB == pytest.approx(zero_gib, abs=1e-6)
    assert memory.oom_gpumem_gib == pytest.approx(oom_gib, abs=5.1e-5)
    assert memory.zero_oom_gpumem_gib == pytest.approx(zero_gib, abs=5.1e-5)


@per_example
def test_step_time(example):
    """step = max_i(E_i + DP_i) + embedding (§7)."""
    *_, estimate = _run(example)
    assert estimate.step_time_s == close(example.values["step"])
