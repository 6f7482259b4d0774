"""``manage.py check`` (and every process's start) says when the OTEL_* variables ask for
something the exporter does not serve, instead of leaving traces silently off."""

from typing import Any

from django.core.checks import Error, register

from tracing.setup import tracing_configuration_error

__all__ = ["otel_protocol_check"]


@register()
def otel_protocol_check(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    problem = tracing_configuration_error()
    if problem is None:
        return []
    return [
        Error(
            problem,
            hint="Unset OTEL_EXPORTER_OTLP_PROTOCOL or set it to http/protobuf "
            "(the collector's OTLP/HTTP receiver, port 4318).",
            id="tracing.E001",
        )
    ]
