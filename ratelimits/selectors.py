"""What the limiter knows, for the admin page and ``manage.py ratelimit_status``: per provider
and model, the configured limits (and where each was set), what the provider reported, the
limits in force, the window's use, calls in flight, the pause and what waits."""

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings

from jobs.breaker import PROVIDER
from llmops.queues import rate_limit_key_pattern, rate_limit_scope_of
from providers.ratelimit_headers import KINDS
from ratelimits.configured_limits import ConfiguredLimits, configured_limits, settings_limits
from ratelimits.limiter import KEY_PARTS, limiter_keys, redis_client
from ratelimits.models import RateLimit
from ratelimits.vocabulary import LIMIT_FIELDS, WILDCARD

__all__ = ["LearnedLimit", "LimitStatus", "rate_limit_statuses"]

FIELD_KIND = {"rpm": "requests", "input_tpm": "input_tokens", "output_tpm": "output_tokens"}


@dataclass(frozen=True)
class LearnedLimit:
    limit: int
    remaining: int | None
    reset_at: datetime | None


@dataclass
class LimitStatus:
    provider: str
    model: str
    configured: ConfiguredLimits
    learned: dict[str, LearnedLimit] = field(default_factory=dict)
    learned_at: datetime | None = None
    """When an answer last carried limits."""
    answered_at: datetime | None = None
    """When the provider last answered (with or without limits)."""
    used: dict[str, int] = field(default_factory=dict)
    """requests / input_tokens / output_tokens in the current window, calls in flight included."""
    used_by_feature: dict[str, dict[str, int]] = field(default_factory=dict)
    in_flight: int = 0
    paused_until: datetime | None = None
    waiting: int = 0
    """Jobs waiting for a slot (in a worker, or held and coming back)."""

    def effective(self, field_name: str) -> int | None:
        """The limit in force: the smaller of the configured and the learned one."""
        configured = getattr(self.configured, field_name)
        learned = self.learned.get(FIELD_KIND[field_name])
        values = [v for v in (configured, learned.limit if learned else None) if v is not None]
        return min(values) if values else None

    @property
    def rows(self) -> list[dict[str, object]]:
        """One row per limit for the admin table."""
        labels = {
            "rpm": "requests / min",
            "input_tpm": "input tokens / min",
            "output_tpm": "output tokens / min",
        }
        return [
            {
                "kind": FIELD_KIND[name],
                "label": label,
                "configured": getattr(self.configured, name),
                "source": self.configured.source_of(name),
                "learned": self.learned.get(FIELD_KIND[name]),
                "effective": self.effective(name),
                "used": self.used.get(FIELD_KIND[name], 0),
            }
            for name, label in labels.items()
        ]

    @property
    def learning(self) -> bool:
        """Nothing configured and no answer seen yet: a few calls go out to find the limits."""
        return not self.configured.any and self.answered_at is None


def _ms(value: bytes | str | None) -> datetime | None:
    """An epoch in ms as kept in Redis; None when missing or 0 (the provider sent none)."""
    if not value or not int(value):
        return None
    return datetime.fromtimestamp(int(value) / 1000, UTC)


def _scopes() -> set[tuple[str, str]]:
    scopes = {
        (row.provider, row.model) for row in RateLimit.objects.exclude(model=WILDCARD).only("id")
    }
    scopes |= {(PROVIDER, model) for model in settings_limits() if model != WILDCARD}
    client = redis_client()
    for part in ("learned", "window", "usage"):
        for key in client.scan_iter(match=rate_limit_key_pattern(part), count=500):
            scope = rate_limit_scope_of(key.decode() if isinstance(key, bytes) else key)
            if scope:
                scopes.add(scope)
    return scopes


def _status(provider: str, model: str) -> LimitStatus:
    status = LimitStatus(provider, model, configured_limits(provider=provider, model=model))
    keys = dict(zip(KEY_PARTS, limiter_keys(provider, model), strict=True))
    client = redis_client()
    now_ms = int(time.time() * 1000)
    window = settings.LLM_RATE_LIMIT_WINDOW_SECONDS + settings.LLM_RATE_LIMIT_MARGIN_SECONDS
    window_ms = int(window * 1000)
    with client.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys["learned"])
        pipe.zrangebyscore(keys["window"], now_ms - window_ms, "+inf")
        pipe.get(keys["pause"])
        pipe.zcount(keys["waiting"], now_ms, "+inf")
        learned_raw, live_ids, pause, waiting = pipe.execute()
    entries = client.hmget(keys["entries"], live_ids) if live_ids else []
    learned = {k.decode(): v.decode() for k, v in learned_raw.items()}
    for kind in KINDS:
        if f"{kind}_limit" in learned:
            remaining = int(learned.get(f"{kind}_remaining", "-1"))
            status.learned[kind] = LearnedLimit(
                int(learned[f"{kind}_limit"]),
                None if remaining < 0 else remaining,
                _ms(learned.get(f"{kind}_reset")),
            )
    status.learned_at = _ms(learned.get("updated"))
    status.answered_at = _ms(learned.get("seen"))
    used = dict.fromkeys(("requests", "input_tokens", "output_tokens"), 0)
    for raw in entries:
        if not raw:
            continue
        req, inp, out, feature, _, flag = raw.decode().split()
        amounts = {"requests": int(req), "input_tokens": int(inp), "output_tokens": int(out)}
        per_feature = status.used_by_feature.setdefault(feature, dict.fromkeys(used, 0))
        for name, amount in amounts.items():
            used[name] += amount
            per_feature[name] += amount
        status.in_flight += flag == "1"
    status.used = used
    status.used_by_feature.pop("-", None)  # the provider's count after a flush, not a feature's
    paused = _ms(pause)
    status.paused_until = paused if paused and paused.timestamp() * 1000 > now_ms else None
    status.waiting = int(waiting)
    return status


def rate_limit_statuses() -> list[LimitStatus]:
    """Every provider and model that is configured or that the limiter has state for."""
    return [_status(provider, model) for provider, model in sorted(_scopes())]


assert set(FIELD_KIND) == set(LIMIT_FIELDS)
