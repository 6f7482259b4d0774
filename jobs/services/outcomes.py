"""What an attempt's end carries into its transition: a success, what a cancelled call
streamed, a classified failure.

Part of the job services (jobs/services/__init__.py has the transition table)."""

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobs.retry_policy import Classification
from ledger.services import AttemptRecord

logger = logging.getLogger(__name__)


@dataclass
class SuccessResult:
    text: str
    stop_reason: str
    usage: dict[str, int]
    http_status: int | None
    request_id: str
    latency_ms: int
    content: list[dict[str, Any]] | None = None
    """Every content block of the answer (text, thinking, tool_use, ...)."""
    embeddings: list[bytes] | None = None
    """An embedding job's vectors (float32 little-endian each), kept in embeddings/."""
    batch: bool = False
    """The answer of a provider message batch item: booked at the batch price."""


@dataclass
class CancelledResult:
    """What a cancelled call streamed before its stream was closed."""

    text: str
    content: list[dict[str, Any]]
    usage: dict[str, int]
    output_tokens_bound: int | None
    maybe_billed: bool
    http_status: int | None
    request_id: str
    latency_ms: int
    message: str


@dataclass
class AttemptFailure:
    """A failed attempt: how the retry policy classified it, and what the ledger books."""

    classification: Classification
    record: AttemptRecord
    retry_after: float | None = None
    answered_at: datetime | None = None
    """When the provider's answer came (wall clock), if it came: an account-wide failure answered
    before the breaker was last closed is old news and does not open it again."""
