from jobs.reconciler import reconcile_jobs
from loops.command import LoopCommand


class Command(LoopCommand):
    help = (
        "Re-enqueue jobs Redis lost and recover jobs whose worker died (once, or --loop, "
        "surviving Redis and database errors)."
    )
    loop_name = "reconciler"
    interval_setting = "LLM_RECONCILE_INTERVAL"

    def run_pass(self) -> str:
        report = reconcile_jobs()
        # Under --loop, only a pass that changed something is worth a line (an open breaker is
        # logged by the breaker and shown in the admin, not repeated every pass).
        if report.changed or not self.looping:
            return f"reconcile: {report}"
        return ""
