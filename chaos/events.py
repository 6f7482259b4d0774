"""The drill's looks at the running system: who runs the rq scheduler, what a worker has in
flight, the breaker, the jobs still waiting, and the counters and budgets that must never go
negative. Reads only, plus the two writes a drill makes on purpose: FLUSHDB and closing the
breaker through ``breaker_close``, the service the admin's action calls."""

from datetime import timedelta
from decimal import Decimal

import django_rq
from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Min, Q
from django.utils import timezone
from rq import Worker
from rq.scheduler import SCHEDULER_KEY_TEMPLATE, RQScheduler

from alerts.models import AlertFingerprint
from jobs.breaker import PROVIDER, breaker_close
from jobs.models import LlmJob, ProviderBreaker
from ledger.models import BudgetReservation, BudgetWindow
from llmops.queues import LLM_QUEUE
from metrics.models import AttemptCounter, FailureCounter, JobCounter

__all__ = [
    "BREAKER_CLOSE_REASON",
    "breaker_close_as_staff",
    "breaker_now",
    "budget_windows_above_limit",
    "forget_dead_workers",
    "held_before_call",
    "in_flight_jobs",
    "negative_values",
    "open_failure_incidents",
    "redis_flush",
    "scheduler_holder_pid",
    "unfinished_jobs",
    "waiting_jobs",
]

BREAKER_CLOSE_REASON = "closed by the chaos drill (llm_chaos)"


def scheduler_holder_pid() -> tuple[str, int | None]:
    """(the scheduler name holding the llm queue's lock or "", its process id if it said)."""
    redis = django_rq.get_connection(LLM_QUEUE)
    name = redis.get(RQScheduler.get_locking_key(LLM_QUEUE))
    if not name:
        return "", None
    name_text = name.decode()
    pid = redis.hget(SCHEDULER_KEY_TEMPLATE % name_text, "pid")
    return name_text, int(pid) if pid else None


def in_flight_jobs(*, worker_pid: int) -> list[str]:
    """The LlmJob ids the rq worker with this pid is running now (its execution index)."""
    queue = django_rq.get_queue(LLM_QUEUE)
    for worker in Worker.all(connection=queue.connection, queue=queue):
        if worker.pid == worker_pid:
            rq_ids = [execution.job_id for execution in worker.get_current_executions(refresh=True)]
            return [
                str(job_id)
                for job_id in LlmJob.objects.filter(rq_job_id__in=rq_ids).values_list(
                    "id", flat=True
                )
            ]
    return []


def held_before_call(*, worker_pid: int, calls_in_flight: set[str]) -> list[str]:
    """Jobs the rq worker with this pid dequeued whose call has not left: its executions whose
    job is still waiting (on the rate limiter before the claim, a database slot...), or claimed
    and waiting for the paced slot the limiter gave it (ratelimits/services.py
    ``rate_limit_sent``), its call not among the provider's ``calls_in_flight`` (job ids)."""
    running = in_flight_jobs(worker_pid=worker_pid)
    return [
        str(job_id)
        for job_id, status in LlmJob.objects.filter(
            id__in=running,
            status__in=[*LlmJob.WAITING_STATUSES, LlmJob.Status.RUNNING],
        ).values_list("id", "status")
        if status != LlmJob.Status.RUNNING or str(job_id) not in calls_in_flight
    ]


def budget_windows_above_limit(
    *, budget_ids: list[int]
) -> tuple[list[str], dict[int, tuple[str, str]]]:
    """([each window above its budget's limit, in words], {budget id: (spent, limit)} now)."""
    above, now = [], {}
    for window in BudgetWindow.objects.filter(budget_id__in=budget_ids).select_related("budget"):
        limit = window.budget.limit_usd
        now[window.budget_id] = (str(window.spent_usd), str(limit))
        if window.spent_usd > limit:
            above.append(
                f"budget {window.budget_id} window {window.window_start:%Y-%m-%d} spent "
                f"${window.spent_usd} > limit ${limit}"
            )
    return above, now


def llm_worker_pids() -> list[int]:
    queue = django_rq.get_queue(LLM_QUEUE)
    return [w.pid for w in Worker.all(connection=queue.connection, queue=queue) if w.pid]


def unfinished_jobs() -> set[str]:
    return {
        str(job_id)
        for job_id in LlmJob.objects.exclude(status__in=LlmJob.FINAL_STATUSES).values_list(
            "id", flat=True
        )[:100_000]
    }


def forget_dead_workers(*, pids: set[int]) -> int:
    """Unregister the rq workers of these (the drill's, all stopped) processes still listed on
    this Redis: one killed with -9 stays listed until its key expires (minutes), and the next
    drill would refuse to run beside it. Returns how many."""
    redis = django_rq.get_connection(LLM_QUEUE)
    stale = [worker for worker in Worker.all(connection=redis) if worker.pid in pids]
    for worker in stale:
        worker.register_death()
    return len(stale)


def redis_flush() -> int:
    """FLUSHDB of the database the system uses; returns how many keys it held."""
    redis = django_rq.get_connection(LLM_QUEUE)
    keys = int(redis.dbsize())
    redis.flushdb()
    return keys


def waiting_jobs(*, job_ids: list[str]) -> list[str]:
    return [
        str(job_id)
        for job_id in LlmJob.objects.filter(
            id__in=job_ids, status__in=LlmJob.WAITING_STATUSES
        ).values_list("id", flat=True)
    ]


def breaker_now() -> ProviderBreaker | None:
    return ProviderBreaker.objects.filter(provider=PROVIDER).first()


def breaker_close_as_staff(*, user: User) -> bool:
    """What a staff member's "Close the breaker" admin action does (jobs/admin.py)."""
    return breaker_close(provider=PROVIDER, by=user, reason=BREAKER_CLOSE_REASON)


def open_failure_incidents() -> set[str]:
    """Failure fingerprints whose incident is open and was paged within the dedup window: an
    occurrence now folds into it instead of paging (alerts/notifications.py)."""
    since = timezone.now() - timedelta(seconds=settings.ALERT_DEDUP_SECONDS)
    return set(
        AlertFingerprint.objects.filter(
            active=True, fingerprint__startswith="failure:", last_sent_at__gte=since
        ).values_list("fingerprint", flat=True)
    )


def negative_values(*, job_ids: list[str], budget_id: int | None) -> list[str]:
    """Every counter, budget figure or job cost below zero, in words (empty: none)."""
    found = []
    lowest = AttemptCounter.objects.aggregate(
        cost=Min("cost_usd"),
        credited=Min("cost_credited_usd"),
        attempts=Min("attempts"),
        input=Min("input_tokens"),
        output=Min("output_tokens"),
    )
    lowest.update(JobCounter.objects.aggregate(jobs=Min("jobs")))
    lowest.update(FailureCounter.objects.aggregate(failures=Min("failures")))
    found += [f"counter {name} = {value}" for name, value in lowest.items() if (value or 0) < 0]
    windows = BudgetWindow.objects.filter(spent_usd__lt=0)
    found += [f"budget window {w.id} spent {w.spent_usd}" for w in windows[:5]]
    reservations = BudgetReservation.objects.filter(
        Q(amount_usd__lt=0) | Q(settled_usd__lt=0)
    ).filter(budget_id=budget_id or 0)
    found += [f"reservation {r.id} {r.amount_usd}/{r.settled_usd}" for r in reservations[:5]]
    jobs = LlmJob.objects.filter(id__in=job_ids, cost_usd__lt=Decimal(0))
    found += [f"job {j.id} cost {j.cost_usd}" for j in jobs[:5]]
    return found
