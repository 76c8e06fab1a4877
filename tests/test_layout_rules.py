"""Where things live (issue 15): FASOP-2024's constants only in its own modules, no citation of a
document outside the repository, no module reading another's privates or writing another
object's attributes, no frozen dataclass holding a cache.

Each rule is a scanner over source text, checked twice: on the package (it must find nothing
but the listed exceptions) and on a planted violation (it must find it), so that a scanner that
finds nothing because it is broken fails too. Comments and docstrings may name the constants:
they explain; code may not use them.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "fasop"
FASOP_MODULES = re.compile(r"fasop/estimators/fasop2024/[a-z_0-9]+\.py")
"""The FASOP-2024 estimator's modules: the only place its constants and rules may be written."""

# ------------------------------------------------------------------------- FASOP constants
FASOP_NUMBERS = {20800: "FASOP's extra parameters per layer (12h^2 + 20800)", 18: "FASOP's bytes per parameter"}
FLOAT32 = re.compile(r"""[rbuRBU]*(['"])(float32|f4|<f4|single)\1""")


def python_constants(text: str) -> list[tuple[int, str]]:
    """(line, what) for each FASOP constant in Python code (comments and strings other than
    dtype names are skipped): the numbers 20800 and 18, float32, a 1/3 or 2/3 split or a
    division by the literal 3, and a default value for a `fwd_bwd_factor` parameter (spec data)."""
    found = []
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
              if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
    for k, tok in enumerate(tokens):
        line = tok.start[0]
        if tok.type == tokenize.NUMBER and _number(tok.string) in FASOP_NUMBERS \
                and not (k and tokens[k - 1].string == "**"):  # 10**18 is not 18 of anything
            found.append((line, FASOP_NUMBERS[_number(tok.string)]))
        elif tok.type == tokenize.NAME and tok.string in ("float32", "single"):
            found.append((line, "float32 arithmetic"))
        elif tok.type == tokenize.STRING and FLOAT32.fullmatch(tok.string):
            found.append((line, "float32 arithmetic"))
        elif tok.string == "/" and k + 1 < len(tokens) and _number(tokens[k + 1].string) == 3:
            found.append((line, "the 1/3 : 2/3 forward/backward split"))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = args.posonlyargs + args.args
            defaults = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            defaults += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            found += [(node.lineno, "a default fwd_bwd_factor (spec data)") for a, _ in defaults
                      if a.arg == "fwd_bwd_factor"]
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("getattr") and len(node.args) == 3 \
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == "fwd_bwd_factor":
            found.append((node.lineno, "a default fwd_bwd_factor (spec data)"))
    return found


def _number(text: str) -> float | None:
    try:
        return float(text.replace("_", "")) if text[:1].isdigit() else None
    except ValueError:  # hex, complex: not ours
        return None


def c_constants(text: str) -> list[tuple[int, str]]:
    """(line, what) for each FASOP constant in C code (comments and string literals skipped):
    20800, 18, the float type (float32 arithmetic), a division by the literal 3."""
    code = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)
    code = re.sub(r"//[^\n]*", "", code)
    code = re.sub(r'"(\\.|[^"\\\n])*"', '""', code)
    found = []
    for line, row in enumerate(code.split("\n"), start=1):
        found += [(line, FASOP_NUMBERS[int(m)]) for m in re.findall(r"\b(20800|18)\b", row)]
        if re.search(r"\bfloat\b", row):
            found.append((line, "float32 arithmetic"))
        if re.search(r"/\s*3(\.0*)?f?\b", row):
            found.append((line, "the 1/3 : 2/3 forward/backward split"))
    return found


def _sources(*patterns: str) -> list[Path]:
    return sorted(p for pattern in patterns for p in PACKAGE.rglob(pattern))


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


BENCHMARK_CONSTANTS = {
    ("benchmarks/bench_kernel.py", "the 1/3 : 2/3 forward/backward split"),
}
"""Benchmarks that write a constant knowingly: bench_kernel times the compiled 1F1B kernel on
made-up durations shaped like FASOP's (any split would do). The tests are not scanned: they state
FASOP's numbers to check them."""


