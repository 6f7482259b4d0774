"""Writes of the feature policies: one service, used by the API, the admin and scripts."""

import logging
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils.text import slugify

from api.errors import ValidationFailed
from features.models import FeaturePolicy
from jobs.pauses import FEATURE_PAUSED
from jobs.services import jobs_unpark
from ledger.selectors import price_for_model, unknown_model_error

__all__ = [
    "MAX_FALLBACK_MODELS",
    "feature_policy_update",
    "validate_fallback_models",
    "validate_paused",
]

logger = logging.getLogger(__name__)

MAX_FALLBACK_MODELS = 5
"""Each fallback is tried after its predecessor gave up: five deep is already a long detour."""


def validate_feature(feature: Any) -> str:
    if not isinstance(feature, str) or not feature or slugify(feature) != feature:
        raise ValidationFailed(
            "A feature is a slug: lowercase letters, digits, '-' and '_'.",
            code="invalid_feature",
            detail={"field": "feature"},
        )
    if len(feature) > 64:
        raise ValidationFailed(
            "A feature is at most 64 characters.",
            code="invalid_feature",
            detail={"field": "feature"},
        )
    return feature


def validate_fallback_models(value: Any) -> list[str]:
    """A list of distinct priced models, at most ``MAX_FALLBACK_MODELS``; a typo is refused
    with the nearest priced name (``unknown_model``)."""
    if not isinstance(value, list) or not all(isinstance(m, str) and m for m in value):
        raise ValidationFailed(
            "fallback_models must be a list of model names.",
            code="invalid_fallback_models",
            detail={"field": "fallback_models"},
        )
    if len(value) > MAX_FALLBACK_MODELS:
        raise ValidationFailed(
            f"fallback_models lists at most {MAX_FALLBACK_MODELS} models.",
            code="invalid_fallback_models",
            detail={"field": "fallback_models", "maximum": MAX_FALLBACK_MODELS},
        )
    if len(set(value)) != len(value):
        raise ValidationFailed(
            "fallback_models lists a model twice.",
            code="invalid_fallback_models",
            detail={"field": "fallback_models"},
        )
    for model in value:
        if price_for_model(model=model) is None:
            error = unknown_model_error(model)
            error.detail = {**(error.detail or {}), "field": "fallback_models"}
            raise error
    return list(value)


def validate_policy_deadline(seconds: Any) -> int | None:
    """None (no default deadline) or whole seconds up to a month (jobs/deadlines.py)."""
    from jobs.deadlines import MAX_DEADLINE_SECONDS

    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise ValidationFailed(
            "deadline_seconds must be a whole number of seconds, or null.",
            code="invalid_deadline",
            detail={"field": "deadline_seconds"},
        )
    if not 0 < seconds <= MAX_DEADLINE_SECONDS:
        raise ValidationFailed(
            f"deadline_seconds must be between 1 and {MAX_DEADLINE_SECONDS} (a month).",
            code="invalid_deadline",
            detail={"field": "deadline_seconds", "maximum": MAX_DEADLINE_SECONDS},
        )
    return seconds


UNCHANGED: Any = object()
"""``deadline_seconds`` or ``default_priority`` left as it is (None removes the default)."""


def validate_policy_mode(mode: Any) -> str:
    if mode not in ("realtime", "deferred"):
        raise ValidationFailed(
            "mode must be 'realtime' or 'deferred'.", code="invalid_mode", detail={"field": "mode"}
        )
    return str(mode)


def validate_default_priority(priority: Any) -> str:
    """high, normal or low; null or '' removes the default."""
    if priority in (None, ""):
        return ""
    if priority not in ("high", "normal", "low"):
        raise ValidationFailed(
            "default_priority must be 'high', 'normal' or 'low' (null removes it).",
            code="invalid_priority",
            detail={"field": "default_priority"},
        )
    return str(priority)


@transaction.atomic
def feature_policy_update(
    *,
    feature: str,
    fallback_models: list[str] | None = None,
    mode: str | None = None,
    deadline_seconds: Any = UNCHANGED,
    paused: bool | None = None,
    default_priority: Any = UNCHANGED,
    by: User | None = None,
) -> FeaturePolicy:
    """Create a feature's policy or change the settings given (None: left as it is). Jobs
    already waiting follow the fallbacks from their next move on; a job's own model always
    comes first. ``mode`` and ``default_priority`` are the defaults of jobs submitted from now
    on."""
    feature = validate_feature(feature)
    models = None if fallback_models is None else validate_fallback_models(fallback_models)
    mode = None if mode is None else validate_policy_mode(mode)
    if deadline_seconds is not UNCHANGED:
        deadline_seconds = validate_policy_deadline(deadline_seconds)
    if default_priority is not UNCHANGED:
        default_priority = validate_default_priority(default_priority)
    try:
        with transaction.atomic():
            policy, _ = FeaturePolicy.objects.get_or_create(feature=feature)
    except IntegrityError:  # a concurrent first PUT of the same feature inserted it
        policy = FeaturePolicy.objects.get(feature=feature)
    policy = FeaturePolicy.objects.select_for_update().get(id=policy.id)
    if models is not None:
        policy.fallback_models = models
    if mode is not None:
        policy.mode = mode
    if deadline_seconds is not UNCHANGED:
        policy.deadline_seconds = deadline_seconds
    if default_priority is not UNCHANGED:
        policy.default_priority = default_priority
    resumed = paused is False and policy.paused
    if paused is not None:
        if paused and not policy.paused:
            logger.warning("feature %s paused by %s: its jobs wait", feature, by or "a command")
        policy.paused = paused
    policy.updated_by = by
    policy.save()
    if resumed:
        logger.warning("feature %s resumed by %s", feature, by or "a command")
        # After the commit (and after the configuration's new token: every worker sees it
        # resumed), its parked jobs go back on the queue in submit order.
        transaction.on_commit(
            lambda: jobs_unpark(reason=FEATURE_PAUSED, features={feature}), robust=True
        )
    return policy


def validate_paused(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValidationFailed(
            "paused must be true or false.", code="invalid_paused", detail={"field": "paused"}
        )
    return value
