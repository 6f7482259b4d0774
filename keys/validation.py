"""What a key request may hold (the API's body, the command's options), one stable error code
per kind of mistake."""

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from api.errors import ValidationFailed
from keys.scopes import ALL_SCOPES

__all__ = [
    "BUDGET_PERIODS",
    "MAX_GRACE_SECONDS",
    "KeyRequest",
    "parse_expires_at",
    "parse_grace_seconds",
    "parse_scopes",
    "validate_key_request",
    "validate_rotate_request",
]

FIELDS = ("name", "scopes", "expires_at", "max_budget_usd", "budget_period", "rpm")
MAX_NAME_LENGTH = 100
BUDGET_PERIODS = ("day", "month")
"""A key's budget window, as a ``ledger.Budget``'s: the UTC day or month."""
MAX_BUDGET_USD = Decimal("100000000")
MAX_RPM = 1_000_000
MAX_GRACE_SECONDS = 30 * 86400
"""A rotation's old secret works at most 30 days: longer is a second key, not a rotation."""


@dataclass(frozen=True)
class KeyRequest:
    name: str
    scopes: list[str]
    expires_at: datetime | None = None
    max_budget_usd: Decimal | None = None
    budget_period: str = "month"
    rpm: int | None = None


def _fail(code: str, message: str, field: str) -> ValidationFailed:
    return ValidationFailed(message, code=code, detail={"field": field})


def parse_scopes(value: Any) -> list[str]:
    """A non-empty list of known scopes, in the canonical order, each once."""
    if not isinstance(value, list) or not value or not all(isinstance(s, str) for s in value):
        raise _fail(
            "invalid_scopes",
            f"scopes must be a non-empty list of: {', '.join(ALL_SCOPES)}.",
            "scopes",
        )
    unknown = sorted(set(value) - set(ALL_SCOPES))
    if unknown:
        raise ValidationFailed(
            f"Unknown scopes: {', '.join(unknown)}; a key may hold {', '.join(ALL_SCOPES)}.",
            code="invalid_scopes",
            detail={"field": "scopes", "unknown": unknown},
        )
    return [scope for scope in ALL_SCOPES if scope in value]


def parse_expires_at(value: Any, *, now: datetime | None = None) -> datetime | None:
    """An ISO datetime in the future (naive means UTC), or None: the key never expires."""
    if value is None or value == "":
        return None
    moment = parse_datetime(value) if isinstance(value, str) else None
    if moment is None:
        raise _fail(
            "invalid_expires_at",
            "expires_at must be an ISO 8601 datetime (UTC unless it says otherwise) or null.",
            "expires_at",
        )
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    if moment <= (now or timezone.now()):
        raise _fail("invalid_expires_at", "expires_at must be in the future.", "expires_at")
    return moment


def parse_grace_seconds(value: Any, *, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GRACE_SECONDS:
        raise _fail(
            "invalid_grace_seconds",
            f"grace_seconds must be a whole number of seconds from 0 to {MAX_GRACE_SECONDS}.",
            "grace_seconds",
        )
    return value


def _budget(value: Any) -> Decimal | None:
    if value is None or value == "":
        return None
    amount: Decimal | None = None
    if isinstance(value, float):
        amount = Decimal(repr(value))
    elif isinstance(value, str | int) and not isinstance(value, bool):
        try:
            amount = Decimal(str(value).strip())
        except InvalidOperation:
            amount = None
    if (
        amount is None
        or not amount.is_finite()
        or not 0 < amount <= MAX_BUDGET_USD
        or amount != amount.quantize(Decimal("0.000001"))
    ):
        raise _fail(
            "invalid_max_budget_usd",
            f"max_budget_usd must be a positive amount of dollars, at most {MAX_BUDGET_USD}, "
            'with up to six decimals (a string such as "25.00"), or null.',
            "max_budget_usd",
        )
    return amount


def _rpm(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RPM:
        raise _fail(
            "invalid_rpm",
            f"rpm (submissions per minute) must be a whole number from 1 to {MAX_RPM}, or null.",
            "rpm",
        )
    return value


def validate_key_request(data: Any) -> KeyRequest:
    if not isinstance(data, dict):
        raise ValidationFailed("The body must be a JSON object.", code="invalid_body")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ValidationFailed(
            f"Unknown fields: {', '.join(unknown)}.",
            code="unknown_field",
            detail={"fields": unknown},
        )
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_NAME_LENGTH:
        raise _fail(
            "invalid_name",
            f"name is required: what the key is for, at most {MAX_NAME_LENGTH} characters "
            '(e.g. "nightly").',
            "name",
        )
    if "scopes" not in data:
        raise _fail(
            "invalid_scopes",
            f"scopes is required: the least the key needs, of {', '.join(ALL_SCOPES)}.",
            "scopes",
        )
    period = data.get("budget_period") or "month"
    if period not in BUDGET_PERIODS:
        raise _fail(
            "invalid_budget_period", 'budget_period must be "day" or "month".', "budget_period"
        )
    return KeyRequest(
        name=name.strip(),
        scopes=parse_scopes(data["scopes"]),
        expires_at=parse_expires_at(data.get("expires_at")),
        max_budget_usd=_budget(data.get("max_budget_usd")),
        budget_period=period,
        rpm=_rpm(data.get("rpm")),
    )


def validate_rotate_request(data: Any) -> int:
    """The grace period a rotation's body asks for (``{"grace_seconds": N}``, or no body)."""
    if data is None or data == {} or data == b"" or data == "":
        data = {}
    if not isinstance(data, dict):
        raise ValidationFailed("The body must be a JSON object.", code="invalid_body")
    unknown = sorted(set(data) - {"grace_seconds"})
    if unknown:
        raise ValidationFailed(
            f"Unknown fields: {', '.join(unknown)}.",
            code="unknown_field",
            detail={"fields": unknown},
        )
    return parse_grace_seconds(
        data.get("grace_seconds"), default=settings.API_KEY_ROTATION_GRACE_SECONDS
    )
