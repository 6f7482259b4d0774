"""The SDK's pieces llmops adapts (tracing/setup.py loads this module only when tracing is on)."""

import logging
import threading
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

__all__ = ["CountingExporter", "DroppingBatchProcessor", "PresetIdGenerator"]

logger = logging.getLogger("tracing.setup")

Count = Callable[[str, int], None]


class PresetIdGenerator(IdGenerator):
    """Random ids, except the next span's when ``preset_ids`` fixed them: a job's span and its
    attempts' carry the ids their rows and log lines already name (tracing/context.py)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._local = threading.local()

    def generate_span_id(self) -> int:
        preset = getattr(self._local, "span_id", None)
        if preset is not None:
            self._local.span_id = None
            return int(preset)
        return self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        preset = getattr(self._local, "trace_id", None)
        if preset is not None:
            self._local.trace_id = None
            return int(preset)
        return self._random.generate_trace_id()


class CountingExporter(SpanExporter):
    """The OTLP exporter, counting in Redis what it exported and what failed."""

    def __init__(self, exporter: SpanExporter, *, count: Count) -> None:
        self._exporter = exporter
        self._count = count

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._exporter.export(spans)
        except Exception:
            logger.warning("traces: the exporter failed; %d spans lost", len(spans))
            result = SpanExportResult.FAILURE
        self._count("exported" if result == SpanExportResult.SUCCESS else "failed", len(spans))
        return result

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


class DroppingBatchProcessor(BatchSpanProcessor):
    """The SDK's batch processor, counting the spans a full queue drops."""

    def __init__(self, exporter: SpanExporter, *, count: Count) -> None:
        super().__init__(exporter)
        self._count = count

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            batch = getattr(self, "_batch_processor", None)
            queue = getattr(batch, "_queue", None)
            if queue is not None and len(queue) >= batch._max_queue_size:  # type: ignore[union-attr]
                self._count("dropped", 1)
        super().on_end(span)
