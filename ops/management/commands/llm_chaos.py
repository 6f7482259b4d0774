"""Run the chaos drill (chaos/, docs/operations.md#chaos-drill) and print its report; exit 1 when
a check fails, 2 when it refuses to run here. A thin wrapper: the drill is a top-level package
that production does not install, so it is imported only when this command runs."""

from types import ModuleType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


def _drill_command() -> ModuleType | None:
    """chaos/command.py, or None where the drill is not installed."""
    try:
        from chaos import command
    except ModuleNotFoundError as missing:
        if missing.name != "chaos":
            raise
        return None
    return command


class Command(BaseCommand):
    help = (
        "Break the system on purpose and check that it holds: the production checklist's drill "
        "against the fake provider and real workers, scaled to minutes. FLUSHDBs the configured "
        "Redis database: run it against a scratch database and Redis (make chaos)."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        drill = _drill_command()
        if drill is not None:
            drill.add_arguments(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        drill = _drill_command()
        if drill is None:
            raise CommandError(
                "the chaos drill (chaos/) is not installed here: run it from a checkout "
                "(make chaos)"
            )
        drill.handle(self, opts)
