"""Build of fasop's optional compiled kernels (fasop/schedule/_native.c); everything else is in
pyproject.toml. `optional=True`: where no C compiler is at hand the build goes on without them
and fasop runs its own Python loops instead, with the same results (fasop/schedule/native.py).

The extension is the top-level module `_fasop_native`, not part of the `fasop` package, so that
the installed one is found even when `fasop` itself is imported from a source tree (the tests
run from the repository root)."""

import setuptools
from setuptools import Extension, setup

LICENSE = "Apache-2.0"
license_field = ({"license_expression": LICENSE} if int(setuptools.__version__.split(".")[0]) >= 77
                 else {"license": LICENSE})

HEADERS = ["fasop/schedule/_one_f_one_b.h", "fasop/schedule/_node_loop.h", "fasop/schedule/_splits.h"]

setup(ext_modules=[Extension("_fasop_native", ["fasop/schedule/_native.c"], depends=HEADERS, optional=True)],
      **license_field)
