"""How much of a provider's requests limit (R a minute) the shared rate limiter used, measured
alike by bench/ratelimit.py and the cluster drill's rate-limit scenario: from the ledger (one
row per attempt: a success or a 429) over a span from the first call, and from the provider's
own arrival log (``/_fake/arrivals``): how close the calls came to a short-interval enforcement
and how evenly they kept the pace of one call every 60/R s."""

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from ledger.models import CostEntry

__all__ = ["PROBE_SECONDS", "RateUse", "arrival_gaps", "rate_use", "sent", "tightest"]

PROBE_SECONDS = 5.0
"""The short interval the arrival log is measured against (``--short-interval 5``)."""


def sent(entry: CostEntry) -> float:
    """When an attempt left its worker: a first attempt's claim (``started_at``, set a few ms
    before the request leaves); a later one's ledger row time less the call's latency (the row
    is written some ms after the answer)."""
    if entry.attempt == 1 and entry.job.started_at is not None:
        return float(entry.job.started_at.timestamp())
    return float(entry.created_at.timestamp() - (entry.latency_ms or 0) / 1000)


@dataclass(frozen=True)
class RateUse:
    rpm: int
    seconds: float
    successes: int
    limited: int
    """Attempts answered 429."""
    calls: int
    per_ten_seconds: tuple[tuple[int, int], ...]
    """(successes, 429s) in each 10 s of the span."""

    @property
    def per_minute(self) -> float:
        return self.successes / (self.seconds / 60)

    @property
    def of_limit(self) -> float:
        """The provider admits at most R in any 60 s: R a minute is the ceiling."""
        return self.per_minute / self.rpm

    @property
    def limited_share(self) -> float:
        return self.limited / max(1, self.calls)

    def summary(self) -> str:
        return (
            f"{self.successes} successful calls in {self.seconds:.0f} s = "
            f"{self.per_minute:.1f}/min = {self.of_limit:.3f} of R; 429s: {self.limited} of "
            f"{self.calls} calls = {100 * self.limited_share:.2f} %"
        )

    def tens(self) -> str:
        return "successes/429s per 10 s: " + " ".join(
            f"{ok}/{limited}" for ok, limited in self.per_ten_seconds
        )


def rate_use(entries: Iterable[CostEntry], *, first: float, seconds: float, rpm: int) -> RateUse:
    """The attempts sent in [first, first + seconds) (``entries`` with their jobs loaded)."""
    span = [(at, entry) for entry in entries if first <= (at := sent(entry)) < first + seconds]
    ok = [at for at, entry in span if entry.outcome == "success"]
    limited = [at for at, entry in span if entry.http_status == 429]
    tens = tuple(
        (
            sum(1 for at in ok if first + k <= at < first + k + 10),
            sum(1 for at in limited if first + k <= at < first + k + 10),
        )
        for k in range(0, int(seconds), 10)
    )
    return RateUse(rpm, seconds, len(ok), len(limited), len(span), tens)


def tightest(arrivals: list[float], start: float, end: float, *, rpm: int) -> str:
    """How close the calls that arrived in [start, end) came to at most R/12 in any 5 s."""
    calls = sorted(a for a in arrivals if start <= a < end)
    allowed = max(1, int(rpm * PROBE_SECONDS / 60 + 1e-9))
    spans = [calls[i + allowed] - calls[i] for i in range(len(calls) - allowed)]
    if not spans:
        return f"fewer than {allowed + 1} arrivals"
    under = sum(1 for span in spans if span < PROBE_SECONDS)
    return (
        f"tightest {allowed + 1} arrivals in a row: {min(spans) * 1000:.0f} ms "
        f"({under} of {len(spans)} such spans under {PROBE_SECONDS:g} s)"
    )


def arrival_gaps(arrivals: list[float], start: float, end: float, *, rpm: int) -> str:
    """How evenly the calls that arrived in [start, end) kept the pace of one every 60/R s: the
    gaps between arrivals in a row, and the time they left unused beyond the pace (each pace of
    it a call the limit allowed and nobody sent)."""
    calls = sorted(a for a in arrivals if start <= a < end)
    gaps = [later - earlier for earlier, later in zip(calls, calls[1:], strict=False)]
    if len(gaps) < 2:
        return "fewer than 3 arrivals"
    pace = 60 / rpm
    beyond = sum(max(0.0, gap - pace) for gap in gaps)
    p90 = statistics.quantiles(gaps, n=10)[-1]
    return (
        f"gaps between arrivals (pace {pace * 1000:.0f} ms): median "
        f"{statistics.median(gaps) * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms, longest "
        f"{max(gaps) * 1000:.0f} ms, {sum(gap < pace * 0.9 for gap in gaps)} under 90 % of "
        f"the pace; {beyond:.1f} s beyond the pace in all = {beyond / pace:.1f} calls' slots"
    )
