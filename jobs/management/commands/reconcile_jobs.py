import time

from django.conf import settings
from django.core.management.base import BaseCommand

from jobs.reconciler import reconcile_jobs


class Command(BaseCommand):
    help = "Re-enqueue jobs Redis lost and recover jobs whose worker died (once, or --loop)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--loop", action="store_true", help="Keep running.")
        parser.add_argument(
            "--interval", type=float, default=None, help="Seconds between passes with --loop."
        )

    def handle(self, *args, loop: bool, interval: float | None, **options):  # type: ignore[no-untyped-def]
        interval = interval or settings.LLM_RECONCILE_INTERVAL
        while True:
            report = reconcile_jobs()
            if report.requeued_lost or report.recovered_stale or not loop:
                self.stdout.write(f"reconcile: {report}")
            if not loop:
                return
            time.sleep(interval)
