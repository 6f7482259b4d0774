"""Reads of the feature policies."""

from django.db.models import QuerySet

from features.models import FeaturePolicy
from jobs.models import LlmJob
from jobs.pauses import FEATURE_PAUSED

__all__ = [
    "fallback_models_for",
    "feature_defaults",
    "feature_policies",
    "feature_policy_for",
    "parked_count",
]


def feature_policy_for(*, feature: str) -> FeaturePolicy | None:
    return FeaturePolicy.objects.filter(feature=feature).first()


def feature_policies() -> QuerySet[FeaturePolicy]:
    return FeaturePolicy.objects.select_related("updated_by").order_by("feature")


def fallback_models_for(*, feature: str) -> list[str]:
    """The feature's fallback models in order (none without a policy)."""
    models = (
        FeaturePolicy.objects.filter(feature=feature)
        .values_list("fallback_models", flat=True)
        .first()
    )
    return list(models or [])


def feature_defaults(*, feature: str) -> tuple[str, int | None, str]:
    """The feature's default mode (``realtime`` without a policy), deadline in seconds and
    priority ('' if none: jobs/admission.py decides). From this process's copy of the
    policies when it is current (ledger/config_cache.py): no query at each submit."""
    from ledger.config_cache import config_snapshot

    snapshot = config_snapshot()
    if snapshot is not None:
        return snapshot.feature_defaults.get(feature, ("realtime", None, ""))
    row = (
        FeaturePolicy.objects.filter(feature=feature)
        .values_list("mode", "deadline_seconds", "default_priority")
        .first()
    )
    return (row[0], row[1], row[2]) if row else ("realtime", None, "")


def parked_count(*, feature: str) -> int:
    """The feature's jobs parked while it is paused (jobs/pauses.py)."""
    return LlmJob.objects.filter(
        feature=feature, held_reason=FEATURE_PAUSED, status__in=LlmJob.WAITING_STATUSES
    ).count()
