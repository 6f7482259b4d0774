"""Which model a job moves to when its own is out: the next of its feature's fallback models
(features/, ``GET``/``PUT /api/v1/features/<feature>/``) that can take it.

A job moves (``job_fall_back`` in jobs/services/, or inside ``job_attempt_failed``) when
- its model's provider breaker is open (the runner, before any call);
- its attempts on its model failed with a transient class ``LLM_FALLBACK_AFTER_ATTEMPTS`` times
  in a row, or that class's retries ran out (jobs/services/);
- the limiter cannot admit it within ``LLM_FALLBACK_AFTER_WAIT_SECONDS`` (the runner).
Never for a fatal error of the request itself: a 400 would fail on any model. An account-wide
failure (401, ``insufficient_quota``...) opens the breaker, so it moves too.
"""

from datetime import datetime

from django.conf import settings
from django.utils import timezone

from features.selectors import fallback_models_for
from jobs.breaker import breakers_held
from jobs.models import LlmJob
from ledger.models import ModelPrice
from ledger.selectors import price_for_model
from providers.selectors import provider_row

__all__ = [
    "fallback_chain",
    "fallback_model",
    "moves_after_failure",
    "moves_after_wait",
]


def fallback_chain(job: LlmJob) -> list[str]:
    """The job's own model, then its feature's fallbacks, each once."""
    chain = [job.model]
    for model in fallback_models_for(feature=job.feature):
        if model not in chain:
            chain.append(model)
    return chain


def _can_take(job: LlmJob, model: str, held: dict[str, bool]) -> bool:
    """A fallback must be priced, of the job's kind, able to give ``max_tokens``, on an enabled
    provider whose breaker is closed."""
    price = price_for_model(model=model)
    if price is None or price.kind != job.kind:
        return False
    if job.kind == ModelPrice.Kind.CHAT and job.max_tokens > price.max_output_tokens:
        return False
    if price.provider_name in held:
        return False
    row = provider_row(name=price.provider_name)
    return row is None or row.enabled


def fallback_model(job: LlmJob) -> str | None:
    """The next model after the one the job runs on that can take it, or None (no policy, the
    end of the chain, or every later model out too)."""
    chain = fallback_chain(job)
    if len(chain) < 2:
        return None
    at = chain.index(job.run_model) if job.run_model in chain else 0
    held = breakers_held()
    for model in chain[at + 1 :]:
        if _can_take(job, model, held):
            return model
    return None


def moves_after_failure(
    job: LlmJob, *, transient: bool, account_wide: bool, retries_exhausted: bool
) -> str | None:
    """The model a job whose attempt just failed moves to, or None (it retries or dead-letters
    on its own model as the retry table says). ``job.model_failures`` counts this failure."""
    if not (transient or account_wide):
        return None  # the request itself is wrong: no model would take it
    if job.budget_attempts >= settings.LLM_MAX_ATTEMPTS:
        return None  # the global cap bounds every chain
    if transient and not retries_exhausted:
        if job.model_failures < settings.LLM_FALLBACK_AFTER_ATTEMPTS:
            return None
    return fallback_model(job)


def moves_after_wait(job: LlmJob, *, hold_seconds: float, now: datetime | None = None) -> bool:
    """Whether a job the limiter holds for ``hold_seconds`` more has waited, all told, past
    ``LLM_FALLBACK_AFTER_WAIT_SECONDS`` on its model (the caller then asks ``fallback_model``)."""
    now = now or timezone.now()
    since = job.limiter_wait_since or now
    waited = (now - since).total_seconds() + hold_seconds
    return waited > settings.LLM_FALLBACK_AFTER_WAIT_SECONDS
