"""Strict YAML: PyYAML's safe loader made stricter (no aliases, no duplicate keys, bounded depth)
and `Reader`, strict access to one mapping (every key read once, leftovers are errors). The only
module that parses YAML; load.py, catalog.py and hf_config.py read their files through it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from fasop.core import limits
from fasop.core.errors import SpecError
from fasop.specs.files import decode_utf8, read_bounded, show


class _Mapping(dict):
    """A YAML mapping that remembers its line and the line of each key (for error messages)."""

    def __init__(self, line: int):
        super().__init__()
        self.line, self.lines = line, {}


_EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
"""YAML 1.2 floats with an exponent but no point or no exponent sign, which PyYAML (YAML 1.1) reads as text."""
_YAML11, _FLOAT, _STR = yaml.resolver.Resolver(), "tag:yaml.org,2002:float", "tag:yaml.org,2002:str"


class _Refused(yaml.MarkedYAMLError):
    """YAML that parses but that specs do not allow (duplicate keys, aliases, deep nesting)."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stricter: no anchors or aliases, nesting at most limits.YAML_DEPTH,
    duplicate and merge (`<<`) keys refused, mappings remember their keys' lines, and a scalar
    that cannot be converted (an integer of 5,000 digits) is a YAML error, not a ValueError."""

    def __init__(self, stream):
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _Refused(problem="YAML anchors and aliases (&name, *name) are not allowed in specs",
                           problem_mark=event.start_mark)
        self.depth += 1
        try:
            if self.depth > limits.YAML_DEPTH:
                raise _Refused(problem=f"nested deeper than {limits.YAML_DEPTH} levels", problem_mark=event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError, TypeError) as exc:
            raise _Refused(problem=f"cannot convert {show(node.value)}: {str(exc).splitlines()[0][:80]}",
                           problem_mark=node.start_mark) from None

    def construct_strict_mapping(self, node) -> _Mapping:
        mapping = _Mapping(node.start_mark.line + 1)
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _Refused(problem="merge keys (<<) are not allowed in specs", problem_mark=key_node.start_mark)
            # a key reads as YAML 1.1 did: `1e3:` names a node type, not the number 1000.0
            key = key_node.value if key_node.tag == _FLOAT and _YAML11.resolve(yaml.ScalarNode, key_node.value, (
                True, False)) == _STR else self.construct_object(key_node, deep=True)
            try:
                duplicate = key in mapping
            except TypeError:
                raise _Refused(problem="a mapping key must be a plain value", problem_mark=key_node.start_mark) from None
            if duplicate:
                raise _Refused(problem=f"duplicate key {show(key)} (first at line {mapping.lines[key]})",
                               problem_mark=key_node.start_mark)
            mapping[key] = self.construct_object(value_node, deep=True)
            mapping.lines[key] = key_node.start_mark.line + 1
        return mapping


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _StrictLoader.construct_strict_mapping)
# YAML 1.2's floats with an exponent but no point or no exponent sign (1e-5, 2.5e9): PyYAML (YAML 1.1) reads them as
# text, and `matmul_efficiency: 1e-3` would be refused as "must be float, got '1e-3'"
_StrictLoader.add_implicit_resolver(_FLOAT, _EXPONENT, list("-+0123456789."))
_StrictLoader.add_constructor("tag:yaml.org,2002:seq", lambda loader, node: loader.construct_sequence(node, deep=True))


def read_yaml(path: Path) -> dict:
    text = decode_utf8(path, read_bounded(path, limits.SPEC_BYTES))
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except _Refused as exc:
        raise SpecError(str(path), f"line {exc.problem_mark.line + 1}", exc.problem) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "?"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(str(path), "", f"malformed YAML at {where}: {show(problem)}") from None
    except RecursionError:  # unreachable with the depth limit; kept as a last guard
        raise SpecError(str(path), "", "malformed YAML: nested too deeply") from None
    if not isinstance(data, dict):
        raise SpecError(str(path), "", "top level must be a mapping")
    return data


def _number_text(value: Any) -> bool:
    try:
        return isinstance(value, str) and len(value) < 40 and math.isfinite(float(value))
    except ValueError:
        return False


class Reader:
    """Strict access to one YAML mapping: every key read once, leftovers are errors.

    `known`, when given, lists every key the section may hold; other keys are rejected up
    front, so a misspelt required key is reported as unknown rather than as missing.
    """

    def __init__(self, path: Path, data: Any, key: str, known: tuple[str, ...] = ()):
        if not isinstance(data, dict):
            raise SpecError(str(path), key or "(top level)", f"must be a mapping, got {show(data)}")
        self.path, self.data, self.key, self.seen, self.known = path, data, key, set(), known
        if known:
            self._reject_unknown(known)

    def qualified(self, key: Any) -> str:
        key = show(key, quote=False)
        return f"{self.key}.{key}" if self.key else key

    def error(self, key: Any, message: str) -> SpecError:
        line = getattr(self.data, "lines", {}).get(key) if isinstance(key, (str, int)) else None
        return SpecError(str(self.path), self.qualified(key), message + (f" (line {line})" if line else ""))

    def get(self, key: str, kind: type | tuple, default: Any = ..., check=None, why: str = "") -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is ...:
                raise self.error(key, "missing required key")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok:
            names = " or ".join(k.__name__ for k in kinds)
            raise self.error(key, f"must be {names}, got {show(value)}" + (
                " (text: write the number without quotes)" if _number_text(value) and float in kinds else ""))
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(key, f"must be finite, got {show(value)}")
        if isinstance(value, str) and not (len(value) <= limits.TEXT_CHARS and value.isprintable()):
            raise self.error(key, f"must be printable text of at most {limits.TEXT_CHARS:,} characters, "
                             f"got {show(value)}")
        if check is not None and not check(value):
            raise self.error(key, f"must be {why}, got {show(value)}")
        return value

    def positive(self, key: str, kind=(int, float), default: Any = ..., *, high: float) -> Any:
        return self.number(key, kind, 0, high, default, above=True)

    def number(self, key: str, kind, low: float, high: float, default: Any = ..., *, above: bool = False) -> Any:
        """A number in [low, high] (in (low, high] with `above`); `high` is a ceiling of limits.py."""
        relation = ">" if above else ">="
        value = self.get(key, kind, default, lambda v: v > low if above else v >= low, f"{relation} {low:g}")
        if value is not default and value > high:
            raise self.error(key, f"must be <= {high:,g}, fasop's ceiling (README: Limits), got {show(value)}")
        return value

    def numbers(self, key: str, names: tuple[str, ...], required: bool, check, why: str) -> dict:
        """The numbers under `key` by name (each `check`ed, `why` its rule): all of `names` when
        `required`, else those given; {} when an optional `key` is absent."""
        if key not in self.data and not required:
            self.get(key, dict, None)
            return {}
        sub = self.sub(key, names)
        values = {name: sub.get(name, (int, float), ... if required else None, check, why) for name in names}
        sub.done()
        return {k: v for k, v in values.items() if v is not None}

    def sub(self, key: str, known: tuple[str, ...] = ()) -> "Reader":
        return Reader(self.path, self.get(key, dict), self.qualified(key), known)

    def _reject_unknown(self, known) -> None:
        extra = [k for k in self.data if k not in known]
        if extra:
            raise self.error(extra[0], f"unknown key (known: {', '.join(sorted(map(str, known)))})")

    def done(self) -> None:
        assert self.seen <= set(self.known or self.seen), f"{self.key}: read keys missing from known"
        self._reject_unknown(self.seen)
