"""Check the metrics' counters against the ledger, or rebuild them from it."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from metrics.rebuild import metrics_rebuild
from metrics.selectors import counter_totals, ledger_totals


class Command(BaseCommand):
    help = (
        "Compare the counters behind /metrics with the ledger (--check, the default), "
        "or rewrite them from the ledger (--rebuild: the one documented counter reset)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--check", action="store_true", help="compare (default)")
        group.add_argument("--rebuild", action="store_true", help="rewrite from the ledger")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["rebuild"]:
            totals = metrics_rebuild()
            self.stdout.write(
                f"rebuilt: {sum(totals.attempts.values())} attempts, "
                f"{sum(totals.jobs.values())} job status entries, "
                f"{sum(totals.failures.values())} dead letters"
            )
            return
        differences = counter_totals().differences(ledger_totals())
        if differences:
            for line in differences:
                self.stdout.write(f"counter != ledger: {line}")
            raise CommandError(f"{len(differences)} metric(s) differ from the ledger")
        self.stdout.write("metrics equal the ledger")
