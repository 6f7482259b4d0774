"""The Message Batches API of an Anthropic provider, through the official SDK: create a batch,
read its status, stream its results, cancel it. What the deferred-work loop calls.

The client is the one providers/anthropic_sdk.py builds for the provider's row (its base URL, the
key from the variable the row names, ``max_retries=0``: retries are ours). The SDK is imported on
the first call, not with this module. A failed call raises ``BatchApiError``, classified by its
HTTP status and error body (providers/errors.py), never by the SDK's exception class; no error
carries the key, nor the SDK exception (whose request holds it in its headers).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings

from providers.errors import failure_reason
from providers.models import DEFAULT_PROVIDER
from providers.models import Provider as ProviderRow
from providers.selectors import provider_api_key, provider_row

if TYPE_CHECKING:
    import anthropic

__all__ = [
    "MAX_BATCH_BYTES",
    "MAX_BATCH_REQUESTS",
    "BatchApiError",
    "BatchInfo",
    "BatchItemResult",
    "BatchRequest",
    "batch_cancel",
    "batch_create",
    "batch_results",
    "batch_retrieve",
    "batches_supported",
    "split_requests",
]

MAX_BATCH_REQUESTS = 100_000
"""The most requests the API takes in one batch."""
MAX_BATCH_BYTES = 256 * 1024 * 1024
"""The largest create body the API takes (JSON-encoded)."""

# The reasons (providers/errors.py) the retry table (jobs/retry_policy.py) calls transient.
_TRANSIENT = frozenset(
    "connection_error read_timeout connection_dropped rate_limited overloaded server_error "
    "conflict".split()
)
_KEY_PATTERN = re.compile(r"sk-ant-[A-Za-z0-9_-]+")
_T = TypeVar("_T")


@dataclass(frozen=True)
class BatchRequest:
    custom_id: str
    """Unique in its batch, ``^[a-zA-Z0-9_-]{1,64}$``: how its result is found again."""
    params: dict[str, Any]
    """A Messages API body (``stream`` is dropped: batch requests never stream)."""


@dataclass(frozen=True)
class BatchInfo:
    id: str
    processing_status: str
    """in_progress | canceling | ended"""
    request_counts: dict[str, int]
    """processing, succeeded, errored, canceled, expired: final only once ``ended``."""
    created_at: datetime | None
    ended_at: datetime | None
    expires_at: datetime | None
    cancel_initiated_at: datetime | None = None

    @property
    def ended(self) -> bool:
        return self.processing_status == "ended"


@dataclass(frozen=True)
class BatchItemResult:
    custom_id: str
    type: str
    """succeeded | errored | canceled | expired"""
    text: str = ""
    content: list[dict[str, Any]] | None = None
    stop_reason: str = ""
    usage: dict[str, int] | None = None
    """A succeeded item's usage, with ``ProviderOutcome.usage``'s keys."""
    model: str = ""
    """The model that answered (a succeeded item)."""
    error_type: str = ""
    error_message: str = ""
    http_status: int | None = None
    """An errored item's ``error.type`` as the status the Messages API answers it with, for the
    retry table (``classify(kind="error_response", http_status=..., error_type=...)``)."""


@dataclass(eq=False)
class BatchApiError(Exception):
    """A call of the Message Batches API that failed: no answer, or an error answer."""

    message: str
    _: KW_ONLY
    reason: str
    """``failure_reason``'s code (providers/errors.py), or ``batch_not_ended``, ``unreadable``."""
    retryable: bool
    http_status: int | None = None
    error_type: str = ""
    error_code: str = ""
    request_id: str = ""
    retry_after: float | None = None
    outcome_unknown: bool = False
    """The call may have been carried out (a create that timed out): look before repeating it."""

    def __post_init__(self) -> None:
        super().__init__(self.message)


def batches_supported(provider_name: str) -> bool:
    """Whether the provider ``provider_name`` has the Message Batches API (an Anthropic one)."""
    row = provider_row(name=provider_name)
    if row is None:
        return provider_name == DEFAULT_PROVIDER  # its row flushed: configured by settings
    return bool(row.kind == ProviderRow.Kind.ANTHROPIC)


def batch_create(*, provider_name: str, requests: list[BatchRequest]) -> BatchInfo:
    """Create a batch of ``requests`` (within the limits: ``split_requests``)."""
    if not requests:
        raise ValueError("a batch needs at least one request")
    body: Any = [_entry(request) for request in requests]  # the SDK's Request, as dicts
    client = _client(provider_name)
    return _batch(client, lambda: client.messages.batches.create(requests=body), changes=True)


