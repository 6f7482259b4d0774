import uuid
from decimal import Decimal
from typing import Any, NoReturn

from django.conf import settings
from django.db import models

from providers.models import DEFAULT_PROVIDER


class ModelPrice(models.Model):
    """Prices of one model in USD per million tokens, valid from ``effective_from`` on.

    A price change is a new row with a later ``effective_from``; history is never rewritten, so an
    old attempt is always priced at the rate in force when it ran.
    """

    class Kind(models.TextChoices):
        CHAT = "chat", "Chat"
        EMBEDDING = "embedding", "Embedding"

    model = models.CharField(max_length=100, db_index=True)
    # Referenced by its name, as breakers and rate limits are: a row of the anthropic provider
    # is there from the first migration on, and no database constraint ties prices to it.
    provider = models.ForeignKey(
        "providers.Provider",
        to_field="name",
        db_constraint=False,
        on_delete=models.PROTECT,
        default=DEFAULT_PROVIDER,
        related_name="prices",
        help_text="The provider that serves the model: its jobs run there.",
    )
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.CHAT)
    effective_from = models.DateTimeField()
    input_per_mtok = models.DecimalField(max_digits=12, decimal_places=4)
    output_per_mtok = models.DecimalField(max_digits=12, decimal_places=4)
    cache_write_5m_per_mtok = models.DecimalField(max_digits=12, decimal_places=4)
    cache_write_1h_per_mtok = models.DecimalField(max_digits=12, decimal_places=4)
    cache_read_per_mtok = models.DecimalField(max_digits=12, decimal_places=4)
    batch_discount = models.DecimalField(
        max_digits=4,
        decimal_places=3,
        default=Decimal("0.500"),
        help_text="Fraction taken off every rate for Message Batches (0.5 = 50 %).",
    )
    max_output_tokens = models.PositiveIntegerField(
        help_text="Largest max_tokens the model accepts; submits above it are refused."
    )
    web_search_per_request = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        default=Decimal("0.01"),
        help_text="USD per web search the web search server tool makes ($10 per 1,000).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model", "-effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["model", "effective_from"], name="unique_price_start")
        ]

    def __str__(self) -> str:
        return f"{self.model} from {self.effective_from:%Y-%m-%d}"

    @property
    def provider_name(self) -> str:
        """The name of the provider that serves the model (no query)."""
        return str(self.provider_id or DEFAULT_PROVIDER)


class LedgerIsAppendOnly(ValueError):
    """Code tried to change or remove a ledger row.

    A programming error, not a request error, so it is not an ``ApplicationError``: no API caller
    can cause it and no handler should turn it into a response. It subclasses ``ValueError``
    because ``CostEntry.save()`` refused updates with ``ValueError`` before it existed.
    """

    def __init__(self, operation: str) -> None:
        super().__init__(
            f"CostEntry rows are append-only: {operation} is refused; "
            "record a correction as a new row instead"
        )


class CostEntryQuerySet(models.QuerySet["CostEntry"]):
    """Reads and inserts only: every way the ORM offers to rewrite or remove rows raises.

    The database refuses the same on MariaDB/MySQL (triggers from migration 0003) and
    PostgreSQL (0015), so raw SQL cannot do it either.
    """

    def update(self, **kwargs: Any) -> NoReturn:
        raise LedgerIsAppendOnly("QuerySet.update()")

    def bulk_update(self, objs: Any, fields: Any, batch_size: int | None = None) -> NoReturn:
        raise LedgerIsAppendOnly("QuerySet.bulk_update()")

    def delete(self) -> NoReturn:
        raise LedgerIsAppendOnly("QuerySet.delete()")

    delete.alters_data = True  # type: ignore[attr-defined]
    delete.queryset_only = True  # type: ignore[attr-defined]

    def _raw_delete(self, using: Any) -> NoReturn:
        # The deletion collector's fast path for cascades; nothing cascades to the ledger today
        # (its foreign keys PROTECT), so this only guards a future schema change.
        raise LedgerIsAppendOnly("QuerySet._raw_delete()")