def test_no_fasop_constant_in_python_outside_its_modules():
    found = [f"{_rel(p)}:{line}: {what}" for p in _sources("*.py") if not FASOP_MODULES.fullmatch(_rel(p))
             for line, what in python_constants(p.read_text(encoding="utf-8"))]
    assert found == []


def test_benchmarks_take_fasops_constants_from_its_estimator():
    found = {(_rel(p), what) for p in sorted((REPO / "benchmarks").glob("*.py"))
             for _, what in python_constants(p.read_text(encoding="utf-8"))}
    assert sorted(found - BENCHMARK_CONSTANTS) == []


C_PENDING: dict[str, set[str]] = {}
"""FASOP rules still in the compiled kernels: none since issue 15 item 3 (the kernels are generic);
nothing may appear, in these files or any other."""


def test_no_fasop_constant_in_c_but_the_pending_ones():
    found = [f"{_rel(p)}:{line}: {what}" for p in _sources("*.c", "*.h")
             for line, what in c_constants(p.read_text(encoding="utf-8")) if what not in C_PENDING.get(_rel(p), ())]
    assert found == []


@pytest.mark.parametrize("code, what", [
    ("x = 12 * h * h + 20800\n", "12h^2 + 20800"),
    ("x = 20_800\n", "12h^2 + 20800"),
    ("bytes_ = 18 * params\n", "bytes per parameter"),
    ("y = np.float32(x)\n", "float32"),
    ("y = x.astype('float32')\n", "float32"),
    ("from numpy import float32\n", "float32"),
    ("fwd = t / 3\n", "split"),
    ("bwd = 2 * t / 3.0\n", "split"),
    ("def f(t, fwd_bwd_factor: float = 3.0):\n    return t\n", "fwd_bwd_factor"),
    ("def f(t, *, fwd_bwd_factor=3):\n    return t\n", "fwd_bwd_factor"),
    ("k = getattr(e, 'fwd_bwd_factor', 3.0)\n", "fwd_bwd_factor"),
])
def test_the_python_scanner_finds_a_planted_constant(code, what):
    found = python_constants(code)
    assert len(found) == 1 and what in found[0][1]


def test_the_python_scanner_leaves_comments_docstrings_and_other_numbers():
    code = ('"""18 bytes per parameter, 12h^2 + 20800, float32 (docs/estimators.md)."""\n'
            "x = t / 30  # a third is t / 3\n"
            "n = 180 + 2080 + 0x18 + 10**18\n"
            "def f(t, fwd_bwd_factor):\n    return t / fwd_bwd_factor\n")
    assert python_constants(code) == []


@pytest.mark.parametrize("code, what", [
    ("double x = 20800 * h;", "20800"), ("x = 18 * p;", "bytes per parameter"),
    ("const float t = (float)x;", "float32"), ("double f = c / 3.0;", "split"), ("double f = c / 3;", "split"),
])
def test_the_c_scanner_finds_a_planted_constant(code, what):
    found = c_constants(code)
    assert len(found) == 1 and what in found[0][1]


def test_the_c_scanner_leaves_comments_and_strings():
    code = '/* 18 bytes, float32, 1/3 */\ndouble x = y; // 20800 / 3\nconst char *s = "float / 3";\n'
    assert c_constants(code) == []


# ------------------------------------------------------------------------- citations
def _tracked_text_files() -> list[Path]:
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
        paths = [REPO / name for name in names.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked sdist)
        paths = [p for p in REPO.rglob("*") if ".git" not in p.parts and ".venv" not in p.parts]
    return [p for p in paths if p.is_file() and p.suffix not in (".png", ".so", ".pdf")]


def outside_citations(text: str) -> list[int]:
    """Lines that cite the model description kept outside the repository."""
    name = "MODEL" + ".md"
    return [n for n, line in enumerate(text.splitlines(), start=1) if name in line]


