"""Validation of a submitted job, with one stable error code per kind of mistake."""

import hashlib
import json
import math
import re
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import Any

from api.errors import ValidationFailed
from jobs.deadlines import DEADLINE_FIELDS, validate_deadline
from jobs.priorities import PRIORITIES
from jobs.request_params import PARAM_FIELDS, validate_params
from jobs.tags import validate_tags

__all__ = [
    "JobRequest",
    "validate_feature_and_model",
    "validate_job_request",
    "validate_mode",
    "validate_priority",
]

ALLOWED_FIELDS = {
    "feature",
    "model",
    "messages",
    "max_tokens",
    "system",
    "temperature",
    "metadata",
    "concurrency_key",
    "mode",
    "priority",
    "tags",
    *DEADLINE_FIELDS,
    *PARAM_FIELDS,
}
MODES = ("realtime", "deferred")
MAX_CONCURRENCY_KEY_LENGTH = 200
FEATURE_RE = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")
MAX_FEATURE_LENGTH = 64
ROLES = {"user", "assistant"}
BLOCK_TYPES = {"text", "image", "document", "tool_use", "tool_result", "thinking"}
TOOL_RESULT_BLOCK_TYPES = {"text", "image", "document"}
DOCUMENT_CONTENT_BLOCK_TYPES = {"text", "image"}
IMAGE_MEDIA_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}
"""The image formats the Messages API accepts."""


@dataclass(frozen=True)
class JobRequest:
    feature: str
    model: str
    messages: list[dict[str, Any]]
    max_tokens: int
    system: Any = None
    temperature: float | None = None
    metadata: dict[str, Any] | None = None
    concurrency_key: str | None = None
    params: dict[str, Any] | None = None
    """tools, tool_choice, stop_sequences, top_p, top_k, thinking: those given
    (jobs/request_params.py); for an embedding job, ``dimensions`` when asked."""
    kind: str = "chat"
    """chat, or embedding (embeddings/validation.py builds those, with ``input``)."""
    input: list[str] | None = None
    """An embedding job's texts, in order."""
    mode: str | None = None
    """realtime or deferred as asked; None: the feature policy's (jobs/admission.py)."""
    deadline: datetime | None = None
    """Not started by then, the job fails (jobs/deadlines.py)."""
    deadline_given: str | None = None
    """The deadline as submitted (``seconds:<n>`` or the ISO time): what the fingerprint keeps."""
    tags: list[str] | None = None
    priority: str | None = None
    """high, normal or low as asked; None: the feature policy's (jobs/admission.py)."""

    def fingerprint(self) -> str:
        # The fields as they are: json.dumps walks them without the deep copy asdict makes
        # (a fifth of the time, for a batch's thousands), into the same canonical text.
        fields = {field.name: getattr(self, field.name) for field in dataclass_fields(self)}
        if fields["kind"] == "chat":
            del fields["kind"]
        del fields["deadline"]  # as given, in deadline_given
        for later in (
            "concurrency_key",
            "params",
            "input",
            "deadline_given",
            "tags",
            "mode",
            "priority",
        ):
            if not fields[later]:
                # Jobs submitted before the field existed keep the fingerprint they were given.
                del fields[later]
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


REQUIRED_CODES = {
    "feature": "invalid_feature",
    "model": "unknown_model",
    "messages": "invalid_messages",
    "max_tokens": "invalid_max_tokens",
}
REQUIRED_HINTS = {
    "feature": "a slug naming what the job is for, e.g. 'summarize': budgets, limits and costs "
    "are kept per feature",
    "model": "a priced model, e.g. 'claude-sonnet-4-6'",
    "messages": "a non-empty list of {'role': 'user', 'content': ...}",
    "max_tokens": "a positive integer",
}


def _fail(code: str, message: str, field: str) -> ValidationFailed:
    return ValidationFailed(message, code=code, detail={"field": field})


def _check_inline(source: dict[str, Any], *, where: str, media_types: set[str]) -> None:
    # An object or a list is no media type (and unhashable: no set lookup for it).
    if not isinstance(source.get("media_type"), str) or source["media_type"] not in media_types:
        allowed = ", ".join(sorted(media_types))
        raise _fail("invalid_messages", f"{where}.media_type must be one of {allowed}.", where)
    if not isinstance(source.get("data"), str) or not source["data"]:
        raise _fail("invalid_messages", f"{where}.data must be a non-empty string.", where)


