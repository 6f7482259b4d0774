"""Counting, inside the transaction of what is counted.

``metrics/apps.py`` subscribes these to the ledger's hook (``ledger/hooks.py``: each ledger row)
and to the job transitions (``jobs/transitions.py``, in the transaction: each job's new status,
and each dead letter, the transition into ``failed``), so each count is written in the same
transaction as the row it counts: the counters (``metrics/models.py``) equal the ledger by
construction, on every host and in every worker process, and a rolled-back transition counts
nothing.
"""

import functools
import logging
import os
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    IntegrityError,
    connection,
    connections,
    models,
    transaction,
)

from metrics.models import (
    LATENCY_BUCKETS,
    LATENCY_COLUMNS,
    SHARDS,
    TOKEN_COLUMNS,
    AttemptCounter,
    FailureCounter,
    JobCounter,
)

if TYPE_CHECKING:
    from jobs.models import LlmJob
    from jobs.transitions import Transition
    from ledger.models import CostEntry

logger = logging.getLogger(__name__)

__all__ = [
    "ATTEMPT_OUTCOMES",
    "attempt_outcome",
    "count_cost_entry",
    "count_job_status",
    "count_job_statuses",
    "count_transition",
    "count_transitions",
    "latency_column",
]

ATTEMPT_OUTCOMES = (
    "success",
    "rate_limited",
    "overloaded",
    "server_error",
    "timeout",
    "connection",
    "cancelled",
    "fatal",
)
"""The ``outcome`` label of ``llm_attempts_total``."""

_OUTCOME_OF_REASON = {
    "rate_limited": "rate_limited",
    "overloaded": "overloaded",
    "server_error": "server_error",
    "conflict": "server_error",
    "read_timeout": "timeout",
    "worker_lost": "timeout",
    "connection_error": "connection",
    "connection_dropped": "connection",
    "cancelled": "cancelled",
}
"""Failure classes (jobs/retry_policy.py) -> outcome label; every other class is ``fatal``
(401/403, invalid requests, the spend cap, an unexpected error or unreadable answer)."""


def attempt_outcome(*, outcome: str, reason_code: str) -> str:
    """The metric's outcome of a ledger row, from its ``outcome`` and failure class."""
    if outcome == "success":
        return "success"
    return _OUTCOME_OF_REASON.get(reason_code, "fatal")


def latency_column(latency_ms: int) -> str:
    """The histogram column (non-cumulative bucket) of one latency."""
    seconds = latency_ms / 1000
    for bound, column in zip(LATENCY_BUCKETS, LATENCY_COLUMNS, strict=False):
        if seconds <= bound:
            return column
    return LATENCY_COLUMNS[-1]


def _shard() -> int:
    """This process's and thread's shard: concurrent workers mostly update different rows, and
    one transaction always updates the same row of a label set (two shards of one label set
    taken in opposite orders by two transactions could deadlock)."""
    return hash((os.getpid(), threading.get_ident())) % SHARDS


