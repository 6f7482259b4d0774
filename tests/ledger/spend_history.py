"""Synthetic ledger history for budget tests: rows written at chosen times.

``created_at`` is ``auto_now_add``, so ``save()`` and ``bulk_create()`` both stamp the current
time. A raw save (what ``loaddata`` does) keeps the given value; the row is still an insert, so
the append-only ledger allows it.
"""

from datetime import datetime
from decimal import Decimal
from itertools import count
from typing import Any

from jobs.models import LlmJob
from ledger.models import CostEntry

_attempts = count(1)


def make_job(user: Any, *, feature: str = "email-classify") -> LlmJob:
    return LlmJob.objects.create(
        user=user,
        feature=feature,
        model="claude-haiku-4-5",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=5,
        request_fingerprint="fp",
    )


def spend(job: LlmJob, cost: str, at: datetime | None = None) -> CostEntry:
    """One ledger row of ``cost`` dollars for ``job``'s feature and owner, created at ``at``."""
    entry = CostEntry(
        job=job,
        attempt=next(_attempts),
        feature=job.feature,
        model=job.model,
        user_id=job.user_id,
        outcome=CostEntry.Outcome.SUCCESS,
        cost_usd=Decimal(cost),
    )
    if at is None:
        entry.save()
    else:
        entry.created_at = at
        entry.save_base(raw=True, force_insert=True)
    return entry
