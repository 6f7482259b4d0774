from jobs.reconciler import ReconcileReport, reconcile_jobs
from llmops.loops import LoopCommand


class Command(LoopCommand):
    help = (
        "Re-enqueue jobs Redis lost and recover jobs whose worker died (once, or --loop, "
        "surviving Redis and database errors)."
    )
    loop_name = "reconciler"
    interval_setting = "LLM_RECONCILE_INTERVAL"

    def run_pass(self) -> str:
        report = reconcile_jobs()
        # Under --loop, only a pass that found something (any count, any flag) is worth a line.
        if report != ReconcileReport() or not self.looping:
            return f"reconcile: {report}"
        return ""
