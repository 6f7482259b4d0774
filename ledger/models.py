import uuid
from decimal import Decimal
from typing import Any, NoReturn

from django.db import models


class ModelPrice(models.Model):
    """Prices of one model in USD per million tokens, valid from ``effective_from`` on.

    A price change is a new row with a later ``effective_from``; history is never rewritten, so an
    old attempt is always priced at the rate in force when it ran.
    """

    model = models.CharField(max_length=100, db_index=True)
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
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model", "-effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["model", "effective_from"], name="unique_price_start")
        ]

    def __str__(self) -> str:
        return f"{self.model} from {self.effective_from:%Y-%m-%d}"


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

    The database refuses the same on MariaDB/MySQL (triggers from migration 0003), so raw SQL
    cannot do it either.
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


class CostEntry(models.Model):
    """One provider attempt, priced. Append-only: corrections are new rows.

    Enforced three times: ``save()`` refuses an existing row, the default manager's QuerySet
    refuses ``update()``/``bulk_update()``/``delete()``, and on MariaDB/MySQL database triggers
    refuse ``UPDATE`` and ``DELETE`` on the table (see migration 0003 for the one escape hatch).
    """

    class Outcome(models.TextChoices):
        SUCCESS = "success", "Success"
        ERROR_RESPONSE = "error_response", "Error response"
        UNKNOWN = "unknown_outcome", "Unknown outcome"
        CONNECTION_ERROR = "connection_error", "Connection error (not sent)"
        ERROR = "error", "Unexpected error"

    class EntryType(models.TextChoices):
        ATTEMPT = "attempt", "Attempt"
        CORRECTION = "correction", "Correction"

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
    cost_usd = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal("0"))
    is_estimated = models.BooleanField(
        default=False, help_text="Upper-bound estimate: the provider may or may not have billed it."
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
