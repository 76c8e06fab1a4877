"""Shared fixtures. Spec objects are built in code where a test protects a formula; the shipped
specs are loaded only by the tests that are about them (reproduction, spec loading)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def pytest_sessionstart(session):
    """With FASOP_TEST_INSTALLED=1 (CI), the tests must run against the installed package, not the
    clone's source tree: a data file the wheel does not ship then fails the tests."""
    import os

    import fasop

    if os.environ.get("FASOP_TEST_INSTALLED") == "1" and Path(fasop.__file__).resolve().is_relative_to(REPO):
        raise pytest.UsageError(f"FASOP_TEST_INSTALLED=1 but fasop was imported from the clone ({fasop.__file__}): "
                                "run `pytest` (not `python -m pytest`) after a non-editable `pip install .`")


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture(params=["compiled", "python"])
def kernels(request, monkeypatch):
    """Runs a test with fasop's compiled kernels (fasop/schedule/_native.c) and again with its own Python
    loops (native.kernels = None); skipped for `compiled` where the extension was not built."""
    from fasop.schedule import native

    if request.param == "python":
        monkeypatch.setattr(native, "kernels", None)
    elif native.kernels is None:
        pytest.skip("the compiled kernels were not built (no C compiler at install time)")
    return request.param


@pytest.fixture
def tiny_specs(tmp_path, monkeypatch) -> Path:
    """The tiny cluster, model and profile of tests/test_bad_input.py in a fresh folder, which
    is the working directory."""
    from test_bad_input import CLUSTER, MODEL, PROFILE

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "model.yaml").write_text(MODEL)
    (tmp_path / "tiny.profile.csv").write_text(PROFILE)
    return tmp_path


def layer_time_table(rng, pp: int, layers: int, coarse: bool):
    """A random pipeline's stage times as the partitioner reads them: stage k's seconds for layers
    a..b-1 (inf where b <= a), from per-layer work times per-stage speed, both drawn from `rng`
    (in halves when `coarse`: ties); and the layer counts b - a of the same grid."""
    import numpy as np

    work, speed = rng.uniform(0.5, 2.0, layers), rng.uniform(0.5, 2.0, pp)
    if coarse:
        work, speed = np.round(work * 2) / 2, np.round(speed * 2) / 2
    size = layers + 1
    a, b = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    sums = np.concatenate([np.zeros((pp, 1)), np.cumsum(speed[:, None] * work[None, :], axis=1)], axis=1)
    return np.where(b > a, sums[:, None, :] - sums[:, :, None], np.inf), b - a


def without_columns(name: str, columns: tuple[str, ...], folder: Path) -> Path:
    """tests/data/<name> copied into `folder` without `columns` (a set as a row in fewer columns would state it),
    with the files its rows name beside it (the hf/ configs, the cluster specs)."""
    import csv
    import shutil

    rows = list(csv.DictReader((DATA / name).open()))
    out = folder / name
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, [c for c in rows[0] if c not in columns], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    shutil.copytree(DATA / "hf", folder / "hf", dirs_exist_ok=True)
    for spec in DATA.glob("*.yaml"):
        shutil.copy(spec, folder / spec.name)
    return out


def with_cell(path: Path, column: str, value: str, row: int = 0) -> Path:
    """The results CSV at `path` rewritten with data row `row`'s `column` set to `value` (a hand-edited row)."""
    import csv

    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    rows[row][column] = value
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path
