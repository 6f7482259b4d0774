"""The OpenTelemetry SDK, configured only by the standard variables, in every process.

On when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` names a
collector, unless ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``; off otherwise (no
provider, no thread, nothing done on the job path). The exporter is OTLP over HTTP
(``http/protobuf``, the SDK's default), reading its endpoint, headers, timeout and compression
from the usual ``OTEL_EXPORTER_OTLP_*`` variables; ``OTEL_SERVICE_NAME`` (default ``llmops``),
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER`` and ``OTEL_BSP_*`` are read by the SDK.

Spans go through a batch processor: ending one appends it to a bounded queue and returns; a
thread of the SDK exports. When the collector is away, the exporter's retries run on that thread
and the queue fills: spans are then dropped, never waited for. What was exported, what failed
and what was dropped are counted in Redis across every process (``llm_trace_spans_total`` on
/metrics). At exit a process gives its last spans two seconds, never the SDK's thirty.
"""

import atexit
import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from llmops.queues import LLM_QUEUE

if TYPE_CHECKING:
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = [
    "SPAN_COUNTS_KEY",
    "flush_if_forked",
    "preset_ids",
    "span_counts",
    "tracer",
    "tracing_configuration_error",
    "tracing_enabled",
    "tracing_reset",
]

logger = logging.getLogger(__name__)

SPAN_COUNTS_KEY = "llmops:traces:spans"
"""A Redis hash: spans ``exported``, ``failed`` (the collector refused them or was away) and
``dropped`` (the queue was full), summed over every process."""

SHUTDOWN_MILLIS = 2000
FORKED_FLUSH_MILLIS = 1000
PROTOCOLS = ("http/protobuf",)


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def tracing_configuration_error() -> str | None:
    """Why the variables set cannot be served (an unsupported protocol), or None."""
    protocol = _env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol not in PROTOCOLS:
        return (
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: llmops exports traces over OTLP/HTTP "
            f"with protobuf only ({', '.join(PROTOCOLS)})"
        )
    return None


def tracing_wanted() -> bool:
    """Whether the standard variables ask for traces to be exported."""
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return False
    if _env("OTEL_TRACES_EXPORTER").lower() == "none":
        return False
    endpoint = _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _env("OTEL_EXPORTER_OTLP_ENDPOINT")
    return bool(endpoint) and tracing_configuration_error() is None


def _count(outcome: str, spans: int) -> None:
    try:
        from runtime.redis_clients import queue_connection

        queue_connection(LLM_QUEUE).hincrby(SPAN_COUNTS_KEY, outcome, spans)
    except Exception:  # Redis away: a count is not worth an error on the exporter's thread
        pass


def span_counts() -> dict[str, int]:
    """Spans exported, failed and dropped, over every process (for /metrics)."""
    from runtime.redis_clients import queue_connection

    raw = queue_connection(LLM_QUEUE).hgetall(SPAN_COUNTS_KEY)
    counts = {"exported": 0, "failed": 0, "dropped": 0}
    for name, value in raw.items():
        key = name.decode() if isinstance(name, bytes) else str(name)
        if key in counts:
            counts[key] = int(value)
    return counts


_lock = threading.Lock()
_state: dict[str, Any] = {"configured": False, "tracer": None, "ids": None, "pid": None}


def _configure() -> None:
    # The SDK is loaded here only: a process with tracing off never imports it.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    from tracing.sdk import CountingExporter, DroppingBatchProcessor, PresetIdGenerator

    ids = PresetIdGenerator()
    # The SDK reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the name defaults to ours.
    resource = Resource.create({} if _env("OTEL_SERVICE_NAME") else {"service.name": "llmops"})
    provider = TracerProvider(resource=resource, id_generator=ids, shutdown_on_exit=False)
    processor = DroppingBatchProcessor(
        CountingExporter(OTLPSpanExporter(), count=_count), count=_count
    )
    provider.add_span_processor(processor)
    atexit.register(_shutdown, processor)
    _state.update(tracer=provider.get_tracer("llmops"), ids=ids, pid=os.getpid(), provider=provider)


def _shutdown(processor: "BatchSpanProcessor") -> None:
    batch = processor._batch_processor
    try:
        batch.shutdown(timeout_millis=SHUTDOWN_MILLIS)
    except Exception:
        pass
    # What the exit's two seconds could not send (the collector away) is lost: counted so.
    left = len(getattr(batch, "_queue", ()))
    if left:
        _count("dropped", left)


def tracer() -> "trace.Tracer | None":
    """The tracer, or None when tracing is off (the caller then does nothing at all)."""
    if not _state["configured"]:
        with _lock:
            if not _state["configured"]:
                if tracing_wanted():
                    try:
                        _configure()
                    except Exception:
                        logger.exception("traces: the OpenTelemetry SDK could not start; off")
                _state["configured"] = True
    return _state["tracer"]


def tracing_enabled() -> bool:
    return tracer() is not None


def tracing_reset() -> None:
    """Forget the configuration, so that the next ``tracer()`` reads the variables again (the
    tests; a process whose environment changed). The spans still queued get the exit's two
    seconds to leave."""
    with _lock:
        processor = _state.get("processor")
        if processor is not None:
            _shutdown(processor)
        _state.update(
            configured=False, tracer=None, ids=None, pid=None, provider=None, processor=None
        )


class preset_ids:  # noqa: N801  (used as a context manager, like a function)
    """Fix the ids of the next span started in this thread (``trace_id`` only for a root)."""

    def __init__(self, *, span_id: str, trace_id: str | None = None) -> None:
        self.span_id = int(span_id, 16)
        self.trace_id = int(trace_id, 16) if trace_id else None

    def __enter__(self) -> None:
        ids = _state["ids"]
        if ids is not None:
            ids._local.span_id = self.span_id
            ids._local.trace_id = self.trace_id

    def __exit__(self, *exc: object) -> None:
        ids = _state["ids"]
        if ids is not None:
            ids._local.span_id = None
            ids._local.trace_id = None


def flush_if_forked() -> None:
    """In a forked child (rq's work horse ends with ``os._exit``, its queue unsent), give the
    spans it just ended a bounded moment to leave."""
    provider = _state.get("provider")
    if provider is not None and _state["pid"] != os.getpid():
        try:
            provider.force_flush(timeout_millis=FORKED_FLUSH_MILLIS)
        except Exception:
            pass
