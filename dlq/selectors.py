"""Reads on the dead-letter queue."""

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import QuerySet

from api.errors import ValidationFailed
from dlq.models import FailureRecord
from jobs.message_refs import resolve
from ledger.pricing import upper_bound_cost
from ledger.selectors import price_for_model

__all__ = ["RequeueEstimate", "failure_list", "failure_requeue_estimate"]

FILTERS = {
    "state": "state",
    "severity": "severity",
    "reason_code": "reason_code",
    "feature": "job__feature",
    "model": "job__model",
    "http_status": "http_status",
}


def failure_list(*, filters: dict[str, str] | None = None) -> QuerySet[FailureRecord]:
    records = FailureRecord.objects.select_related("job", "handled_by").order_by(
        "-created_at", "-id"
    )
    for name, value in (filters or {}).items():
        if not value:
            continue
        if name not in FILTERS:
            raise ValidationFailed(f"Unknown filter {name!r}.", code="invalid_filter")
        if name == "state" and value not in FailureRecord.State.values:
            raise ValidationFailed(
                f"state must be one of {', '.join(FailureRecord.State.values)}.",
                code="invalid_filter",
                detail={"field": "state"},
            )
        # isdigit() alone also takes digits int() refuses ("²").
        if name == "http_status" and not (value.isascii() and value.isdigit()):
            raise ValidationFailed(
                "http_status must be a number.", code="invalid_filter", detail={"field": name}
            )
        records = records.filter(**{FILTERS[name]: value})
    return records


@dataclass(frozen=True)
class RequeueEstimate:
    count: int
    cost_usd: Decimal
    """Worst case for one more attempt of every job: each at its upper-bound cost."""


def failure_requeue_estimate(
    *, records: QuerySet[FailureRecord], model: str | None = None
) -> RequeueEstimate:
    """How many open records a bulk requeue would move and the most one attempt of each costs.

    One query for the six job fields the bound needs (and two per agent turn, whose transcript
    is rebuilt): never the records' snapshots or messages,
    nor the jobs' outputs.
    """
    requests = records.filter(state=FailureRecord.State.OPEN).values_list(
        "job__model",
        "job__messages",
        "job__messages_ref",
        "job__system",
        "job__max_tokens",
        "job__params",
    )
    prices: dict[str, object] = {}
    total = Decimal(0)
    count = 0
    for job_model, messages, ref, system, max_tokens, params in requests.iterator(chunk_size=500):
        if ref is not None:
            messages = resolve(ref)  # an agent run's turn: its transcript, rebuilt
        run_model = model or job_model
        if run_model not in prices:
            prices[run_model] = price_for_model(model=run_model)
        price = prices[run_model]
        count += 1
        if price is not None:
            total += upper_bound_cost(
                price,  # type: ignore[arg-type]
                messages=messages,
                system=system,
                max_tokens=max_tokens,
                tools=(params or {}).get("tools"),
            )
    return RequeueEstimate(count=count, cost_usd=total)