def _unpriceable(where: str, kind: Any) -> ValidationFailed:
    # The provider fetches a URL or a Files API id itself: the bytes it will bill for are not in
    # the job, so no upper bound on the attempt's cost (ledger/pricing.py) could be set.
    return _fail(
        "invalid_messages",
        f"{where}: a source of type {kind!r} cannot be priced before the call; send the "
        "content inline (base64 for images and PDFs, text or content for documents).",
        where,
    )


def _check_image(block: dict[str, Any], *, where: str) -> None:
    source = block.get("source")
    at = f"{where}.source"
    if not isinstance(source, dict):
        raise _fail("invalid_messages", f"{at} must be an object.", at)
    if source.get("type") != "base64":
        raise _unpriceable(at, source.get("type"))
    _check_inline(source, where=at, media_types=IMAGE_MEDIA_TYPES)


def _check_document(block: dict[str, Any], *, where: str) -> None:
    source = block.get("source")
    at = f"{where}.source"
    if not isinstance(source, dict):
        raise _fail("invalid_messages", f"{at} must be an object.", at)
    kind = source.get("type")
    if kind == "base64":
        _check_inline(source, where=at, media_types={"application/pdf"})
    elif kind == "text":
        _check_inline(source, where=at, media_types={"text/plain"})
    elif kind == "content":
        content = source.get("content")
        if isinstance(content, list):
            _check_blocks(
                content,
                field=f"{at}.content",
                code="invalid_messages",
                types=DOCUMENT_CONTENT_BLOCK_TYPES,
            )
        elif not isinstance(content, str) or not content.strip():
            raise _fail(
                "invalid_messages",
                f"{at}.content must be a non-empty string or a list of blocks.",
                f"{at}.content",
            )
    else:
        raise _unpriceable(at, kind)


def _check_tool_result(block: dict[str, Any], *, where: str) -> None:
    content = block.get("content")
    if isinstance(content, list) and content:
        _check_blocks(
            content,
            field=f"{where}.content",
            code="invalid_messages",
            types=TOOL_RESULT_BLOCK_TYPES,
        )
    elif content is not None and not isinstance(content, str):
        raise _fail(
            "invalid_messages",
            f"{where}.content must be a string or a list of blocks.",
            f"{where}.content",
        )


def _check_blocks(value: list[Any], *, field: str, code: str, types: set[str]) -> None:
    if not value:
        raise _fail(code, f"{field} must not be an empty list of blocks.", field)
    for i, block in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _fail(code, f"{where} must be an object with a 'type'.", where)
        kind = block["type"]
        if kind not in types:
            raise _fail(code, f"{where} has unknown type {kind!r}.", where)
        if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"].strip()):
            raise _fail(code, f"{where} must carry a non-empty 'text'.", where)
        if kind == "image":
            _check_image(block, where=where)
        elif kind == "document":
            _check_document(block, where=where)
        elif kind == "tool_result":
            _check_tool_result(block, where=where)


def _validate_messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise _fail("invalid_messages", "messages must be a non-empty list.", "messages")
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _fail("invalid_messages", f"{where} must be an object.", where)
        if set(message) - {"role", "content"}:
            raise _fail(
                "invalid_messages", f"{where} has fields other than role and content.", where
            )
        if not isinstance(message.get("role"), str) or message["role"] not in ROLES:
            raise _fail("invalid_messages", f"{where}.role must be 'user' or 'assistant'.", where)
        content = message.get("content")
        if isinstance(content, str):
            if not content.strip():
                raise _fail("invalid_messages", f"{where}.content must not be empty.", where)
        elif isinstance(content, list):
            _check_blocks(
                content, field=f"{where}.content", code="invalid_messages", types=BLOCK_TYPES
            )
        else:
            raise _fail(
                "invalid_messages", f"{where}.content must be a string or a list of blocks.", where
            )
    if value[0]["role"] != "user":
        raise _fail("invalid_messages", "The first message must have role 'user'.", "messages[0]")
    return value


