"""The interface every model provider implements, and what a call reports.

A provider turns a ``ProviderRequest`` (a Messages API body: other APIs are translated at the
edge) into a ``ProviderOutcome``, and never raises for provider trouble: an error answer, a
timeout, a refused or dropped connection are outcomes. The next seam is streaming: a
``stream(request)`` yielding the provider's events, from which ``call`` is then built.
"""

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from providers.call_deadline import CallDeadline

__all__ = ["Provider", "ProviderOutcome", "ProviderRequest", "UnreadableResponse"]


class UnreadableResponse(Exception):
    """A 2xx whose body is not a Messages API answer: the call may have been billed."""


@dataclass(frozen=True)
class ProviderRequest:
    body: dict[str, Any]
    """The Messages API body, sent as given."""
    idempotency_key: str
    """The job's id, sent as ``Idempotency-Key`` (the provider does not honour it today)."""
    read_timeout: float | None = None
    """The call's read timeout (``Provider.read_timeout_for``); None: the configured floor."""
    deadline: CallDeadline | None = None
    """With a deadline, the call ends by then whatever the provider sends."""


@dataclass
class ProviderOutcome:
    kind: str
    """success | error_response | read_timeout | connection_dropped | connection_error"""
    latency_ms: int
    http_status: int | None = None
    request_id: str = ""
    error_type: str = ""
    error_code: str = ""
    message: str = ""
    retry_after: float | None = None
    rate_limit_headers: dict[str, str] = field(default_factory=dict)
    text: str = ""
    content: list[dict[str, Any]] = field(default_factory=list)
    """Every content block of the answer, as the API returned it."""
    stop_reason: str = ""
    usage: dict[str, int] = field(default_factory=dict)

    @property
    def reached_provider(self) -> bool:
        return self.kind != "connection_error"

    @property
    def outcome_unknown(self) -> bool:
        return self.kind in ("read_timeout", "connection_dropped")


@runtime_checkable
class Provider(Protocol):
    """What the job path needs from a model provider (docs/architecture.md, "providers/")."""

    name: str
    """The provider's name, as breaker and rate-limit rows spell it ("anthropic")."""

    def call(self, request: ProviderRequest) -> ProviderOutcome:
        """One call: an outcome for every failure the provider or the network can cause;
        ``UnreadableResponse`` for a 2xx that is not an answer."""
        ...

    def warm_up(self) -> None:
        """Build, once in a worker's main process, what every call would otherwise build."""
        ...

    def max_tokens_limit(self) -> int:
        """The largest ``max_tokens`` one call accepts (the model's own limit is a price's)."""
        ...

    def read_timeout_for(self, max_tokens: int) -> float:
        """The read timeout of a call that may generate ``max_tokens``."""
        ...

    def call_deadline_for(self, max_tokens: int) -> float:
        """The wall-clock deadline of such a call, from connect to its last byte."""
        ...
