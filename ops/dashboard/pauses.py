"""The dashboard's pause panel (issue 43, 1): each paused feature and provider, how many jobs
wait on it (parked: queued or retrying with its ``held_reason``, jobs/pauses.py), and where to
resume it."""

from collections import Counter

from django.db.models import Count
from django.urls import reverse

from features.models import FeaturePolicy
from jobs.models import LlmJob
from jobs.pauses import FEATURE_PAUSED, PROVIDER_PAUSED
from providers.models import Provider
from providers.selectors import provider_name_for_model

__all__ = ["pauses"]


def _parked(reason: str, by: str) -> dict[str, int]:
    rows = (
        LlmJob.objects.filter(status__in=LlmJob.WAITING_STATUSES, held_reason=reason)
        .values_list(by)
        .annotate(count=Count("id"))
        .values_list(by, "count")
    )
    return dict(rows)


def pauses() -> dict:
    features = list(
        FeaturePolicy.objects.filter(paused=True).order_by("feature").values_list("id", "feature")
    )
    providers = list(
        Provider.objects.filter(paused=True).order_by("name").values_list("id", "name")
    )
    by_feature = _parked(FEATURE_PAUSED, "feature") if features else {}
    by_provider: Counter[str] = Counter()
    if providers:
        for model, count in _parked(PROVIDER_PAUSED, "current_model").items():
            by_provider[provider_name_for_model(model=model)] += count
    return {
        "features": [
            {
                "name": feature,
                "waiting": by_feature.get(feature, 0),
                "url": reverse("admin:features_featurepolicy_change", args=[policy_id]),
            }
            for policy_id, feature in features
        ],
        "providers": [
            {
                "name": name,
                "waiting": by_provider.get(name, 0),
                "url": reverse("admin:providers_provider_change", args=[provider_id]),
            }
            for provider_id, name in providers
        ],
    }
