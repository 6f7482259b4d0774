"""The one shape of the drills' manage.py commands (``llm_chaos``, ``llm_cluster_drill``): a thin
wrapper around a drill module that production does not install (chaos/), imported only when the
command runs, with a clear error where it is missing."""

from importlib import import_module
from types import ModuleType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

__all__ = ["DrillCommand"]


class DrillCommand(BaseCommand):
    """Subclasses name ``drill_module`` (it has ``add_arguments(parser)`` and
    ``handle(command, opts)``) and ``missing``, the error where it is not installed."""

    drill_module = ""
    missing = ""
    requires_system_checks: list[str] = []

    def _drill(self) -> ModuleType | None:
        try:
            return import_module(self.drill_module)
        except ModuleNotFoundError as missing:
            parts = self.drill_module.split(".")
            # The drill itself or a package of its path, never a module it imports.
            ours = {".".join(parts[:n]) for n in range(1, len(parts) + 1)}
            if missing.name not in ours:
                raise
            return None

    def add_arguments(self, parser: CommandParser) -> None:
        drill = self._drill()
        if drill is not None:
            drill.add_arguments(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        drill = self._drill()
        if drill is None:
            raise CommandError(self.missing)
        drill.handle(self, opts)
