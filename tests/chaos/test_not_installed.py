"""The chaos drill is a development tool outside the installed apps: no installed app imports it
at import time, and ``manage.py llm_chaos`` says so where it is missing."""

import ast
import sys
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.core.management import CommandError, call_command

ROOT = Path(settings.BASE_DIR).resolve()


def _module_level_imports(path: Path) -> set[str]:
    """What the module imports when it is imported (not inside its functions)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_it_is_no_installed_app():
    assert not [app for app in settings.INSTALLED_APPS if app.split(".")[0] == "chaos"]


def test_no_installed_app_imports_it_at_import_time():
    local = [Path(config.path).resolve() for config in apps.get_app_configs()]
    packages = {path for path in local if path.is_relative_to(ROOT)} | {
        ROOT / "llmops",
        ROOT / "api",
    }
    offenders = [
        str(path.relative_to(ROOT))
        for package in sorted(packages)
        for path in sorted(package.rglob("*.py"))
        if any(name.split(".")[0] == "chaos" for name in _module_level_imports(path))
    ]
    assert offenders == []


def test_the_command_says_the_drill_is_not_installed_where_it_is_missing(monkeypatch):
    # The package and every module of it that an earlier test on this worker imported: a cached
    # ``chaos.command`` would otherwise be found without looking at ``chaos``.
    for name in [name for name in sys.modules if name.split(".")[0] == "chaos"] + ["chaos"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(CommandError, match=r"chaos drill \(chaos/\) is not installed here"):
        call_command("llm_chaos")
