"""Validation of a submitted pipeline: every step by the rules of a job, all at once.

Each step is checked by the same functions as ``POST /api/v1/jobs/`` (jobs/validation.py and
jobs/admission.py), so a step is accepted exactly when the same body would be accepted as a job.
One bad step refuses the whole pipeline, naming every bad step, and nothing is written.
"""

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User

from api.errors import LimitExceeded, ValidationFailed
from jobs.admission import check_against_price_table, check_budgets_not_spent
from jobs.deadlines import DEADLINE_FIELDS, validate_deadline
from jobs.tags import validate_tags
from jobs.validation import validate_job_request
from pipelines.placeholders import uses_previous

__all__ = [
    "MARKER_KEY",
    "MAX_NAME_LENGTH",
    "PipelineRequest",
    "step_job_body",
    "validate_pipeline_request",
]

ALLOWED_FIELDS = {"name", "steps", "tags", *DEADLINE_FIELDS}
MAX_NAME_LENGTH = 200
MARKER_KEY = "llmops_pipeline"
"""The key of a step job's ``metadata`` that says which pipeline and step it runs
(``{"id": "<pipeline id>", "step": <index>}``); reserved, so a step may not send it."""


@dataclass(frozen=True)
class PipelineRequest:
    name: str
    steps: list[dict[str, Any]]
    deadline: datetime | None = None
    tags: list[str] = dataclass_field(default_factory=list)


def step_job_body(body: Any, *, deadline: datetime | None, tags: list[str]) -> Any:
    """A step's job body with the pipeline's deadline (for every step; a step's own deadline is
    refused then) and tags (the pipeline's first, then the step's own)."""
    if not isinstance(body, dict):
        return body
    merged = dict(body)
    if deadline is not None:
        merged["deadline"] = deadline.isoformat()
    if tags:
        merged["tags"] = [*tags, *(body.get("tags") or [])]
    return merged


def _step_problem(
    index: int, body: Any, *, deadline: datetime | None = None, tags: list[str] | None = None
) -> dict[str, Any] | None:
    """The refusal of one step, shaped as a batch's bad item is (jobs/bulk.py)."""
    try:
        if deadline is not None and isinstance(body, dict):
            own = [name for name in DEADLINE_FIELDS if body.get(name) is not None]
            if own:
                raise ValidationFailed(
                    "The pipeline has a deadline: a step may not give its own.",
                    code="invalid_deadline",
                    detail={"field": own[0]},
                )
        request = validate_job_request(step_job_body(body, deadline=deadline, tags=tags or []))
        check_against_price_table(model=request.model, max_tokens=request.max_tokens)
        if MARKER_KEY in (request.metadata or {}):
            raise ValidationFailed(
                f"metadata.{MARKER_KEY} is reserved: the pipeline sets it on the step's job.",
                code="invalid_metadata",
                detail={"field": f"metadata.{MARKER_KEY}"},
            )
        if index == 0 and uses_previous(body):
            raise ValidationFailed(
                "The first step has no previous step to fill {{previous}} with.",
                code="invalid_previous",
                detail={"field": "messages"},
            )
    except ValidationFailed as exc:
        field = exc.detail.get("field") if isinstance(exc.detail, dict) else None
        return {"index": index, "code": exc.code, "message": exc.message, "field": field}
    return None


def _check_budgets(steps: list[dict[str, Any]], user: User, api_key_id: int | None) -> None:
    """429 ``budget_exceeded`` as for a job if a budget of a step's feature or of the user is
    spent, with ``detail.indexes`` naming the steps of the refused feature."""
    features: dict[str, list[int]] = {}
    for index, body in enumerate(steps):
        features.setdefault(body["feature"], []).append(index)
    for feature, indexes in features.items():
        try:
            check_budgets_not_spent(feature=feature, user=user, api_key_id=api_key_id)
        except LimitExceeded as exc:
            raise LimitExceeded(
                exc.message,
                code=exc.code,
                detail={**(exc.detail or {}), "indexes": indexes},
                headers=exc.headers,
            ) from exc


def validate_pipeline_request(
    data: Any, *, user: User, api_key_id: int | None = None
) -> PipelineRequest:
    if not isinstance(data, dict):
        raise ValidationFailed("The body must be a JSON object.", code="invalid_body")
    unknown = sorted(set(data) - ALLOWED_FIELDS)
    if unknown:
        raise ValidationFailed(
            f"Unknown fields: {', '.join(unknown)}.",
            code="unknown_field",
            detail={"fields": unknown},
        )
    name = data.get("name")
    if name is None:
        name = ""
    if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH or not name.isprintable():
        raise ValidationFailed(
            f"name must be printable text of at most {MAX_NAME_LENGTH} characters.",
            code="invalid_name",
            detail={"field": "name"},
        )
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ValidationFailed(
            "steps must be a non-empty list of job bodies.",
            code="invalid_steps",
            detail={"field": "steps", "indexes": []},
        )
    maximum = settings.PIPELINE_MAX_STEPS
    if len(steps) > maximum:
        raise ValidationFailed(
            f"A pipeline has at most {maximum} steps; this one has {len(steps)}.",
            code="too_many_steps",
            detail={"field": "steps", "maximum": maximum},
        )
    deadline, _given = validate_deadline(data)
    tags = validate_tags(data.get("tags"))
    errors = [
        e
        for i, body in enumerate(steps)
        if (e := _step_problem(i, body, deadline=deadline, tags=tags)) is not None
    ]
    if errors:
        raise ValidationFailed(
            f"{len(errors)} of {len(steps)} steps are invalid; nothing was saved.",
            code="invalid_steps",
            detail={"indexes": [e["index"] for e in errors], "errors": errors},
        )
    _check_budgets(steps, user, api_key_id)
    return PipelineRequest(name=name.strip(), steps=steps, deadline=deadline, tags=tags)
