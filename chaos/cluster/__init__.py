"""The cluster drill (``python manage.py llm_cluster_drill``, ``make cluster-drill``): the
system's hosts built on this machine with network namespaces, the paths between them frozen and
a host killed while long calls are in flight, checked against the fake provider's own logs.

- ``topology``: the namespaces, the bridge, freezing and healing paths, cleaning leftovers;
- ``forwarder``: the database host's forwarder to MariaDB; ``services``: what runs on each host;
- ``scenarios``: a path frozen, a host killed; ``checks``: per scenario, from the provider's log;
- ``rate_limit``: the shared rate limiter at the provider's limit, workers on three hosts;
- ``drill``: one run start to end and its report; ``command``: the management command.
"""

from chaos.cluster.drill import ClusterOptions, ClusterReport, run_cluster_drill

__all__ = ["ClusterOptions", "ClusterReport", "run_cluster_drill"]
