"""Who may scrape the metrics: a bearer token or an allowed network, nobody else.

One rule for ``/metrics`` and django-rq's ``/django-rq/metrics/``: the caller shows
``Authorization: Bearer <METRICS_TOKEN>`` or comes from a network in
``METRICS_ALLOWED_NETWORKS``; with DEBUG on (``make run``), the loopback network needs neither.
Anonymous callers get ``401``; with DEBUG off nothing is open by default.
"""

import ipaddress
from collections.abc import Callable
from functools import lru_cache, wraps
from secrets import compare_digest

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache

__all__ = ["allowed_networks", "metrics_access_allowed", "metrics_protected"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def _parse(networks: tuple[str, ...]) -> tuple[Network, ...]:
    parsed = []
    for network in networks:
        try:
            parsed.append(ipaddress.ip_network(network, strict=False))
        except ValueError as error:
            raise ImproperlyConfigured(
                f"METRICS_ALLOWED_NETWORKS: {network!r} is not a network ({error})"
            ) from None
    return tuple(parsed)


def allowed_networks() -> tuple[Network, ...]:
    return _parse(tuple(settings.METRICS_ALLOWED_NETWORKS))


def _bearer_token(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def metrics_access_allowed(request: HttpRequest) -> bool:
    token = _bearer_token(request)
    expected = settings.METRICS_TOKEN
    if token is not None and expected and compare_digest(token.encode(), expected.encode()):
        return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if settings.DEBUG and address.is_loopback:
        return True  # a developer's own machine (make run): the README's curl works at once
    return any(address in network for network in allowed_networks())


def metrics_protected(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Answer ``401`` (with ``WWW-Authenticate: Bearer``) unless ``metrics_access_allowed``."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        if not metrics_access_allowed(request):
            response = JsonResponse(
                {
                    "code": "not_authenticated",
                    "message": (
                        "Metrics need Authorization: Bearer <METRICS_TOKEN>, "
                        "or a caller in METRICS_ALLOWED_NETWORKS."
                    ),
                    "detail": None,
                },
                status=401,
            )
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
        return view(request, *args, **kwargs)

    return never_cache(wrapper)
