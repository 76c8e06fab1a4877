"""Build of fasop's optional compiled kernels (fasop/_native.c); everything else is in
pyproject.toml. `optional=True`: where no C compiler is at hand the build goes on without them
and fasop runs its own Python loops instead, with the same results (fasop/native.py)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("fasop._native", ["fasop/_native.c"], optional=True)])
