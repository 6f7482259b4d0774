"""Run the cluster drill (chaos/cluster/, docs/deploy.md#the-cluster-drill) and print its report;
exit 1 when a check fails, 2 when it refuses to run here (not root, no network namespaces). A
thin wrapper: the drill is not installed in production, so it is imported only when this runs."""

from ops.drill_command import DrillCommand


class Command(DrillCommand):
    help = (
        "Build the system's hosts on this machine with network namespaces (as root), freeze "
        "a worker host's paths and kill a host while long calls are in flight, and check the "
        "jobs and the money against the fake provider's own logs; then measure the rate "
        "limiter's use of the provider's limit across hosts (make cluster-drill)."
    )
    drill_module = "chaos.cluster.command"
    missing = "the cluster drill (chaos/cluster/) is not installed here"
