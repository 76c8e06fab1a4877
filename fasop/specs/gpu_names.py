"""GPU names as people write them: the catalog's own, its aliases, and what tools print.

A GPU is named in a cluster spec (`gpu:`), a `fasop validate` row (`gpu`), a calibration overlay and
`--peak-tflops`. Names compare by `canonical`: case, '-', '_' and spaces ignored, and the vendor, product
line and system words that `nvidia-smi`, `rocm-smi` and vendors' tables put before the model dropped
(`NVIDIA`, `Tesla`, `GeForce`, `Quadro`, `AMD`, `Instinct`, `DGX`, `HGX`): `NVIDIA A100-SXM4-80GB`
(nvidia-smi), `DGX-GB200` (Megatron-Bridge's performance tables), `Tesla T4` and `A100-SXM4-80GB` are
the same key as the catalog's. A catalog entry's `aliases` (gpus.yaml) names it too: the other names of the
same part, e.g. H100-SXM's `H100` and nvidia-smi's `H100 80GB HBM3`. A name that could be two catalog
GPUs (`A100`: 40 or 80 GB) is no alias: it is refused naming both (catalog.unknown_gpu) and the catalog's names.
"""

from __future__ import annotations

from fasop.core.errors import SpecError

SYSTEM_WORDS = ("nvidia", "tesla", "geforce", "quadro", "amd", "instinct", "dgx", "hgx")
"""Leading words dropped from a name (repeatedly: `NVIDIA DGX H100` -> `h100`)."""


def canonical(name: str) -> str:
    """The key names compare by: lower case, without '-', '_', spaces and leading SYSTEM_WORDS."""
    key = "".join(ch for ch in name.lower() if ch not in "-_ ")
    dropped = True
    while dropped:
        dropped = False
        for word in SYSTEM_WORDS:
            if key.startswith(word) and len(key) > len(word):
                key, dropped = key[len(word):], True
    return key


def by_name(gpus: dict, path: str) -> dict:
    """Every key a catalog GPU answers to (its canonical name, its aliases') -> the GPU; an alias that is
    another GPU's name or alias is refused (SpecError naming `<gpu>: aliases` and the alias)."""
    table = dict(gpus)
    for gpu in gpus.values():
        for alias in gpu.aliases:
            other = table.get(canonical(alias))
            if other is not None and other is not gpu:
                raise SpecError(path, f"{gpu.name}: aliases",
                                f"{alias!r} already names {other.name}: an alias names one GPU")
            table[canonical(alias)] = gpu
    return table


def starts(name: str, of: str) -> bool:
    """Whether `name` is the start of the GPU name `of` up to a non-digit (canonical keys): `A100` starts
    A100-SXM4-80GB, `A10` does not (A10 is another part), `H20` not H200."""
    key, full = canonical(name), canonical(of)
    return bool(key) and full.startswith(key) and (full == key or not full[len(key)].isdigit())


def could_be(name: str, gpus) -> str:
    """'could be X or Y: name one; ' where `name` starts (`starts`) several of `gpus`' names or aliases
    (`A100`: the 40 and 80 GB parts, `V100`: four), else ''."""
    could = [g.name for g in gpus if any(starts(name, n) for n in (g.name, *g.aliases))]
    return f"could be {' or '.join(could)}: name one; " if len(could) > 1 else ""
