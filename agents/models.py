import uuid

from django.conf import settings
from django.db import models

from jobs.models import LlmJob


class AgentRun(models.Model):
    """A tool-calling loop run for a user: model turns (each an LLM job) and tool calls (each a
    step), until the model answers.

    Status:
        queued            created, its first turn's job waits for a worker
        running           a turn or the turn's tool calls are under way
        waiting_approval  a tool call waits for a human (approve or reject)
        completed         the model answered (final; ``output``)
        failed            a limit, a dead-lettered turn (a requeue from the DLQ resumes it), or an
                          approval that never came (``error_code``)
        cancelled         cancelled by its owner or staff, or its turn's job was cancelled (final)

    The transcript is stored once: ``messages`` (as submitted) plus what each step adds (a model
    turn its assistant content, a tool call its ``tool_result``), agents/transcript.py.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        WAITING_APPROVAL = "waiting_approval", "Waiting for approval"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    FINAL_STATUSES = (Status.COMPLETED, Status.CANCELLED)
    """No step starts again once the run is in one of these (``failed`` may resume)."""
    ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING, Status.WAITING_APPROVAL)

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
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    feature = models.CharField(max_length=64)
    model = models.CharField(max_length=64)
    system = models.JSONField(null=True, blank=True, help_text="As submitted (text or blocks).")
    messages = models.JSONField(help_text="The first messages, as submitted.")
    tools = models.JSONField(default=list, help_text="The names of the tools it may call.")
    max_tokens = models.PositiveIntegerField(help_text="Per model turn.")
    max_turns = models.PositiveIntegerField(default=10)
    max_cost_usd = models.DecimalField(max_digits=16, decimal_places=6, null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    priority = models.CharField(
        max_length=6,
        blank=True,
        help_text="Each turn's job priority (high, normal, low) as asked; empty: the feature "
        "policy's default.",
    )
    deadline = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Every turn's job's deadline; no turn is sent after it. Empty: none.",
    )
    tags = models.JSONField(
        default=list, blank=True, help_text="Slugs, applied to every turn's job; AgentRunTag rows."
    )
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    idempotency_key_hash = models.CharField(max_length=64, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64)
    turns = models.PositiveIntegerField(default=0, help_text="Model turns sent so far.")
    cost_usd = models.DecimalField(
        max_digits=16, decimal_places=6, default=0, help_text="What its turns' jobs cost so far."
    )
    output = models.JSONField(null=True, blank=True, help_text="{text, content} once completed.")
    error_code = models.CharField(max_length=40, blank=True)
    error_message = models.TextField(blank=True)
    waiting_since = models.DateTimeField(
        null=True, blank=True, help_text="When it started waiting for an approval."
    )
    tools_enqueued_at = models.DateTimeField(
        null=True, blank=True, help_text="When its tool task was last put on the queue."
    )
    tools_rq_job_id = models.CharField(
        max_length=80, blank=True, help_text="The RQ job of its tool task (the sweep checks it)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    pruned_at = models.DateTimeField(
        null=True, blank=True, help_text="When its messages and steps' content were emptied."
    )
    traceparent = models.CharField(
        max_length=55,
        blank=True,
        help_text="The run's own span as a W3C traceparent, fixed at submit (tracing/context.py).",
    )
    trace_parent_span_id = models.CharField(max_length=16, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "idempotency_key_hash"], name="unique_agent_run_idempotency_key"
            )
        ]
        indexes = [
            models.Index(fields=["user", "-created_at"], name="agentrun_user_created"),
            models.Index(fields=["status", "updated_at"], name="agentrun_status_updated"),
        ]
        permissions = [
            ("approve_agentrun", "Can approve or reject an agent run's tool calls"),
            ("cancel_agentrun", "Can cancel an agent run"),
        ]

    def __str__(self) -> str:
        return f"agent run {self.id} ({self.status})"


class AgentRunTag(models.Model):
    """One tag of a run: ``?tag=`` reads the (tag, run) index (jobs/tags.py says why)."""

    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="tag_rows")
    tag = models.SlugField(max_length=64, db_index=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "tag"], name="unique_agent_run_tag")]
        indexes = [models.Index(fields=["tag", "run"], name="agentruntag_tag_run")]

    def __str__(self) -> str:
        return f"{self.tag} ({self.run_id})"


class AgentStep(models.Model):
    """One step of a run: a model turn (its job; ``output`` = the assistant content it added)
    or a tool call (``input`` from the model, ``output`` = the tool_result content it added).

    A tool step is claimed ``pending -> running`` by one conditional UPDATE (``attempts`` + 1)
    and ends ``completed`` by another that names the attempt: a completed call never runs
    again; one interrupted mid-call (its worker killed) runs again with the same ``call_id``.
    """

    class Kind(models.TextChoices):
        MODEL = "model", "Model turn"
        TOOL = "tool", "Tool call"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        WAITING_APPROVAL = "waiting_approval", "Waiting for approval"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField(help_text="Position in the run, from 0.")
    turn = models.PositiveIntegerField(help_text="The model turn it belongs to, from 1.")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    status = models.CharField(max_length=20, choices=Status.choices)
    job = models.OneToOneField(
        LlmJob,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="agent_step",
        help_text="A model turn's job.",
    )
    name = models.CharField(max_length=64, blank=True, help_text="The tool's name.")
    call_id = models.CharField(max_length=128, blank=True, help_text="The model's tool_use id.")
    input = models.JSONField(null=True, blank=True)
    output = models.JSONField(
        null=True, blank=True, help_text="What the step adds to the transcript."
    )
    is_error = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=0, help_text="Tool calls started.")
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decision_reason = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(
        null=True, blank=True, help_text="A running tool call not finished by then was lost."
    )
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="unique_agent_step_index"),
        ]
        indexes = [models.Index(fields=["status", "lease_until"], name="agentstep_status_lease")]

    def __str__(self) -> str:
        return f"step {self.index} ({self.kind} {self.name or ''}) of {self.run_id}"


class DemoEmail(models.Model):
    """What the demo ``send_email`` tool "sent": recorded here, never mailed
    (agents/demo_tools.py). Unique on the call id: a call run twice records one message."""

    call_id = models.CharField(max_length=128, unique=True)
    to = models.CharField(max_length=254)
    subject = models.CharField(max_length=200)
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"demo email to {self.to}: {self.subject}"
