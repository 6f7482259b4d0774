"""Thin views of the metrics app: the Prometheus scrape endpoints."""

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, exposition

from metrics.access import metrics_protected
from metrics.collector import llm_registry, process_registry, rq_registry


def _render(request: HttpRequest, *registries: CollectorRegistry) -> HttpResponse:
    encoder, content_type = exposition.choose_encoder(request.META.get("HTTP_ACCEPT", ""))
    body = b"".join(encoder(registry) for registry in registries)
    return HttpResponse(body, content_type=content_type)


@require_GET
@metrics_protected
def metrics(request: HttpRequest) -> HttpResponse:
    """Everything: HTTP and database metrics of the web process plus the LLM metrics."""
    return _render(request, process_registry(), llm_registry())


@require_GET
@metrics_protected
def rq_metrics(request: HttpRequest) -> HttpResponse:
    """django-rq's own collector (workers, registries), behind the same protection."""
    return _render(request, rq_registry())