def test_no_citation_of_a_document_outside_the_repository():
    found = []
    for path in _tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{_rel(path)}:{n}" for n in outside_citations(text)]
    assert found == []


def test_the_citation_scanner_finds_a_planted_one():
    assert outside_citations("ok\nas in " + "MODEL" + ".md §3\n") == [2]


# ------------------------------------------------------------------------- ownership
OWNERSHIP_PENDING = {
    ("fasop/estimators/fasop2024/orders.py", "imports fasop.partition.splits._weighted"),
    ("fasop/costs/compute.py", "writes c.__dict__"),
    ("fasop/plans/plan.py", "writes obj.__dict__"),
}
"""Known cases, each for its module's owner to remove: fasop2024_orders imports partition's
private _weighted; compute.LayerCosts seeds the cached `matrix` of its own instances (LayerCosts.make_matrices) and plan.trusted makes frozen
values without their __init__ (a measured speed-up, plan.py)."""
STDLIB_PRIVATES = {"os._exit", "sys._getframe", "getattr(pool, '_processes', None)"}
"""Private names of the standard library that fasop uses knowingly (workers.py: a pool's
processes, to end them; a worker's immediate exit)."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def ownership_breaches(text: str, module: str = "fasop.m") -> list[str]:
    """What a module does with other modules' and objects' insides: imports a private name of a
    fasop module, reads a private attribute that this module does not define (so another
    module's class or module owns it), writes an object's __dict__, calls object.__setattr__
    outside __post_init__, or reaches a private name through getattr / setattr."""
    tree = ast.parse(text)
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            own.add(node.attr)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _private(node.value):
            own.add(node.value)  # __slots__ entries
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
    found = []
    setattr_ok = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__post_init__":
            setattr_ok |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "fasop":
            found += [f"imports {node.module}.{a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"reads {ast.unparse(node)}")
        elif isinstance(node, ast.Attribute) and node.attr == "__dict__":
            found.append(f"writes {ast.unparse(node)}")
        elif isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func == "object.__setattr__" and id(node) not in setattr_ok:
                found.append(f"writes {ast.unparse(node.args[0]) if node.args else '?'} (object.__setattr__)")
            elif func.split(".")[-1] in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) \
                    and _private(node.args[1].value):
                found.append(ast.unparse(node))
    return [f for f in found if f.split(" ", 1)[-1] not in STDLIB_PRIVATES and f not in STDLIB_PRIVATES]


def test_no_module_reaches_into_another():
    found = {(_rel(p), breach) for p in _sources("*.py")
             for breach in ownership_breaches(p.read_text(encoding="utf-8"))}
    assert sorted(found - OWNERSHIP_PENDING) == []


TESTS_REACHING_IN = {
    ("tests/test_native.py", "reads native.kernels._set_poison"),
    ("tests/test_optimal.py", "reads est._schedule_all"),
    ("tests/test_optimal.py", "reads est._step"),
}
"""Tests that reach into the code they test: the compiled kernels' test hooks (a kernel's reference
oracle, the one allowed exception), and test_optimal's brute force, which schedules splits through
the estimator's privates (pending: a public way to time a given split)."""


def test_tests_go_through_public_behaviour():
    found = {(_rel(p), breach) for p in sorted((REPO / "tests").glob("*.py"))
             for breach in ownership_breaches(p.read_text(encoding="utf-8"))}
    assert sorted(found - TESTS_REACHING_IN) == []


@pytest.mark.parametrize("code, what", [
    ("from fasop.partition.splits import _weighted\n", "imports fasop.partition.splits._weighted"),
    ("def f(e):\n    return e._step(1)\n", "reads e._step"),
    ("import fasop.search.engine as s\nx = s._Kept\n", "reads s._Kept"),
    ("def f(e):\n    e.__dict__['x'] = 1\n", "writes e.__dict__"),
    ("def f(e):\n    object.__setattr__(e, 'x', 1)\n", "writes e (object.__setattr__)"),
    ("def f(e):\n    return getattr(e, '_cache', None)\n", "getattr(e, '_cache', None)"),
    ("def test(monkeypatch, m):\n    monkeypatch.setattr(m, '_root', 1)\n", "monkeypatch.setattr(m, '_root', 1)"),
])
def test_the_ownership_scanner_finds_a_planted_breach(code, what):
    assert ownership_breaches(code) == [what]


