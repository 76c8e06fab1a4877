"""The package's folders are its architecture (issue 27): each subpackage is a layer, a module
imports only from its own layer or the layers below it, and no import closes a circle.

Every import counts: at module level, inside a function (a deferred import is still a
dependency), and under `if TYPE_CHECKING:` (an annotation that needs a higher module is a
circle in the design). Checked twice, as the other source scanners here: on the package (it must
find nothing) and on planted violations (it must find them).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fasop

PACKAGE = Path(fasop.__file__).resolve().parent
README = Path(__file__).resolve().parent.parent / "README.md"
LAYERS = ("core", "specs", "plans", "schedule", "partition", "costs", "estimators", "search", "pareto", "report", "cli")
"""The subpackages, lowest first: the data flow specs -> plans -> costs -> estimators -> search ->
pareto -> report -> cli, with schedule and partition (pure algorithms) under the costs."""


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(text: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The fasop modules `text` (module `name`) imports, wherever the import statement stands."""
    base = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "fasop"}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                anchor = base.split(".")[: len(base.split(".")) - node.level + 1]
                module = ".".join(anchor + ([module] if module else []))
            if module.split(".")[0] != "fasop":
                continue
            # `from fasop.x import y`: the submodule fasop.x.y where there is one, else fasop.x itself
            found |= {f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names}
    return found - {name}


def graph(root: Path) -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    known = set(files)
    return {m: imports_of(p.read_text(encoding="utf-8"), m, p.name == "__init__.py", known) & known
            for m, p in files.items()}


def layer(module: str) -> int:
    """0 for the root package (its version; the public names are imported lazily), then LAYERS in
    order; `fasop.__main__` is the command line's."""
    parts = module.split(".")
    if len(parts) == 1:
        return 0
    top = "cli" if parts[1] == "__main__" else parts[1]
    return LAYERS.index(top) + 1 if top in LAYERS else -1


def upward(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} -> {d}" for m, ds in edges.items() for d in ds if layer(d) > layer(m) or layer(m) < 0)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circles():
    assert cycles(graph(PACKAGE)) == []


def test_imports_only_go_down_the_layers():
    assert upward(graph(PACKAGE)) == []


def test_the_folders_are_the_layers_each_saying_what_it_owns_and_may_import():
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert folders == sorted(LAYERS)
    for name in LAYERS:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "May import:" in doc, name
    modules = [p for p in PACKAGE.iterdir() if p.suffix == ".py"]
    assert sorted(p.name for p in modules) == ["__init__.py", "__main__.py"]


def test_the_readme_layout_lists_the_layers_in_order():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Layout"):]
    section = section[: section.find("\n## ", 4) if "\n## " in section[4:] else len(section)]
    listed = re.findall(r"^\| `fasop/(\w+)/` \|", section, re.M)
    assert tuple(listed) == LAYERS


def test_the_scanners_find_planted_circles_and_upward_imports(tmp_path):
    root = tmp_path / "fasop"
    for folder in ("core", "search", "specs"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text('"""x"""\n')
    (root / "__init__.py").write_text("")
    (root / "core" / "a.py").write_text("def f():\n    from fasop.search import b\n")
    (root / "search" / "b.py").write_text("from fasop.core import a\n")
    (root / "specs" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                         "    from fasop.specs.d import X\n")
    (root / "specs" / "d.py").write_text("from fasop.specs import c\n")
    edges = graph(root)
    assert cycles(edges) == [["fasop.core.a", "fasop.search.b"], ["fasop.specs.c", "fasop.specs.d"]]
    assert upward(edges) == ["fasop.core.a -> fasop.search.b"]
