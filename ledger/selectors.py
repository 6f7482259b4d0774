import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from api.did_you_mean import nearest_name
from api.errors import ValidationFailed
from dlq.models import FailureRecord
from ledger.config_cache import config_snapshot
from ledger.models import CostEntry, ModelPrice


def price_for_model(*, model: str, at: datetime | None = None) -> ModelPrice | None:
    """The price in force for ``model`` at ``at`` (now by default), or None if it has none.
    Read from this process's copy of the price table when it is current (ledger/config_cache.py);
    the row is shared: never change it."""
    at = at or timezone.now()
    snapshot = config_snapshot()
    if snapshot is not None:
        return snapshot.price_at(model, at)
    return (
        ModelPrice.objects.filter(model=model, effective_from__lte=at)
        .order_by("-effective_from")
        .first()
    )


def priced_models(*, at: datetime | None = None) -> list[str]:
    """Every model with a price in force at ``at`` (now by default), sorted."""
    at = at or timezone.now()
    return sorted(
        set(ModelPrice.objects.filter(effective_from__lte=at).values_list("model", flat=True))
    )


def unknown_model_error(model: str) -> ValidationFailed:
    """The refusal of a model without a price: the models there are, and the nearest one when
    the name looks like a typo of it (``claude-sonet-4-6``)."""
    known = priced_models()
    near = nearest_name(model, known)
    message = f"Model {model!r} has no price; it cannot be run."
    if near:
        message += f" Did you mean {near!r}?"
    elif known:
        message += f" Priced models: {', '.join(known)}."
    detail: dict[str, Any] = {"field": "model", "models": known}
    if near:
        detail["did_you_mean"] = near
    return ValidationFailed(message, code="unknown_model", detail=detail)


def cost_entries_for_job(*, job_id: UUID) -> QuerySet[CostEntry]:
    return CostEntry.objects.filter(job_id=job_id).order_by("attempt")


# --- Cost reports -----------------------------------------------------------------------------

REPORT_GROUPS = ("feature", "model", "user", "day", "key", "tag")
"""What a cost report can group by; the first is the default."""

REPORT_DEFAULT_DAYS = 30
"""A report without ``since`` covers the 30 days before ``until``: a month of spend."""

TOKEN_KINDS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cache_write_5m": "cache_write_5m_tokens",
    "cache_write_1h": "cache_write_1h_tokens",
    "cache_read": "cache_read_tokens",
}
"""Report name of each token kind -> its ``CostEntry`` column."""

_RELATIVE = re.compile(r"^(\d{1,6})([dhm])$")
_RELATIVE_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


@dataclass(frozen=True)
class CostReportRow:
    """One group of a cost report (or the totals, whose ``key`` is None)."""

    key: str | None
    jobs: int = 0
    attempts: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KINDS, 0))
    cost_usd: Decimal = Decimal("0")
    failures: int = 0
    batch_saved_usd: Decimal = Decimal("0")
    """What deferred work (provider message batches) saved against the standard price."""


@dataclass(frozen=True)
class CostReport:
    group_by: str
    since: datetime
    until: datetime
    rows: list[CostReportRow]
    totals: CostReportRow


def _invalid(field_name: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, code="invalid_filter", detail={"field": field_name})


def report_time_parse(*, value: str, field_name: str, now: datetime, end_of_day: bool) -> datetime:
    """An aware UTC datetime from ``7d``/``24h``/``30m`` (that long before ``now``), an ISO date
    (its midnight UTC, or the next midnight when ``end_of_day``: ``until=2025-01-31`` includes
    the 31st) or an ISO datetime (naive means UTC). Anything else raises ``invalid_filter``."""
    value = value.strip()
    if "T" in value:
        # An unencoded "+01:00" in a query string arrives as " 01:00".
        value = value.replace(" ", "+")
    try:
        if match := _RELATIVE.fullmatch(value):
            amount, unit = int(match[1]), _RELATIVE_UNITS[match[2]]
            return now - timedelta(**{unit: amount})
        if (day := parse_date(value)) is not None:
            start = datetime.combine(day, time.min, tzinfo=UTC)
            return start + timedelta(days=1) if end_of_day else start
        if (moment := parse_datetime(value)) is not None:
            if timezone.is_naive(moment):
                return moment.replace(tzinfo=UTC)
            return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        pass  # A well-formed but impossible value (2025-02-30, 999999d): the same answer.
    raise _invalid(
        field_name,
        f"{field_name} must be an ISO date or datetime (UTC unless it says otherwise) "
        "or a relative time such as 7d, 24h or 30m.",
    )


