"""The checks of the faults that found the second hardening (issue 18): a call that trickles
past its deadline, the reconciler stopped, a worker killed while the jobs it dequeued wait on the
rate limiter, a token revoked under its open WebSocket.

Each fails when its fault did not happen, and its figures then begin with NOT_HAPPENED.
``all_final`` and ``failed_because`` serve fault_checks.py too (it imports this module).
"""

from collections import Counter

from chaos.budget_checks import CAPPED_REFUSAL
from chaos.checks import Check
from chaos.faults import REVOKE_CLOSE_SECONDS, TRICKLE_CUT_GRACE_SECONDS
from chaos.record import DrillRecord
from chaos.setup import CAPPED_FEATURE
from dlq.models import FailureRecord
from jobs.models import LlmJob
from ledger.models import CostEntry

__all__ = ["NOT_HAPPENED", "all_final", "failed_because", "more_fault_checks"]

NOT_HAPPENED = "fault did not happen: "


def all_final(job_ids: set[str] | list[str]) -> tuple[int, int]:
    """(how many of them are final, how many completed)."""
    jobs = LlmJob.objects.filter(id__in=list(job_ids))
    return (
        jobs.filter(status__in=LlmJob.FINAL_STATUSES).count(),
        jobs.filter(status=LlmJob.Status.COMPLETED).count(),
    )


def failed_because(job_ids: set[str]) -> str:
    """Their dead letters' reason codes, most common first: "<n> <reason_code>, ...", and how
    many of them were cancelled (final, not completed, no dead letter)."""
    reasons = Counter(
        FailureRecord.objects.filter(job_id__in=list(job_ids)).values_list("reason_code", flat=True)
    )
    cancelled = LlmJob.objects.filter(id__in=list(job_ids), status=LlmJob.Status.CANCELLED).count()
    if cancelled:
        reasons["cancelled"] += cancelled
    return ", ".join(f"{n} {reason}" for reason, n in reasons.most_common())


def _trickle(record: DrillRecord) -> Check:
    name = "trickling call cut at its deadline"
    event = record.trickle
    drill = set(record.job_ids)
    calls = [c for c in record.billing if c.how == "trickled" and c.job_id in drill]
    if event is None or not calls:
        return Check(name, False, NOT_HAPPENED + "the provider trickled no call")
    # Cut at its deadline: booked as an unknown outcome, its latency the deadline (a few
    # seconds more for a heartbeat to notice); not answered minutes later, not still running.
    cut_by = event.deadline_seconds + TRICKLE_CUT_GRACE_SECONDS
    cut, late, notes = [], [], []
    for call in calls:
        rows = CostEntry.objects.filter(job_id__in=[call.job_id], entry_type="attempt")
        answered = rows.filter(request_id=call.request_id, is_estimated=False).first()
        if answered is not None:
            late.append((answered.latency_ms or 0) / 1000)
            continue
        # Its own booking, not the reconciler's for a killed worker (worker_lost, no latency).
        unknown = (
            rows.filter(is_estimated=True)
            .exclude(reason_code="worker_lost")
            .order_by("-latency_ms")
            .first()
        )
        latency = (unknown.latency_ms or 0) / 1000 if unknown is not None else None
        if latency is not None and event.deadline_seconds - 1 <= latency <= cut_by:
            cut.append(latency)
        elif rows.filter(reason_code="worker_lost").exists():
            notes.append("still running past its deadline when a kill of its worker ended it")
        else:
            notes.append("no row" if latency is None else f"{latency:.1f} s")
    final, completed = all_final({call.job_id for call in calls})
    figures = (
        f"{len(calls)} call(s) trickled (a byte a second; deadline {event.deadline_seconds:g} s): "
        f"{len(cut)} cut and booked as an unknown outcome"
        + (f" after {', '.join(f'{s:.1f}' for s in cut)} s" if cut else "")
        + (
            f", {len(late)} answered late after {', '.join(f'{s:.1f}' for s in late)} s"
            if late
            else ""
        )
        + (
            f", {len(notes)} not cut at {event.deadline_seconds:g}-{cut_by:g} s"
            + f" ({', '.join(notes)})"
            if notes
            else ""
        )
        + f"; {completed}/{len(calls)} of their jobs completed, {len(calls) - final} not final"
    )
    return Check(name, len(cut) == len(calls) and final == len(calls), figures)


