"""A small ledger for the cost report tests, and the report computed from it independently:
plain Python sums over the rows the test wrote, never the selector under test."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from dlq.models import FailureRecord
from jobs.models import LlmJob
from ledger.models import CostEntry

TOKENS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cache_write_5m": "cache_write_5m_tokens",
    "cache_write_1h": "cache_write_1h_tokens",
    "cache_read": "cache_read_tokens",
}


@contextmanager
def at(moment: datetime) -> Iterator[None]:
    """Rows created inside get ``created_at = moment`` (auto_now_add reads timezone.now)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timezone, "now", lambda: moment)
        yield


@dataclass
class Ledger:
    now: datetime
    entries: list[CostEntry]
    failures: list[FailureRecord]
    jobs: dict[str, LlmJob]


def make_job(user: Any, feature: str, model: str) -> LlmJob:
    return LlmJob.objects.create(
        user=user,
        feature=feature,
        model=model,
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=50,
        request_fingerprint="fp",
    )


def entry(job: LlmJob, when: datetime, *, attempt: int, cost: str, **fields: Any) -> CostEntry:
    with at(when):
        return CostEntry.objects.create(
            job=job,
            attempt=attempt,
            feature=job.feature,
            model=job.model,
            user_id=job.user_id,
            outcome=fields.pop("outcome", CostEntry.Outcome.SUCCESS),
            cost_usd=Decimal(cost),
            **fields,
        )


def failure(job: LlmJob, when: datetime) -> FailureRecord:
    with at(when):
        return FailureRecord.objects.create(
            job=job,
            severity="ERROR",
            reason_code="server_error",
            attempts=3,
            request_snapshot={},
        )


def build_ledger(alice: Any, bob: Any) -> Ledger:
    """Alice: a job with an error then a success, and a job booked at its upper bound, corrected
    later and dead-lettered. Bob: a success today, and a dead-lettered job 40 days ago (outside
    the default 30-day range)."""
    now = timezone.now().replace(microsecond=0)
    jobs = {
        "a1": make_job(alice, "summarize", "claude-haiku-4-5"),
        "a2": make_job(alice, "classify", "claude-sonnet-4-6"),
        "b1": make_job(bob, "summarize", "claude-sonnet-4-6"),
        "b2": make_job(bob, "summarize", "claude-haiku-4-5"),
    }
    day = timedelta(days=1)
    estimated = entry(
        jobs["a2"], now - day, attempt=1, cost="0.012000", outcome="unknown_outcome",
        is_estimated=True,
    )  # fmt: skip
    entries = [
        entry(jobs["a1"], now - 3 * day, attempt=1, cost="0", outcome="error_response"),
        entry(
            jobs["a1"],
            now - 3 * day + timedelta(minutes=1),
            attempt=2,
            cost="0.000300",
            input_tokens=100,
            output_tokens=20,
            cache_write_5m_tokens=5,
            cache_read_tokens=50,
        ),  # fmt: skip
        estimated,
        entry(
            jobs["a2"],
            now - timedelta(hours=1),
            attempt=1,
            cost="-0.009500",
            entry_type="correction",
            corrects=estimated,
            input_tokens=400,
            output_tokens=80,
            cache_write_1h_tokens=10,
        ),  # fmt: skip
        entry(
            jobs["b1"],
            now - timedelta(hours=2),
            attempt=1,
            cost="0.004000",
            input_tokens=1000,
            output_tokens=200,
        ),  # fmt: skip
        entry(jobs["b2"], now - 40 * day, attempt=1, cost="1.000000", input_tokens=7),
    ]
    failures = [
        failure(jobs["a2"], now - day + timedelta(minutes=5)),
        failure(jobs["b2"], now - 40 * day),
    ]
    return Ledger(now=now, entries=entries, failures=failures, jobs=jobs)


def expected_report(
    ledger: Ledger,
    *,
    group_by: str,
    since: datetime,
    until: datetime,
    keep: Callable[[LlmJob | CostEntry], bool] = lambda row: True,
) -> dict[str, Any]:
    """The rows and totals a report must show, summed here from the rows themselves."""

    def key(row: Any, job: LlmJob) -> str:
        if group_by == "feature":
            return str(row.feature if isinstance(row, CostEntry) else job.feature)
        if group_by == "model":
            return str(row.model if isinstance(row, CostEntry) else job.model)
        if group_by == "user":
            return str(job.user.username)
        return str(row.created_at.date().isoformat())

    def blank() -> dict[str, Any]:
        return {
            "jobs": set(),
            "attempts": 0,
            "tokens": dict.fromkeys(TOKENS, 0),
            "cost": Decimal(0),
            "failures": 0,
            "saved": Decimal(0),
        }

    groups: dict[str, dict[str, Any]] = {}
    totals = blank()
    for row in ledger.entries:
        if not (since <= row.created_at < until and keep(row)):
            continue
        for figures in (groups.setdefault(key(row, row.job), blank()), totals):
            figures["jobs"].add(row.job_id)
            figures["attempts"] += row.entry_type == "attempt"
            for kind, column in TOKENS.items():
                figures["tokens"][kind] += getattr(row, column)
            figures["cost"] += row.cost_usd
            figures["saved"] += row.batch_saved_usd
    for record in ledger.failures:
        if not (since <= record.created_at < until and keep(record.job)):
            continue
        for figures in (groups.setdefault(key(record, record.job), blank()), totals):
            figures["failures"] += 1

    def shape(figures: dict[str, Any]) -> dict[str, Any]:
        return {
            "jobs": len(figures["jobs"]),
            "attempts": figures["attempts"],
            "tokens": figures["tokens"],
            "cost_usd": f"{figures['cost']:.6f}",
            "failures": figures["failures"],
            "batch_saved_usd": f"{figures['saved']:.6f}",
        }

    rows = [{"key": name, **shape(figures)} for name, figures in groups.items()]
    if group_by == "day":
        rows.sort(key=lambda row: row["key"])
    else:
        rows.sort(key=lambda row: (-Decimal(row["cost_usd"]), row["key"]))
    return {"rows": rows, "totals": shape(totals)}
