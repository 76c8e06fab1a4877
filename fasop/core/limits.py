"""Every ceiling on what fasop reads, in one place, with the reason for each (docs/limits.md).

A value from a spec file, a profile CSV or a flag is checked against these before any arithmetic
(fasop/specs/ for files, fasop/cli/ / search/engine.py / pareto/sweep.py for flags): inside them, every later
computation is bounded in time and memory; outside, one line says which value to change. Each
ceiling sits far above anything a real training run uses (the reason given under it), so no
real input meets one.
"""

from __future__ import annotations

# ----------------------------------------------------------------------------- files
SPEC_BYTES = 256 << 10
"""A spec (YAML) file is at most 256 KiB: the shipped ones are under 6 KB. Read with this cap, so
`/dev/zero` or a huge file is refused, never read whole; parsing YAML takes ~10 us a byte here
(1 MiB: 9-24 s on a loaded 2-core machine; 256 KiB: a few seconds)."""
PROFILE_BYTES = 4 << 20
"""A profile CSV is at most 4 MiB, ~130,000 rows (the shipped ones are under 20 KB; 256 layers x
20 GPU types x 8 TP degrees is 41,000 rows). Checking takes ~0.8 us a byte here (7.7 MB: 5.8 s
on a loaded 2-core machine)."""
VMS_CSV_BYTES = 64 << 20
"""A SkyPilot vms.csv (`fasop prices --from`) is at most 64 MiB (the catalog's largest, GCP's,
is a few MB); it is read whole, so a larger file is refused rather than held in memory."""
CHECKPOINT_BYTES = 1 << 30
"""A `pareto --resume` checkpoint is at most 1 GiB (a record, one searched composition with its
fastest plan, is a few KB: 1 GiB holds hundreds of thousands of compositions)."""
CHECKPOINT_LINE_BYTES = 16 << 20
"""A checkpoint record (one line) is at most 16 MiB (a plan over 1,024 nodes writes ~0.5 MB); read
line by line with this cap, so a crafted line cannot fill memory."""
YAML_DEPTH = 32
"""Nesting of YAML collections: specs nest 5 deep; a deep document would exhaust the parser's recursion."""
YAML_ALIASES = 0
"""YAML anchors and aliases are refused: specs do not need them, and an alias bomb ("billion
laughs") turns 2 KB of text into gigabytes."""
TEXT_CHARS = 1000
"""A text value of a spec (a name, a path, a kind) is printable and at most 1,000 characters: it
ends up in file names, titles and one-line messages."""
SHOWN_CHARS = 60
"""An offending value is shown in an error message cut to this many characters."""

# ----------------------------------------------------------------------------- model spec
HIDDEN_SIZE = 1 << 20
"""hidden_size <= 1,048,576 (the largest published models: ~25,600)."""
ATTENTION_HEADS = 1 << 16
"""num_attention_heads <= 65,536 (published: <= 128)."""
VOCAB_SIZE = 1 << 24
"""vocab_size <= 16,777,216 (published: <= 262,144)."""
SEQUENCE_LENGTH = 1 << 24
"""sequence_length <= 16,777,216 tokens (long-context training: <= 1 M)."""
GLOBAL_BATCH_SIZE = 1 << 14
"""global_batch_size <= 16,384 samples for a plan fasop searches, explains or draws (published runs reach 65,536:
`fasop validate` reads them, MEASURED_GLOBAL_BATCH_SIZE). The micro-batch count sets the size of every
pipeline schedule (stages x micro-batches events: explain's timeline of 32 stages x 16,384 micro-batches takes
19 s and ~1 GB here, and grows with both) and of the partitioner's stages x micro-batches tables, and the
divisors of the batch set the number of plans."""
MEASURED_GLOBAL_BATCH_SIZE = 1 << 20
"""A measured run's global_batch_size (and micro_batch_size) in `fasop validate` <= 1,048,576 samples
(published: 65,536, BERT pre-training with LAMB; Megatron-Bridge's weak-scaling runs double theirs with the GPUs,
16,384 at 256 GPUs). Above GLOBAL_BATCH_SIZE because validate simulates no schedule: its estimate is closed
form in the micro-batch count (a row of 1,048,576 sequences takes 0.4 s and 35 MB here), so no
stages x micro-batches table is built for it."""
SCHEDULE_PAIRS = 1 << 19
"""A pipeline timeline (`fasop explain`, `fasop plot`) is simulated for at most 524,288 (stage, micro-batch)
pairs: each is four Python events with its critical-path links, 32 stages x 16,384 micro-batches take 19 s and
~1 GB here, and 256 stages x 16,384 took 126 s and 7.8 GB. Past it, the estimate is shown without a timeline,
with a note (costs/parts.py schedule_or_note); the estimate itself is closed form and unaffected."""
LAYERS = 256
"""Entries in the layer list (and num_hidden_layers, num_decoder_layers) <= 256 (published:
<= 128 transformer layers). The optimal partitioner's stage-time tables take stages x
(layers + 1)^2 floats: at 256 layers on 256 stages, 135 MB each."""

