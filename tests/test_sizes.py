"""Module and function sizes (issue 15, ../shared/STYLE.md): a module stays readable in one
sitting and a function fits on a screen or so. Measured on the package's source: a module's
lines, a function's lines from `def` to its last line (nested functions included in their
parent's count too). The limits are where the code stands after issue 15's splits, so growing
past them is a decision to make, not a drift; the exceptions are named, each with its reason, and
each must still need its exception.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULE_LINES = 400
FUNCTION_LINES = 80
EXCEPTIONS: dict[str, str] = {}


def sizes(root: Path, base: Path = REPO) -> tuple[dict[str, int], dict[str, int]]:
    """({module: lines}, {module:function: lines}) of every .py file under root, named relative to
    base (the longest function of a name where a module defines several)."""
    modules, functions = {}, {}
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(base).as_posix()
        text = path.read_text(encoding="utf-8")
        modules[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{name}:{node.name}"
                functions[key] = max(functions.get(key, 0), node.end_lineno - node.lineno + 1)
    return modules, functions


def test_modules_stay_under_the_limit():
    modules, _ = sizes(REPO / "fasop")
    assert {m: n for m, n in modules.items() if n > MODULE_LINES} == {}


def test_functions_fit_a_screen_or_are_named_exceptions():
    _, functions = sizes(REPO / "fasop")
    assert {f: n for f, n in functions.items() if n > FUNCTION_LINES and f not in EXCEPTIONS} == {}
    assert [f for f in EXCEPTIONS if functions.get(f, 0) <= FUNCTION_LINES] == []  # no stale exception


def test_the_measure_counts_a_planted_long_function(tmp_path):
    package = tmp_path / "fasop"
    package.mkdir()
    body = "\n".join(f"    x{k} = {k}" for k in range(FUNCTION_LINES))
    (package / "long.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    return 1\n")
    modules, functions = sizes(package, tmp_path)
    assert functions == {"fasop/long.py:long": FUNCTION_LINES + 1, "fasop/long.py:short": 2}
    assert modules == {"fasop/long.py": FUNCTION_LINES + 5}


if __name__ == "__main__":  # python tests/test_sizes.py: the largest modules and functions
    modules, functions = sizes(REPO / "fasop")
    for title, table in (("modules", modules), ("functions", functions)):
        print(f"largest {title} (lines):")
        for name, lines in sorted(table.items(), key=lambda kv: (-kv[1], kv[0]))[:8]:
            print(f"  {lines:4d}  {name}")
