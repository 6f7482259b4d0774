"""The one check of a caller's callback URL (a job's, an agent run's, a batch's, a front-door
call's ``LLM-Callback-URL``): an http(s) URL with a host, no user or password in it, printable,
at most ``MAX_CALLBACK_URL_LENGTH`` characters, and, unless ``CALLBACK_ALLOW_PRIVATE_HOSTS``, no
literal private or local address (names are looked up when the POST goes out, alerts/targets.py).

Messages never repeat the URL: it may carry a token in its path or query.
"""

from typing import Any
from urllib.parse import urlparse

from django.conf import settings

from alerts.targets import WEBHOOK, callback_address_problem, target_problem
from api.errors import ValidationFailed

__all__ = ["INVALID_CALLBACK_URL", "MAX_CALLBACK_URL_LENGTH", "validate_callback_url"]

MAX_CALLBACK_URL_LENGTH = 500
"""The longest URL a delivery stores."""
INVALID_CALLBACK_URL = "invalid_callback_url"
"""The error code of every refused callback URL (400)."""


def validate_callback_url(url: Any, *, field: str = "callback_url") -> str:
    """``url`` when it may be called back, "" for None or ""; else ``ValidationFailed``
    (``invalid_callback_url``, ``detail.field`` = ``field``)."""
    if url is None or url == "":
        return ""
    if (
        not isinstance(url, str)
        or len(url) > MAX_CALLBACK_URL_LENGTH
        or not url.isprintable()
        or any(character.isspace() for character in url)
    ):
        raise _fail(
            f"{field} must be an http(s) URL of at most {MAX_CALLBACK_URL_LENGTH} characters.",
            field,
        )
    try:
        problem = target_problem(kind=WEBHOOK, target=url)
        if not problem and "@" in urlparse(url).netloc:
            # Credentials in a URL end up in proxies' and receivers' logs; use a token instead.
            problem = "A callback URL may not carry a user or password; put a token in it."
        if not problem and not settings.CALLBACK_ALLOW_PRIVATE_HOSTS:
            problem = callback_address_problem(url, resolve=False)
    except ValueError:  # urlparse: a malformed IPv6 host
        problem = "Enter an http(s) URL with a host."
    if problem:
        raise _fail(f"{field}: {problem}", field)
    return url


def _fail(message: str, field: str) -> ValidationFailed:
    return ValidationFailed(message, code=INVALID_CALLBACK_URL, detail={"field": field})
