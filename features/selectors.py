"""Reads of the feature policies."""

from django.db.models import QuerySet

from features.models import FeaturePolicy

__all__ = ["fallback_models_for", "feature_defaults", "feature_policies", "feature_policy_for"]


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


def feature_defaults(*, feature: str) -> tuple[str, int | None]:
    """The feature's default mode (``realtime`` without a policy) and deadline in seconds."""
    row = (
        FeaturePolicy.objects.filter(feature=feature)
        .values_list("mode", "deadline_seconds")
        .first()
    )
    return (row[0], row[1]) if row else ("realtime", None)
