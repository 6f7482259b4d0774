"""Run the chaos drill (chaos/, docs/operations.md#chaos-drill) and print its report; exit 1 when
a check fails, 2 when it refuses to run here. A thin wrapper: the drill is a top-level package
that production does not install, so it is imported only when this command runs."""

from ops.drill_command import DrillCommand


class Command(DrillCommand):
    help = (
        "Break the system on purpose and check that it holds: the production checklist's drill "
        "against the fake provider and real workers, scaled to minutes. FLUSHDBs the configured "
        "Redis database: run it against a scratch database and Redis (make chaos)."
    )
    drill_module = "chaos.command"
    missing = "the chaos drill (chaos/) is not installed here: run it from a checkout (make chaos)"