def batch_retrieve(*, provider_name: str, batch_id: str) -> BatchInfo:
    client = _client(provider_name)
    return _batch(client, lambda: client.messages.batches.retrieve(batch_id))


def batch_cancel(*, provider_name: str, batch_id: str) -> BatchInfo:
    """Ask to cancel: the batch is ``canceling`` until its unfinished items are ``canceled``."""
    client = _client(provider_name)
    return _batch(client, lambda: client.messages.batches.cancel(batch_id), changes=True)


def batch_results(*, provider_name: str, batch_id: str) -> Iterator[BatchItemResult]:
    """The results of an ended batch, streamed from its JSONL file, in the order the API gives
    (not the request order). ``BatchApiError`` (reason ``batch_not_ended``, retryable) before
    it has ended; one raised while iterating when the stream breaks."""
    client = _client(provider_name)
    batch = _batch(client, lambda: client.messages.batches.retrieve(batch_id))
    if not batch.ended:
        raise BatchApiError(
            f"Message Batch {batch_id} is {batch.processing_status}: its results are available "
            "once it has ended",
            reason="batch_not_ended",
            retryable=True,
        )
    decoder = _call(client, lambda: client.messages.batches.results(batch_id))
    return _stream(client, decoder)


def split_requests(
    requests: list[BatchRequest],
    *,
    max_requests: int = MAX_BATCH_REQUESTS,
    max_bytes: int = MAX_BATCH_BYTES,
) -> list[list[BatchRequest]]:
    """``requests`` in consecutive chunks, each a create body within ``max_requests`` and
    ``max_bytes``, in their order. ``ValueError`` for a request too large for any batch."""
    if max_requests < 1:
        raise ValueError("max_requests must be at least 1")
    # Measured as json.dumps writes it by default (ASCII escapes, ", " separators): no smaller
    # than the SDK's encoding, so a chunk within it is within the API's limit.
    envelope = len(json.dumps({"requests": []}))
    separator = len(", ")
    chunks: list[list[BatchRequest]] = []
    chunk: list[BatchRequest] = []
    size = envelope
    for request in requests:
        item = len(json.dumps(_entry(request)))
        if envelope + item > max_bytes:
            raise ValueError(
                f"request {request.custom_id!r} alone is {item} bytes encoded, more than a "
                f"batch takes ({max_bytes})"
            )
        added = item + (separator if chunk else 0)
        if chunk and (len(chunk) == max_requests or size + added > max_bytes):
            chunks.append(chunk)
            chunk, size, added = [], envelope, item
        chunk.append(request)
        size += added
    if chunk:
        chunks.append(chunk)
    return chunks


# --- the SDK boundary ------------------------------------------------------------------------


def _entry(request: BatchRequest) -> dict[str, Any]:
    params = {key: value for key, value in request.params.items() if key != "stream"}
    return {"custom_id": request.custom_id, "params": params}


def _client(provider_name: str) -> anthropic.Anthropic:
    """The SDK client of the provider's row, as the provider's own calls resolve it."""
    row = provider_row(name=provider_name)
    if row is None and provider_name != DEFAULT_PROVIDER:
        raise LookupError(f"provider {provider_name!r} has no row")
    if row is not None and row.kind != ProviderRow.Kind.ANTHROPIC:
        raise LookupError(f"provider {provider_name!r} ({row.kind}) has no Message Batches API")
    base_url = row.base_url if row is not None else ""
    api_key = provider_api_key(api_key_env=row.api_key_env) if row is not None else ""
    from providers.anthropic_sdk import get_client

    return get_client(
        base_url or settings.ANTHROPIC_BASE_URL,
        settings.LLM_DEFERRED_READ_TIMEOUT_SECONDS,  # they answer at once (deferred/defaults.py)
        settings.LLM_PROVIDER_CONNECT_TIMEOUT,
        # Only the default provider without a row falls back to ANTHROPIC_API_KEY: a row's key
        # is its own variable's, never the real key sent to whatever URL the row names.
        api_key if row is not None else None,
    )


def _call(client: anthropic.Anthropic, call: Callable[[], _T], changes: bool = False) -> _T:
    """``call()``, its failure as a ``BatchApiError``; ``changes``: it creates or cancels."""
    import anthropic
    import httpx2

    started = time.monotonic()
    try:
        return call()
    except (anthropic.APIError, httpx2.TransportError, json.JSONDecodeError) as exc:
        error = _api_error(exc, client, started, changes)
    # Raised outside the except block: the SDK's exception (its request, its headers, the key)
    # is not kept as the context.
    raise error


