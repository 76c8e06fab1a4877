"""The compiled kernels of fasop's hot loops (`fasop/schedule/_native.c`, module `_fasop_native`), when
they were built.

`kernels` is the extension module, or None when it was not built (no C compiler at install
time), when it is of another version of fasop (API differs), or when the environment variable
FASOP_PURE_PYTHON is set to a non-empty value. Callers read `native.kernels` at call time and
run their own Python loops when it is None: the kernels compute the same float64 operations in
the same order, so the results are the same bits either way (tests compare the two).
"""

from __future__ import annotations

import os
from types import ModuleType

API = 13
"""The kernels' interface version (_fasop_native.API): bumped with every change of a signature or
of what a call returns."""

kernels: ModuleType | None = None
if not os.environ.get("FASOP_PURE_PYTHON"):
    try:
        import _fasop_native as kernels
    except ImportError:  # not built: the Python loops
        kernels = None
    if kernels is not None and getattr(kernels, "API", None) != API:
        kernels = None  # built from another version of fasop
