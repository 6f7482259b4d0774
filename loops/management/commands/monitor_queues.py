from alerts.dispatch import alert_deliveries_resume, alert_failures_resume
from alerts.notifications import alert_failure_incidents_check
from batches.services import batch_cancels_resume
from dlq.services import bulk_requeues_resume
from loops.command import LoopCommand
from loops.deadline_health import deadline_attainment_check
from loops.queue_health import queue_health_check
from loops.retry_health import retry_overdue_check
from retention.services import prune_daily
from webhooks.services import webhooks_resume


class Command(LoopCommand):
    help = (
        "Check how long the oldest job of each queue has waited (ALERT_QUEUE_WAIT_THRESHOLDS); "
        "raise a WARNING over the threshold and resolve it when it clears; the same for the "
        "oldest overdue retry (LLM_OVERDUE_RETRY_ALERT_SECONDS) and for each feature's deadline "
        "attainment over the last hour (LLM_DEADLINE_ALERT_RATIO); re-enqueue the alerts of "
        "failures and the alert deliveries Redis lost; resolve failure alerts whose DLQ "
        "records are all handled; resume bulk requeues, batch cancels and webhook deliveries "
        "Redis lost; once a day with LLM_RETENTION_DAYS, prune old jobs' and runs' content. Once, "
        "or --loop, "
        "surviving Redis and database errors."
    )
    loop_name = "monitor"
    interval_setting = "ALERT_MONITOR_INTERVAL"

    def run_pass(self) -> str:
        reports = queue_health_check()
        retries = retry_overdue_check()
        deadlines = deadline_attainment_check()
        resumed = alert_deliveries_resume()
        realerted = alert_failures_resume()
        cleared = alert_failure_incidents_check()
        bulk = bulk_requeues_resume()
        batch_cancels = batch_cancels_resume()
        webhooks = webhooks_resume()
        pruned = prune_daily()
        lines = []
        if pruned is not None:
            lines.append(f"monitor: retention (LLM_RETENTION_DAYS): {pruned}")
        if bulk:
            lines.append(f"monitor: resumed {bulk} bulk requeues lost from Redis")
        if batch_cancels:
            lines.append(f"monitor: resumed {batch_cancels} batch cancels lost from Redis")
        if webhooks:
            lines.append(f"monitor: resumed {webhooks} webhook deliveries lost from Redis")
        if resumed:
            lines.append(f"monitor: resumed {resumed} alert deliveries lost from Redis")
        if realerted or not self.looping:
            lines.append(f"monitor: failure alerts lost from Redis, enqueued again: {realerted}")
        if cleared or not self.looping:
            lines.append(f"monitor: failure alerts resolved (DLQ handled): {cleared}")
        for report in reports:
            if report.alert is not None or not self.looping:
                lines.append(f"monitor: {report}")
        if retries.alert is not None or not self.looping:
            lines.append(f"monitor: {retries}")
        if deadlines.alerts or not self.looping:
            lines.append(f"monitor: {deadlines}")
        return "\n".join(lines)