def _api_error(
    exc: Exception, client: anthropic.Anthropic, started: float, changes: bool
) -> BatchApiError:
    import anthropic
    import httpx2

    from providers.ratelimit_headers import retry_after_seconds
    from providers.transport import endpoint_of, transport_failure

    def redact(text: str) -> str:
        text = text.replace(client.api_key, "[redacted]") if client.api_key else text
        return _KEY_PATTERN.sub("[redacted]", text)

    if isinstance(exc, anthropic.APIStatusError):
        status, error_type = exc.status_code, exc.type or ""
        error_code, api_message = exc.error_code or "", exc.api_message or ""
        reason = failure_reason(
            kind="error_response",
            http_status=status,
            error_type=error_type,
            error_code=error_code,
            message=api_message,
        )
        return BatchApiError(
            redact(f"HTTP {status} {error_type or 'error'}: {api_message or 'no message'}"),
            reason=reason,
            retryable=reason in _TRANSIENT,
            http_status=status,
            error_type=error_type,
            error_code=error_code,
            request_id=exc.request_id or "",
            retry_after=retry_after_seconds(exc.response.headers),
        )
    if not isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
        # A 2xx whose body is not the API's answer (a proxy's page, a broken results line).
        return BatchApiError(
            redact(f"an answer that is not the Message Batches API's: {exc}"),
            reason="unreadable",
            retryable=True,
            outcome_unknown=changes,
        )
    outcome = transport_failure(
        exc,
        started,
        None,
        connection_error=anthropic.APIConnectionError,
        timeout_error=anthropic.APITimeoutError,
    )
    never_left = outcome.kind == "connection_error"
    return BatchApiError(
        redact(
            # Host and port only: the base URL's path may carry a gateway's token.
            outcome.message
            if never_left
            else f"no answer, or a broken one ({outcome.kind}), from {endpoint_of(client.base_url)}"
        ),
        reason=outcome.kind,
        retryable=True,
        outcome_unknown=changes and not never_left,
    )


def _batch(
    client: anthropic.Anthropic, call: Callable[[], Any], changes: bool = False
) -> BatchInfo:
    """The batch ``call()`` answers; a 2xx that is no batch (a proxy's page) as unreadable."""
    batch = _call(client, call, changes)
    try:
        return BatchInfo(
            id=batch.id,
            processing_status=batch.processing_status,
            request_counts={k: int(v) for k, v in batch.request_counts.model_dump().items()},
            created_at=batch.created_at,
            ended_at=batch.ended_at,
            expires_at=batch.expires_at,
            cancel_initiated_at=batch.cancel_initiated_at,
        )
    except (AttributeError, TypeError, ValueError):
        # The SDK hands a non-JSON 2xx body back as text, and builds a JSON one unvalidated.
        error = BatchApiError(
            f"a {type(batch).__name__} that is not a Message Batch",
            reason="unreadable",
            retryable=True,
            outcome_unknown=changes,
        )
    raise error


def _stream(client: anthropic.Anthropic, decoder: Any) -> Iterator[BatchItemResult]:
    lines = iter(decoder)
    try:
        while (line := _call(client, lambda: next(lines, None))) is not None:
            yield _item(line)
    finally:
        decoder.close()


def _item(line: Any) -> BatchItemResult:
    from providers.anthropic_sdk import STATUS_OF_ERROR_TYPE, content_block_dict, message_usage

    result = line.result
    if result.type == "succeeded":
        message = result.message
        return BatchItemResult(
            custom_id=line.custom_id,
            type=result.type,
            text="".join(block.text for block in message.content if block.type == "text"),
            content=[content_block_dict(block) for block in message.content],
            stop_reason=message.stop_reason or "",
            usage=message_usage(message.usage),
            model=message.model or "",
        )
    if result.type == "errored":
        error = getattr(result.error, "error", None)
        error_type = str(getattr(error, "type", "") or "")
        return BatchItemResult(
            custom_id=line.custom_id,
            type=result.type,
            error_type=error_type,
            error_message=str(getattr(error, "message", "") or ""),
            http_status=STATUS_OF_ERROR_TYPE.get(error_type, 500),
        )
    return BatchItemResult(custom_id=line.custom_id, type=result.type)
