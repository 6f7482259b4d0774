import logging
import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from alerts.dispatch import alert_deliveries_resume, alert_failures_resume
from alerts.notifications import alert_failure_incidents_check
from alerts.queue_health import queue_health_check

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Check how long the oldest job of each queue has waited (ALERT_QUEUE_WAIT_THRESHOLDS); "
        "raise a WARNING over the threshold and resolve it when it clears; re-enqueue the alerts "
        "of failures and the alert deliveries Redis lost; resolve failure alerts whose DLQ "
        "records are all handled. Once, or --loop."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--loop", action="store_true", help="Keep running.")
        parser.add_argument(
            "--interval", type=float, default=None, help="Seconds between checks with --loop."
        )

    def handle(self, *args, loop: bool, interval: float | None, **options):  # type: ignore[no-untyped-def]
        interval = interval or settings.ALERT_MONITOR_INTERVAL
        while True:
            # A long-lived process: drop connections the database closed while we slept.
            close_old_connections()
            try:
                reports = queue_health_check()
                resumed = alert_deliveries_resume()
                realerted = alert_failures_resume()
                cleared = alert_failure_incidents_check()
            except Exception:
                if not loop:
                    raise
                # A Redis or database blip must not stop the monitor; the next pass retries.
                logger.exception("monitor_queues: check failed")
                reports, resumed, realerted, cleared = [], 0, 0, 0
            if resumed:
                self.stdout.write(f"monitor: resumed {resumed} alert deliveries lost from Redis")
            if realerted or not loop:
                self.stdout.write(
                    f"monitor: failure alerts lost from Redis, enqueued again: {realerted}"
                )
            if cleared or not loop:
                self.stdout.write(f"monitor: failure alerts resolved (DLQ handled): {cleared}")
            for report in reports:
                if report.alert is not None or not loop:
                    self.stdout.write(f"monitor: {report}")
            if not loop:
                return
            time.sleep(interval)
