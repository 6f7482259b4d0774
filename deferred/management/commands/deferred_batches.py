from deferred.services import deferred_pass
from loops.command import LoopCommand


class Command(LoopCommand):
    help = (
        "Send waiting deferred jobs as provider message batches, poll them and book their "
        "results (once, or --loop, surviving provider, Redis and database errors)."
    )
    loop_name = "deferred"
    interval_setting = "LLM_DEFERRED_POLL_SECONDS"

    def run_pass(self) -> str:
        report = deferred_pass()
        # Under --loop the line is prefixed with the loop's name already.
        if self.looping:
            return str(report) if report.changed else ""
        return f"deferred: {report}"
