"""Validation of a submitted agent run: its own fields, then its first turn by the rules of a
job (jobs/validation.py, jobs/admission.py), so that a run is accepted exactly when its first
turn would be. Every refusal is a ``400`` with a stable code and the field; nothing is written.
"""

import hashlib
import json
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth.models import User

from agents.tools import registered_tool, unknown_tool_message
from api.errors import ValidationFailed
from jobs.admission import check_against_price_table, check_budgets_not_spent
from jobs.deadlines import DEADLINE_FIELDS, validate_deadline
from jobs.tags import validate_tags
from jobs.validation import validate_job_request, validate_priority
from webhooks.validation import validate_callback_url

__all__ = [
    "DEFAULT_MAX_TURNS",
    "MARKER_KEY",
    "MAX_TURNS",
    "AgentRunRequest",
    "validate_agent_run_request",
]

ALLOWED_FIELDS = {
    "feature",
    "model",
    "messages",
    "max_tokens",
    "tools",
    "system",
    "max_turns",
    "max_cost_usd",
    "metadata",
    "tags",
    "callback_url",
    "priority",
    *DEADLINE_FIELDS,
}
DEFAULT_MAX_TURNS = 10
MAX_TURNS = 50
MAX_USER_CACHE_BREAKPOINTS = 2
"""The API takes 4 ``cache_control`` blocks a request; each turn adds 2 of its own
(agents/transcript.py)."""
MARKER_KEY = "llmops_agent_run"
"""The key of a turn job's ``metadata`` naming its run (``{"id": "<run id>", "turn": n}``);
reserved, so a run may not send it."""


@dataclass(frozen=True)
class AgentRunRequest:
    feature: str
    model: str
    messages: list[dict[str, Any]]
    max_tokens: int
    system: Any
    tools: list[str]
    max_turns: int
    max_cost_usd: Decimal | None
    metadata: dict[str, Any]
    deadline: datetime | None = None
    deadline_given: str | None = None
    """As submitted (``seconds:<n>`` or the ISO time): what the fingerprint keeps."""
    tags: list[str] = dataclass_field(default_factory=list)
    callback_url: str = ""
    """Its final state is POSTed there (webhooks/); empty: none."""
    priority: str = ""
    """Each turn's job priority as asked; empty: the feature policy's (jobs/priorities.py)."""

    def fingerprint(self) -> str:
        fields = {**self.__dict__, "max_cost_usd": str(self.max_cost_usd)}
        del fields["deadline"]
        for later in ("deadline_given", "tags", "callback_url", "priority"):
            if not fields[later]:
                # Runs submitted before the field existed keep the fingerprint they were given.
                del fields[later]
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()


def _fail(code: str, message: str, field: str) -> ValidationFailed:
    return ValidationFailed(message, code=code, detail={"field": field})


def _tools(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise _fail("invalid_tools", "tools must be a list of registered tool names.", "tools")
    if len(set(value)) != len(value):
        raise _fail("invalid_tools", "tools names a tool twice.", "tools")
    for i, name in enumerate(value):
        if registered_tool(name) is None:
            message, known, near = unknown_tool_message(name)
            detail: dict[str, Any] = {"field": f"tools[{i}]", "tool": name, "tools": known}
            if near:
                detail["did_you_mean"] = near
            raise ValidationFailed(message, code="unknown_tool", detail=detail)
    return list(value)


def _max_turns(value: Any) -> int:
    if value is None:
        return DEFAULT_MAX_TURNS
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TURNS:
        raise _fail(
            "invalid_max_turns", f"max_turns must be an integer from 1 to {MAX_TURNS}.", "max_turns"
        )
    return value


def _max_cost(value: Any) -> Decimal | None:
    if value is None:
        return None
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise InvalidOperation
        cost = Decimal(str(value))
    except InvalidOperation:
        cost = Decimal(-1)
    if not cost.is_finite() or cost <= 0 or cost >= Decimal("1e10"):
        raise _fail(
            "invalid_max_cost_usd", "max_cost_usd must be a positive amount in USD.", "max_cost_usd"
        )
    return cost.quantize(Decimal("0.000001"))


def _count_breakpoints(value: Any) -> int:
    if isinstance(value, dict):
        own = 1 if "cache_control" in value else 0
        return own + sum(_count_breakpoints(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return sum(_count_breakpoints(v) for v in value)
    return 0


def validate_agent_run_request(
    data: Any, *, user: User, api_key_id: int | None = None
) -> AgentRunRequest:
    if not isinstance(data, dict):
        raise ValidationFailed("The body must be a JSON object.", code="invalid_body")
    unknown = sorted(set(data) - ALLOWED_FIELDS)
    if unknown:
        raise ValidationFailed(
            f"Unknown fields: {', '.join(unknown)}.",
            code="unknown_field",
            detail={"fields": unknown},
        )
    tools = _tools(data.get("tools"))
    max_turns = _max_turns(data.get("max_turns"))
    max_cost = _max_cost(data.get("max_cost_usd"))
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _fail("invalid_metadata", "metadata must be a JSON object.", "metadata")
    if MARKER_KEY in (metadata or {}):
        raise _fail(
            "invalid_metadata",
            f"metadata.{MARKER_KEY} is reserved: the run sets it on its turns' jobs.",
            f"metadata.{MARKER_KEY}",
        )
    # The first turn as a job: every rule of a job's fields applies.
    body = {
        key: data[key]
        for key in ("feature", "model", "messages", "max_tokens", "system")
        if key in data
    }
    request = validate_job_request(body)
    check_against_price_table(model=request.model, max_tokens=request.max_tokens)
    if _count_breakpoints([request.messages, request.system]) > MAX_USER_CACHE_BREAKPOINTS:
        raise _fail(
            "invalid_messages",
            f"At most {MAX_USER_CACHE_BREAKPOINTS} cache_control blocks: each turn adds two.",
            "messages",
        )
    check_budgets_not_spent(feature=request.feature, user=user, api_key_id=api_key_id)
    deadline, deadline_given = validate_deadline(data)
    tags = validate_tags(data.get("tags"))
    callback_url = validate_callback_url(data.get("callback_url"))
    priority = validate_priority(data.get("priority")) or ""
    return AgentRunRequest(
        priority=priority,
        feature=request.feature,
        model=request.model,
        messages=request.messages,
        max_tokens=request.max_tokens,
        system=request.system,
        tools=tools,
        max_turns=max_turns,
        max_cost_usd=max_cost,
        metadata=metadata or {},
        deadline=deadline,
        deadline_given=deadline_given,
        tags=tags,
        callback_url=callback_url,
    )
