"""The hardware catalog: GPU types and the analytic estimator's physical constants.

Data lives in `fasop/data/cluster_specs/catalog/gpus.yaml` (one entry per GPU type, a source on every
number) and `fasop/data/cluster_specs/catalog/analytic.yaml` (efficiencies, latencies, overheads). A cluster
spec with `estimator: analytic` (fasop/data/cluster_specs/aws.yaml, gcp.yaml) names a catalog GPU per node
type and gets its memory, intra-node link and peaks from here (catalog_clusters.py reads it). Units are converted once,
at load: TFLOP/s -> FLOP/s, GB/s -> bytes/s, Gbit/s -> bytes/s, GiB -> bytes (YAML read through fasop.specs.load).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from fasop.core import limits
from fasop.core.errors import SpecError
from fasop.specs.files import shipped_folder
from fasop.specs.gpu_names import by_name, canonical, could_be
from fasop.specs.host_ops import HostOps, read_host_ops
from fasop.specs.reader import Reader, read_yaml
from fasop.specs.types import GIB
from fasop.specs.validate_software import read_validate_software

CATALOG_DIR = shipped_folder("cluster_specs") / "catalog"
LINKS = ("nvlink", "xgmi", "pcie")
PEAK_PRECISIONS = ("bf16", "fp16", "fp8", "fp32", "tf32", "mxfp8", "nvfp4")
"""The precisions gpus.yaml gives a dense peak for (`<precision>_tflops`)."""
_GPU_KEYS = tuple(f"{p}_tflops" for p in PEAK_PRECISIONS) + ("memory_gib", "memory_gbyte_per_s",
             "intra_node_gbyte_per_s", "intra_node_link", "matmul_efficiency", "reference_inter_node_gbit_per_s",
             "intra_node_efficiency", "fp8_matmul_efficiency", "fused_attention_efficiency",
             "validate_software", "streaming_multiprocessors", "nvlink_domain_gpus", "memory_bandwidth_efficiency",
             "layer_overhead_s", "reference_gpus_per_node", "compute_capability", "kernel_launch_s", "nvfp4_matmul_efficiency",
             "layer_gemm_share", "ssd_scan_efficiency", "host_link_gbyte_per_s", "aliases")
PARAM_KEYS = ("memory_bandwidth_efficiency", "link_efficiency", "link_latency_s", "fused_attention", "fused_elementwise",
              "eager_rope", "fsdp_copy_out", "fused_attention_efficiency", "gemm_traffic", "overlap_slowdown",
              "dp_overlap", "framework_overhead_gib", "gradient_reduce_bytes", "gradient_accumulation_fusion",
              "fp8_cast_bytes", "nvfp4_cast_bytes", "tp_overlap", "overlap_grad_reduce", "matmul_tile", "kernel_launch_s", "kernels_per_layer",
              "micro_batch_sync", "p2p_blocking", "optimizer_step_bytes", "loss_scaling_bytes", "gradient_bucket_bytes",
              "te_module_call_s", "host_ops", "layer_overhead_s", "moe_load_imbalance", "grouped_gemm_efficiency",
              "ep_overlap", "moe_node_dedup")
"""The keys analytic.yaml (and a cluster spec's `analytic:` section) may hold."""
EAGER_ROPES = ("complex", "matrix")


@dataclass(frozen=True, kw_only=True, eq=False)
class GpuType:
    """One catalog GPU (compared and hashed by identity: the catalog loads each once)."""

    name: str
    peak_flops: dict[str, float]
    """Dense peak per precision, FLOP/s (tensor cores; `fp32`: CUDA cores); a missing key: no such unit."""
    memory_bytes: float
    """GPU memory usable by training (before the framework overhead)."""
    memory_bytes_per_s: float
    intra_node_bytes_per_s: float
    """Per-GPU link to the node's other GPUs, one direction."""
    intra_node_link: str
    matmul_efficiency: float
    """Achievable share of the peak on large matmuls (measured MAMF / peak where measured)."""
    reference_inter_node_bytes_per_s: float
    """Network of the vendor's reference node, per node (used by `fasop validate`)."""
    fp8_matmul_efficiency: float | None = None
    """Achievable share of the FP8 peak on large matmuls, where measured; None: matmul_efficiency."""
    nvfp4_matmul_efficiency: float | None = None
    """Achievable share of the NVFP4 peak, where measured (or a same-die proxy); None: the FP8 share."""
    intra_node_efficiency: float | None = None
    """Share of the intra-node link NCCL achieves, where measured; None: the link kind's (analytic.yaml)."""
    fused_attention_efficiency: float | None = None
    """Share of the 16-bit peak a fused attention kernel reaches, where measured; None: analytic.yaml's."""
    streaming_multiprocessors: int = 0
    """SMs (CUs) that run a matmul's output tiles in waves; 0: unknown (no wave quantization)."""
    nvlink_domain_gpus: int | None = None
    """GPUs of an NVLink domain spanning nodes (NVL72: 72; its groups use the GPU link); None: the node."""
    reference_gpus_per_node: int = 8
    """GPUs of the vendor's reference node (GB200 / GB300: a 4-GPU tray): validate's `gpus_per_node`."""
    validate_software: dict = field(default_factory=dict)
    """What `fasop validate` assumes for a row that leaves a software cell empty: the software the published
    training runs on this GPU had (specs/validate_software.py: the flat switches, `moe_software` by precision,
    `megatron_fsdp`); a missing key: analytic.yaml's value. Search and pareto do not estimate with it."""
    memory_bandwidth_efficiency: float | None = None
    """Share of the memory bandwidth memory-bound kernels reach, measured or calibrated; None: analytic.yaml's."""
    compute_capability: float | None = None
    """CUDA compute capability (7.5: Turing); None: not an NVIDIA GPU, or unknown. FlashAttention-2 and
    PyTorch SDPA's flash backend need 8.0+ (estimators.analytic.overheads.fused_attention)."""
    layer_overhead_s: float | None = None
    """Launch / framework seconds per layer and micro-batch forward (backward 2x); None: analytic.yaml's."""
    layer_gemm_share: dict[str, float] = field(default_factory=dict)
    """Per precision, the share of matmul_flops a training layer's weight GEMMs reach after their waves,
    where measured at such shapes (Blackwell: Transformer Engine's GEMM profiling tutorial); none: 1."""

    def memory_share(self, params: "AnalyticParams") -> float:
        return self.memory_bandwidth_efficiency or params.memory_bandwidth_efficiency

    kernel_launch_s: float | None = None
    """Host seconds a kernel where the package fixes the host (Grace); None: analytic.yaml's (host.py)."""
    host_link_bytes_per_s: float | None = None
    """One direction of the GPU's link to host memory where the package fixes it (Grace's NVLink-C2C); None: a
    PCIe Gen5 x16 slot (estimators.analytic.offload)."""

    def layer_overhead(self, params: "AnalyticParams") -> float:
        return params.layer_overhead_s if self.layer_overhead_s is None else self.layer_overhead_s

    def intra_node_share(self, params: "AnalyticParams") -> float:
        return self.intra_node_efficiency or params.link_efficiency[self.intra_node_link]

    aliases: tuple[str, ...] = ()
    """Other names of the same part (gpu_names.py), e.g. H100-SXM's `H100`."""
    ssd_scan_efficiency: float | None = None
    """Share of the 16-bit peak Mamba-2's chunked scan (mamba_ssm's Triton kernels) reaches where measured;
    None: blocks.SSD_FLASH_RATIO of the GPU's fused attention rate."""

    def attention_share(self, params: "AnalyticParams") -> float:
        return self.fused_attention_efficiency or params.fused_attention_efficiency

    def matmul_flops(self, precision: str) -> float:
        """Achievable matmul FLOP/s in `precision`; fp8 without FP8 units runs at the 16-bit peak,
        bf16 without BF16 units at the fp16 peak (what a framework falls back to); tf32 without TF32
        units (pre-Ampere) at the fp32 CUDA-core peak, and an fp32 matmul at the fp32 peak."""
        chain = {"fp32": ("fp32",), "tf32": ("tf32", "fp32")}.get(precision)
        for p in chain or (precision, "bf16" if precision in ("fp8", "mxfp8", "nvfp4") else "fp16", "fp16"):
            if p in self.peak_flops:
                # block-scaled GEMMs: NVFP4's own share where given, else the FP8 share measured, where it was
                own = self.nvfp4_matmul_efficiency if p == "nvfp4" else None
                fp8 = p in ("fp8", "mxfp8", "nvfp4") and self.fp8_matmul_efficiency is not None
                return self.peak_flops[p] * (own or (self.fp8_matmul_efficiency if fp8 else self.matmul_efficiency))
        raise AssertionError(f"{self.name} has no {precision} peak")

    def gemm_flops(self, precision: str) -> float:
        """matmul_flops at a training layer's weight-GEMM shapes (x layer_gemm_share; fp16 as bf16)."""
        return self.matmul_flops(precision) * self.layer_gemm_share.get("bf16" if precision == "fp16" else precision, 1.0)


@dataclass(frozen=True, kw_only=True, eq=False)
class AnalyticParams:
    """Physical constants of the analytic estimator (fasop/data/cluster_specs/catalog/analytic.yaml);
    compared and hashed by identity, so that the cost model can cache on them."""

    memory_bandwidth_efficiency: float
    link_efficiency: dict[str, float]
    """Per link kind: nvlink, xgmi, pcie, network."""
    intra_node_latency_s: float
    inter_node_latency_s: float
    fused_attention: bool
    fused_attention_efficiency: float
    """Share of the 16-bit peak a fused attention kernel reaches (forward and backward)."""
    gemm_traffic: bool
    """Charge a matmul's operand bytes on top of its FLOPs (Calculon's `no_overlap` processing mode)."""
    fused_elementwise: bool = True
    """Norms, rotary, the MLP activation and residual adds run as fused kernels (Megatron / Transformer
    Engine); false: one eager PyTorch kernel per op (eager.eager_extra_bytes)."""
    eager_rope: str = "complex"
    """Eager RoPE in fp32 (EAGER_ROPES; eager.EAGER_ROPE_BYTES): `complex` meta-llama / torchtitan, `matrix` IBM FMS."""
    fsdp_copy_out: bool = True
    """FSDP2's copy-out and reduce-scatter copy-in (parallel.fsdp_copy_bytes); false: FSDP1's flat parameter, in place."""
    compiled_rope: bool = False
    """A compiled block's `complex` RoPE stays eager: Inductor runs complex ops as aten kernels (eager.py)."""
    megatron_fsdp: bool = False
    """ZeRO 3 is Megatron-FSDP: parameters are views of the gathered bucket and gradients accumulate into the
    reduce-scatter buffer, so neither FSDP2's copies nor FSDP1's concatenation (set by `fasop validate`)."""
    quantized_activations: bool = True
    """A low-precision run keeps its weight matmuls' inputs for the backward quantized, as Transformer Engine does
    (layers.Recipe.stored_input_bytes); false: in 16 bits, as torchao's float8 does (set by `fasop validate`)."""
    dp_overlap: float
    framework_overhead_bytes: float
    gradient_reduce_bytes: dict[str, int]
    gradient_accumulation_fusion: bool = False
    """The weight-gradient matmul adds into the fp32 main gradient (Megatron-LM `--gradient-accumulation-fusion`)."""
    fp8_cast_bytes: float = 0.0
    """Bytes moved per matmul-input element an FP8 run casts (read 16-bit, write FP8 and its transpose)."""
    nvfp4_cast_bytes: float = 0.0
    """The same for an NVFP4 run (layers.Recipe.cast_bytes)."""
    overlap_grad_reduce: bool = False
    """DP gradient buckets are reduced during the backward: a stage's DP sync waits only for what
    its last micro-batch's backward (and next forward, for the weight all-gather) cannot cover."""
    tp_overlap: float = 0.0
    """Share of the tensor-parallel collectives hidden behind the layer's matmuls."""
    overlap_slowdown: float = 0.0
    """Compute beside an overlapped DP / FSDP collective runs (1 + this) times slower (data_parallel.overlap_share)."""
    matmul_tile: tuple[int, int] = (1, 1)
    """Output tile (rows, columns) an SM computes at a time: a matmul runs in whole waves of them (1, 1: none)."""
    kernel_launch_s: float = 0.0
    """Host (CPU) seconds to issue one kernel: framework dispatch, autograd and the launch itself."""
    micro_batch_sync: bool = False
    """The runtime synchronises the device at every micro-batch (DeepSpeed's PipelineEngine): the
    host's kernel issue adds to a layer pass instead of hiding behind it (estimators.analytic.host)."""
    p2p_blocking: bool = False
    """Each pipeline transfer is its own blocking send / recv (DeepSpeed's PipelineEngine): a boundary's
    activation and gradient do not overlap, a 1F1B cycle pays both (estimators.analytic.host)."""
    kernels_per_layer: tuple[int, int] = (0, 0)
    """Kernels the dense block issues per layer and micro-batch, (forward, backward) (estimators.analytic.host)."""
    host: HostOps = HostOps()
    """Host ops of the modules beyond the dense block, a TE call's price, graphed scopes (specs/host_ops.py)."""
    optimizer_step_bytes: dict[str, float] = field(default_factory=lambda: {"bf16": 30.0, "fp16": 30.0, "fp8": 30.0,
                                                                               "fp32": 28.0, "tf32": 28.0})
    """Bytes the optimizer step moves per parameter a GPU updates, per precision (memory bound)."""
    loss_scaling_bytes: float = 0.0  # fp16 only: bytes a parameter of the loss-scaling passes (unscale, inf / NaN check)
    gradient_bucket_bytes: float = float("inf")
    """Gradient bytes per DP all-reduce bucket: each bucket pays the ring's latencies."""
    layer_overhead_s: float = 0.0
    """Seconds per layer and micro-batch forward (backward 2x) beyond FLOPs and bytes; a GPU's own overrides it."""
    calibrated_gpus: dict[str, GpuType] = field(default_factory=dict)
    """GPU types as a calibration overlay has them (fasop/specs/calibration.py), by canonical name."""
    calibration: tuple[tuple[str, float], ...] = ()
    """The overlay's values as applied (`Calibration.values`), for a cluster's own constants (validate rows)."""

    def gpu(self, gpu: GpuType) -> GpuType:
        """`gpu` as these constants' calibration has it (itself when not calibrated)."""
        return self.calibrated_gpus.get(canonical(gpu.name), gpu)
    moe_load_imbalance: float = 1.0
    """Tokens the busiest expert-parallel rank receives / the mean (rho >= 1)."""
    grouped_gemm_efficiency: float = 1.0
    """Rate of the routed experts' grouped GEMM as a share of the GPU's dense matmul rate."""
    ep_overlap: float = 0.0
    """Share of the other micro-batch's compute the EP all-to-all hides behind (Megatron-Core's EP A2A overlap)."""
    moe_node_dedup: bool = False  # dispatch a token across the network once per remote node (DeepEP / HybridEP)
    moe_rank_dedup: bool = False  # and once per rank of its own domain (DeepEP; moe_kernels.dispatch_copies)
    moe_allgather: bool = False  # Megatron-Core's allgather dispatcher: collectives over ep x etp (moe_kernels.py)
    moe_routing: str = "uniform"  # how tokens spread over the experts (moe_kernels.ROUTINGS)
    moe_comm_sms: int = 0  # SMs a DeepEP / HybridEP dispatch or combine kernel holds while it runs (0: none taken)
    moe_permute_fusion: bool = True  # Megatron-Core's --moe-permute-fusion; false: the unfused path (moe_kernels.py)
    adam_moment_bytes: int = 4
    """Bytes of each of Adam's two moments per parameter: 4 (fp32), 2 under Megatron-Core's precision-aware
    optimizer with bf16 moments (--exp-avg-dtype / --exp-avg-sq-dtype bf16; a `fasop validate` row's
    `optimizer_states` bf16)."""


@lru_cache(maxsize=4)
def load_gpus(path: str = str(CATALOG_DIR / "gpus.yaml")) -> dict[str, GpuType]:
    """Every GPU type of the catalog, keyed by canonical name."""
    top = Reader(Path(path), read_yaml(Path(path)), "")
    gpus = {}
    for name in list(top.data):
        gpus[canonical(str(name))] = _gpu(top.sub(name, _GPU_KEYS), str(name))
    top.done()
    return gpus


@lru_cache(maxsize=4)
def gpu_names(path: str = str(CATALOG_DIR / "gpus.yaml")) -> dict[str, GpuType]:
    """load_gpus keyed by every name a GPU answers to: its own and its aliases (gpu_names.py)."""
    return by_name(load_gpus(path), path)


def unknown_gpu(shown: str, name: str = "") -> str:
    """Why a GPU name (`shown`, '' where the place names it; the GPUs it could be first) is refused."""
    gpus = load_gpus().values()
    return f"unknown GPU type {shown + ' ' if shown else ''}({could_be(name, gpus)}catalog: {', '.join(g.name for g in gpus)})"


def find_gpu(name: str, where: str = "gpu") -> GpuType:
    gpu = gpu_names().get(canonical(name))
    if gpu is None:
        raise SpecError(where, "gpu", unknown_gpu(repr(name), name))
    return gpu


def _gpu(r: Reader, name: str) -> GpuType:
    optional = lambda key: r.get(key, (int, float, type(None)), None, lambda v: v is None or v > 0, "> 0 or null")
    share = lambda key: r.get(key, (int, float), None, lambda v: 0 < v <= 1, "in (0, 1]")
    peaks = {p: optional(f"{p}_tflops") for p in PEAK_PRECISIONS}
    if peaks["fp16"] is None and peaks["bf16"] is None:
        raise r.error("fp16_tflops", "a GPU needs a 16-bit peak")
    if peaks["fp32"] is None:
        raise r.error("fp32_tflops", "a GPU needs its FP32 (CUDA-core) peak")
    top = max(v for v in peaks.values() if v is not None)
    if top > limits.TFLOPS:
        raise r.error(f"{max(peaks, key=lambda p: peaks[p] or 0)}_tflops", f"at most {limits.TFLOPS:,} TFLOP/s")
    for low, high in (("fp32", "fp16"), ("tf32", "fp16"), ("fp16", "fp8"), ("fp8", "mxfp8"), ("mxfp8", "nvfp4")):
        if peaks[low] is not None and peaks[high] is not None and peaks[low] > peaks[high]:
            raise r.error(f"{low}_tflops", f"{peaks[low]} is above {high}_tflops {peaks[high]} (a narrower type is never slower)")
    host = r.get("host_link_gbyte_per_s", (int, float), None, lambda v: 1 <= v <= 1e4, "in [1, 10000]")
    gpu = GpuType(
        name=name,
        peak_flops={p: float(v) * 1e12 for p, v in peaks.items() if v is not None},
        memory_bytes=float(r.positive("memory_gib", high=limits.MEMORY_GIB)) * GIB,
        memory_bytes_per_s=float(r.positive("memory_gbyte_per_s", high=limits.GBIT_PER_S[1])) * 1e9,
        intra_node_bytes_per_s=float(r.positive("intra_node_gbyte_per_s", high=limits.GBIT_PER_S[1])) * 1e9,
        intra_node_link=r.get("intra_node_link", str, check=lambda v: v in LINKS, why=f"one of {LINKS}"),
        matmul_efficiency=float(r.get("matmul_efficiency", (int, float), check=lambda v: 0 < v <= 1, why="in (0, 1]")),
        reference_inter_node_bytes_per_s=float(r.positive("reference_inter_node_gbit_per_s", high=limits.GBIT_PER_S[1])) * 1e9 / 8,
        fp8_matmul_efficiency=share("fp8_matmul_efficiency"), nvfp4_matmul_efficiency=share("nvfp4_matmul_efficiency"),
        fused_attention_efficiency=share("fused_attention_efficiency"), intra_node_efficiency=share("intra_node_efficiency"),
        validate_software=read_validate_software(r),
        nvlink_domain_gpus=r.get("nvlink_domain_gpus", int, None, lambda v: 2 <= v <= limits.GPUS, f"in [2, {limits.GPUS}]"),
        reference_gpus_per_node=r.get("reference_gpus_per_node", int, 8, lambda v: 1 <= v <= limits.GPUS_PER_NODE,
                                      f"in [1, {limits.GPUS_PER_NODE}]"),
        streaming_multiprocessors=r.get("streaming_multiprocessors", int, 0, lambda v: 1 <= v <= 4096, "in [1, 4096]"),
        memory_bandwidth_efficiency=share("memory_bandwidth_efficiency"),
        layer_overhead_s=r.get("layer_overhead_s", (int, float), None, lambda v: 0 <= v <= 1, "in [0, 1]"),
        compute_capability=r.get("compute_capability", (int, float), None, lambda v: 1 <= v < 100, "in [1, 100)"),
        kernel_launch_s=r.get("kernel_launch_s", (int, float), None, lambda v: 0 <= v <= 1e-3, "in [0, 0.001]"),
        layer_gemm_share=r.numbers("layer_gemm_share", ("bf16", "fp8", "mxfp8", "nvfp4"), False, lambda v: 0 < v <= 1, "in (0, 1]"),
        ssd_scan_efficiency=r.get("ssd_scan_efficiency", (int, float), None, lambda v: 0 < v <= 1, "in (0, 1]"),
        host_link_bytes_per_s=None if host is None else float(host) * 1e9,
        aliases=tuple(r.get("aliases", list, [], lambda v: all(isinstance(a, str) and a.strip() for a in v), "a list of names")),
    )
    r.done()
    return gpu


# ----------------------------------------------------------------------------- physical constants
@lru_cache(maxsize=4)
def default_params(path: str = str(CATALOG_DIR / "analytic.yaml")) -> AnalyticParams:
    return _params(Reader(Path(path), read_yaml(Path(path)), "", PARAM_KEYS), None)


def _params(r: Reader, base: AnalyticParams | None) -> AnalyticParams:
    """Constants from `r`; keys it lacks come from `base` (all required when base is None)."""
    def get(key, kind, check, why):
        default = ... if base is None else None
        return r.get(key, kind, default, check, why)
    share = lambda v: 0 <= v <= 1
    eff = get("memory_bandwidth_efficiency", (int, float), lambda v: 0 < v <= 1, "in (0, 1]")
    links = r.numbers("link_efficiency", ("nvlink", "xgmi", "pcie", "network"), base is None,
                   lambda v: isinstance(v, (int, float)) and 0 < v <= 1, "in (0, 1]")
    latency = r.numbers("link_latency_s", ("intra_node", "inter_node"), base is None,
                     lambda v: isinstance(v, (int, float)) and v >= 0, ">= 0")
    fused = get("fused_attention", bool, None, "")
    traffic = get("gemm_traffic", bool, None, "")
    elementwise, copy_out, rope = get("fused_elementwise", bool, None, ""), get("fsdp_copy_out", bool, None, ""), \
        get("eager_rope", str, lambda v: v in EAGER_ROPES, f"one of {', '.join(EAGER_ROPES)}")
    attention = get("fused_attention_efficiency", (int, float), lambda v: 0 < v <= 1, "in (0, 1]")
    overlap = get("dp_overlap", (int, float), share, "in [0, 1]")
    overhead = get("framework_overhead_gib", (int, float), lambda v: v >= 0, ">= 0")
    grad = r.numbers("gradient_reduce_bytes", ("bf16", "fp16", "fp8", "fp32", "tf32"), base is None,
                  lambda v: v in (2, 4) and not isinstance(v, bool), "2 or 4")
    if any(grad.get(p, 4) != 4 for p in ("fp32", "tf32")):
        raise r.error("gradient_reduce_bytes", "fp32 / tf32 runs reduce fp32 gradients: 4")
    fusion = get("gradient_accumulation_fusion", bool, None, "")
    cast, cast4 = (get(k, (int, float), lambda v: v >= 0, ">= 0") for k in ("fp8_cast_bytes", "nvfp4_cast_bytes"))
    tp_overlap = get("tp_overlap", (int, float), share, "in [0, 1]")
    grad_overlap = get("overlap_grad_reduce", bool, None, "")
    launch = get("kernel_launch_s", (int, float), lambda v: 0 <= v <= 1e-3, "in [0, 0.001]")
    sync, blocking = get("micro_batch_sync", bool, None, ""), get("p2p_blocking", bool, None, "")
    host = read_host_ops(r, base.host if base else None)
    kernels = get("kernels_per_layer", list, lambda v: len(v) == 2 and all(type(x) is int and 0 <= x <= 10_000 for x in v),
                  "[forward, backward]: two integers in [0, 10000]")
    opt = r.numbers("optimizer_step_bytes", ("bf16", "fp16", "fp8", "fp32", "tf32"), base is None,
                   lambda v: isinstance(v, (int, float)) and 0 <= v <= 1000, "in [0, 1000]")
    scaling = get("loss_scaling_bytes", (int, float), lambda v: 0 <= v <= 1000, "in [0, 1000]")
    bucket = get("gradient_bucket_bytes", (int, float), lambda v: v >= 1 << 10, ">= 1024")
    tile = get("matmul_tile", list, lambda v: len(v) == 2 and all(type(x) is int and 1 <= x <= 1024 for x in v),
               "[rows, columns]: two integers in [1, 1024]")
    layer = r.get("layer_overhead_s", (int, float), None, lambda v: 0 <= v <= 1, "in [0, 1]")
    rho = get("moe_load_imbalance", (int, float), lambda v: 1 <= v <= 16, "in [1, 16]")
    grouped = get("grouped_gemm_efficiency", (int, float), lambda v: 0 < v <= 1, "in (0, 1]")
    ep_overlap = get("ep_overlap", (int, float), share, "in [0, 1]")
    slowdown = get("overlap_slowdown", (int, float), share, "in [0, 1]")
    dedup = get("moe_node_dedup", bool, None, "")
    r.done()
    return AnalyticParams(
        memory_bandwidth_efficiency=float(eff) if eff is not None else base.memory_bandwidth_efficiency,
        link_efficiency={**(base.link_efficiency if base else {}), **links},
        intra_node_latency_s=float(latency.get("intra_node", base.intra_node_latency_s if base else 0)),
        inter_node_latency_s=float(latency.get("inter_node", base.inter_node_latency_s if base else 0)),
        fused_attention=fused if fused is not None else base.fused_attention,
        gemm_traffic=traffic if traffic is not None else base.gemm_traffic,
        fused_elementwise=elementwise if elementwise is not None else base.fused_elementwise,
        fsdp_copy_out=copy_out if copy_out is not None else base.fsdp_copy_out, eager_rope=rope or base.eager_rope,
        fused_attention_efficiency=float(attention) if attention is not None else base.fused_attention_efficiency,
        dp_overlap=float(overlap) if overlap is not None else base.dp_overlap,
        framework_overhead_bytes=float(overhead) * GIB if overhead is not None else base.framework_overhead_bytes,
        gradient_reduce_bytes=_block_scaled({**(base.gradient_reduce_bytes if base else {}), **grad}),
        gradient_accumulation_fusion=fusion if fusion is not None else base.gradient_accumulation_fusion,
        fp8_cast_bytes=float(cast) if cast is not None else base.fp8_cast_bytes,
        nvfp4_cast_bytes=float(cast4) if cast4 is not None else base.nvfp4_cast_bytes,
        tp_overlap=float(tp_overlap) if tp_overlap is not None else base.tp_overlap,
        overlap_slowdown=float(slowdown) if slowdown is not None else base.overlap_slowdown,
        overlap_grad_reduce=grad_overlap if grad_overlap is not None else base.overlap_grad_reduce,
        matmul_tile=tuple(tile) if tile is not None else base.matmul_tile,
        kernel_launch_s=float(launch) if launch is not None else base.kernel_launch_s,
        kernels_per_layer=tuple(kernels) if kernels is not None else base.kernels_per_layer, host=host,
        micro_batch_sync=sync if sync is not None else base.micro_batch_sync,
        p2p_blocking=blocking if blocking is not None else base.p2p_blocking,
        optimizer_step_bytes=_block_scaled({**(base.optimizer_step_bytes if base else {}),
                                            **{k: float(v) for k, v in opt.items()}}),
        loss_scaling_bytes=float(scaling) if scaling is not None else base.loss_scaling_bytes,
        gradient_bucket_bytes=float(bucket) if bucket is not None else base.gradient_bucket_bytes,
        layer_overhead_s=float(layer) if layer is not None else (base.layer_overhead_s if base else 0.0),
        calibrated_gpus=base.calibrated_gpus if base else {},
        calibration=base.calibration if base else (),
        moe_load_imbalance=float(rho) if rho is not None else base.moe_load_imbalance,
        grouped_gemm_efficiency=float(grouped) if grouped is not None else base.grouped_gemm_efficiency,
        ep_overlap=float(ep_overlap) if ep_overlap is not None else base.ep_overlap,
        moe_node_dedup=dedup if dedup is not None else base.moe_node_dedup,
    )


def read_params(r: Reader, base: AnalyticParams | None) -> AnalyticParams:
    """Analytic constants from the reader `r` (PARAM_KEYS), over `base` (a cluster's `analytic:` section)."""
    return _params(r, base)


def _block_scaled(by_precision: dict) -> dict:
    """`by_precision` with mxfp8 and nvfp4 as fp8: block-scaled runs keep bf16 weights, fp32 main
    gradients and Adam states as FP8 runs do (Transformer Engine; Megatron-LM --fp8-recipe mxfp8 /
    --fp4-format); only their matmuls differ."""
    fp8 = by_precision.get("fp8")
    return by_precision if fp8 is None else {**by_precision, **{p: fp8 for p in ("mxfp8", "nvfp4") if p not in by_precision}}