def report_range_parse(
    *, since: str | None, until: str | None, now: datetime | None = None
) -> tuple[datetime, datetime]:
    """The report's half-open range [since, until): by default up to now, from 30 days before."""
    now = now or timezone.now()
    end = (
        report_time_parse(value=until, field_name="until", now=now, end_of_day=True)
        if until
        else now
    )
    if since:
        start = report_time_parse(value=since, field_name="since", now=now, end_of_day=False)
    elif end - datetime.min.replace(tzinfo=UTC) > timedelta(days=REPORT_DEFAULT_DAYS):
        start = end - timedelta(days=REPORT_DEFAULT_DAYS)
    else:
        # An until in the first month of year 1: the default range starts where dates start.
        start = datetime.min.replace(tzinfo=UTC)
    if start >= end:
        raise _invalid("since", "since must be before until.")
    return start, end


def report_user_find(*, value: str) -> User:
    """The user a report is filtered to, by username or by id."""
    found = User.objects.filter(username=value).first()
    # isdigit() alone also takes digits int() refuses ("²").
    if found is None and value.isascii() and value.isdigit():
        found = User.objects.filter(id=int(value)).first()
    if found is None:
        raise _invalid("user", f"No user {value!r}.")
    return found


def cost_report(
    *,
    group_by: str = REPORT_GROUPS[0],
    since: datetime,
    until: datetime,
    user: User | None = None,
    feature: str | None = None,
    model: str | None = None,
) -> CostReport:
    """Ledger rows created in [since, until), grouped, with the failures (dead-lettered jobs,
    ``FailureRecord``) created in the same range for the same group.

    Per group: distinct jobs, attempts (``attempt`` rows: a correction is not an attempt),
    tokens by kind and cost of every row (corrections included, so the cost is what the group
    really cost). A fixed number of queries whatever the size: the ledger's GROUP BY, the
    failures' GROUP BY, then by model, day or tag the distinct jobs of the whole range for the
    totals (see ``_total_jobs``; by tag, one aggregate of the range), by user the usernames.
    Rows come by cost, highest first; by day, oldest first.
    """
    if group_by not in REPORT_GROUPS:
        raise _invalid("group_by", f"group_by must be one of {', '.join(REPORT_GROUPS)}.")

    entries = CostEntry.objects.filter(created_at__gte=since, created_at__lt=until)
    failures = FailureRecord.objects.filter(created_at__gte=since, created_at__lt=until)
    if user is not None:
        entries = entries.filter(user_id=user.pk)
        failures = failures.filter(job__user_id=user.pk)
    if feature:
        entries = entries.filter(feature=feature)
        failures = failures.filter(job__feature=feature)
    if model:
        entries = entries.filter(model=model)
        failures = failures.filter(job__model=model)

    entry_key, failure_key = {
        "feature": (F("feature"), F("job__feature")),
        "model": (F("model"), F("job__model")),
        "user": (F("user_id"), F("job__user_id")),
        "key": (F("api_key_id"), F("job__api_key_id")),
        # A row belongs to each tag of its job (JobTag's (tag, job) index); untagged: no key.
        "tag": (F("job__tag_rows__tag"), F("job__tag_rows__tag")),
        # The ranges are UTC and so are the days, whatever the server's time zone.
        "day": (TruncDate("created_at", tzinfo=UTC), TruncDate("created_at", tzinfo=UTC)),
    }[group_by]
    sums = {kind: Sum(column) for kind, column in TOKEN_KINDS.items()}
    grouped = (
        entries.order_by()
        .values(group=entry_key)
        .annotate(
            jobs=Count("job_id", distinct=True),
            attempts=Count("id", filter=Q(entry_type=CostEntry.EntryType.ATTEMPT)),
            cost=Sum("cost_usd"),
            saved=Sum("batch_saved_usd"),
            **sums,
        )
    )
    failed = dict(
        failures.order_by()
        .values(group=failure_key)
        .annotate(n=Count("id"))
        .values_list("group", "n")
    )

    rows: dict[Any, CostReportRow] = {}
    for values in grouped:
        rows[values["group"]] = CostReportRow(
            key=None,
            jobs=values["jobs"],
            attempts=values["attempts"],
            tokens={kind: int(values[kind] or 0) for kind in TOKEN_KINDS},
            cost_usd=values["cost"] or Decimal("0"),
            failures=failed.get(values["group"], 0),
            batch_saved_usd=values["saved"] or Decimal("0"),
        )
    for group, count in failed.items():
        # A job that failed in range whose attempts were all booked before it.
        rows.setdefault(group, CostReportRow(key=None, failures=count))

    names = _report_keys(group_by, list(rows))
    keyed = [replace(row, key=names[group]) for group, row in rows.items()]
    if group_by == "day":
        keyed.sort(key=lambda row: row.key or "")
    else:
        keyed.sort(key=lambda row: (-row.cost_usd, row.key or ""))

    if group_by == "tag":
        # A job with two tags is in two rows: the totals are the range's, counted once.
        totals = _totals_once(entries, failures)
        return CostReport(group_by=group_by, since=since, until=until, rows=keyed, totals=totals)
    totals = CostReportRow(
        key=None,
        jobs=_total_jobs(group_by, entries, keyed),
        attempts=sum(row.attempts for row in keyed),
        tokens={kind: sum(row.tokens[kind] for row in keyed) for kind in TOKEN_KINDS},
        cost_usd=sum((row.cost_usd for row in keyed), Decimal("0")),
        failures=sum(row.failures for row in keyed),
        batch_saved_usd=sum((row.batch_saved_usd for row in keyed), Decimal("0")),
    )
    return CostReport(group_by=group_by, since=since, until=until, rows=keyed, totals=totals)


