"""CUDA-graph capture in the exports: a row's `cuda_graphs` (what its estimate assumed the run
captures, `fasop search --cuda-graphs`) as Megatron-LM's flags and torchtitan's key, and what each
target demands of a captured run that the plan does not say, as warnings.

Megatron-LM at d98e8a6 (`megatron/training/arguments.py`, `megatron/core/transformer/
transformer_config.py`, `megatron/training/config/common_config.py`):

- `--cuda-graph-impl` (TransformerConfig.cuda_graph_impl, a generated flag: none, local,
  transformer_engine, full_iteration). `full_iteration` captures the whole forward-backward in one
  graph (optimizer step outside); it needs `--cuda-graph-modules` empty and
  `--no-check-for-nan-in-loss-and-grad` (arguments.py asserts it). The per-layer modules
  (`--cuda-graph-modules attn moe_router ...`, arguments.py, space-separated) run under
  `transformer_engine` (TE make_graphed_callables, the impl Megatron-LM's MoE README and
  Megatron-Bridge's recipes use for module lists; `local` would also graph moe_preprocess with
  moe_router, transformer_config.py). The old `--cuda-graph-scope` is deprecated.
- `--te-rng-tracker` (RNGConfig.te_rng_tracker): required; arguments.py turns it on with a warning.
- A dropless MoE layer cannot be captured where it syncs with the host: the `moe` module only with
  drop-and-pad (`--moe-expert-capacity-factor`, `--moe-pad-expert-input-to-capacity`: a row never
  has it, search refuses it, specs/host_ops.search_scopes), the whole iteration only with static shapes (Megatron-Bridge's full-iteration MoE recipes: HybridEP with
  `--moe-expert-rank-capacity-factor`, tokens over the budget dropped, perf_recipes/deepseek/common.py
  @067f987). fasop estimates dropless all-to-all MoE layers: a warning, nothing written.
- Per-layer graphs and full recompute exclude each other (the search never pairs them,
  estimators/analytic/recipes.py); with transformer_engine graphs, `moe` recompute and a graphed
  moe_router exclude each other.

torchtitan at HEAD b5bcd76 (2026-08-21, torchtitan/config/configs.py `TrainingConfig.disable_cuda_graphs`,
default False: the forward+backward step is captured) refuses capture with pipeline parallelism and
with expert parallelism unless the dispatcher never syncs with the host (trainer.py
`_validate_cuda_graphs`: HybridEP with `non_blocking_capacity_factor`, or MinimalAsyncEP). It has
no per-module capture.
"""

from __future__ import annotations

from fasop.specs.host_ops import search_scopes
from fasop.specs.types import ModelSpec

MEGATRON_FULL_ITERATION = ("--cuda-graph-impl full_iteration", "--no-check-for-nan-in-loss-and-grad", "--te-rng-tracker")
"""Megatron-LM's flags of a whole-iteration capture."""
MEGATRON_PER_LAYER_IMPL = "transformer_engine"
"""The --cuda-graph-impl of a per-layer module list."""


def scopes_of(cell: str | None) -> tuple[str, ...]:
    """A row's cuda_graphs cell as scopes; () for an empty, `none` or unreadable cell (eager)."""
    scopes, why = search_scopes(cell or "none")
    return () if why else scopes


def megatron_graphs(model: ModelSpec, s, warnings: list[str]) -> list[str]:
    """Megatron-LM's flags of the row's capture (`s`: export Settings), its constraints as `warnings`."""
    scopes = scopes_of(s.cuda_graphs)
    if not scopes:
        return []
    arch = model.architecture
    moe = arch is not None and arch.moe is not None
    if scopes == ("full_iteration",):
        if moe:
            flags = "--moe-expert-rank-capacity-factor 1.5" if s.moe_flex else \
                "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-expert-rank-capacity-factor 1.5"
            warnings.append("cuda_graphs full_iteration on an MoE model: the dropless dispatcher estimated copies token "
                            "counts to the host every layer, which a whole-iteration graph cannot hold; Megatron-Bridge's "
                            f"full-iteration MoE recipes run static shapes instead ({flags}: tokens over the budget "
                            "dropped) -- not written: set them, or plan with --cuda-graphs attn,moe_router,moe_preprocess")
        return list(MEGATRON_FULL_ITERATION)
    args = [f"--cuda-graph-impl {MEGATRON_PER_LAYER_IMPL}", "--cuda-graph-modules " + " ".join(scopes),
            "--te-rng-tracker"]
    if "moe_router" in scopes and s.recompute.startswith("selective:") and "moe" in s.recompute[10:].split(","):
        warnings.append("recompute of the moe module with a graphed moe_router: Megatron-Core refuses the pair under "
                        "--cuda-graph-impl transformer_engine (transformer_config.py); drop one")
    return args


def torchtitan_graphs(p, s, warnings: list[str]) -> list[tuple[str, str, str]]:
    """torchtitan's `training.disable_cuda_graphs` (key, value, why) for the row: its default captures
    the forward+backward step, so an eager plan writes True; a graphed one False where torchtitan
    can capture it, else True with a warning."""
    scopes = scopes_of(s.cuda_graphs)
    if not scopes:
        return [("disable_cuda_graphs", "True", "eager, as estimated (torchtitan's default captures fwd+bwd)")]
    if p.pp > 1:
        warnings.append(f"cuda_graphs {','.join(scopes)}: torchtitan captures no graph with pipeline parallelism "
                        "(trainer.py _validate_cuda_graphs); written eager, slower than estimated where the host binds")
        return [("disable_cuda_graphs", "True", "torchtitan refuses CUDA graphs with pipeline parallelism")]
    if scopes != ("full_iteration",):
        warnings.append(f"cuda_graphs {','.join(scopes)}: torchtitan has no per-module capture; it captures the whole "
                        "forward+backward step (more than estimated)")
    if p.ep > 1:
        warnings.append("CUDA graphs with expert parallelism: torchtitan captures only a dispatcher that never syncs "
                        "with the host (HybridEP with non_blocking_capacity_factor, or MinimalAsyncEP): set it in your "
                        "model recipe, or disable_cuda_graphs = True (eager, slower than estimated where the host binds)")
    return [("disable_cuda_graphs", "False", "the forward+backward step in a CUDA graph, as estimated")]
