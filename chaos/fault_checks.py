"""The drill's checks on alerts and on the faults themselves.

Alerts, as the receiver got them over HTTP:
- each CRITICAL condition (a dead-letter fingerprint: severity, reason, feature, model) paged
  exactly once, however many jobs failed that way (not at all if its incident was paged before
  the drill and is still open within ALERT_DEDUP_SECONDS: it folds in, as it should);
- the storms that passed (429s, 529s, dropped connections, the killed worker, the flush) paged
  nobody: no job dead-lettered for a transient reason with retries left (a job whose every
  attempt of its class's whole schedule met the storm is the retry table's promise: it is named
  and its page expected), no ERROR or CRITICAL alert other than those, and every WARNING
  condition that fired resolved again. A failure names each dead letter, page and condition.

Faults: each one in the mix really happened, and the system came back from it (the killed
worker was restarted and its jobs recovered; the flush found no rq scheduler running and every
job it emptied Redis of ended; the breaker opened once and the drill closed it; the long calls
ran once each; the trickling call was cut at its deadline; the jobs a killed worker held on the
limiter completed; the revoked socket was closed; the reconciler came back). A fault that did
not happen fails its check, and its figures begin with "fault did not happen".

The refusals of the drill's capped budget are expected: its budget alerts and its jobs' WARNING
dead letters are left out of "storms paged nobody" (budget_checks.py checks the budget).
"""

from collections import Counter

from django.conf import settings

from alerts.notifications import failure_record_fingerprint
from chaos.budget_checks import CAPPED_REFUSAL
from chaos.checks import Check
from chaos.fault_checks_more import NOT_HAPPENED, all_final, failed_because, more_fault_checks
from chaos.record import DrillRecord
from chaos.setup import CAPPED_FEATURE
from dlq.models import FailureRecord
from jobs.models import Severity
from jobs.retry_policy import DEFAULT_SCHEDULES, schedules
from ledger.models import CostEntry

__all__ = ["alert_checks", "fault_checks"]


def _expected(record: DrillRecord, fingerprint: str) -> bool:
    """An alert the drill causes on purpose: its capped budget's, or a refusal of its jobs."""
    capped = record.capped_budget_id
    if capped is not None and fingerprint.startswith("budget_") and f":{capped}:" in fingerprint:
        return True
    return fingerprint.startswith("failure:") and (
        f":{CAPPED_REFUSAL}:{CAPPED_FEATURE}:" in fingerprint
    )


def _critical_fingerprints(record: DrillRecord) -> set[str]:
    failures = FailureRecord.objects.filter(
        job_id__in=record.job_ids, severity=Severity.CRITICAL
    ).select_related("job")
    return {failure_record_fingerprint(failure=failure) for failure in failures}


def _paged_once(record: DrillRecord) -> Check:
    critical = _critical_fingerprints(record)
    pages = Counter(
        r.fingerprint
        for r in record.received
        if r.action == "trigger" and r.severity == Severity.CRITICAL
    )
    folded = critical & record.open_incidents
    unpaged = critical - folded - set(pages)
    repeated = {fp: n for fp, n in pages.items() if n > 1}
    stray = set(pages) - critical
    expected = record.options.has("401")
    passed = not unpaged and not repeated and not stray and (bool(critical) or not expected)
    reasons = Counter(fp.split(":")[2] for fp in critical)
    kinds = ", ".join(f"{reason} on {n} feature/model pairs" for reason, n in reasons.items())
    once = sum(1 for fp in critical if pages.get(fp) == 1)
    return Check(
        "CRITICAL paged once",
        passed,
        f"{len(critical)} CRITICAL condition(s) ({kinds or 'none'}): {sum(pages.values())} "
        f"pages received, {once} conditions paged exactly once"
        + (f"; {len(folded)} folded into incidents open before the drill" if folded else "")
        + (f"; {len(unpaged)} never paged" if unpaged else "")
        + (f"; {len(repeated)} paged more than once" if repeated else "")
        + (f"; {len(stray)} pages for no CRITICAL dead letter" if stray else ""),
    )


