"""Writes on the ledger, and the money rules they follow.

Every provider attempt leaves exactly one ``CostEntry`` (``entry_type=attempt``), written by the
job transition that ends the attempt, in the same transaction. The ledger is append-only: a late
result that shows what an estimated attempt really cost is booked as one ``correction`` row whose
``cost_usd`` is the difference, so the sum of a job's rows is always what it cost.

- A success is priced exactly, at the rate in force when the attempt ran (the rate its budget
  reservation used, when it has one).
- An error response costs nothing; a request that never left costs nothing.
- An attempt of unknown outcome (read timeout, dropped connection, worker lost, a 2xx whose body
  could not be read) is booked at its upper bound: the provider may have done and billed it.
"""

from dataclasses import dataclass, field, replace
from decimal import Decimal

from django.db.models import F

from jobs.models import JobAttempt, LlmJob
from ledger.budgets import budget_reserved_price, budget_settle
from ledger.hooks import cost_entry_booked
from ledger.models import CostEntry, ModelPrice
from ledger.pricing import attempt_cost, broken_stream_cost, upper_bound_cost
from ledger.selectors import price_for_model
from providers.models import DEFAULT_PROVIDER

__all__ = [
    "AttemptRecord",
    "cost_entry_correct_late_result",
    "cost_entry_record_attempt",
    "cost_entry_record_tool_call",
    "job_upper_bound_cost",
]


@dataclass
class AttemptRecord:
    """What one attempt left behind, as the ledger books it."""

    outcome: str
    """A ``CostEntry.Outcome``."""
    usage: dict[str, int] = field(default_factory=dict)
    http_status: int | None = None
    reason_code: str = ""
    error_type: str = ""
    message: str = ""
    request_id: str = ""
    latency_ms: int | None = None
    retry_delay_seconds: float | None = None
    maybe_billed: bool = False
    """The provider may have done the work although we never saw its answer."""
    output_tokens_bound: int | None = None
    """A stream that ended early: the most output tokens it generated, when known (None with
    ``usage``: up to ``max_tokens``). With either, the row books the stream's usage, bounded."""
    batch: bool = False
    """An item of a provider message batch: priced at the model's batch rate."""
    superseded: bool = False
    """A batch result whose job had moved on: booked (it was paid), not the job's answer."""


def job_upper_bound_cost(*, job: "LlmJob", price: ModelPrice | None = None) -> Decimal:
    """The most one attempt of this job can cost at today's price (0 without a price); what
    ``budget_reserve`` holds for it. ``price``: the price in force of its model, when the caller
    read it already."""
    price = price or price_for_model(model=job.run_model)
    if price is None:
        return Decimal(0)
    return upper_bound_cost(
        price,
        messages=job.request_messages,
        system=job.system,
        max_tokens=job.max_tokens,
        tools=(job.params or {}).get("tools"),
    )


def _attempt_terms(job: "LlmJob", attempt: int) -> tuple[str, ModelPrice | None, bool]:
    """The model and price attempt ``attempt`` was claimed at (``jobs.JobAttempt``): the job
    may have moved to a fallback model since, and a late or superseded result of this attempt is
    still the model it ran on. An attempt claimed before attempts were recorded: the price its
    budget reservation used, else the one in force now, on the job's model. Third: whether the
    attempt may hold budget reservations (False when its claim took none: no budget applied)."""
    claimed = (
        JobAttempt.objects.filter(job_id=job.id, attempt=attempt).select_related("price").first()
    )
    if claimed is not None:
        return claimed.model, claimed.price, claimed.reservation_token is not None
    price = budget_reserved_price(job=job, attempt=attempt) or price_for_model(model=job.run_model)
    return job.run_model, price, True


def cost_entry_record_attempt(*, job: "LlmJob", attempt: int, record: AttemptRecord) -> CostEntry:
    """Book one attempt, at the model and price it was claimed at. Call inside the transaction
    of the job's transition."""
    model, price, reserved = _attempt_terms(job, attempt)
    estimated = False
    saved = Decimal(0)
    if record.outcome == CostEntry.Outcome.SUCCESS:
        cost = attempt_cost(price, record.usage, batch=record.batch) if price else Decimal(0)
        if record.batch and price is not None:
            saved = attempt_cost(price, record.usage) - cost
    elif (
        record.maybe_billed
        and price is not None
        and (record.usage or record.output_tokens_bound is not None)
    ):
        # A stream that ended early: its input as message_start reported it (or bounded), its
        # output bounded by what streamed, or else by max_tokens.
        bound = record.output_tokens_bound
        output = job.max_tokens if bound is None else min(job.max_tokens, bound)
        cost, usage = broken_stream_cost(
            price,
            usage=record.usage,
            output_tokens=output,
            messages=job.request_messages,
            system=job.system,
            tools=(job.params or {}).get("tools"),
        )
        record = replace(record, usage=usage)
        estimated = True
    elif record.maybe_billed and price is not None:
        cost = upper_bound_cost(
            price,
            messages=job.request_messages,
            system=job.system,
            max_tokens=job.max_tokens,
            tools=(job.params or {}).get("tools"),
        )
        estimated = True
    else:
        cost = Decimal(0)
    return _create_row(
        job=job,
        attempt=attempt,
        record=record,
        model=model,
        price=price,
        cost=cost,
        is_estimated=estimated,
        batch_saved_usd=saved,
        reserved=reserved,
    )


