"""The shape of a batch body. Each item is validated as a job (jobs/bulk.py), by the job rules."""

import hashlib
import json
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime
from typing import Any

from django.conf import settings

from api.errors import ValidationFailed
from jobs.deadlines import DEADLINE_FIELDS, validate_deadline
from jobs.tags import validate_tags
from jobs.validation import JobRequest, validate_priority
from webhooks.validation import MAX_CALLBACK_URL_LENGTH, validate_callback_url

__all__ = [
    "BATCH_FIELDS",
    "ITEM_FIELDS",
    "MARKER_KEY",
    "MAX_CALLBACK_URL_LENGTH",
    "MAX_NAME_LENGTH",
    "BatchRequest",
    "batch_request_fingerprint",
    "check_item_metadata",
    "validate_batch_request",
    "validate_embedding_items",
]

BATCH_FIELDS = frozenset(
    {
        "name",
        "kind",
        "feature",
        "model",
        "items",
        "allow_failures",
        "callback_url",
        "dimensions",
        "mode",
        "priority",
        "tags",
        *DEADLINE_FIELDS,
    }
)
KINDS = ("chat", "embedding")
EMBEDDING_ITEM_FIELDS = frozenset({"input", "metadata"})
"""What an item of an embedding batch carries: one text, and its own metadata."""
ITEM_FIELDS = frozenset({"messages", "max_tokens", "system", "temperature", "metadata"})
"""What an item may carry; ``feature`` and ``model`` are the batch's, for every item."""
MARKER_KEY = "llmops_batch"
"""The key the batch adds to its jobs' metadata: lets the transition subscriber skip every job
that is in no batch without a query (batches/counters.py). Reserved in an item's metadata."""
MAX_NAME_LENGTH = 200


@dataclass(frozen=True)
class BatchRequest:
    name: str
    feature: Any
    model: Any
    items: list[Any]
    allow_failures: bool
    callback_url: str
    kind: str = "chat"
    dimensions: int | None = None
    deadline: datetime | None = None
    tags: list[str] = dataclass_field(default_factory=list)
    mode: Any = None
    """realtime or deferred for every job (None: the feature policy's)."""
    priority: Any = None
    """high, normal or low for every job (None: the feature policy's)."""

    def shared(self) -> dict[str, Any]:
        """The job fields every item takes from the batch: one deadline for all of them (a
        ``deadline_seconds`` counts from the batch's submit), its tags and its mode."""
        shared = {"feature": self.feature, "model": self.model}
        if self.deadline is not None:
            shared["deadline"] = self.deadline.isoformat()
        if self.tags:
            shared["tags"] = self.tags
        if self.mode is not None:
            shared["mode"] = self.mode
        if self.priority is not None:
            shared["priority"] = self.priority
        return shared


def _fail(code: str, message: str, field: str, **detail: Any) -> ValidationFailed:
    return ValidationFailed(message, code=code, detail={"field": field, **detail})


def validate_batch_request(data: Any) -> BatchRequest:
    """Check the batch's own fields; ``feature``, ``model`` and the items are checked as jobs."""
    if not isinstance(data, dict):
        raise ValidationFailed("The body must be a JSON object.", code="invalid_body")
    unknown = sorted(set(data) - BATCH_FIELDS)
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
        raise _fail(
            "invalid_name",
            f"name must be printable text of at most {MAX_NAME_LENGTH} characters.",
            "name",
        )

    allow_failures = data.get("allow_failures", True)
    if not isinstance(allow_failures, bool):
        raise _fail(
            "invalid_allow_failures", "allow_failures must be true or false.", "allow_failures"
        )

    callback_url = validate_callback_url(data.get("callback_url"))

    kind = data.get("kind", "chat")
    if kind not in KINDS:
        raise _fail("invalid_kind", "kind must be 'chat' (the default) or 'embedding'.", "kind")
    dimensions = data.get("dimensions")
    if dimensions is not None and kind != "embedding":
        raise _fail("unknown_field", "dimensions is for a batch of kind embedding.", "dimensions")
    if kind == "embedding":
        from embeddings.validation import validate_dimensions

        dimensions = validate_dimensions(dimensions)

    deadline, _given = validate_deadline(data)
    tags = validate_tags(data.get("tags"))

    items = data.get("items")
    if not isinstance(items, list) or not items:
        raise _fail(
            "invalid_items", "items must be a non-empty list of job bodies.", "items", indexes=[]
        )
    maximum = settings.LLM_BATCH_MAX_ITEMS
    if len(items) > maximum:
        raise _fail(
            "too_many_items",
            f"A batch holds at most {maximum} items; this one has {len(items)}.",
            "items",
            maximum=maximum,
        )
    return BatchRequest(
        mode=data.get("mode"),
        priority=validate_priority(data.get("priority")),
        name=name.strip(),
        feature=data.get("feature"),
        model=data.get("model"),
        items=items,
        allow_failures=allow_failures,
        callback_url=callback_url,
        kind=kind,
        dimensions=dimensions,
        deadline=deadline,
        tags=tags,
    )


def validate_embedding_items(items: list[Any]) -> list[tuple[str, dict[str, Any] | None]]:
    """Each item of an embedding batch: ``{"input": "text", "metadata": {...}}``. Refuses all
    with one ``400 invalid_items`` naming every bad index, as for chat items."""
    out: list[tuple[str, dict[str, Any] | None]] = []
    bad: list[int] = []
    errors: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        problem: tuple[str, str, str | None] | None = None
        if not isinstance(item, dict):
            problem = ("invalid_body", "An item must be a JSON object.", None)
        elif set(item) - EMBEDDING_ITEM_FIELDS:
            unknown = ", ".join(sorted(set(item) - EMBEDDING_ITEM_FIELDS))
            problem = ("unknown_field", f"Unknown item fields: {unknown}.", None)
        elif not isinstance(item.get("input"), str) or not item["input"].strip():
            problem = ("invalid_input", "input must be a non-empty string.", "input")
        elif item.get("metadata") is not None and not isinstance(item["metadata"], dict):
            problem = ("invalid_metadata", "metadata must be a JSON object.", "metadata")
        if problem is not None:
            bad.append(index)
            if len(errors) < 100:
                code, message, field = problem
                errors.append({"index": index, "code": code, "message": message, "field": field})
            continue
        out.append((item["input"], item.get("metadata")))
    if bad:
        raise ValidationFailed(
            f"{len(bad)} of {len(items)} items are invalid; nothing was saved.",
            code="invalid_items",
            detail={"indexes": bad, "errors": errors, "errors_truncated": len(bad) > len(errors)},
        )
    return out


def check_item_metadata(request: JobRequest) -> None:
    """An item may not set the batch's own metadata key."""
    if MARKER_KEY in (request.metadata or {}):
        raise _fail(
            "invalid_metadata",
            f"metadata.{MARKER_KEY} is reserved: the batch sets it on its jobs.",
            f"metadata.{MARKER_KEY}",
        )


def batch_request_fingerprint(data: Any) -> str:
    """The whole body, canonically: a repeated Idempotency-Key must come with the same body."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
