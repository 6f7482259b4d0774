"""Reading the rate-limit settings from the environment (pure: no Django models, no Redis).

``llmops/settings.py`` calls these at start-up, so a bad value raises ``ImproperlyConfigured``
there instead of being ignored at the first job.
"""

import json
import os
import re
from typing import Any

from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "LIMIT_FIELDS",
    "WILDCARD",
    "feature_weights_from_env",
    "priority_features_from_env",
    "rate_limits_from_env",
    "share_from_env",
]

LIMIT_FIELDS = ("rpm", "input_tpm", "output_tpm")
"""Requests, input tokens and output tokens per minute: the provider's three limits."""
WILDCARD = "*"
"""A model key that applies to every model without a key of its own."""
_SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")


def _json(name: str, default: Any) -> Any:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be JSON: {exc}") from exc


def rate_limits_from_env(name: str) -> dict[str, dict[str, int]]:
    """{"<model id>" or "*": {"rpm": int, "input_tpm": int, "output_tpm": int}}, any subset of
    the three, each a positive integer; e.g. {"claude-sonnet-4-6": {"rpm": 4000}}."""
    value = _json(name, {})
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object keyed by model id (or *)")
    limits: dict[str, dict[str, int]] = {}
    for model, fields in value.items():
        if not isinstance(model, str) or not model.strip():
            raise ImproperlyConfigured(f"{name}: model keys must be non-empty strings")
        if not isinstance(fields, dict) or not fields or set(fields) - set(LIMIT_FIELDS):
            raise ImproperlyConfigured(
                f"{name}[{model!r}] must be an object with some of {', '.join(LIMIT_FIELDS)}"
            )
        for field, limit in fields.items():
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ImproperlyConfigured(
                    f"{name}[{model!r}][{field!r}] must be a positive integer, not {limit!r}"
                )
        limits[model.strip()] = dict(fields)
    return limits


def feature_weights_from_env(name: str) -> dict[str, float]:
    """{"<feature>": weight}: a number >= 0 per feature slug; features not named weigh 1."""
    value = _json(name, {})
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object: {{feature: weight}}")
    weights: dict[str, float] = {}
    for feature, weight in value.items():
        if not isinstance(feature, str) or not _SLUG.fullmatch(feature):
            raise ImproperlyConfigured(f"{name}: {feature!r} is not a feature slug")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
            raise ImproperlyConfigured(f"{name}[{feature!r}] must be a number >= 0")
        weights[feature] = float(weight)
    return weights


def priority_features_from_env(name: str) -> frozenset[str]:
    """A comma-separated list of feature slugs."""
    features = {f.strip() for f in os.environ.get(name, "").split(",") if f.strip()}
    for feature in features:
        if not _SLUG.fullmatch(feature):
            raise ImproperlyConfigured(f"{name}: {feature!r} is not a feature slug")
    return frozenset(features)


def share_from_env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from exc
    if not 0 < value <= 1:
        raise ImproperlyConfigured(f"{name} must be over 0 and at most 1, not {value}")
    return value
