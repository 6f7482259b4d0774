"""The chaos drill (``python manage.py llm_chaos``): point 7 of the production checklist, do not
trust retries, backoff and the DLQ until they have been broken on purpose, as one command.

It starts the system's processes against the configured database and Redis (the fake provider,
llm workers, the default/alerts worker, the reconciler and the monitor), loads them with jobs,
breaks things on a timeline (429s, a 529 window, dropped connections, 401s that open the
circuit breaker, kill -9 of a worker, FLUSHDB while no rq scheduler runs, calls longer than the
stale threshold), waits for every job to end, stops everything and checks the invariants.

- ``plan``: options, the timeline of faults, the timing knobs scaled for the drill;
- ``safety``: refusing to run where it would hurt; ``setup``: the drill's user and budget;
- ``processes``, ``provider``, ``receiver``: the processes, the fake provider, the alert receiver;
- ``conductor``: the faults moment by moment; ``events``: the looks and the two writes it makes;
- ``drill``: one drill start to end; ``record``: what happened;
- ``checks``, ``fault_checks``, ``report``: the checks and the report.
"""

from chaos.drill import Drill
from chaos.plan import FAULT_KINDS, DrillOptions
from chaos.report import Report, evaluate
from chaos.safety import Refused

__all__ = ["FAULT_KINDS", "Drill", "DrillOptions", "Refused", "Report", "evaluate"]
