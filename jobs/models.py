import uuid
from decimal import Decimal

from django.conf import settings
from django.db import models

from jobs.priorities import PRIORITY_CHOICES


class Severity(models.TextChoices):
    """How bad a failure is: the retry table gives it, a dead-lettered job's record (dlq/) and
    its alert (alerts/, routed by it) carry it."""

    WARNING = "WARNING", "Warning"
    ERROR = "ERROR", "Error"
    CRITICAL = "CRITICAL", "Critical"


class LlmJob(models.Model):
    """One LLM call run in the background. Its row is the source of truth for its state."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        RETRYING = "retrying", "Retrying"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    class Kind(models.TextChoices):
        CHAT = "chat", "Chat (Messages)"
        EMBEDDING = "embedding", "Embedding"

    class Mode(models.TextChoices):
        REALTIME = "realtime", "Real time"
        DEFERRED = "deferred", "Deferred (provider message batches, at the batch price)"

    FINAL_STATUSES = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)
    WAITING_STATUSES = (Status.QUEUED, Status.RETRYING)
    REQUEST_FIELDS = ("messages", "system", "metadata", "input")
    """The large columns of the request, which lists that do not show them leave unread."""

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
    feature = models.SlugField(max_length=64)
    model = models.CharField(max_length=100)
    current_model = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text=(
            "The model the current or next attempt runs on: ``model``, or a fallback of the "
            "feature's policy once the job moved (jobs/fallbacks.py)."
        ),
    )
    served_by = models.CharField(
        max_length=100, blank=True, default="", help_text="The model that answered."
    )
    model_failures = models.PositiveSmallIntegerField(
        default=0, help_text="Transient failures in a row on current_model (a fallback's trigger)."
    )
    limiter_wait_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the rate limiter first held it on current_model (a fallback's trigger).",
    )
    mode = models.CharField(
        max_length=10,
        choices=Mode.choices,
        default=Mode.REALTIME,
        help_text=(
            "deferred: sent in a provider message batch by the deferred loop (deferred/), "
            "never pushed on the llm queue; realtime once it falls back."
        ),
    )
    provider_batch = models.ForeignKey(
        "deferred.ProviderBatch",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The provider batch of its last deferred attempt (in it while running).",
    )
    kind = models.CharField(
        max_length=10,
        choices=Kind.choices,
        default=Kind.CHAT,
        help_text="chat: a Messages-style call; embedding: the vectors of ``input``.",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)

    # The request, as the provider will receive it.
    messages = models.JSONField(
        help_text="Empty when messages_ref points at them (an agent run's turn)."
    )
    messages_ref = models.JSONField(
        null=True,
        blank=True,
        help_text=(
            "Where the messages are kept instead (jobs/message_refs.py): an agent run's turn "
            "names its run and step, and its transcript is rebuilt from the run's steps."
        ),
    )
    system = models.JSONField(null=True, blank=True)
    input = models.JSONField(
        null=True,
        blank=True,
        help_text="An embedding job's texts, in order (its vectors are kept in embeddings/).",
    )
    max_tokens = models.PositiveIntegerField(help_text="0 for an embedding job: no output.")
    temperature = models.FloatField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    params = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "tools, tool_choice, stop_sequences, top_p, top_k, thinking as submitted: sent to "
            "the provider unchanged (jobs/request_params.py)."
        ),
    )

    concurrency_key = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text=(
            "At most LLM_CONCURRENCY_PER_KEY jobs with the same key run at once; "
            "empty: no such limit."
        ),
    )

    deadline = models.DateTimeField(
        null=True,
        blank=True,
        help_text=(
            "Not started by then: it ends failed (deadline_exceeded) without a call, and no "
            "retry is scheduled past it (jobs/deadlines.py). Empty: no deadline."
        ),
    )
    deadline_stopped = models.BooleanField(
        default=False,
        help_text="Its last failure would have been retried after its deadline: it ended there.",
    )
    tags = models.JSONField(
        default=list,
        blank=True,
        help_text="Slugs, as shown; the JobTag rows (one per tag) are what filters read.",
    )

    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    idempotency_key_hash = models.CharField(
        max_length=64,
        null=True,
        blank=True,
        help_text=(
            "SHA-256 of the key: keys compare byte for byte whatever the column collation "
            "(MariaDB's default folds case and trailing spaces)."
        ),
    )
    request_fingerprint = models.CharField(max_length=64)

    attempts = models.PositiveIntegerField(default=0, help_text="Provider attempts, all time.")
    budget_attempts = models.PositiveIntegerField(
        default=0, help_text="Attempts since the last requeue; bounded by LLM_MAX_ATTEMPTS."
    )
    retry_counts = models.JSONField(
        default=dict, blank=True, help_text="Retries used per failure class since the last requeue."
    )
    rq_job_id = models.CharField(max_length=64, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(
        null=True, blank=True, help_text="A cancel asked while the job ran: its worker ends it."
    )

    output_text = models.TextField(null=True, blank=True)
    output_content = models.JSONField(
        null=True,
        blank=True,
        help_text="Every content block of the answer as the API returned it (text, thinking, "
        "tool_use, server tool results).",
    )
    stop_reason = models.CharField(max_length=40, blank=True)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_creation_input_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_read_input_tokens = models.PositiveIntegerField(null=True, blank=True)
    cost_usd = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal("0"))
    max_cost_usd = models.DecimalField(
        max_digits=16,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="The most the job may cost in all, retries and fallbacks included (an agent "
        "run's turn: what its run has left); no attempt starts whose worst case does not fit.",
    )

    error_code = models.CharField(max_length=40, blank=True)
    error_http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error_message = models.TextField(blank=True)
    error_severity = models.CharField(max_length=10, blank=True)
    priority = models.CharField(
        max_length=6,
        choices=PRIORITY_CHOICES,
        default="normal",
        help_text="high jobs leave the queue and pass the rate limiter before normal ones, low "
        "after (jobs/priorities.py); as asked, else the feature policy's default.",
    )
    held_reason = models.CharField(
        max_length=40,
        blank=True,
        help_text="Why a waiting job is parked with no RQ job: feature_paused, provider_paused. "
        "Resuming the feature or provider enqueues it again, in submit order.",
    )
    pruned_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When its prompt, output and vectors were emptied (retention/; the row and its "
        "cost stay).",
    )
    traceparent = models.CharField(
        max_length=55,
        blank=True,
        help_text="The job's own span as a W3C traceparent (trace id, span id), fixed at submit "
        "(tracing/context.py).",
    )
    trace_parent_span_id = models.CharField(
        max_length=16,
        blank=True,
        help_text="The caller's span (the submit's traceparent, or an agent run's); empty for a "
        "trace the job starts.",
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The API's and the admin's filters, each with the creation-time order they list in.
            models.Index(fields=["user", "-created_at"], name="job_user_created"),
            models.Index(fields=["user", "status", "-created_at"], name="job_user_status_created"),
            models.Index(fields=["status", "-created_at"], name="job_status_created"),
            models.Index(fields=["feature", "-created_at"], name="job_feature_created"),
            models.Index(fields=["model", "-created_at"], name="job_model_created"),
            # The reconciler's and the monitor's sweeps.
            models.Index(fields=["status", "next_attempt_at"], name="job_status_next"),
            models.Index(fields=["status", "enqueued_at"], name="job_status_enqueued"),
            models.Index(fields=["status", "heartbeat_at"], name="job_status_heartbeat"),
            # The deferred loop's flush: waiting deferred jobs per model.
            models.Index(
                fields=["mode", "status", "current_model", "enqueued_at"], name="job_deferred_wait"
            ),
            # The ops dashboard: jobs finished per minute and the wait/runtime percentiles of
            # the last hours read this index alone (bench/dashboard.py).
            models.Index(
                fields=["completed_at", "status", "attempts", "started_at", "enqueued_at"],
                name="job_finished_timings",
            ),
            # Deadline attainment per feature (jobs/deadlines.py) reads this index alone.
            models.Index(
                fields=["deadline", "feature", "status", "completed_at"],
                name="job_deadline_attainment",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "idempotency_key_hash"], name="unique_idempotency_key_hash_per_user"
            )
        ]
        verbose_name = "LLM job"

    def __str__(self) -> str:
        return f"{self.feature}/{self.model} {self.id} ({self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL_STATUSES

    @property
    def duration_ms(self) -> int | None:
        if self.started_at is None or self.completed_at is None:
            return None
        return int((self.completed_at - self.started_at).total_seconds() * 1000)

    @property
    def run_model(self) -> str:
        """The model its current or next attempt runs on (the ledger, the limiter, budgets and
        the provider call all use it); ``model`` is what was asked for."""
        return self.current_model or self.model

    @property
    def counted_model(self) -> str:
        """The model a status change is counted under (metrics/): the one the attempt that just
        ended ran on, when it moved the job to a fallback (``moved_from``), else ``run_model``."""
        return getattr(self, "moved_from", None) or self.run_model

    @property
    def is_embedding(self) -> bool:
        return self.kind == self.Kind.EMBEDDING

    @property
    def request_messages(self) -> list:
        """The messages sent for this job: its own, or those its ``messages_ref`` points at
        (rebuilt once per instance, and checked against the digest taken at submit).

        An embedding job's inputs read as one user turn of text blocks: what the estimates of
        an attempt's input (budgets, the limiter, the ledger's bounds) count, in one form."""
        if self.is_embedding:
            return [
                {"role": "user", "content": [{"type": "text", "text": t} for t in self.input or []]}
            ]
        if self.messages_ref is None:
            return self.messages
        cached = getattr(self, "_resolved_messages", None)
        if cached is None:
            from jobs.message_refs import resolve

            cached = self._resolved_messages = resolve(self.messages_ref)
        return cached

    def provider_request(self) -> dict:
        """The Messages API body sent for this job; for an embedding job, the Embeddings API's
        (``model``, ``input``, and ``dimensions`` when asked)."""
        if self.is_embedding:
            return {"model": self.run_model, "input": list(self.input or []), **(self.params or {})}
        body: dict = {
            "model": self.run_model,
            "max_tokens": self.max_tokens,
            "messages": self.request_messages,
        }
        if self.system is not None:
            body["system"] = self.system
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.params or {})
        return body


class JobAttempt(models.Model):
    """One attempt of a job as it was claimed: the model, provider and price it runs at and the
    budget reservation that holds it, fixed when it starts (a real-time call, a stream, a batch
    item, an embedding request, an agent turn). Every booking of the attempt (success, unknown
    outcome, cancel, superseded batch result, recovery) reads them from here, never from the
    job's state at booking time: the job may have moved to a fallback model meanwhile."""

    job = models.ForeignKey(LlmJob, on_delete=models.CASCADE, related_name="attempt_rows")
    attempt = models.PositiveIntegerField()
    model = models.CharField(max_length=100)
    provider = models.CharField(max_length=40)
    price = models.ForeignKey(
        "ledger.ModelPrice", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    batch = models.BooleanField(default=False, help_text="An item of a provider message batch.")
    reservation_token = models.UUIDField(null=True, blank=True)
    claimed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt"], name="unique_job_attempt")
        ]

    def __str__(self) -> str:
        return f"{self.job_id} attempt {self.attempt} on {self.model}"