def _totals_once(entries: QuerySet[CostEntry], failures: QuerySet[FailureRecord]) -> CostReportRow:
    """The totals of a report whose rows overlap (by tag): one aggregate over the ledger rows."""
    sums = {kind: Sum(column) for kind, column in TOKEN_KINDS.items()}
    values = entries.aggregate(
        jobs=Count("job_id", distinct=True),
        attempts=Count("id", filter=Q(entry_type=CostEntry.EntryType.ATTEMPT)),
        cost=Sum("cost_usd"),
        **sums,
    )
    return CostReportRow(
        key=None,
        jobs=int(values["jobs"] or 0),
        attempts=int(values["attempts"] or 0),
        tokens={kind: int(values[kind] or 0) for kind in TOKEN_KINDS},
        cost_usd=values["cost"] or Decimal("0"),
        failures=failures.count(),
    )


def _total_jobs(group_by: str, entries: QuerySet[CostEntry], rows: list[CostReportRow]) -> int:
    """Distinct jobs over the whole report.

    Every row of a job carries the job's feature, user and key (a correction books against its
    attempt's feature; a job keeps its feature, owner and key for life), so by feature, user or
    key no job is in two groups and the groups' counts add up: no second pass over the range. By
    model (a requeue may switch model), by day or by tag (a job has several) a job can be in two
    groups: count them in SQL.
    """
    if not rows:
        return 0
    if group_by in ("feature", "user", "key"):
        return sum(row.jobs for row in rows)
    return int(entries.aggregate(jobs=Count("job_id", distinct=True))["jobs"])


def api_key_label(key: Any) -> str:
    """A key as reports name it: its name, id and the prefix of its current secret."""
    return f"{key.name} (#{key.id}, {key.prefix}...)"


def _report_keys(group_by: str, groups: list[Any]) -> dict[Any, str | None]:
    """What each group is called in a report: usernames for user ids, key labels for key ids
    (one query each), ISO dates."""
    if group_by == "user":
        ids = [group for group in groups if group is not None]
        usernames = dict(User.objects.filter(id__in=ids).values_list("id", "username"))
        return {group: usernames.get(group) for group in groups}
    if group_by == "day":
        return {group: group.isoformat() if group else None for group in groups}
    if group_by == "key":
        from keys.models import ApiKey  # keys imports the ledger

        ids = [group for group in groups if group is not None]
        labels = {
            key.id: api_key_label(key)
            for key in ApiKey.objects.filter(id__in=ids).only("id", "name", "prefix")
        }
        return {group: labels.get(group) for group in groups}
    return {group: group for group in groups}