def _kill_waiting(record: DrillRecord) -> Check:
    name = "kill -9 of jobs waiting on the limiter"
    event = record.kill_waiting
    if event is None:
        return Check(name, False, NOT_HAPPENED + "no worker was killed")
    jobs = set(event.jobs_in_flight)
    final, completed = all_final(jobs)
    # A job of the capped feature (the ``budget`` fault) may meet its budget's refusal when it
    # runs again: recovered, and refused as it should be. Any other failure is a fault.
    refused = (
        LlmJob.objects.filter(
            id__in=list(jobs),
            feature=CAPPED_FEATURE,
            status=LlmJob.Status.FAILED,
            failures__reason_code=CAPPED_REFUSAL,
        )
        .distinct()
        .count()
    )
    statuses = Counter(
        LlmJob.objects.filter(id__in=list(jobs))
        .exclude(status__in=LlmJob.FINAL_STATUSES)
        .values_list("status", flat=True)
    )
    figures = (
        f"{event.process} (pid {event.pid}) killed at {event.at:.0f} s with {len(jobs)} job(s) "
        f"dequeued and waiting on the limiter: {completed} completed, {final - completed} failed"
        + (f" ({failed_because(jobs)})" if final > completed else "")
        + (f" ({refused} of the capped feature, refused by its budget)" if refused else "")
        + f", {len(jobs) - final} not final"
        + (f" ({', '.join(f'{n} {s}' for s, n in statuses.items())})" if statuses else "")
    )
    if not jobs:
        return Check(name, False, NOT_HAPPENED + figures)
    return Check(name, completed + refused == len(jobs), figures)


def _revoke(record: DrillRecord) -> Check:
    name = "revoked token's socket closed"
    event = record.revoke
    if event is None or event.revoked_at is None:
        return Check(name, False, NOT_HAPPENED + "no socket was opened and revoked")
    if event.error:
        return Check(name, False, NOT_HAPPENED + event.error)
    if not event.heard_before:
        return Check(
            name, False, NOT_HAPPENED + "the socket heard no event before its token was deleted"
        )
    heard = (
        f"the socket heard {event.heard_before} events, its token deleted at "
        f"{event.revoked_at:.0f} s"
    )
    if event.closed_at is None:
        return Check(
            name,
            False,
            f"{heard}; still open {REVOKE_CLOSE_SECONDS:g} s later, "
            f"{event.heard_after} events heard after the revocation",
        )
    after = event.closed_at - event.revoked_at
    # Closed by the server for the revocation: a close frame, not a connection that died (no
    # frame) or an error in the consumer (1011), which close idle sockets too.
    by_server = event.close_code is not None and event.close_code not in (1006, 1011)
    how = (
        f"code {event.close_code}"
        if by_server
        else f"code {event.close_code}: not a close for the revocation"
        if event.close_code is not None
        else "no close frame: the connection died, not a close for the revocation"
    )
    return Check(
        name,
        after <= REVOKE_CLOSE_SECONDS and by_server,
        f"{heard}; closed {after:.1f} s later ({how}), "
        f"{event.heard_after} events heard after the revocation",
    )


def _reconciler(record: DrillRecord) -> Check:
    name = "reconciler stopped, back"
    event = record.reconciler_stop
    if event is None:
        return Check(name, False, NOT_HAPPENED + "the reconciler was never stopped")
    if event.exited_after is None:
        return Check(name, False, NOT_HAPPENED + "the reconciler did not stop when told")
    # The jobs not final when it came back waited, some of them for it: all must end.
    waited = set(event.waiting_at_restart)
    final, completed = all_final(waited)
    back = event.restarted_at is not None
    return Check(
        name,
        back and final == len(waited),
        f"stopped at {event.at:.0f} s (exited after {event.exited_after:.1f} s), "
        + (
            f"started again after {event.restarted_at - event.at:.0f} s with "
            f"{len(waited)} jobs not final"
            if event.restarted_at is not None
            else "NOT started again"
        )
        + f": {completed} of them completed, {final - completed} failed, "
        f"{len(waited) - final} not final at the end",
    )


def more_fault_checks(record: DrillRecord) -> list[Check]:
    checks = []
    for kind, check in (
        ("trickle", _trickle),
        ("reconciler", _reconciler),
        ("kill-waiting", _kill_waiting),
        ("revoke", _revoke),
    ):
        if record.options.has(kind):
            checks.append(check(record))
    return checks
