"""The fake provider is a development tool: the product's apps never import it."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("app", ["jobs", "ledger", "alerts", "llmops", "api", "providers"])
def test_it_is_imported_by_no_product_app(app):
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / app).rglob("*.py"))
        if any(
            name == "fake_provider" or name.startswith("fake_provider.")
            for name in _imported_modules(path)
        )
    ]
    assert offenders == []
