"""Write gpt2xl-scaled.profile.csv: SCALED TEST DATA derived from gpt2xl.profile.csv, not measurements.

FASOP profiled GPT-2 XL on A100 and A10 only. To exercise fasop on H100 and L4 nodes we derive
their rows by scaling a measured row by the ratio of dense FP16 tensor-core peaks:

    seconds(target) = seconds(source) x peak(source) / peak(target)

A100 and A10 rows are copied unchanged. The derived rows assume every layer is compute bound
and reaches the same fraction of peak on both GPUs; real times differ (memory bandwidth,
kernel efficiency, launch overheads). Replace them with profiles when they exist.

Run from anywhere:  python model_specs/make_scaled_profile.py
Same input, same bytes out: rows keep the source order, floats are written with repr.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "gpt2xl.profile.csv"
TARGET = HERE / "gpt2xl-scaled.profile.csv"

# Dense (no sparsity) FP16 tensor-core peaks, TFLOP/s, from NVIDIA's datasheets.
DENSE_FP16_TFLOP_PER_S = {
    "A100": 312.0,  # A100 datasheet (SXM4): FP16 Tensor Core 312 TFLOPS (624 with sparsity)
    "H100": 989.4,  # H100 Tensor Core GPU Architecture whitepaper (SXM5): 989.4 dense FP16 Tensor
    "A10": 125.0,   # A10 datasheet: FP16 Tensor Core 125 TFLOPS (250 with sparsity)
    "L4": 121.0,    # L4 datasheet: FP16 Tensor Core 242 TFLOPS with sparsity -> 121 dense
}

# target GPU -> the measured GPU its rows are scaled from
DERIVED_FROM = {"H100": "A100", "L4": "A10"}


def read_rows(path: Path) -> list[tuple[str, int, int, float]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == ["gpu", "tp", "layer_index", "seconds"], reader.fieldnames
        return [(r["gpu"], int(r["tp"]), int(r["layer_index"]), float(r["seconds"])) for r in reader]


def scaled_rows(rows: list[tuple[str, int, int, float]]) -> list[tuple[str, int, int, float]]:
    """The source rows, then for each derived GPU (in DERIVED_FROM order) its scaled rows."""
    out = list(rows)
    for target, source in DERIVED_FROM.items():
        ratio = DENSE_FP16_TFLOP_PER_S[source] / DENSE_FP16_TFLOP_PER_S[target]
        out += [(target, tp, layer, seconds * ratio) for (gpu, tp, layer, seconds) in rows if gpu == source]
    return out


def to_csv(rows: list[tuple[str, int, int, float]]) -> str:
    buf = io.StringIO()
    buf.write("gpu,tp,layer_index,seconds\n")
    for gpu, tp, layer, seconds in rows:
        buf.write(f"{gpu},{tp},{layer},{seconds!r}\n")
    return buf.getvalue()


def main() -> None:
    TARGET.write_text(to_csv(scaled_rows(read_rows(SOURCE))))


if __name__ == "__main__":
    main()
