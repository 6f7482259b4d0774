import uuid

from django.conf import settings
from django.db import models

from jobs.models import LlmJob


class Pipeline(models.Model):
    """Ordered steps, each an LLM job that starts only once the previous one completed, and may
    use its output (``{{previous}}``, pipelines/placeholders.py).

    Status:
        running    a step is waiting or running (or the pipeline resumed after a requeue)
        completed  the last step completed (final)
        failed     a step's job was dead-lettered, or a step was refused when it was to start;
                   requeuing the dead-lettered job from the DLQ makes it ``running`` again
        cancelled  the owner or staff cancelled it, or the current step's job was cancelled (final)
    """

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    FINAL_STATUSES = (Status.COMPLETED, Status.CANCELLED)
    """No step starts again once the pipeline is in one of these (``failed`` may resume)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    api_key = models.ForeignKey(
        "keys.ApiKey",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The API key that submitted it (empty: a session, or before keys).",
    )
    name = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    step_count = models.PositiveIntegerField()
    deadline = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Every step's job's deadline; no step starts after it. Empty: none.",
    )
    tags = models.JSONField(default=list, blank=True, help_text="Slugs, on every step's job.")
    created_at = models.DateTimeField(auto_now_add=True)
    pruned_at = models.DateTimeField(
        null=True, blank=True, help_text="When its steps' requests were emptied (retention/)."
    )
    finished_at = models.DateTimeField(
        null=True, blank=True, help_text="When it completed, failed or was cancelled."
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The API's list (own pipelines, optionally by status) in the order it lists them.
            models.Index(fields=["user", "-created_at"], name="pipeline_user_created"),
            models.Index(
                fields=["user", "status", "-created_at"], name="pipeline_user_status_created"
            ),
            models.Index(fields=["status", "-created_at"], name="pipeline_status_created"),
        ]
        permissions = [("cancel_pipeline", "Can cancel a pipeline")]

    def __str__(self) -> str:
        return f"{self.name or 'pipeline'} {self.id} ({self.status})"


class PipelineStep(models.Model):
    """One step: the job body as submitted, and its job once it started.

    A step's job is created only when the previous step completed, because its messages may hold
    that step's output; until then ``job`` is empty. A step refused when it was to start (its
    budget spent meanwhile, or its messages invalid once filled in) has no job and keeps the
    refusal in ``error_code`` and ``error_message``.
    """

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField(help_text="Position in the pipeline, from 0.")
    request = models.JSONField(help_text="The job body as submitted, {{previous}} unfilled.")
    job = models.OneToOneField(
        LlmJob,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="pipeline_step",
        help_text="Empty until the step starts.",
    )
    error_code = models.CharField(max_length=40, blank=True)
    error_message = models.TextField(blank=True)

    class Meta:
        # By the column: ordering by "pipeline" would join the pipeline for its own ordering.
        ordering = ["pipeline_id", "index"]
        constraints = [
            models.UniqueConstraint(fields=["pipeline", "index"], name="unique_pipeline_step_index")
        ]

    def __str__(self) -> str:
        return f"step {self.index} of {self.pipeline_id}"

    def status_in(self, pipeline_status: str) -> str:
        """What the API shows: the job's status once it has one; before, ``pending`` while the
        pipeline may still reach it, ``cancelled`` once it stopped; ``failed`` when refused."""
        if self.job_id is not None:
            assert self.job is not None
            return self.job.status
        if self.error_code:
            return LlmJob.Status.FAILED
        if pipeline_status in (Pipeline.Status.FAILED, Pipeline.Status.CANCELLED):
            return LlmJob.Status.CANCELLED
        return "pending"
