"""System checks of the rate-limit settings (tag ``settings``, see llmops/checks.py)."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, register

from llmops.checks import SETTINGS, errors
from ratelimits.vocabulary import FEATURE_SLUG, LIMIT_FIELDS

__all__ = [
    "feature_weight_problems",
    "priority_feature_problems",
    "rate_limit_problems",
    "share_problems",
]


def rate_limit_problems(limits: Any, name: str = "LLM_RATE_LIMITS") -> list[str]:
    """{"<model id>" or "*": {"rpm": int, "input_tpm": int, "output_tpm": int}}, any subset of
    the three, each a positive integer; e.g. {"claude-sonnet-4-6": {"rpm": 4000}}."""
    if not isinstance(limits, dict):
        return [f"{name} must be a JSON object keyed by model id (or *)"]
    problems = []
    for model, fields in limits.items():
        if not isinstance(model, str) or not model.strip():
            problems.append(f"{name}: model keys must be non-empty strings")
        elif not isinstance(fields, dict) or not fields or set(fields) - set(LIMIT_FIELDS):
            problems.append(
                f"{name}[{model!r}] must be an object with some of {', '.join(LIMIT_FIELDS)}"
            )
        else:
            problems.extend(
                f"{name}[{model!r}][{field!r}] must be a positive integer, not {limit!r}"
                for field, limit in fields.items()
                if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
            )
    return problems


def feature_weight_problems(weights: Any, name: str = "LLM_FEATURE_WEIGHTS") -> list[str]:
    """{"<feature>": weight}: a number >= 0 per feature slug; features not named weigh 1."""
    if not isinstance(weights, dict):
        return [f"{name} must be a JSON object: {{feature: weight}}"]
    problems = []
    for feature, weight in weights.items():
        if not isinstance(feature, str) or not FEATURE_SLUG.fullmatch(feature):
            problems.append(f"{name}: {feature!r} is not a feature slug")
        elif isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
            problems.append(f"{name}[{feature!r}] must be a number >= 0")
    return problems


def priority_feature_problems(features: Any, name: str = "LLM_PRIORITY_FEATURES") -> list[str]:
    return [
        f"{name}: {feature!r} is not a feature slug"
        for feature in sorted(features)
        if not FEATURE_SLUG.fullmatch(feature)
    ]


def share_problems(share: float, name: str = "LLM_USER_MAX_SHARE") -> list[str]:
    if not 0 < share <= 1:
        return [f"{name} must be over 0 and at most 1, not {share}"]
    return []


@register(SETTINGS)
def check_rate_limit_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    return [
        *errors("ratelimits.E001", rate_limit_problems(settings.LLM_RATE_LIMITS)),
        *errors("ratelimits.E002", feature_weight_problems(settings.LLM_FEATURE_WEIGHTS)),
        *errors("ratelimits.E003", priority_feature_problems(settings.LLM_PRIORITY_FEATURES)),
        *errors("ratelimits.E004", share_problems(settings.LLM_USER_MAX_SHARE)),
    ]
