"""Alert destination kinds, the one check of a target, and how a target is shown without leaking it.

Targets are secrets (a Slack webhook URL posts to a channel, a PagerDuty routing key pages
people): everything that logs, prints or stores an error uses ``redact_target`` or ``scrub``, and
``target_problem`` never repeats the target it rejects.

Pure on purpose: no Django model import, so that ``llmops/settings.py`` checks ``ALERT_ROUTES``
with the same rule as the admin before any app is loaded.
"""

import ipaddress
import re
import socket
from urllib.parse import parse_qsl, unquote, urlparse

__all__ = [
    "CALLBACK",
    "EMAIL",
    "KINDS",
    "PAGERDUTY",
    "SLACK",
    "WEBHOOK",
    "IPAddress",
    "callback_address_problem",
    "callback_addresses",
    "redact_target",
    "scrub",
    "target_problem",
]

SLACK = "slack"
"""Target: a Slack incoming-webhook URL."""
PAGERDUTY = "pagerduty"
"""Target: the routing key of a PagerDuty Events API v2 integration."""
WEBHOOK = "webhook"
"""Target: any http(s) URL that takes the alert as JSON."""
EMAIL = "email"
"""Target: comma-separated email addresses."""
KINDS = (SLACK, PAGERDUTY, WEBHOOK, EMAIL)
"""The kinds of an alert route."""
CALLBACK = "callback"
"""Target: an API consumer's http(s) URL (a batch's ``callback_url``) that receives the alert's
``details`` as its JSON body. Delivered like an alert, never a route kind: checked as a webhook
URL, plus ``callback_address_problem``."""

# PagerDuty's integration ("routing") keys are 32 letters and digits; anything else is a paste
# error that would only show up as a 400 from the Events API when the first incident fires.
_ROUTING_KEY = re.compile(r"[A-Za-z0-9]{32}")
# Deliberately loose: one "@" with something on each side and no space. The mail server, not
# a regular expression, is the judge of an address; this catches a pasted name or a URL.
_ADDRESS = re.compile(r"[^@\s]+@[^@\s]+")


def target_problem(*, kind: str, target: str) -> str:
    """What is wrong with a target for its kind, without repeating the target; "" if nothing.

    The one check, used by the admin (``AlertRoute.clean``) and by the ``ALERT_ROUTES`` setting.
    Leading and trailing spaces are ignored: both callers store the target stripped.
    """
    if kind not in KINDS:
        return f"Unknown kind; use {', '.join(KINDS)}."
    target = target.strip()
    if not target:
        return "A target is required."
    if kind in (SLACK, WEBHOOK):
        parsed = urlparse(target)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            return "Enter an http(s) URL with a host."
    if kind == EMAIL:
        # Empty items (a trailing comma) are skipped, as the email sender skips them.
        addresses = [a.strip() for a in target.split(",") if a.strip()]
        if not addresses or not all(_ADDRESS.fullmatch(a) for a in addresses):
            return "Enter comma-separated email addresses."
    if kind == PAGERDUTY and not _ROUTING_KEY.fullmatch(target):
        return "Enter the integration's routing key (32 letters and digits, no spaces)."
    return ""


def redact_target(*, kind: str, target: str) -> str:
    """Enough to recognise a destination, not enough to use it."""
    if kind == EMAIL:
        # Addresses are not credentials, and operators need to see who was mailed.
        return target
    if kind in (SLACK, WEBHOOK, CALLBACK):
        host = urlparse(target).hostname or "?"
        return f"{host}/…"
    return f"…{target[-4:]}" if len(target) > 8 else "…"


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def callback_address_problem(url: str, *, resolve: bool) -> str:
    """What keeps a caller's callback URL from being sent to, "" if nothing: a host on a private,
    loopback, link-local or reserved network (the workers would otherwise post wherever an API
    consumer points them, inside our own network). ``resolve``: look the name up; without it
    only a literal address or ``localhost`` is refused (at submit, no DNS wait). The sender uses
    ``callback_addresses`` instead, to connect to the addresses it checked. Never repeats the
    URL."""
    host = urlparse(url).hostname or ""
    if _is_localhost(host):
        return _LOCAL
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not resolve:
            return ""
    try:
        return callback_addresses(url)[0]
    except OSError:
        return ""  # the request fails the same way, as a retryable connection error


def callback_addresses(url: str) -> tuple[str, list[IPAddress]]:
    """Look a callback URL's host up once: what keeps it from being sent to ("" if nothing, as
    ``callback_address_problem``) and every address it has now, in the resolver's order. The
    request connects only to these (alerts/pinned_http.py): a second lookup could answer
    differently (DNS rebinding). Raises OSError when the name does not resolve."""
    host = urlparse(url).hostname or ""
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(host)]
    except ValueError:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        # A link-local IPv6 answer may carry its zone ("fe80::1%eth0"); the address is the rest.
        found = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        addresses = list(dict.fromkeys(found))
    if _is_localhost(host):
        return _LOCAL, addresses
    if any(not address.is_global for address in addresses):
        return "The callback host is on a private, local or reserved network.", addresses
    return "", addresses


_LOCAL = "The callback host is a local address."


def _is_localhost(host: str) -> bool:
    return host == "localhost" or host.endswith(".localhost")


SECRET_PIECE_LENGTH = 8
"""A URL's path segments and query values this long or longer are scrubbed on their own too: a
destination may quote its token alone ("unknown token T0K3N..."), not only the whole path or
query; shorter pieces ("v2", "hooks") are words, not secrets."""


def scrub(text: str, *, target: str) -> str:
    """Remove a target from a message before storing or logging it: for a URL, also its path,
    its query, its user:password, and each long enough path segment, query value, user or
    password on its own, as written and percent-decoded."""
    secrets = {target}
    parsed = urlparse(target)
    if parsed.scheme in ("http", "https"):
        secrets.update(p for p in (parsed.path, parsed.query) if len(p) > 1)
        userinfo = parsed.netloc.rpartition("@")[0]
        secrets.add(userinfo)
        items = parsed.query.split("&")
        pieces = [*parsed.path.split("/"), *items, *(i.partition("=")[2] for i in items)]
        pieces += [*userinfo.split(":"), *(value for _, value in parse_qsl(parsed.query))]
        for piece in pieces:
            secrets.update(p for p in (piece, unquote(piece)) if len(p) >= SECRET_PIECE_LENGTH)
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, "[redacted]")
    return text
