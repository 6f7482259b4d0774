"""Every write on a pipeline: create, cancel, and what each transition of a step's job does.

    create                    -> running, step 0's job submitted           pipeline_create
    step job completed        -> next step's job submitted | completed     (pipeline_job_transition)
    step job dead-lettered    -> failed (later steps: cancelled)           (pipeline_job_transition)
    step job requeued (DLQ)   failed -> running (later steps: pending)     (pipeline_job_transition)
    step job cancelled        -> cancelled                                 (pipeline_job_transition)
    cancel                    running|failed -> cancelled                  pipeline_cancel

``pipeline_job_transition`` runs inside the transaction of the job's own transition
(jobs/transitions.py, ``in_transaction=True``), so the next step's job exists exactly when the
previous job's completion committed: a crash between the two cannot lose or double a step. The
pipeline row is locked there (after the job row, which the transition holds): every change of
one pipeline is serialized on it, and every writer takes the job's lock before the pipeline's.
"""

import logging
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from api.errors import ApplicationError, Conflict
from jobs.deadlines import deadline_passed
from jobs.models import LlmJob
from jobs.services import job_cancel, job_submit
from jobs.transitions import Transition
from pipelines import events
from pipelines.models import Pipeline, PipelineStep
from pipelines.placeholders import fill_previous
from pipelines.validation import MARKER_KEY, step_job_body, validate_pipeline_request

__all__ = ["pipeline_cancel", "pipeline_create", "pipeline_job_transition"]

logger = logging.getLogger(__name__)

_WATCHED = frozenset(
    {
        Transition.COMPLETED,
        Transition.DEAD_LETTERED,
        Transition.RECOVERED,
        Transition.CANCELLED,
        Transition.REQUEUED,
    }
)
"""The transitions that move a pipeline; submits, claims and scheduled retries never do."""


def _job_body(body: dict[str, Any], *, pipeline: Pipeline, index: int) -> dict[str, Any]:
    """The step's body with the marker that tells a job's transitions it belongs to a step."""
    metadata = {**(body.get("metadata") or {}), MARKER_KEY: {"id": str(pipeline.id), "step": index}}
    merged = step_job_body(body, deadline=pipeline.deadline, tags=pipeline.tags)
    return {**merged, "metadata": metadata}


@transaction.atomic
def pipeline_create(*, user: User, data: Any, api_key_id: int | None = None) -> Pipeline:
    """Validate every step, insert the pipeline and its steps, and submit step 0's job (enqueued
    on commit). A refusal (400 naming the bad steps, 429 for a spent budget) writes nothing.
    Every step's job records ``api_key_id``, the key that submitted the pipeline."""
    request = validate_pipeline_request(data, user=user, api_key_id=api_key_id)
    pipeline = Pipeline.objects.create(
        user=user,
        api_key_id=api_key_id,
        name=request.name,
        step_count=len(request.steps),
        deadline=request.deadline,
        tags=request.tags,
    )
    first, _created = job_submit(
        user=user,
        data=_job_body(request.steps[0], pipeline=pipeline, index=0),
        api_key_id=api_key_id,
    )
    PipelineStep.objects.bulk_create(
        PipelineStep(pipeline=pipeline, index=i, request=body, job=first if i == 0 else None)
        for i, body in enumerate(request.steps)
    )
    logger.info(
        "pipeline %s created with %s steps; step 0 is job %s",
        pipeline.id,
        pipeline.step_count,
        first.id,
        extra={"pipeline_id": str(pipeline.id), "job_id": str(first.id)},
    )
    return pipeline


def _current_job(pipeline_id: Any) -> LlmJob | None:
    """The job of the last step that started (the one the pipeline waits on), if any."""
    step = (
        PipelineStep.objects.filter(pipeline_id=pipeline_id, job__isnull=False)
        .select_related("job")
        .defer(*(f"job__{field}" for field in LlmJob.REQUEST_FIELDS), "request")
        .order_by("-index")
        .first()
    )
    return step.job if step is not None else None


def pipeline_cancel(*, pipeline: Pipeline) -> Pipeline:
    """Cancel a running or failed pipeline: its waiting step's job is cancelled (a job already
    running finishes, and the pipeline stops after it), and no later step starts.

    A completed or cancelled pipeline answers ``409 not_cancellable``. Locks are taken job first,
    pipeline second, as a job's transitions take them; if the pipeline moved on to its next step
    between the read and the lock, that step's job is cancelled in another round.
    """
    if pipeline.status in Pipeline.FINAL_STATUSES:
        raise _not_cancellable(pipeline)
    while True:
        with transaction.atomic():
            job = _current_job(pipeline.id)
            if job is not None and job.status in LlmJob.WAITING_STATUSES:
                try:
                    # Its CANCELLED transition cancels the pipeline (pipeline_job_transition).
                    job_cancel(job=job)
                except Conflict:
                    pass  # claimed meanwhile: it runs to its end, no step starts after it
            locked = Pipeline.objects.select_for_update().get(id=pipeline.id)
            if locked.status == Pipeline.Status.CANCELLED:
                return locked
            if locked.status == Pipeline.Status.COMPLETED:
                raise _not_cancellable(locked)
            current = _current_job(pipeline.id)
            if (current and current.id) != (job and job.id):
                continue  # the next step started before the lock: cancel its job too
            _finish(locked, Pipeline.Status.CANCELLED)
            logger.info("pipeline %s cancelled", locked.id, extra={"pipeline_id": str(locked.id)})
            return locked