REPORT_COLUMNS = [
    "job",
    "entry_type",
    "input_tokens",
    "output_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "cache_read_tokens",
    "cost_usd",
    "batch_saved_usd",
]
"""What the cost reports read from each ledger row (ledger/reports.py), carried in their indexes."""


class CostEntry(models.Model):
    """One provider attempt, priced. Append-only: corrections are new rows.

    Enforced three times: ``save()`` refuses an existing row, the default manager's QuerySet
    refuses ``update()``/``bulk_update()``/``delete()``, and on MariaDB/MySQL and PostgreSQL
    database triggers refuse ``UPDATE`` and ``DELETE`` on the table (see migrations 0003 and
    0015 for each one's escape hatch).
    """

    class Outcome(models.TextChoices):
        SUCCESS = "success", "Success"
        ERROR_RESPONSE = "error_response", "Error response"
        UNKNOWN = "unknown_outcome", "Unknown outcome"
        CONNECTION_ERROR = "connection_error", "Connection error (not sent)"
        ERROR = "error", "Unexpected error"
        CANCELLED = "cancelled", "Cancelled mid-call"
        EXPIRED = "expired", "Expired in a message batch (not billed)"

    class EntryType(models.TextChoices):
        ATTEMPT = "attempt", "Attempt"
        CORRECTION = "correction", "Correction"
        TOOL_CALL = "tool_call", "Priced tool call"
        """An agent run's call of a priced tool (an MCP server's), booked on the job of the turn
        that asked for it; ``attempt`` numbers the turn's priced calls, ``request_id`` is the
        call's ``call_id``."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    job = models.ForeignKey("jobs.LlmJob", on_delete=models.PROTECT, related_name="cost_entries")
    attempt = models.PositiveIntegerField()
    entry_type = models.CharField(
        max_length=10,
        choices=EntryType.choices,
        default=EntryType.ATTEMPT,
        db_default=EntryType.ATTEMPT,
    )
    corrects = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="corrections",
        help_text="The estimated row this correction books the real cost against.",
    )
    feature = models.CharField(max_length=64, db_index=True)
    model = models.CharField(max_length=100, db_index=True)
    provider = models.CharField(
        max_length=40,
        default=DEFAULT_PROVIDER,
        help_text="The provider the attempt ran on (its price row's), copied like the model.",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The job's owner, copied like feature and model so reports need no join.",
    )
    api_key = models.ForeignKey(
        "keys.ApiKey",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The API key that submitted the job (empty: a session, or before keys), "
        "copied like the user.",
    )
    price = models.ForeignKey(ModelPrice, on_delete=models.PROTECT, null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    reason_code = models.CharField(max_length=40, blank=True)
    error_type = models.CharField(max_length=60, blank=True)
    error_message = models.TextField(blank=True)
    request_id = models.CharField(max_length=100, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_write_5m_tokens = models.PositiveIntegerField(default=0)
    cache_write_1h_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    web_search_requests = models.PositiveIntegerField(
        default=0, help_text="Searches the web search server tool made (billed per search)."
    )
    cost_usd = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal("0"))
    is_estimated = models.BooleanField(
        default=False, help_text="Upper-bound estimate: the provider may or may not have billed it."
    )
    is_batch = models.BooleanField(
        default=False, help_text="An item of a provider message batch, priced at the batch rate."
    )
    is_superseded = models.BooleanField(
        default=False,
        help_text="A batch result booked after its job moved on (to real time, or cancelled): "
        "paid, so booked, but not the job's answer.",
    )
    batch_saved_usd = models.DecimalField(
        max_digits=16,
        decimal_places=6,
        default=Decimal("0"),
        help_text="What the batch price saved against the standard price for this row.",
    )
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    retry_delay_seconds = models.FloatField(
        null=True, blank=True, help_text="Delay before the retry this attempt led to, if any."
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = CostEntryQuerySet.as_manager()

    class Meta:
        ordering = ["created_at"]
        verbose_name_plural = "cost entries"
        indexes = [
            # The cost reports and budget windows: a scope, then a time range, then every column
            # a report reads, so a report over a million rows never visits the rows themselves
            # (bench/costs.py: 4-6 s per report without them, under 0.7 s with them).
            models.Index(
                fields=["feature", "created_at", "model", "user", *REPORT_COLUMNS],
                name="cost_report_feature",
            ),
            models.Index(
                fields=["user", "created_at", "feature", "model", *REPORT_COLUMNS],
                name="cost_report_user",
            ),
            models.Index(
                fields=["model", "created_at", "feature", "user", *REPORT_COLUMNS],
                name="cost_report_model",
            ),
            models.Index(
                fields=["created_at", "feature", "model", "user", *REPORT_COLUMNS],
                name="cost_report_created",
            ),
            models.Index(
                fields=["api_key", "created_at", "feature", "model", "user", *REPORT_COLUMNS],
                name="cost_report_key",
            ),
            # The ops dashboard's attempts and failed attempts per minute (bench/dashboard.py).
            models.Index(
                fields=["created_at", "entry_type", "outcome"], name="cost_dashboard_created"
            ),
        ]
        constraints = [
            # One row per attempt, and at most one correction of it (a late result).
            models.UniqueConstraint(
                fields=["job", "attempt", "entry_type"], name="one_cost_entry_per_attempt_type"
            )
        ]

    def __str__(self) -> str:
        return f"{self.job_id} #{self.attempt} {self.outcome} ${self.cost_usd}"

    def save(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        # The ledger is append-only; an update would rewrite money history.
        if not self._state.adding:
            raise LedgerIsAppendOnly("saving an existing row")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise LedgerIsAppendOnly("Model.delete()")

    @property
    def cache_creation_input_tokens(self) -> int:
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens


class Budget(models.Model):
    """A hard spending limit for one feature, one user or one API key, per UTC day or month.

    Before each provider call the worker reserves the attempt's worst case against every budget
    that applies (ledger/budgets.py); the ledger row of the attempt settles it. Settled spend never
    exceeds ``limit_usd``, whatever the number of workers.
    """

    class Scope(models.TextChoices):
        FEATURE = "feature", "Feature"
        USER = "user", "User"
        KEY = "key", "API key"

    class Period(models.TextChoices):
        DAY = "day", "Day (UTC)"
        MONTH = "month", "Month (UTC)"

    class OnExceed(models.TextChoices):
        REJECT = "reject", "Reject (dead-letter the job)"
        DEFER = "defer", "Defer (hold the job until the window resets)"

    scope = models.CharField(max_length=10, choices=Scope.choices)
    feature = models.SlugField(max_length=64, blank=True, help_text="For a feature budget.")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="For a user budget.",
    )
    api_key = models.ForeignKey(
        "keys.ApiKey",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="budgets",
        help_text="For a key budget (the key's max_budget_usd).",
    )
    period = models.CharField(max_length=10, choices=Period.choices, default=Period.MONTH)
    limit_usd = models.DecimalField(max_digits=14, decimal_places=6)
    soft_alert_percent = models.PositiveSmallIntegerField(
        default=80, help_text="A WARNING once per window when spend crosses this percentage."
    )
    on_exceed = models.CharField(max_length=10, choices=OnExceed.choices, default=OnExceed.REJECT)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "feature", "user_id", "period"]
        indexes = [
            models.Index(fields=["enabled", "scope", "feature"], name="budget_feature"),
            models.Index(fields=["enabled", "scope", "user"], name="budget_user"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(scope="feature", user__isnull=True, api_key__isnull=True)
                    & ~models.Q(feature="")
                )
                | models.Q(scope="user", user__isnull=False, feature="", api_key__isnull=True)
                | models.Q(scope="key", api_key__isnull=False, user__isnull=True, feature=""),
                name="budget_scope_is_consistent_with_keys",
            ),
            # A key has one max_budget_usd (per day or per month).
            models.UniqueConstraint(fields=["api_key"], name="one_budget_per_api_key"),
            models.CheckConstraint(
                condition=models.Q(limit_usd__gt=0), name="budget_limit_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(soft_alert_percent__gte=1, soft_alert_percent__lte=100),
                name="budget_soft_percent_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.period} ${self.limit_usd}"

    @property
    def name(self) -> str:
        if self.scope == self.Scope.FEATURE:
            return f"feature:{self.feature}"
        if self.scope == self.Scope.KEY:
            return f"key:{self.key_label}"
        return f"user:{self.user.get_username() if self.user else self.user_id}"

    @property
    def key_label(self) -> str:
        """A key budget's key as labels show it: its id and name (the prefix changes with each
        rotation; the id does not)."""
        return f"{self.api_key_id} {self.api_key.name}" if self.api_key else str(self.api_key_id)

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if self.scope == self.Scope.FEATURE and (not self.feature or self.user_id):
            raise ValidationError("A feature budget names a feature and no user.")
        if self.scope == self.Scope.USER and (not self.user_id or self.feature):
            raise ValidationError("A user budget names a user and no feature.")
        if self.scope != self.Scope.KEY and self.api_key_id:
            raise ValidationError("Only a key budget names an API key.")
        if self.scope == self.Scope.KEY and (not self.api_key_id or self.feature or self.user_id):
            raise ValidationError("A key budget names an API key and no feature or user.")


class BudgetWindow(models.Model):
    """The settled spend of one budget in one window (a UTC day or month), kept by the ledger
    writes in the same transaction as each ledger row, and the window's alert marks."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="windows")
    window_start = models.DateTimeField()
    spent_usd = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal("0"))
    soft_alerted_at = models.DateTimeField(null=True, blank=True)
    exhausted_alerted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-window_start"]
        constraints = [
            models.UniqueConstraint(fields=["budget", "window_start"], name="one_budget_window")
        ]

    def __str__(self) -> str:
        return f"{self.budget.name} from {self.window_start:%Y-%m-%d}: ${self.spent_usd}"


