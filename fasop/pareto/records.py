"""A sweep's composition results as JSON data, read back as strictly as any input file.

`encode(result)` turns a `CompositionResult` into JSON-ready values (a frozen dataclass becomes an
object of exactly its fields, a tuple a list, a float stays a float: `json` writes floats with
`repr`, so they come back bit for bit). `decode(value)` rebuilds it by walking the dataclasses'
type hints: every field present and no other, every value of its declared type (ints as ints,
text within TEXT_CHARS, no bool where a number is asked), nothing else constructed. Nothing in
a record names a type or a function, so a crafted checkpoint can describe wrong numbers but
never run code (the pickle it replaces could). Values of `object` fields (an estimator's extra
CSV columns) are text, numbers, booleans or null.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing

from fasop.pareto.sweep import CompositionResult

TEXT_CHARS = 100_000
"""A text value of a record (a name, a reason) is at most this long (FASOP's longest: ~200)."""
INT_LIMIT = 1 << 63
"""An int of a record lies in (-2^63, 2^63) (counts, degrees, iterations)."""


class RecordError(ValueError):
    """A value that does not match its declared type; the message names the field's path."""


def encode(result: CompositionResult) -> dict:
    return _encode(result, CompositionResult)


def decode(value: object) -> CompositionResult:
    """The CompositionResult `value` describes; RecordError (naming the field) when it does not match."""
    return _decode(value, CompositionResult, "result")


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, object]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _encode(value, hint):
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return {name: _encode(getattr(value, name), h) for name, h in _hints(hint).items()}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        return _encode(value, next(a for a in args if a is not type(None)))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return [_encode(v, args[0]) for v in value]
        return [_encode(v, a) for v, a in zip(value, args)]
    if hint is int:
        return int(value)
    if hint is object and hasattr(value, "item") and not isinstance(value, (str, bool, int, float)):
        return value.item()  # a numpy scalar
    return value


def _decode(value, hint, path: str):
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _decode_dataclass(value, hint, path)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return _decode(value, next(a for a in args if a is not type(None)), path)
    if origin is tuple:
        return _decode_tuple(value, args, path)
    return _decode_scalar(value, hint, path)


def _decode_dataclass(value, cls: type, path: str):
    hints = _hints(cls)
    if not isinstance(value, dict):
        raise RecordError(f"{path}: expected an object of {cls.__name__}")
    if set(value) != set(hints):
        odd = sorted(set(value) ^ set(hints))[:3]
        raise RecordError(f"{path}: the fields of {cls.__name__} are not the expected ones ({', '.join(odd)})")
    try:
        return cls(**{name: _decode(value[name], h, f"{path}.{name}") for name, h in hints.items()})
    except (TypeError, ValueError) as exc:  # a __post_init__ check
        raise RecordError(f"{path}: {exc}") from None


def _decode_tuple(value, args: tuple, path: str) -> tuple:
    if not isinstance(value, list):
        raise RecordError(f"{path}: expected a list")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_decode(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
    if len(value) != len(args):
        raise RecordError(f"{path}: expected {len(args)} items, got {len(value)}")
    return tuple(_decode(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args)))


def _decode_scalar(value, hint, path: str):
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and -INT_LIMIT < value < INT_LIMIT
    elif hint is float:  # an int stays an int: written as it was, read as it was
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
            (not isinstance(value, int) or -INT_LIMIT < value < INT_LIMIT)
    elif hint is str:
        ok = isinstance(value, str) and len(value) <= TEXT_CHARS
    elif hint is object:
        ok = value is None or isinstance(value, (bool, float)) or \
            isinstance(value, int) and -INT_LIMIT < value < INT_LIMIT or \
            isinstance(value, str) and len(value) <= TEXT_CHARS
    else:
        raise AssertionError(f"{path}: no decoder for {hint!r}")  # a new field type: add it here
    if not ok:
        raise RecordError(f"{path}: {type(value).__name__} value is not a valid {getattr(hint, '__name__', hint)}")
    return value