def validate_feature_and_model(data: dict[str, Any]) -> tuple[str, str]:
    """The ``feature`` (a slug) and ``model`` (a name; its price is checked by the service) of a
    body: a job's, an embeddings request's or a batch's."""
    feature = data.get("feature")
    if (
        not isinstance(feature, str)
        or len(feature) > MAX_FEATURE_LENGTH
        or not FEATURE_RE.fullmatch(feature)
    ):
        raise _fail(
            "invalid_feature",
            "feature must be a lowercase slug (letters, digits, '-', '_'), at most 64 characters.",
            "feature",
        )
    model = data.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 100:
        raise _fail("unknown_model", "model must name a priced model.", "model")
    return feature, model


def validate_mode(mode: Any) -> str | None:
    """``realtime``, ``deferred`` (a provider message batch, at the batch price) or None."""
    if mode is None or mode in MODES:
        return mode
    raise _fail("invalid_mode", "mode must be 'realtime' or 'deferred'.", "mode")


def validate_priority(priority: Any, *, field: str = "priority") -> str | None:
    """``high``, ``normal``, ``low`` or None (the feature policy's default)."""
    if priority is None or priority in PRIORITIES:
        return priority
    raise _fail("invalid_priority", f"{field} must be 'high', 'normal' or 'low'.", field)


def validate_job_request(data: Any) -> JobRequest:
    """Check the shape of a submit body. Model existence and limits are checked by the service,
    which knows the price table."""
    if not isinstance(data, dict):
        raise ValidationFailed("The body must be a JSON object.", code="invalid_body")
    unknown = sorted(set(data) - ALLOWED_FIELDS)
    if unknown:
        raise ValidationFailed(
            f"Unknown fields: {', '.join(unknown)}.",
            code="unknown_field",
            detail={"fields": unknown},
        )

    for required in ("feature", "model", "messages", "max_tokens"):
        if data.get(required) is None:
            raise _fail(
                REQUIRED_CODES[required],
                f"{required} is required ({REQUIRED_HINTS[required]}).",
                required,
            )

    feature, model = validate_feature_and_model(data)

    messages = _validate_messages(data.get("messages"))

    max_tokens = data.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise _fail("invalid_max_tokens", "max_tokens must be a positive integer.", "max_tokens")

    system = data.get("system")
    if system is not None:
        if isinstance(system, str):
            if not system.strip():
                system = None
        elif isinstance(system, list):
            _check_blocks(system, field="system", code="invalid_system", types={"text"})
        else:
            raise _fail(
                "invalid_system", "system must be a string or a list of text blocks.", "system"
            )

    temperature = data.get("temperature")
    if temperature is not None:
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not math.isfinite(temperature)
            or not 0 <= temperature <= 1
        ):
            raise _fail(
                "invalid_temperature", "temperature must be between 0 and 1.", "temperature"
            )
        temperature = float(temperature)

    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _fail("invalid_metadata", "metadata must be a JSON object.", "metadata")

    concurrency_key = data.get("concurrency_key")
    if concurrency_key is not None:
        if (
            not isinstance(concurrency_key, str)
            or not concurrency_key.strip()
            or len(concurrency_key) > MAX_CONCURRENCY_KEY_LENGTH
            or not concurrency_key.isprintable()
        ):
            raise _fail(
                "invalid_concurrency_key",
                f"concurrency_key must be a non-empty printable string of at most "
                f"{MAX_CONCURRENCY_KEY_LENGTH} characters.",
                "concurrency_key",
            )

    mode = validate_mode(data.get("mode"))
    params = validate_params(data, max_tokens=max_tokens, temperature=temperature)
    deadline, deadline_given = validate_deadline(data)
    tags = validate_tags(data.get("tags"))
    return JobRequest(
        mode=mode,
        priority=validate_priority(data.get("priority")),
        feature=feature,
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        system=system,
        temperature=temperature,
        metadata=metadata,
        concurrency_key=concurrency_key,
        params=params or None,
        deadline=deadline,
        deadline_given=deadline_given,
        tags=tags or None,
    )