def _transient_dead_letters(record: DrillRecord) -> tuple[dict[str, str], list[str]]:
    """The drill's jobs dead-lettered for a transient reason: ({failure fingerprint: what} of
    those that spent their class's whole schedule, each attempt answered so by the provider;
    [what] of the others). At 20 % of calls answered 429, a job meets six in a row (its whole
    schedule: 2, 5, 12, 30, 75 s) once in 0.2^-6 = 15,625: the retry table's promise, not a
    storm that paged. Dead-lettered with retries left is what must never happen."""
    exhausted: dict[str, str] = {}
    early: list[str] = []
    failures = FailureRecord.objects.filter(
        job_id__in=record.job_ids, reason_code__in=list(DEFAULT_SCHEDULES)
    ).select_related("job")
    for failure in failures:
        reason = failure.reason_code
        attempts = list(
            CostEntry.objects.filter(job_id=failure.job_id, entry_type="attempt")
            .order_by("attempt")
            .values_list("reason_code", flat=True)
        )
        of_class = attempts.count(reason)
        allowed = len(schedules().get(reason, ())) + 1
        what = (
            f"job {failure.job_id} {reason} after {len(attempts)} attempts, {of_class} of them "
            f"{reason} (its schedule allows {allowed})"
        )
        if of_class >= allowed or len(attempts) >= settings.LLM_MAX_ATTEMPTS:
            exhausted[failure_record_fingerprint(failure=failure)] = what
        else:
            early.append(what)
    return exhausted, early


def _storms_quiet(record: DrillRecord) -> Check:
    exhausted, early = _transient_dead_letters(record)
    critical = _critical_fingerprints(record)
    received = [r for r in record.received if not _expected(record, r.fingerprint)]
    expected = len(record.received) - len(received)
    loud = Counter(
        f"{r.severity} {r.fingerprint}"
        for r in received
        if r.action == "trigger"
        and r.severity in (Severity.ERROR, Severity.CRITICAL)
        and r.fingerprint not in critical
        and r.fingerprint not in exhausted
    )
    warnings = {
        r.fingerprint
        for r in received
        if r.action == "trigger" and r.severity not in (Severity.ERROR, Severity.CRITICAL)
    } - critical
    resolved = {r.fingerprint for r in record.received if r.action == "resolve"}
    unresolved = warnings - resolved
    passed = not early and not loud and not unresolved
    return Check(
        "storms paged nobody",
        passed,
        f"{len(early)} dead letters for transient reasons with retries left"
        + (f" ({'; '.join(early)})" if early else "")
        + (
            f", {len(exhausted)} after their whole schedule ({'; '.join(exhausted.values())})"
            if exhausted
            else ""
        )
        + f"; {sum(loud.values())} ERROR/CRITICAL pages beside the CRITICAL conditions"
        + (f" ({', '.join(f'{n}x {what}' for what, n in sorted(loud.items()))})" if loud else "")
        + f"; {len(warnings)} WARNING condition(s) fired, {len(warnings & resolved)} resolved"
        + (f" ({', '.join(sorted(warnings))})" if warnings else "")
        + (f", unresolved: {', '.join(sorted(unresolved))}" if unresolved else "")
        + (
            f"; {expected} alert(s) of the capped budget's refusals, as expected"
            if expected
            else ""
        ),
    )


def alert_checks(record: DrillRecord) -> list[Check]:
    return [_paged_once(record), _storms_quiet(record)]


# --- the faults --------------------------------------------------------------------------------


def _ledger_rows(record: DrillRecord, **filters: object) -> tuple[int, set[str]]:
    rows = CostEntry.objects.filter(job_id__in=record.job_ids, entry_type="attempt", **filters)
    jobs = {str(job) for job in rows.values_list("job_id", flat=True)}
    return rows.count(), jobs


def _storm(record: DrillRecord, label: str, served: int, reason: str) -> Check:
    attempts, jobs = _ledger_rows(record, reason_code=reason)
    final, completed = all_final(jobs)
    failed = final - completed
    return Check(
        label,
        served > 0 and attempts > 0 and final == len(jobs),
        (NOT_HAPPENED if not served else "")
        + f"provider {served}, ledger {attempts} attempts ({reason}) of {len(jobs)} jobs: "
        f"{completed} completed, {failed} failed"
        + (f" ({failed_because(jobs)})" if failed else "")
        + f", {len(jobs) - final} not final",
    )


def _breaker(record: DrillRecord) -> Check:
    event = record.breaker
    if event is None or event.opened_at is None:
        served = record.provider_stats.get("by_status", {}).get("401", 0)
        return Check(
            "breaker opened once, closed",
            False,
            (NOT_HAPPENED if not served else "")
            + f"the provider answered {served} 401s; the breaker never opened",
        )
    failed_401 = FailureRecord.objects.filter(
        job_id__in=record.job_ids, reason_code=event.reason
    ).count()
    held_for = (event.closed_at or 0) - event.opened_at
    closer = (
        "by the drill (breaker_close, as the admin action)"
        if event.closed_by_drill
        else (f"by {event.closed_by or 'nobody'}")
    )
    return Check(
        "breaker opened once, closed",
        event.openings == 1 and event.closed_by_drill,
        f"opened {event.openings}x ({event.reason}) at {event.opened_at:.0f} s, "
        f"{failed_401} job(s) dead-lettered with it; closed after {held_for:.1f} s {closer}",
    )


