"""The checks of the Redis primary's kill (chaos/cluster/failover.py): the sentinels promoted
the replica, no job lost (every one completed: the reconciler puts back what the replica had
not got), none stuck two minutes after the kill, no call sent twice (every worker host lived
through it; a second call after a worker cut its own call off is counted apart), and the
ledger against the bill (chaos/cluster/checks.py)."""

from chaos.checks import Check
from chaos.cluster.checks import _calls_by_job, _completed, _describe, _fenced_at, _money, _stuck
from chaos.cluster.scenarios import ScenarioRecord

__all__ = ["FAILOVER_PROMISE_SECONDS", "redis_kill_checks"]

FAILOVER_PROMISE_SECONDS = 10.0
"""REDIS_SENTINEL_RETRY_SECONDS' default: a longer failover is an outage for every process."""


def _failover(record: ScenarioRecord) -> Check:
    seconds = record.failover_seconds
    figures = (
        "no failover" if seconds is None else f"the replica promoted {seconds:.1f} s after the kill"
    )
    passed = seconds is not None and seconds <= FAILOVER_PROMISE_SECONDS
    return Check(
        f"failover within {FAILOVER_PROMISE_SECONDS:.0f} s (the clients' retries)", passed, figures
    )


def _sent_twice_anywhere(record: ScenarioRecord) -> Check:
    twice, after_fence = [], 0
    fenced = _fenced_at(record)
    for job, calls in _calls_by_job(record).items():
        if len(calls) < 2:
            continue
        if job in fenced and calls[1].arrived >= fenced[job]:
            after_fence += 1
        else:
            twice.append(f"{job[:8]}: {_describe(record, calls)}")
    figures = (
        f"{len(twice)} of {len(record.job_ids)} jobs sent twice"
        + (f", {after_fence} sent again after a worker had cut its call off" if after_fence else "")
        + f"; {len(record.calls)} calls for {len(record.job_ids)} jobs"
        + (f"; e.g. {'; '.join(twice[:4])} (seconds from the kill)" if twice else "")
    )
    return Check("no call sent twice (every worker host lived)", not twice, figures)


def redis_kill_checks(record: ScenarioRecord) -> list[Check]:
    return [
        _failover(record),
        _completed(record),
        _stuck(record),
        _sent_twice_anywhere(record),
        *_money(record),
    ]
