"""Per-process caches of what fasop derives from a few long-lived objects (a model spec, a
cluster spec): the estimators of one search, of a pareto sweep's compositions or of repeated
searches in one process share them, and only those of the latest few objects are kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def recent(cache: dict, owners: tuple, make: Callable[[], T], keep: int = 4) -> T:
    """The value `cache` holds for the objects `owners` (the same objects, by identity), made by
    make() on first use; `cache` keeps the values of the latest `keep` owner tuples. The owners
    are kept alive with their value, so an id is never mistaken for another object's."""
    key = tuple(id(owner) for owner in owners)
    entry = cache.pop(key, None)
    if entry is None or any(a is not b for a, b in zip(entry[0], owners)):
        entry = (owners, make())
    cache[key] = entry  # the latest last
    while len(cache) > keep:
        del cache[next(iter(cache))]
    return entry[1]


def kept(store: dict, key, make: Callable[[], T], limit: int) -> T:
    """store[key], made by make() on first use; a store already holding `limit` entries starts
    over before it takes a new one (bounded memory for values cheap to make again)."""
    value = store.get(key)
    if value is None:
        if len(store) >= limit:
            store.clear()
        value = store[key] = make()
    return value