def _kill(record: DrillRecord) -> Check:
    event = record.kill
    if event is None:
        return Check("kill -9, restart", False, NOT_HAPPENED + "no worker was killed")
    _, lost = _ledger_rows(record, reason_code="worker_lost")
    jobs = set(event.jobs_in_flight) | lost
    final, completed = all_final(jobs)
    restarted = (
        f"restarted after {event.restarted_after:.1f} s"
        if event.restarted_after is not None
        else "NOT restarted"
    )
    return Check(
        "kill -9, restart",
        # The guarantee is that every call in flight on the killed worker ends: recovered by
        # the reconciler as worker_lost, or (when the flush that follows wiped its lock first)
        # put back by another of its paths.
        event.restarted_after is not None and bool(event.jobs_in_flight) and final == len(jobs),
        (NOT_HAPPENED if not event.jobs_in_flight else "")
        + f"{event.process} (pid {event.pid}{', rq scheduler' if event.held_scheduler else ''}) "
        f"killed at {event.at:.0f} s with {len(event.jobs_in_flight)} call(s) in flight, "
        f"{restarted}; {len(lost)} jobs recovered as worker_lost, {completed}/{len(jobs)} "
        "completed",
    )


def _flush(record: DrillRecord) -> Check:
    event = record.flush
    if event is None:
        return Check("FLUSHDB, no scheduler", False, NOT_HAPPENED + "Redis was never flushed")
    final, completed = all_final(event.waiting_jobs)
    scheduler_gone = not event.scheduler_running or not record.options.has("kill")
    return Check(
        "FLUSHDB, no scheduler",
        scheduler_gone and final == len(event.waiting_jobs),
        f"{event.keys} keys wiped at {event.at:.0f} s ({event.scheduler}); "
        f"{len(event.waiting_jobs)} waiting jobs lost their RQ job: {completed} completed, "
        f"{final - completed} failed, {len(event.waiting_jobs) - final} not final",
    )


def _long_calls(record: DrillRecord) -> Check:
    name = "long calls ran once"
    event = record.long_call
    if event is None:
        return Check(name, False, NOT_HAPPENED + "the provider never answered slowly")
    # A long call taken over would show as its attempt booked worker_lost, and its answer as a
    # late correction: look at every row of those attempts, not only at the attempt rows.
    # A trickled call also runs past the threshold, to its deadline: its own check looks at it.
    trickled = {call.job_id for call in record.billing if call.how == "trickled"}
    long_rows = CostEntry.objects.filter(
        job_id__in=[job for job in record.job_ids if job not in trickled],
        latency_ms__gt=event.stale_after_seconds * 1000,
    )
    attempts = set(long_rows.values_list("job_id", "attempt"))
    answered = long_rows.filter(entry_type="attempt", outcome=CostEntry.Outcome.SUCCESS).count()
    lost = CostEntry.objects.filter(
        job_id__in=[job for job, _ in attempts], reason_code="worker_lost"
    ).values_list("job_id", "attempt")
    taken_over = len(attempts & set(lost))
    figures = (
        f"{event.arrivals} calls arrived while the provider took {event.latency_seconds:g} s; "
        f"{len(attempts)} calls over the stale threshold ({event.stale_after_seconds:g} s), "
        f"{answered} answered on their one attempt, {taken_over} taken over by the reconciler"
    )
    if not attempts:
        return Check(name, False, NOT_HAPPENED + figures)
    return Check(name, answered == len(attempts) and taken_over == 0, figures)


def fault_checks(record: DrillRecord) -> list[Check]:
    by_status = record.provider_stats.get("by_status", {})
    checks = []
    if record.options.has("429"):
        served = by_status.get("429", 0)
        checks.append(_storm(record, "429 storm ridden out", served, "rate_limited"))
    if record.options.has("529"):
        served = by_status.get("529", 0)
        checks.append(_storm(record, "529 window ridden out", served, "overloaded"))
    if record.options.has("drop"):
        dropped = record.provider_stats.get("dropped", 0)
        checks.append(_storm(record, "dropped connections", dropped, "connection_dropped"))
    if record.options.has("kill"):
        checks.append(_kill(record))
    if record.options.has("flush"):
        checks.append(_flush(record))
    if record.options.has("401"):
        checks.append(_breaker(record))
    if record.options.has("long"):
        checks.append(_long_calls(record))
    return checks + more_fault_checks(record)