# ----------------------------------------------------------------------------- cluster spec
GPUS_PER_NODE = 1024
"""gpus_per_node <= 1,024 (a node is 4-8 GPUs; an NVLink rack 72)."""
MEMORY_GIB = 1 << 20
"""memory_limit_gib <= 1,048,576 GiB per GPU (today's largest: 192 GiB)."""
GBIT_PER_S = (1e-3, 1e7)
"""Bandwidths between 1 Mbit/s and 10 Pbit/s (NVLink 5: 14.4 Tbit/s); below, a step would take years."""
TFLOPS = 1e6
"""A catalog peak is <= 1,000,000 TFLOP/s per GPU (today's largest, B300 NVFP4: 15,000)."""
USD_PER_HOUR = 1e6
"""A node costs <= $1,000,000 an hour (the dearest cloud nodes: ~$100)."""
DIVISOR = (1e-3, 1e3)
"""p2p_*_divisor between 0.001 and 1,000 (FASOP's: 1.05 and 3.5)."""
OVERHEAD_FACTOR = 100.0
"""memory.overhead_factor between 1 and 100 (FASOP's: 1.10)."""

# ----------------------------------------------------------------------------- profiles
LAYER_SECONDS = (1e-9, 1e4)
"""A profiled per-layer forward time between 1 ns and 10,000 s (a kernel launch alone takes ~5 us);
a subnormal time like 1e-320 would make rates overflow to infinity."""
FACTOR = (1e-6, 1e6)
"""fwd_bwd_factor and micro-batch scaling factors between 1e-6 and 1e6 (FASOP's: 1 to 3)."""
SCALING_FACTORS = 16
"""At most 16 factors in one micro-batch scaling point (their product is the factor)."""
TP_DEGREE = GPUS_PER_NODE
"""A profiled tensor-parallel degree is at most the GPUs a node may have."""

# ----------------------------------------------------------------------------- flags
NODES = 1024
"""An inventory (--nodes, or one --max-nodes composition) has at most 1,024 nodes."""
GPUS = 1 << 16
"""... and at most 65,536 GPUs in all: plans per inventory grow with the divisors of this."""
COMPOSITIONS = 10_000
"""`fasop pareto` searches at most 10,000 compositions (product of (max - min + 1) over the
types); each is a full search (~0.1-1 s for the shipped models)."""
ITERATIONS = 10**15
"""--iterations (or --tokens / (batch x sequence)) <= 1e15 training steps: costs stay exact in a float."""
TOKENS = 10**21
"""--tokens <= 1e21 (the largest training runs: ~3e13 tokens)."""
TOP = 10**6
"""--top <= 1,000,000 plans kept."""
PARTITION_BUDGET = 10**6
"""--partition-budget <= 1,000,000 search-tree nodes per plan (default 400): the budget is spent
per plan, so time grows with it."""
WORKERS = 256
"""--workers above the available CPU cores is lowered to them (with a note); a process per core is
the most that helps."""
HOURS_OR_USD = 1e15
"""--deadline-hours and --budget-usd: positive, finite, at most 1e15."""
