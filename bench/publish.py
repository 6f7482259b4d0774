"""The cost of one live-event publish from a sync worker process (jobs/events.py).

    REDIS_URL=redis://127.0.0.1:6379/14 .venv/bin/python bench/publish.py [N]

Publishes N (default 1,000) ``job.updated`` events of one unsaved job, from the main thread as
an RQ work horse does after a transition commits, and prints the median and p99 wall time per
publish. For comparison it times the naive way too: ``async_to_sync(layer.group_send)`` per
group, which makes a new event loop and a new Redis connection on each call. Nobody listens to
the groups, so this measures the publisher's cost alone. Needs only Redis (no database).
"""

import os
import statistics
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmops.settings")
os.environ.setdefault("DATABASE_URL", "sqlite:///")

import django  # noqa: E402

django.setup()

from asgiref.sync import async_to_sync  # noqa: E402
from channels.layers import get_channel_layer  # noqa: E402

from jobs.events import event_for, publish_job_event  # noqa: E402
from jobs.models import LlmJob  # noqa: E402
from llmops.queues import all_jobs_group, job_events_group, job_group  # noqa: E402


def _job() -> LlmJob:
    return LlmJob(
        id=uuid.uuid4(),
        user_id=1,
        status=LlmJob.Status.RUNNING,
        attempts=1,
        cost_usd=Decimal("0.001234"),
        feature="bench",
        model="claude-sonnet-4-6",
    )


def _time(label: str, fn: object, n: int) -> None:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter() - started)
    samples.sort()
    median = statistics.median(samples) * 1e6
    p99 = samples[int(len(samples) * 0.99) - 1] * 1e6
    print(f"{label:<44} median {median:8.0f} µs   p99 {p99:8.0f} µs   (n={n})")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    job = _job()
    publish_job_event(job)  # start the sender thread and its connection, as the first event does
    _time("publish_job_event (one sender thread)", lambda: publish_job_event(job), n)

    layer = get_channel_layer()
    groups = [job_events_group(job.user_id), job_group(job.id), all_jobs_group()]
    message = event_for(job)

    def naive() -> None:
        for group in groups:
            async_to_sync(layer.group_send)(group, message)

    _time("naive async_to_sync(group_send) x3 groups", naive, max(n // 10, 10))


if __name__ == "__main__":
    main()
