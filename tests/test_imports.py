"""softfp8's imports point one way: no module reaches itself again through its imports.

Read from the sources with `ast` (nothing is imported): an edge is every `import` / `from ...
import` of a softfp8 module at any level (module top, inside functions, inside `try`), and every
string constant that names a softfp8 submodule exactly (`importlib.import_module` tables such
as `dispatch._MODULES`). A cycle is a strongly connected group of modules; the failure names one
cycle through it, with the line of each import.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "softfp8"

# Areas under refactoring on other branches (issue 49, item 6): their own internal cycles are
# expected to go with that work. A cycle that leaves an area is never excused.
LEAVES = ("softfp8._choices", "softfp8._needs", "softfp8._report", "softfp8._version")
"""Modules below everything else: they import no softfp8 module at all."""


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


@lru_cache(maxsize=None)
def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported softfp8 module: line of the first such import}."""
    modules = _modules()

    def owner(name: str) -> str | None:
        """The module `name` lives in: itself, or the nearest package above it."""
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, (path, is_package) in modules.items():
        here = name if is_package else name.rpartition(".")[0]
        edges: dict[str, int] = {}

        def add(target: str | None, line: int) -> None:
            if target is not None and target != name:
                edges.setdefault(target, line)

        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == PACKAGE:
                        add(owner(alias.name), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[:len(here.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source.split(".")[0] != PACKAGE:
                    continue
                for alias in node.names:  # `from . import x` imports the module x
                    full = f"{source}.{alias.name}"
                    add(full if full in modules else owner(source), node.lineno)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                # a module imported by its name at run time ("softfp8" alone is a word, too)
                if node.value in modules and node.value != PACKAGE:
                    add(node.value, node.lineno)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def one_cycle(graph: dict[str, dict[str, int]], group: list[str]) -> str:
    """A shortest cycle through the group's first module, as 'a (line) -> b (line) -> a'."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = paths[v] + [start]
                    return " -> ".join(f"{a} (line {graph[a][b]})"
                                       for a, b in zip(path, path[1:])) + f" -> {start}"
                if w in members and w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{group} is no cycle")


def test_the_graph_sees_imports_at_every_level():
    graph = import_graph()
    assert "softfp8.ops" in graph["softfp8.linear"]  # at the top
    assert "softfp8.hub.hf_quantizer" in graph["softfp8.convert"]  # inside a function
    assert "softfp8.backends.triton" in graph["softfp8.dispatch"]  # by name, at run time
    assert "softfp8._version" in graph["softfp8"]  # `from ._version import __version__`


def test_cycles_are_found_and_named():
    graph = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7, "d": 1}, "d": {}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert one_cycle(graph, ["a", "b", "c"]) == "a (line 3) -> b (line 5) -> c (line 7) -> a"
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycles():
    graph = import_graph()
    found = [one_cycle(graph, g) for g in cycles(graph)]
    assert not found, "import cycles:\n" + "\n".join(found)


@pytest.mark.parametrize("leaf", LEAVES)
def test_leaves_import_no_softfp8_module(leaf):
    assert import_graph()[leaf] == {}, f"{leaf} imports {sorted(import_graph()[leaf])}"


@pytest.mark.parametrize("module, allowed", [
    ("softfp8._checks", {"softfp8.formats"}),
    ("softfp8._encode", {"softfp8.formats"}),
    ("softfp8.formats", {"softfp8._choices"}),
])
def test_shared_pieces_sit_just_above_the_leaves(module, allowed):
    assert set(import_graph()[module]) <= allowed


def test_the_quantizer_registers_when_it_is_imported_first():
    """`from softfp8 import SoftFP8Config` before transformers: importing the quantizer imports
    transformers' registry, whose import hook must not ask the half-run quantizer to register
    (it used to warn, and from_pretrained then did not know quant_method 'softfp8')."""
    pytest.importorskip("transformers")
    import subprocess
    import sys

    code = ("from softfp8 import SoftFP8Config\n"
            "from transformers.quantizers import auto\n"
            "assert 'softfp8' in auto.AUTO_QUANTIZER_MAPPING\n"
            "assert 'softfp8' in auto.AUTO_QUANTIZATION_CONFIG_MAPPING\n")
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