def cost_entry_correct_late_result(
    *, job: "LlmJob", attempt: int, record: AttemptRecord
) -> CostEntry | None:
    """Book what an attempt whose outcome was booked as unknown really cost, once it is known.

    Appends one correction row (real cost minus the estimate, the real usage, the real outcome)
    against the estimated row; returns None when there is nothing to correct (no estimated row,
    already corrected, or the late result is itself of unknown outcome).
    """
    if record.maybe_billed:
        return None
    estimated = CostEntry.objects.filter(
        job=job, attempt=attempt, entry_type=CostEntry.EntryType.ATTEMPT, is_estimated=True
    ).first()
    if estimated is None:
        return None
    if CostEntry.objects.filter(
        job=job, attempt=attempt, entry_type=CostEntry.EntryType.CORRECTION
    ).exists():
        return None
    price = estimated.price
    real = Decimal(0)
    if record.outcome == CostEntry.Outcome.SUCCESS and price is not None:
        real = attempt_cost(price, record.usage)
    return _create_row(
        job=job,
        attempt=attempt,
        record=record,
        model=estimated.model,
        price=price,
        cost=real - estimated.cost_usd,
        entry_type=CostEntry.EntryType.CORRECTION,
        corrects=estimated,
    )


def cost_entry_record_tool_call(
    *, job: "LlmJob", call_id: str, tool: str, source: str, price_usd: Decimal, is_error: bool
) -> CostEntry:
    """Book one call of a priced tool (an MCP server's) on the job of the turn that asked for
    it, at its price per call. Call inside the transaction that records the call, with the job
    locked (its priced calls are numbered). The job's ``cost_usd`` includes it, so a run's cost,
    its ``max_cost_usd`` and every budget of its feature, user and key count it."""
    booked = CostEntry.objects.filter(job=job, entry_type=CostEntry.EntryType.TOOL_CALL)
    entry = _create_row(
        job=job,
        attempt=booked.count() + 1,
        record=AttemptRecord(
            outcome=CostEntry.Outcome.ERROR_RESPONSE if is_error else CostEntry.Outcome.SUCCESS,
            request_id=call_id[:100],
        ),
        model=tool,
        price=None,
        cost=price_usd,
        entry_type=CostEntry.EntryType.TOOL_CALL,
        provider=source[:40],
    )
    LlmJob.objects.filter(id=job.id).update(cost_usd=F("cost_usd") + price_usd)
    return entry


def _create_row(
    *,
    job: "LlmJob",
    attempt: int,
    record: AttemptRecord,
    model: str,
    price: ModelPrice | None,
    cost: Decimal,
    is_estimated: bool = False,
    entry_type: str = CostEntry.EntryType.ATTEMPT,
    corrects: CostEntry | None = None,
    batch_saved_usd: Decimal = Decimal(0),
    provider: str = "",
    reserved: bool = True,
) -> CostEntry:
    entry = CostEntry.objects.create(
        job=job,
        attempt=attempt,
        entry_type=entry_type,
        corrects=corrects,
        # A correction books against the attempt as it ran, whatever the job became since.
        feature=corrects.feature if corrects else job.feature,
        model=corrects.model if corrects else model,
        provider=corrects.provider
        if corrects
        else (provider or (price.provider_name if price else DEFAULT_PROVIDER)),
        user_id=job.user_id,
        api_key_id=job.api_key_id,
        price=price,
        outcome=record.outcome,
        http_status=record.http_status,
        reason_code=record.reason_code,
        error_type=record.error_type,
        error_message=record.message[:2000],
        request_id=record.request_id,
        latency_ms=record.latency_ms,
        cost_usd=cost,
        is_estimated=is_estimated,
        is_batch=record.batch,
        is_superseded=record.superseded,
        batch_saved_usd=batch_saved_usd,
        retry_delay_seconds=record.retry_delay_seconds,
        **_usage_fields(record.usage),
    )
    # In the same transaction: budget windows and the metrics' counters always equal the ledger.
    budget_settle(entry=entry, job=job, reserved=reserved)
    cost_entry_booked(entry)
    return entry


def _usage_fields(usage: dict[str, int]) -> dict[str, int]:
    return {
        kind: int(usage.get(kind, 0))
        for kind in (
            "input_tokens",
            "output_tokens",
            "cache_write_5m_tokens",
            "cache_write_1h_tokens",
            "cache_read_tokens",
            "web_search_requests",
        )
    }