def test_the_ownership_scanner_allows_own_privates():
    code = ("import os\n"
            "class A:\n    __slots__ = ('_x',)\n"
            "    def __init__(self):\n        self._x = 1\n"
            "    def same(self, other):\n        return other._x == self._x\n"
            "    def __post_init__(self):\n        object.__setattr__(self, 'y', 2)\n"
            "def _helper():\n    return 1\n"
            "def g(a):\n    os._exit(0)\n    return a._x + _helper()\n")
    assert ownership_breaches(code) == []


def frozen_caches(text: str) -> list[str]:
    """Frozen dataclasses that cache (a cached_property or lru_cache method): a mutable cache in
    a value that claims to be immutable."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ClassDef):
            continue
        frozen = any(isinstance(d, ast.Call) and any(k.arg == "frozen" and isinstance(k.value, ast.Constant)
                                                      and k.value.value is True for k in d.keywords)
                     for d in node.decorator_list)
        caching = [f.name for f in node.body if isinstance(f, ast.FunctionDef) and any(
            re.fullmatch(r"(functools\.)?(cached_property|lru_cache|cache)", ast.unparse(getattr(d, "func", d)))
            for d in f.decorator_list)]
        if frozen and caching:
            found += [f"{node.name}.{name}" for name in caching]
    return found


def test_no_frozen_dataclass_caches():
    found = [f"{_rel(p)}: {c}" for p in _sources("*.py") for c in frozen_caches(p.read_text(encoding="utf-8"))]
    assert found == []


def test_the_frozen_cache_scanner_finds_a_planted_one():
    code = ("from dataclasses import dataclass\nfrom functools import cached_property\n"
            "@dataclass(frozen=True)\nclass V:\n    x: int\n    @cached_property\n    def y(self):\n        return 1\n"
            "@dataclass\nclass W:\n    @cached_property\n    def y(self):\n        return 1\n")
    assert frozen_caches(code) == ["V.y"]


# ------------------------------------------------------------------------- boundaries
BOUNDARIES = {"yaml": re.compile(r"fasop/specs/reader\.py"), "matplotlib": re.compile(r"fasop/report/plots\.py"),
              "argparse": re.compile(r"fasop/cli/[a-z_]+\.py")}
"""Which module may import each boundary library: the one spec reader, the one plotting module,
the command line."""


def boundary_crossings(text: str, path: str) -> list[str]:
    """Imports of a boundary library outside its module, and print() outside the command line
    (the library never prints), anywhere in the module (functions included)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top in BOUNDARIES and not BOUNDARIES[top].fullmatch(path):
                found.append(f"imports {top}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print" \
                and not BOUNDARIES["argparse"].fullmatch(path):
            found.append("prints")
    return found


def test_boundary_libraries_stay_in_their_modules():
    found = [f"{_rel(p)}: {c}" for p in _sources("*.py")
             for c in boundary_crossings(p.read_text(encoding="utf-8"), _rel(p))]
    assert found == []


@pytest.mark.parametrize("code, path, allowed, what", [
    ("import yaml\n", "fasop/specs/catalog.py", "fasop/specs/reader.py", "imports yaml"),
    ("def f():\n    import matplotlib.pyplot as plt\n", "fasop/report/explain.py", "fasop/report/plots.py", "imports matplotlib"),
    ("from argparse import Namespace\n", "fasop/search/engine.py", "fasop/cli/search.py", "imports argparse"),
    ("def f(x):\n    print(x)\n", "fasop/search/engine.py", "fasop/cli/command.py", "prints"),
])
def test_the_boundary_scanner_finds_a_planted_crossing(code, path, allowed, what):
    assert boundary_crossings(code, path) == [what]
    assert boundary_crossings(code, allowed) == []
