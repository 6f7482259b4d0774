import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from llmops.commands import OperatorCommand
from retention.services import prune_before

_AGE = re.compile(r"(\d+)d")


def parse_before(value: str) -> datetime:
    """``90d`` (that many days ago) or an ISO 8601 time (UTC when it names no zone)."""
    text = value.strip()
    age = _AGE.fullmatch(text)
    if age is not None:
        return timezone.now() - timedelta(days=int(age.group(1)))
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(
            f"--before {value!r}: give an age in days (90d) or an ISO 8601 time "
            "(2026-09-01 or 2026-09-01T00:00:00+00:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class Command(OperatorCommand):
    help = (
        "Empty the prompts, outputs, stored vectors and tool inputs/results of the final jobs, "
        "agent runs and pipelines that ended before --before (90d, or an ISO time); keep their "
        "rows (status, model, tokens, cost, times), the ledger, budgets and the cost report."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--before", required=True, help="90d, or an ISO 8601 time")
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be pruned, change nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        before = parse_before(options["before"])
        if before > timezone.now():
            raise CommandError(f"--before {options['before']!r} is in the future")
        report = prune_before(before, dry_run=options["dry_run"])
        self.stdout.write(f"{report} (ended before {before.isoformat()})")
