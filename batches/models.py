import uuid

from django.conf import settings
from django.db import models

from alerts.targets import CALLBACK, redact_target
from jobs.models import LlmJob


class Batch(models.Model):
    """Many LLM jobs submitted at once and followed as one (Laravel's ``Bus::batch``).

    Every item is an ordinary ``LlmJob`` run by the ordinary workers; identical items share one
    job (``BatchItem``). The counters count items and move inside the transitions of those jobs
    (batches/counters.py), so they stay exact under any number of workers.

    Status:
        running    no outcome decided yet
        completed  every item ended (with ``allow_failures``, some may have failed)
        cancelled  the owner or staff cancelled it: its waiting jobs were cancelled
        failed     without ``allow_failures``, an item failed: the rest was cancelled
    ``status`` says the outcome as soon as it is decided; ``finished_at`` is set once, when no
    item is pending any more (jobs already running when a batch is cancelled still end).
    """

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        COMPLETED = "completed", "Completed"
        CANCELLED = "cancelled", "Cancelled"
        FAILED = "failed", "Failed"

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
    kind = models.CharField(
        max_length=10,
        choices=LlmJob.Kind.choices,
        default=LlmJob.Kind.CHAT,
        help_text="embedding: items are texts, grouped into embedding jobs.",
    )
    feature = models.SlugField(max_length=64)
    model = models.CharField(max_length=100)
    allow_failures = models.BooleanField(
        default=True, help_text="Off: the first failed item cancels the rest (status failed)."
    )
    callback_url = models.CharField(
        max_length=500,
        blank=True,
        help_text="Receives one POST when the batch finishes. A secret: shown redacted.",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    deadline = models.DateTimeField(
        null=True, blank=True, help_text="Every job's deadline (jobs/deadlines.py); empty: none."
    )
    tags = models.JSONField(
        default=list, blank=True, help_text="Slugs, applied to every job; BatchTag for filters."
    )
    door = models.CharField(
        max_length=16,
        blank=True,
        default="",
        help_text="anthropic: made at the Anthropic door's Message Batches (gateway/); empty: "
        "the job API's.",
    )

    # Items, not jobs: identical items share a job and count once each.
    total = models.PositiveIntegerField()
    jobs_total = models.PositiveIntegerField(help_text="Distinct jobs (identical items share one).")
    # Signed on purpose: a counting bug must show as a wrong number, never fail a job's transition.
    pending = models.IntegerField(help_text="Items whose job is queued, running or retrying.")
    completed = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    cancelled = models.IntegerField(default=0)

    idempotency_key_hash = models.CharField(
        max_length=64, null=True, blank=True, help_text="SHA-256 of its Idempotency-Key, if any."
    )
    request_fingerprint = models.CharField(
        max_length=64, blank=True, help_text="SHA-256 of the body, kept with an Idempotency-Key."
    )

    created_at = models.DateTimeField(auto_now_add=True)
    cancel_requested_at = models.DateTimeField(
        null=True, blank=True, help_text="When a cancel (or the first failure) stopped it."
    )
    jobs_cancelled_at = models.DateTimeField(
        null=True, blank=True, help_text="When the background cancel of its waiting jobs ended."
    )
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "batches"
        indexes = [
            models.Index(fields=["user", "-created_at"], name="batch_user_created"),
            models.Index(fields=["status", "-created_at"], name="batch_status_created"),
            # The monitor's sweep for cancels whose background job Redis lost.
            models.Index(
                fields=["jobs_cancelled_at", "cancel_requested_at"], name="batch_cancel_sweep"
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "idempotency_key_hash"], name="unique_batch_idempotency_key"
            )
        ]
        permissions = [("cancel_batch", "Can cancel any batch")]

    def __str__(self) -> str:
        return f"{self.name or 'batch'} {self.id} ({self.status})"

    @property
    def done(self) -> int:
        return self.completed + self.failed + self.cancelled

    @property
    def percent(self) -> int:
        return 100 if not self.total else int(self.done * 100 / self.total)

    @property
    def callback_redacted(self) -> str:
        return redact_target(kind=CALLBACK, target=self.callback_url) if self.callback_url else ""


class BatchTag(models.Model):
    """One tag of a batch: ``?tag=`` reads the (tag, batch) index (jobs/tags.py says why)."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="tag_rows")
    tag = models.SlugField(max_length=64, db_index=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["batch", "tag"], name="unique_batch_tag")]
        indexes = [models.Index(fields=["tag", "batch"], name="batchtag_tag_batch")]

    def __str__(self) -> str:
        return f"{self.tag} ({self.batch_id})"


class BatchItem(models.Model):
    """One item of a batch and the job that runs it. Identical items (the same request
    fingerprint) point at one job: it runs once and its result is each one's result."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="items")
    index = models.PositiveIntegerField(help_text="Position in the submitted items, from 0.")
    job = models.ForeignKey(
        LlmJob, on_delete=models.PROTECT, related_name="batch_items", db_index=False
    )
    runs_job = models.BooleanField(
        help_text="The first item of its job (the others share it): the batch's job list."
    )
    position = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="An embedding item: the index of its text in its job's input.",
    )
    metadata = models.JSONField(
        null=True, blank=True, help_text="An embedding item's own metadata (its job has many)."
    )

    class Meta:
        ordering = ["batch", "index"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "index"], name="unique_batch_item_index")
        ]
        indexes = [
            # The transition subscriber's lookup (job -> batch, items), read from the index alone.
            models.Index(fields=["job", "batch"], name="batchitem_job_batch"),
        ]

    def __str__(self) -> str:
        return f"item {self.index} of batch {self.batch_id}"
