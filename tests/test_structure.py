"""The layout holds its direction: no two modules of the product import each other, directly or
round a circle, whether at module level or inside a function (a lazy import that dodges a
circle is still one). Imports under ``if TYPE_CHECKING:`` do not count; tests, migrations,
bench/ and chaos/ are not the product."""

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

NOT_PRODUCT = {"tests", "bench", "chaos", "migrations", "deploy", "docs", "scripts", "templates"}


def _product_modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if any(part in NOT_PRODUCT or part.startswith(".") for part in parts):
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    return modules


def _imported(tree: ast.AST, package: str) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            node.body = []  # types only: never imported at run time
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _import_graph() -> dict[str, set[str]]:
    modules = _product_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in _imported(ast.parse(path.read_text()), package):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_two_modules_of_the_product_import_each_other() -> None:
    graph = _import_graph()
    assert len(graph) > 200  # the product was found
    assert _circles(graph) == []


def test_the_check_finds_a_circle_when_there_is_one() -> None:
    graph = {"a.services": {"a.selectors"}, "a.selectors": {"a.events"}, "a.events": {"a.services"}}
    graph["a.models"] = set()
    assert _circles(graph) == [["a.events", "a.selectors", "a.services"]]


MAX_MODULE_LINES = 600
"""A module past this becomes a package or splits by concept (docs/architecture.md)."""


def test_no_module_of_the_product_is_over_600_lines() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in _product_modules().items()}
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_the_settings_file_stays_short() -> None:
    """Groups of settings that belong to one app live in its defaults.py, as rq keeps its own."""
    assert len((ROOT / "llmops" / "settings.py").read_text().splitlines()) < 350