class JobWait(models.Model):
    """A time a waiting job was held back without an attempt (the rate limiter's next slot, its
    concurrency key taken, a budget's hold), for its trace and its admin timeline. Consecutive
    holds of one kind make one row, its ``seconds`` extended: pacing may hold a job many times."""

    class Kind(models.TextChoices):
        RATE_LIMIT = "rate_limit", "Rate limit"
        CONCURRENCY_KEY = "concurrency_key", "Concurrency key"
        BUDGET = "budget", "Budget"

    job = models.ForeignKey(LlmJob, on_delete=models.CASCADE, related_name="wait_rows")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    started_at = models.DateTimeField()
    seconds = models.FloatField(help_text="Until the time it was held to.")
    holds = models.PositiveIntegerField(default=1)

    class Meta:
        indexes = [models.Index(fields=["job", "started_at"], name="jobwait_job_started")]

    def __str__(self) -> str:
        return f"{self.job_id} held {self.seconds:.2f}s ({self.kind})"


class JobTag(models.Model):
    """One tag of a job. A row per tag, not a JSON contains: ``?tag=`` and the cost report's
    ``group_by=tag`` read the (tag, job) index on MariaDB, whose JSON functions use none."""

    job = models.ForeignKey(LlmJob, on_delete=models.CASCADE, related_name="tag_rows")
    tag = models.SlugField(max_length=64, db_index=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "tag"], name="unique_job_tag")]
        indexes = [models.Index(fields=["tag", "job"], name="jobtag_tag_job")]

    def __str__(self) -> str:
        return f"{self.tag} ({self.job_id})"


class ProviderBreaker(models.Model):
    """The circuit breaker of one provider account.

    An account-wide failure (401, 403, the spend cap, "credit balance is too low") opens it: no
    worker starts a call for that provider while it is open, waiting jobs stay queued, and one
    CRITICAL alert goes out. Staff close it from the admin, or it closes when a probe call (one
    job let through every ``LLM_BREAKER_PROBE_SECONDS``) succeeds.
    """

    class State(models.TextChoices):
        CLOSED = "closed", "Closed"
        OPEN = "open", "Open"

    provider = models.CharField(max_length=40, unique=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.CLOSED)
    reason_code = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    opened_at = models.DateTimeField(null=True, blank=True)
    opened_by_job = models.ForeignKey(
        LlmJob, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    next_probe_at = models.DateTimeField(null=True, blank=True)
    probes = models.PositiveIntegerField(default=0, help_text="Probe calls since it opened.")
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    close_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["provider"]
        permissions = [("close_providerbreaker", "Can close a provider circuit breaker")]

    def __str__(self) -> str:
        return f"{self.provider}: {self.state}"

    @property
    def is_open(self) -> bool:
        return self.state == self.State.OPEN
