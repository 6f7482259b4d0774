from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import Count, F, Q, QuerySet
from django.utils import timezone

from api.errors import NotFound
from api.runs import RunFilters, filter_runs
from jobs.live_text import running_text
from jobs.models import LlmJob


def job_get_for_user(*, user: User, job_id: UUID) -> LlmJob:
    """A user's own job; another user's job is indistinguishable from a missing one."""
    # With its provider batch: the body shows the batch's provider id.
    job = LlmJob.objects.select_related("provider_batch").filter(user=user, id=job_id).first()
    if job is None:
        raise NotFound("No such job.", code="job_not_found")
    return job


def job_list_for_user(*, user: User, filters: RunFilters | None = None) -> QuerySet[LlmJob]:
    """The user's own jobs, newest first, by the shared list filters (api/runs.py)."""
    # The list shows output and usage, never the request: leave its large columns unread.
    # The provider batch of a deferred job in the same query: no query per row for its id.
    jobs = (
        LlmJob.objects.filter(user=user)
        .select_related("provider_batch")
        .defer(*LlmJob.REQUEST_FIELDS)
    )
    return filter_runs(jobs, filters or RunFilters(), statuses=LlmJob.Status.values)


def job_oldest_overdue_retry(
    *, due_before: datetime, exclude_models: set[str] | None = None
) -> LlmJob | None:
    """The retrying job whose next attempt fell due longest ago, if that was before
    ``due_before``: its retry should have run by now (no scheduler, or workers far behind).
    ``exclude_models``: models whose jobs wait on purpose (their provider's breaker is open)."""
    overdue = LlmJob.objects.filter(
        status=LlmJob.Status.RETRYING, next_attempt_at__lt=due_before
    ).exclude(mode=LlmJob.Mode.DEFERRED)  # the deferred loop's, flushed on its own clock
    if exclude_models:
        overdue = overdue.exclude(current_model__in=exclude_models)
    return overdue.order_by("next_attempt_at").first()


DUE_TOLERANCE_SECONDS = 1.0
"""A retry's RQ job may start this much before ``next_attempt_at``: the scheduler computes its
due time from the same delay a moment after the row, so a legitimate copy is never refused."""


def jobs_runnable(*, job_id: str, rq_job_id: str | None) -> QuerySet[LlmJob]:
    """The job, if this RQ job may run it now: waiting, due, and the RQ job the row points at
    (a stray copy requeued by hand or duplicated by a failover matches nothing)."""
    due = Q(status=LlmJob.Status.QUEUED) | Q(
        status=LlmJob.Status.RETRYING,
        next_attempt_at__lte=timezone.now() + timedelta(seconds=DUE_TOLERANCE_SECONDS),
    )
    jobs = LlmJob.objects.filter(due, id=job_id)
    if rq_job_id is not None:
        jobs = jobs.filter(rq_job_id=rq_job_id)
    return jobs


def job_for_run(*, job_id: str, rq_job_id: str | None) -> LlmJob | None:
    """The job an RQ job is about to run, read without a lock (``job_claim`` decides)."""
    return jobs_runnable(job_id=job_id, rq_job_id=rq_job_id).first()


def job_output(job: LlmJob, *, partial: bool = False) -> dict[str, Any] | None:
    """A job's ``output`` as the API shows it: the text, the stop reason, and every content
    block (a job completed before blocks were kept shows its text as one block). With
    ``partial``, a running job shows the text its attempt has streamed so far (from Redis), and
    an embedding job its vectors (embeddings/selectors.py)."""
    if partial and job.status == LlmJob.Status.RUNNING:
        text = running_text(job.id, job.attempts)
        return {"text": None, "stop_reason": None, "content": [], "partial_text": text}
    if job.output_text is None:
        return None
    if job.is_embedding:
        from embeddings.selectors import embedding_output

        # One job's view (the detail, ``partial``) shows its vectors; a list, their shape.
        return embedding_output(job, vectors=partial)
    return {
        "text": job.output_text,
        "stop_reason": job.stop_reason or None,
        "content": job.output_content or [{"type": "text", "text": job.output_text}],
    }


def job_wait_while_running(*, job: LlmJob, seconds: float) -> LlmJob:
    """The job once it no longer runs, or as it is after ``seconds`` (a cancel's short wait for
    its worker to close the stream)."""
    import time

    ends = time.monotonic() + seconds
    while job.status == LlmJob.Status.RUNNING and time.monotonic() < ends:
        time.sleep(0.1)
        job.refresh_from_db()
    return job


@dataclass(frozen=True)
class DeadlineAttainment:
    feature: str
    with_deadline: int
    met: int

    @property
    def ratio(self) -> float:
        return self.met / self.with_deadline if self.with_deadline else 1.0


def deadline_attainment(
    *,
    since: datetime,
    until: datetime,
    user_id: int | None = None,
    feature: str | None = None,
    now: datetime | None = None,
) -> list[DeadlineAttainment]:
    """Per feature: the jobs whose deadline fell in [since, until) and has passed, and how many
    of them completed by it (``completed_at <= deadline``). Only passed deadlines count: each
    such job's outcome is settled, met or missed; a job still within its deadline is neither.
    One GROUP BY over the ``job_deadline_attainment`` index; features by name."""
    end = min(until, now or timezone.now())
    if since >= end:
        return []
    jobs = LlmJob.objects.filter(deadline__gte=since, deadline__lt=end)
    if user_id is not None:
        jobs = jobs.filter(user_id=user_id)
    if feature:
        jobs = jobs.filter(feature=feature)
    met = Q(status=LlmJob.Status.COMPLETED, completed_at__lte=F("deadline"))
    rows = (
        jobs.order_by("feature")
        .values("feature")
        .annotate(with_deadline=Count("id"), met=Count("id", filter=met))
    )
    return [
        DeadlineAttainment(row["feature"], with_deadline=row["with_deadline"], met=row["met"])
        for row in rows
    ]
