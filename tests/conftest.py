"""Shared fixtures. Spec objects are built in code where a test protects a formula; the shipped
specs are loaded only by the tests that are about them (reproduction, spec loading)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def repo() -> Path:
    return REPO