class BudgetReservation(models.Model):
    """The worst case of one attempt held against one budget window until the attempt ends.

    A reservation ends only by settlement (its attempt's ledger row, written by the worker or by
    the reconciler's ``job_recover``) or by release (the call is known not to have been sent:
    its copy lost the claim, or never claimed and is gone); never by a clock. The rows one
    ``budget_reserve`` call creates (one per budget) share a ``token``; the claim that starts
    the attempt marks them ``claimed_at``, in the claim's transaction."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="reservations")
    window_start = models.DateTimeField()
    job = models.ForeignKey("jobs.LlmJob", on_delete=models.CASCADE, related_name="+")
    attempt = models.PositiveIntegerField()
    token = models.UUIDField(
        null=True, blank=True, help_text="Shared by the rows of one reservation (null: legacy)."
    )
    amount_usd = models.DecimalField(max_digits=16, decimal_places=6)
    price = models.ForeignKey(
        ModelPrice,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The price the worst case was computed with; the attempt is booked with it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        help_text="Unused: read only by the release before this one, which counted a "
        "reservation until then (written as never). To be dropped in the next release."
    )
    settled_at = models.DateTimeField(null=True, blank=True)
    settled_usd = models.DecimalField(max_digits=16, decimal_places=6, null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["budget", "window_start", "settled_at", "expires_at"],
                name="reservation_open",
            ),
            models.Index(fields=["job", "attempt"], name="reservation_job_attempt"),
            models.Index(fields=["token"], name="reservation_token"),
            # The reconciler's sweep of reservations whose copy never claimed its attempt.
            models.Index(
                fields=["settled_at", "claimed_at", "created_at"], name="reservation_sweep"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget.name} job {self.job_id} #{self.attempt} ${self.amount_usd}"
