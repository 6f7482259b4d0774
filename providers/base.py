"""The interface every model provider implements, and what a call reports.

A provider turns a ``ProviderRequest`` (a Messages API body: other APIs are translated at the
edge) into a ``ProviderOutcome``, and never raises for provider trouble: an error answer, a
timeout, a stalled, refused or dropped connection are outcomes. Every call streams: the text is
handed to ``on_text`` as it arrives, the usage is kept as it streams (so a stream that breaks
still says what its input was), and a ``cancel`` of the call's deadline ends it from any thread.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from providers.call_deadline import CallDeadline

__all__ = [
    "STREAMED_BYTES_PER_TOKEN",
    "Provider",
    "ProviderOutcome",
    "ProviderRequest",
    "UnreadableResponse",
    "streamed_output_bound",
]


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
    """With a deadline, the call ends by then whatever the provider sends; ``cancel()`` on it
    ends the call at once (a running job's cancel)."""
    on_text: Callable[[str], None] | None = None
    """Called with each piece of the answer's text as it streams (in the calling thread)."""
    kind: str = "chat"
    """chat: ``body`` is a Messages API body; embedding: an Embeddings API body (``model``,
    ``input``, ``dimensions``), answered with ``ProviderOutcome.embeddings``."""


@dataclass
class ProviderOutcome:
    kind: str
    """success | error_response | read_timeout | connection_dropped | connection_error |
    cancelled (the caller cancelled the call mid-stream)"""
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
    """A complete stream's usage; for one that broke after ``message_start``, the input it
    reported and the output tokens reported so far (empty: the stream never started)."""
    output_tokens_bound: int | None = None
    """For a stream that ended early: the most output tokens it can have generated, when that
    is known (an error event ended it in-band: what streamed, ``streamed_output_bound``);
    None when it can be anything up to ``max_tokens`` (a stall, a drop, a cancel: the provider
    generates until it sees the close, past what the worker had read)."""
    request_sent: bool = True
    """False for a call cancelled before its request left: nothing can have been billed."""
    embeddings: list[bytes] | None = None
    """An embedding call's vectors, in the order of its ``input``: each one float32,
    little-endian (how they are stored, embeddings/storage.py)."""

    @property
    def reached_provider(self) -> bool:
        return self.kind != "connection_error"

    @property
    def outcome_unknown(self) -> bool:
        return self.kind in ("read_timeout", "connection_dropped")

    @property
    def maybe_billed(self) -> bool:
        """The provider may have billed output we did not see to its end: an unknown outcome,
        a cancelled stream, or an error event inside a stream that had started."""
        if self.kind == "success" or not self.request_sent:
            return False
        return self.outcome_unknown or self.kind == "cancelled" or bool(self.usage)


STREAMED_BYTES_PER_TOKEN = 3
"""How a stream that an error event ended early bounds the output it generated:
its streamed UTF-8 bytes over this. Claude's tokenizer averages about 3.5 to 4.5 bytes a token on
prose and code; 3 leaves room for the tokens in flight when the stream closed. The row is marked
estimated (docs/architecture.md, "Streaming")."""
STREAMED_MARGIN_TOKENS = 16
"""Added to that bound: a delta or two generated while the stream was being closed."""


def streamed_output_bound(streamed_bytes: int) -> int:
    """The output tokens a stream that ended early is booked with, from what it streamed."""
    return -(-streamed_bytes // STREAMED_BYTES_PER_TOKEN) + STREAMED_MARGIN_TOKENS


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
        """Build, once in a worker's main process, what every call would otherwise build.
        Called again (before every call), it does nothing."""
        ...

    def read_timeout_for(self, max_tokens: int) -> float:
        """The read timeout of a call that may generate ``max_tokens``: the stream's idle bound."""
        ...

    def call_deadline_for(self, max_tokens: int) -> float:
        """The wall-clock deadline of such a call, from connect to its last byte."""
        ...
