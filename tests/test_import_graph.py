"""The import graph of ragen_jax, envs and configs has no cycle, counting the imports inside functions too (a
function-level import can hide a cycle that breaks the day someone moves it to the top).

The graph is read from the source with `ast`: module m imports every module its import statements name, and the
packages above them that are not m's own (Python runs a package's __init__ before its submodules)."""

from __future__ import annotations

import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("ragen_jax", "envs", "configs")


def _module_name(path: str) -> str:
    mod = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for pkg in PACKAGES
               for p in glob.glob(os.path.join(ROOT, pkg, "**", "*.py"), recursive=True)}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for m, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        package = m if path.endswith("__init__.py") else m.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                for k in range(1, len(parts) + 1):
                    target = ".".join(parts[:k])
                    if target in modules and target != m and not m.startswith(target + "."):
                        edges[m].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    edges = import_graph()
    edges["ragen_jax.shapes"].add("ragen_jax.trainer.trainer")  # shapes is a leaf: this closes a loop
    found = cycles(edges)
    assert any({"ragen_jax.shapes", "ragen_jax.trainer.trainer"} <= set(c) for c in found), found
