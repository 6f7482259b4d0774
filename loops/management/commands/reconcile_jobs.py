from agents.sweep import agent_runs_resume
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
        # Agent runs whose tool task Redis lost or whose worker died, and approvals timed out.
        agents = agent_runs_resume()
        # Under --loop, only a pass that changed something is worth a line (an open breaker is
        # logged by the breaker and shown in the admin, not repeated every pass).
        lines = []
        if report.changed or not self.looping:
            lines.append(f"reconcile: {report}")
        if agents.changed or not self.looping:
            lines.append(f"reconcile: {agents}")
        return "\n".join(lines)