def _not_cancellable(pipeline: Pipeline) -> Conflict:
    return Conflict(
        f"A {pipeline.status} pipeline cannot be cancelled.",
        code="not_cancellable",
        detail={"status": pipeline.status},
    )


def _finish(pipeline: Pipeline, status: str) -> None:
    pipeline.status = status
    pipeline.finished_at = timezone.now()
    pipeline.save(update_fields=["status", "finished_at"])
    events.publish_finished_on_commit(pipeline)


# --- The transitions of a step's job ------------------------------------------------------------


def _in_a_pipeline(job: LlmJob) -> bool:
    """The marker its step put in the job's metadata: tested without a query. Only a hint (a
    caller could send the key on a plain job); the step's row decides."""
    if "metadata" not in job.__dict__:
        # A caller that left the column unread (deferred fields are missing from the instance's
        # __dict__; get_deferred_fields() walks every field, 11 us): reading it would cost a
        # query per job anyway, so the step's unique index answers instead.
        return True
    metadata = job.metadata
    return isinstance(metadata, dict) and MARKER_KEY in metadata


def pipeline_job_transition(job: LlmJob, transition: Transition) -> None:
    """Move the job's pipeline, inside the job's transition (registered in apps.py).

    A no-op without a query for every transition that cannot move a pipeline and for every job
    that is not a step's; otherwise one lookup on the step's unique job column, then the
    pipeline row locked.
    """
    if transition not in _WATCHED or not _in_a_pipeline(job):
        return
    if transition == Transition.RECOVERED and job.status != LlmJob.Status.FAILED:
        return  # recovered into a retry: the step is still on its way
    step = PipelineStep.objects.filter(job_id=job.id).only("id", "pipeline_id", "index").first()
    if step is None:
        return
    pipeline = Pipeline.objects.select_for_update().get(id=step.pipeline_id)
    if transition == Transition.COMPLETED:
        _advance(pipeline, step, job)
    elif transition == Transition.REQUEUED:
        if pipeline.status == Pipeline.Status.FAILED:
            pipeline.status = Pipeline.Status.RUNNING
            pipeline.finished_at = None
            pipeline.save(update_fields=["status", "finished_at"])
            logger.info(
                "pipeline %s resumes: step %s requeued",
                pipeline.id,
                step.index,
                extra={"pipeline_id": str(pipeline.id)},
            )
    elif pipeline.status == Pipeline.Status.RUNNING:
        # Dead-lettered (directly, or by the reconciler's recovery), or cancelled.
        stopped = (
            Pipeline.Status.CANCELLED
            if transition == Transition.CANCELLED
            else Pipeline.Status.FAILED
        )
        _finish(pipeline, stopped)
        logger.info(
            "pipeline %s %s at step %s (job %s %s)",
            pipeline.id,
            stopped,
            step.index,
            job.id,
            transition.value,
            extra={"pipeline_id": str(pipeline.id)},
        )


def _advance(pipeline: Pipeline, step: PipelineStep, job: LlmJob) -> None:
    """Step ``step`` completed: start the next one with its output, or complete the pipeline."""
    if pipeline.status != Pipeline.Status.RUNNING:
        # Cancelled while this step's job was running: its result stays, nothing follows.
        return
    events.publish_step_completed_on_commit(pipeline, index=step.index, job=job)
    following = (
        PipelineStep.objects.select_for_update()
        .filter(pipeline=pipeline, index=step.index + 1)
        .first()
    )
    if following is None:
        _finish(pipeline, Pipeline.Status.COMPLETED)
        logger.info("pipeline %s completed", pipeline.id, extra={"pipeline_id": str(pipeline.id)})
        return
    if following.job_id is not None or following.error_code:
        return  # already started (the step row is the guard against a second start)
    body = fill_previous(following.request, job.output_text or "")
    user = User.objects.only("id").get(id=pipeline.user_id)
    try:
        if deadline_passed(pipeline.deadline):
            raise ApplicationError(
                "The pipeline's deadline passed before this step could start.",
                code="deadline_exceeded",
            )
        # No savepoint of ours: job_submit refuses before writing anything, and writes inside
        # its own atomic block.
        next_job, _created = job_submit(
            user=user,
            data=_job_body(body, pipeline=pipeline, index=following.index),
            api_key_id=pipeline.api_key_id,
        )
    except ApplicationError as exc:
        # Refused at start (its budget spent since the pipeline was accepted, or its messages
        # invalid once filled, e.g. empty): the step fails without a job, and so does the
        # pipeline. The completing job is not affected.
        following.error_code = exc.code
        following.error_message = exc.message[:2000]
        following.save(update_fields=["error_code", "error_message"])
        _finish(pipeline, Pipeline.Status.FAILED)
        logger.warning(
            "pipeline %s failed: step %s refused at start: %s",
            pipeline.id,
            following.index,
            exc.message,
            extra={"pipeline_id": str(pipeline.id), "error_code": exc.code},
        )
        return
    following.job = next_job
    following.save(update_fields=["job"])
