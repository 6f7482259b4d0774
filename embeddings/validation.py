"""The shape of an embeddings request (``POST /api/v1/embeddings/``), with one stable error code
per kind of mistake, as for jobs (jobs/validation.py, whose feature and metadata rules apply)."""

from typing import Any

from api.errors import ValidationFailed
from jobs.validation import JobRequest, validate_feature_and_model

__all__ = ["ALLOWED_FIELDS", "MAX_DIMENSIONS", "MAX_INPUTS", "validate_embedding_request"]

ALLOWED_FIELDS = frozenset({"feature", "model", "input", "dimensions", "metadata"})
MAX_INPUTS = 2048
"""The most texts one request embeds (the Embeddings API's own limit)."""
MAX_DIMENSIONS = 16_384


def _fail(code: str, message: str, field: str, **detail: Any) -> ValidationFailed:
    return ValidationFailed(message, code=code, detail={"field": field, **detail})


def validate_input(value: Any, *, field: str = "input") -> list[str]:
    """A list of 1 to ``MAX_INPUTS`` non-empty strings (a single string is a list of one)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise _fail(
            "invalid_input", f"{field} must be a non-empty list of strings (the texts).", field
        )
    if len(value) > MAX_INPUTS:
        raise _fail(
            "too_many_inputs",
            f"{field} has {len(value)} texts; at most {MAX_INPUTS} per request (a batch of "
            f"kind embedding takes more).",
            field,
            maximum=MAX_INPUTS,
        )
    for index, text in enumerate(value):
        if not isinstance(text, str) or not text.strip():
            raise _fail(
                "invalid_input",
                f"{field}[{index}] must be a non-empty string.",
                field,
                index=index,
            )
    return value


def validate_dimensions(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIMENSIONS:
        raise _fail(
            "invalid_dimensions",
            f"dimensions must be an integer between 1 and {MAX_DIMENSIONS}.",
            "dimensions",
        )
    return value


def validate_embedding_request(data: Any) -> JobRequest:
    """Check the shape of an embeddings body; the model's price and kind are checked by the
    service (jobs/admission.py)."""
    if not isinstance(data, dict):
        raise ValidationFailed("The body must be a JSON object.", code="invalid_body")
    unknown = sorted(set(data) - ALLOWED_FIELDS)
    if unknown:
        raise ValidationFailed(
            f"Unknown fields: {', '.join(unknown)}.",
            code="unknown_field",
            detail={"fields": unknown},
        )
    feature, model = validate_feature_and_model(data)
    texts = validate_input(data.get("input"))
    dimensions = validate_dimensions(data.get("dimensions"))
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _fail("invalid_metadata", "metadata must be a JSON object.", "metadata")
    return JobRequest(
        feature=feature,
        model=model,
        messages=[],
        max_tokens=0,
        metadata=metadata,
        params={"dimensions": dimensions} if dimensions is not None else None,
        kind="embedding",
        input=texts,
    )
