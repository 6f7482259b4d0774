"""The drill's handle on its fake provider (fake_provider/): start it, set its faults, read
what it billed."""

import sys
from decimal import Decimal
from typing import Any

import httpx

from chaos.processes import Stack, free_port, wait_until

__all__ = ["BilledCall", "FakeProvider"]


class BilledCall:
    __slots__ = ("batch_id", "cost_usd", "how", "job_id", "request_id")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.request_id: str = raw["request_id"]
        self.batch_id: str = raw.get("batch_id", "")
        # A message batch's item carries our job id as its custom_id, not as a header.
        self.job_id: str = raw.get("custom_id") or raw["idempotency_key"]
        self.cost_usd = Decimal(raw["cost_usd"])
        self.how: str = raw["how"]


class FakeProvider:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=30)
        self.applied: dict[str, Any] = {}

    @classmethod
    def start(cls, stack: Stack, *, latency_ms: str, seed: int) -> "FakeProvider":
        """``manage.py fake_anthropic`` on a free port, with a requests-per-minute limit far
        above the drill's load: its answers then carry anthropic-ratelimit-* headers, as the
        real API's do, and the injected 429s report a limit the shared rate limiter can learn
        without throttling the drill to the fake provider's fallback of 50 a minute."""
        port = free_port()
        stack.start(
            "fake_provider",
            [sys.executable, "manage.py", "fake_anthropic", "--port", str(port),
             "--latency-ms", latency_ms, "--seed", str(seed), "--rpm", "20000"],
        )  # fmt: skip
        provider = cls(f"http://127.0.0.1:{port}")
        if not wait_until(lambda: provider.http.get("/_fake/health").is_success, timeout=60):
            raise RuntimeError("the fake provider did not start (see its log)")
        return provider

    def configure(self, *, faults: dict[str, float], latency_ms: str) -> None:
        """Set the lasting configuration (no window: the drill itself decides when each fault
        starts and ends, and windows of the provider's own would replace one another)."""
        wanted = {"faults": faults, "latency_ms": latency_ms}
        if wanted != self.applied:
            self.http.post("/_fake/faults", json=wanted).raise_for_status()
            self.applied = wanted

    def settings(self, **settings: Any) -> None:
        """Settings the drill keeps all along (the stream's pace, the batches' behaviour)."""
        self.http.post("/_fake/faults", json=settings).raise_for_status()

    def script(self, *, key: str, steps: list[Any]) -> None:
        """The next calls carrying ``Idempotency-Key: key`` (a job id) answer ``steps``, in
        order (fake_provider/scripts.py); then the configuration resumes."""
        self.http.post("/_fake/faults", json={"next": steps, "key": key}).raise_for_status()

    def trickled(self) -> list[str]:
        """The job ids (Idempotency-Key) of the calls the provider has trickled (billed at once,
        as ``trickled``): read from its billing log, small when the drill asks (early on)."""
        calls = self.http.get("/_fake/billing").raise_for_status().json()["calls"]
        return [call["idempotency_key"] for call in calls if call["how"] == "trickled"]

    def stats(self) -> dict[str, Any]:
        return dict(self.http.get("/_fake/stats").raise_for_status().json())

    def calls_in_flight(self) -> set[str]:
        """The job ids (Idempotency-Keys) of the calls in flight now."""
        return set(self.http.get("/_fake/in_flight").raise_for_status().json()["keys"])

    def billing(self) -> list[BilledCall]:
        log = self.http.get("/_fake/billing").raise_for_status().json()
        if log["evicted"]:
            raise RuntimeError(f"the fake provider's billing log lost {log['evicted']} calls")
        return [BilledCall(raw) for raw in log["calls"]]
