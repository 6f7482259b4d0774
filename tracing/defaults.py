"""Traces' own setting; the exporter itself reads only the standard ``OTEL_*`` variables
(tracing/setup.py)."""

from llmops.env import env

__all__ = ["LLM_TRACE_URL_TEMPLATE"]

# The admin links a job's or a run's trace id to your tracing backend when this is set, e.g.
# "https://grafana.example.com/explore?traceId={trace_id}" or
# "http://jaeger.example.com:16686/trace/{trace_id}".
LLM_TRACE_URL_TEMPLATE = env.str("LLM_TRACE_URL_TEMPLATE", "")
