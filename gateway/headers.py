"""What a front-door call says of itself in its headers (docs/front-doors.md#headers): the
``LLM-*`` headers and ``Idempotency-Key``. Checked here (a callback URL by webhooks/), the job's
own rules (feature slug, tags, deadline) applied by the job's validation when it is submitted."""

from dataclasses import dataclass
from typing import Any

from api.errors import ValidationFailed
from webhooks.validation import validate_callback_url

__all__ = [
    "DEFAULT_FEATURE",
    "PRIORITIES",
    "CallOptions",
    "call_options",
]

DEFAULT_FEATURE = "default"
"""The feature of a call without ``LLM-Feature``: budgets and costs are kept per feature."""
PRIORITIES = ("high", "normal", "low")
"""``LLM-Priority``: the job's ``priority`` (jobs/priorities.py); absent, the feature policy's."""
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


@dataclass(frozen=True)
class CallOptions:
    feature: str = DEFAULT_FEATURE
    tags: list[str] | None = None
    deadline_seconds: float | None = None
    priority: str | None = None
    keep_on_disconnect: bool = False
    idempotency_key: str | None = None
    callback_url: str | None = None
    """``LLM-Callback-URL``: each final state of the job is POSTed there, signed (webhooks/,
    which checks it)."""

    def job_fields(self) -> dict[str, Any]:
        """The fields of a job submit body these options give."""
        fields: dict[str, Any] = {"feature": self.feature}
        if self.tags:
            fields["tags"] = self.tags
        if self.deadline_seconds is not None:
            fields["deadline_seconds"] = self.deadline_seconds
        if self.priority is not None:
            fields["priority"] = self.priority
        return fields


def _invalid(header: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, code="invalid_header", detail={"field": header})


def _flag(headers: Any, name: str) -> bool:
    value = (headers.get(name) or "").strip().lower()
    if not value or value in _FALSE:
        return False
    if value in _TRUE:
        return True
    raise _invalid(name, f"{name} must be true or false.")


def call_options(headers: Any) -> CallOptions:
    """The options of a call from its request headers (any case-insensitive mapping)."""
    feature = (headers.get("LLM-Feature") or "").strip() or DEFAULT_FEATURE
    tags_header = (headers.get("LLM-Tags") or "").strip()
    tags = [tag.strip() for tag in tags_header.split(",") if tag.strip()] or None
    deadline: float | None = None
    deadline_header = (headers.get("LLM-Deadline-Seconds") or "").strip()
    if deadline_header:
        try:
            deadline = float(deadline_header)
        except ValueError:
            raise _invalid(
                "LLM-Deadline-Seconds", "LLM-Deadline-Seconds must be a number of seconds."
            ) from None
        if deadline.is_integer():
            deadline = int(deadline)
    priority = (headers.get("LLM-Priority") or "").strip().lower() or None
    if priority is not None and priority not in PRIORITIES:
        raise _invalid("LLM-Priority", "LLM-Priority must be high, normal or low.")
    return CallOptions(
        feature=feature,
        tags=tags,
        deadline_seconds=deadline,
        priority=priority,
        keep_on_disconnect=_flag(headers, "LLM-Keep-On-Disconnect"),
        idempotency_key=headers.get("Idempotency-Key") or None,
        callback_url=validate_callback_url(
            (headers.get("LLM-Callback-URL") or "").strip(), field="LLM-Callback-URL"
        )
        or None,
    )
