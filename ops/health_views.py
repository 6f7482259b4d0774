"""Thin views of the health endpoints; what they check is in ops/health.py.

Public on purpose (load balancers and orchestrators call them, without a session or a token),
GET and HEAD only, never cached. Their detail holds no URL, host or secret.
"""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from ops.health import liveness, readiness


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 while the process answers; it calls neither the database nor Redis."""
    return JsonResponse(liveness())


@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when the database, Redis and an llm worker all answer, else 503."""
    result = readiness()
    return JsonResponse(result.as_dict(), status=200 if result.ready else 503)