def _add(model: type[models.Model], keys: dict[str, Any], amounts: dict[str, Any]) -> None:
    """counter row += amounts, in the caller's transaction; a missing row is created first."""
    keys = {**keys, "shard": _shard()}
    increments = {name: amount for name, amount in amounts.items() if amount}
    if not increments:
        increments = {"shard": 0}  # still make sure the label set exists
    sql = _increment_sql(connection.vendor, model, tuple(increments), tuple(keys))
    params = [
        *_db_values(model, increments),
        *_db_values(model, keys),
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if cursor.rowcount:  # rows matched (Django's MySQL connection counts found rows)
            return
        _create_row(model, keys)
        cursor.execute(sql, params)


@functools.cache
def _increment_sql(
    vendor: str, model: type[models.Model], increments: tuple[str, ...], keys: tuple[str, ...]
) -> str:
    """``UPDATE counter SET a = a + %s, ... WHERE key = %s AND ...``, written once per shape.

    What the ORM's ``filter(**keys).update(a=F("a") + amount)`` sends, without building the
    query again at every count: that took 0.36 ms of CPU for a job's count and 0.67 ms for an
    attempt's, three times in every model turn. ``vendor`` keys the cache: the quoting is the
    backend's."""
    quote = connection.ops.quote_name
    column = {name: quote(_field(model, name).column) for name in (*increments, *keys)}
    sets = ", ".join(f"{column[name]} = {column[name]} + %s" for name in increments)
    where = " AND ".join(f"{column[name]} = %s" for name in keys)
    return f"UPDATE {quote(model._meta.db_table)} SET {sets} WHERE {where}"


def _db_values(model: type[models.Model], values: dict[str, Any]) -> list[Any]:
    """Each value as its field hands it to the database (a Decimal for the backend's numeric)."""
    return [
        _field(model, name).get_db_prep_value(value, connection, prepared=False)
        for name, value in values.items()
    ]


def _field(model: type[models.Model], name: str) -> "models.Field[Any, Any]":
    """A counter's column: a concrete field of its own (no relation)."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field) and field.column
    return field


_INSERT_IGNORING_DUPLICATES = {
    "mysql": "INSERT IGNORE INTO {table} ({columns}) VALUES ({placeholders})",
    "postgresql": "INSERT INTO {table} ({columns}) VALUES ({placeholders}) ON CONFLICT DO NOTHING",
}
"""A new counter row's insert, a no-op where another worker made the row first."""


def _create_row(model: type[models.Model], keys: dict[str, Any]) -> None:
    """Create a counter row at zero, committed at once on a connection of its own (MariaDB,
    PostgreSQL).

    Inside the caller's transaction, two workers creating the same row would both end up
    holding the shared lock of InnoDB's duplicate-key check and then both want the row
    exclusively: a deadlock. On PostgreSQL the second insert of a key waits for the first
    transaction to end, so two transactions creating two rows in opposite orders deadlock too.
    Created and committed apart, the row simply exists when the caller's UPDATE takes it.
    SQLite writers are serialised anyway, and a second connection would wait for the caller's
    own write lock, so there the row is made in a savepoint.
    """
    insert = _INSERT_IGNORING_DUPLICATES.get(connection.vendor)
    if insert:
        fields = [f for f in model._meta.concrete_fields if not f.primary_key]
        columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        values = [
            keys[f.name] if f.name in keys else f.get_db_prep_save(f.get_default(), connection)
            for f in fields
        ]
        table = connection.ops.quote_name(model._meta.db_table)
        placeholders = ", ".join(["%s"] * len(fields))
        side = connections.create_connection(DEFAULT_DB_ALIAS)
        try:
            with side.cursor() as cursor:
                cursor.execute(
                    insert.format(table=table, columns=columns, placeholders=placeholders), values
                )
            return
        except DatabaseError:
            logger.warning("counter row could not be made apart; making it in the transaction")
        finally:
            side.close()
    try:
        with transaction.atomic():
            model._default_manager.create(**keys)
    except IntegrityError:
        pass


def count_cost_entry(entry: "CostEntry") -> None:
    """Count one ledger row. Call in the transaction that creates it."""
    amounts: dict[str, Any] = {column: getattr(entry, column) for column in TOKEN_COLUMNS.values()}
    is_attempt = entry.entry_type == "attempt"
    amounts["attempts"] = 1 if is_attempt else 0
    cost = Decimal(entry.cost_usd)
    amounts["cost_usd"] = cost if cost > 0 else Decimal(0)
    amounts["cost_credited_usd"] = -cost if cost < 0 else Decimal(0)
    if is_attempt and entry.latency_ms is not None:
        amounts["latency_count"] = 1
        amounts["latency_sum_ms"] = entry.latency_ms
        amounts[latency_column(entry.latency_ms)] = 1
    _add(
        AttemptCounter,
        {
            "feature": entry.feature,
            "model": entry.model,
            "outcome": attempt_outcome(outcome=entry.outcome, reason_code=entry.reason_code),
        },
        amounts,
    )


def count_job_status(job: "LlmJob") -> None:
    """Count a job entering its (new) status. Call in the transaction of the transition."""
    _add(
        JobCounter,
        {"feature": job.feature, "model": job.counted_model, "status": job.status},
        {"jobs": 1},
    )


def count_job_statuses(jobs: Iterable["LlmJob"]) -> None:
    """``count_job_status`` for many jobs at once (a batch's submit): one statement per
    feature, model and status, however many jobs. Call in the transaction of the transition."""
    counts = Counter((job.feature, job.counted_model, job.status) for job in jobs)
    # In one order, so that two bulk transitions never take two label sets in opposite orders.
    for (feature, model, status), jobs_entering in sorted(counts.items()):
        _add(
            JobCounter,
            {"feature": feature, "model": model, "status": status},
            {"jobs": jobs_entering},
        )


def count_failure(*, severity: str, reason: str) -> None:
    """Count one dead letter. Call in the transaction that creates its FailureRecord."""
    _add(FailureCounter, {"severity": severity.lower(), "reason": reason}, {"failures": 1})


def count_transition(job: "LlmJob", transition: "Transition") -> None:
    """A job's transition, in its transaction: its new status, and its dead letter when it
    entered ``failed``."""
    count_job_status(job)
    _count_dead_letter(job)


def count_transitions(jobs: Sequence["LlmJob"], transition: "Transition") -> None:
    """``count_transition`` for many jobs making one transition in one transaction."""
    count_job_statuses(jobs)
    for job in jobs:
        _count_dead_letter(job)


def _count_dead_letter(job: "LlmJob") -> None:
    # Only _dead_letter (jobs/services/holds.py) moves a job into failed, always with one
    # FailureRecord whose severity and reason are the job's error_severity and error_code.
    if job.status == "failed":
        count_failure(severity=job.error_severity, reason=job.error_code)
