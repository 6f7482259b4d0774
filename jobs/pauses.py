"""Paused features and providers (issue 43): their jobs are accepted and wait.

A waiting job whose feature or provider is paused is parked when a worker picks it up
(``job_park``, before the breaker, the limiter, the budget and the claim: nothing is sent and no
budget is reserved): it stays ``queued`` or ``retrying`` with a ``held_reason`` and no RQ job, so
nothing polls for it and the reconciler leaves it. Resuming enqueues the parked jobs again in
the order they were submitted (``jobs_unpark``). The deferred loop sends no batch for them.

Which features and providers are paused is read from the process's copy of the configuration
(ledger/config_cache.py: no query while nothing changed; a change is seen by every process at
its next use after the commit).
"""

from django.db.models import Q

from features.models import FeaturePolicy
from jobs.models import LlmJob
from ledger.config_cache import config_snapshot
from providers.models import Provider
from providers.selectors import provider_models, provider_name_for_model

__all__ = ["FEATURE_PAUSED", "PROVIDER_PAUSED", "paused_filter", "pause_reason"]

FEATURE_PAUSED = "feature_paused"
PROVIDER_PAUSED = "provider_paused"


def _paused() -> tuple[frozenset[str], frozenset[str]]:
    """The paused features and provider names."""
    snapshot = config_snapshot()
    if snapshot is None:
        features = frozenset(
            FeaturePolicy.objects.filter(paused=True).values_list("feature", flat=True)
        )
        providers = frozenset(Provider.objects.filter(paused=True).values_list("name", flat=True))
        return features, providers
    paused = frozenset(name for name, row in snapshot.providers.items() if row.paused)
    return snapshot.paused_features, paused


def pause_reason(job: LlmJob) -> str | None:
    """Why the job may not start now: its feature or its model's provider is paused."""
    features, providers = _paused()
    if job.feature in features:
        return FEATURE_PAUSED
    if providers and provider_name_for_model(model=job.run_model) in providers:
        return PROVIDER_PAUSED
    return None


def paused_filter() -> Q | None:
    """The waiting jobs a paused feature or provider holds (for the deferred loop), or None."""
    features, providers = _paused()
    if not features and not providers:
        return None
    held = Q(feature__in=features)
    if providers:
        held |= Q(current_model__in=provider_models(names=set(providers)))
    return held
