"""The configured side of the limits: staff's admin rows, then the LLM_RATE_LIMITS setting.

Precedence, field by field (rpm, input_tpm, output_tpm): an enabled admin row for the model, an
enabled admin row for ``*``, ``LLM_RATE_LIMITS[model]``, ``LLM_RATE_LIMITS["*"]``. What the
provider reports in its headers is the other side (learned, kept in Redis by the limiter): the
limit that applies is the smaller of the configured and the learned one, and either alone when
only one is known. A configured limit can therefore hold the workers below the provider's (a key
shared with another application), never push them above it.

Admin rows are read once per ``LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS`` per process (one query for
all rows, shared by every thread), so an edit reaches every worker within that time.
"""

import threading
import time
from dataclasses import dataclass

from django.conf import settings

from ratelimits.models import RateLimit
from ratelimits.vocabulary import LIMIT_FIELDS, WILDCARD

__all__ = [
    "ConfiguredLimits",
    "config_cache_clear",
    "configured_limits",
    "feature_weight",
    "is_priority_feature",
    "limiter_line",
    "settings_limits",
]


@dataclass(frozen=True)
class ConfiguredLimits:
    rpm: int | None = None
    input_tpm: int | None = None
    output_tpm: int | None = None
    sources: tuple[tuple[str, str], ...] = ()
    """(field, where it was set): "admin anthropic/claude-sonnet-4-6", "LLM_RATE_LIMITS[*]"."""

    @property
    def any(self) -> bool:
        return any(getattr(self, field) is not None for field in LIMIT_FIELDS)

    def source_of(self, field: str) -> str:
        return dict(self.sources).get(field, "")


_lock = threading.Lock()
_rows: dict[tuple[str, str], RateLimit] = {}
_rows_read_at: float | None = None


def config_cache_clear() -> None:
    """Forget the admin rows read by this process (the admin calls it after an edit)."""
    global _rows_read_at
    with _lock:
        _rows_read_at = None


def _admin_rows() -> dict[tuple[str, str], RateLimit]:
    global _rows, _rows_read_at
    with _lock:
        now = time.monotonic()
        if _rows_read_at is not None and (
            now - _rows_read_at < settings.LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS
        ):
            return _rows
        _rows = {(r.provider, r.model): r for r in RateLimit.objects.filter(enabled=True)}
        _rows_read_at = now
        return _rows


def configured_limits(*, provider: str, model: str) -> ConfiguredLimits:
    rows = _admin_rows()
    configured = settings_limits()
    candidates: list[tuple[str, dict[str, int | None]]] = []
    for key in (model, WILDCARD):
        row = rows.get((provider, key))
        if row is not None:
            row_values = {field: getattr(row, field) for field in LIMIT_FIELDS}
            candidates.append((f"admin {provider}/{key}", row_values))
    for key in (model, WILDCARD):
        if key in configured:
            candidates.append((f"LLM_RATE_LIMITS[{key}]", dict(configured[key])))
    values: dict[str, int | None] = dict.fromkeys(LIMIT_FIELDS)
    sources: list[tuple[str, str]] = []
    for field in LIMIT_FIELDS:
        for source, fields in candidates:
            if fields.get(field) is not None:
                values[field] = fields[field]
                sources.append((field, source))
                break
    return ConfiguredLimits(
        rpm=values["rpm"],
        input_tpm=values["input_tpm"],
        output_tpm=values["output_tpm"],
        sources=tuple(sources),
    )


def settings_limits() -> dict[str, dict[str, int]]:
    """LLM_RATE_LIMITS by model id, spaces around a key ignored (ratelimits/checks.py)."""
    return {model.strip(): fields for model, fields in settings.LLM_RATE_LIMITS.items()}


def feature_weight(feature: str) -> float:
    """A feature's share of each limit, relative to the other features that want calls at the
    same moment (LLM_FEATURE_WEIGHTS; features not named weigh 1)."""
    return float(settings.LLM_FEATURE_WEIGHTS.get(feature, 1.0))


def is_priority_feature(feature: str) -> bool:
    """Whether the feature's jobs default to priority high (LLM_PRIORITY_FEATURES; a feature
    policy's ``default_priority`` comes first: jobs/admission.py)."""
    return feature in settings.LLM_PRIORITY_FEATURES


def limiter_line(feature: str, priority: str) -> tuple[str, dict[str, float]]:
    """The line a job waits in at the limiter and the weights it is shared by: its feature's
    for a normal job; for a high one a line of its own that weighs
    ``LLM_PRIORITY_WEIGHT_FACTOR`` times the feature's (admitted before the feature's and the
    others' waiting normal calls), for a low one that many times less (jobs/priorities.py)."""
    weights = dict(settings.LLM_FEATURE_WEIGHTS)
    if priority not in ("high", "low"):
        return feature, weights
    factor = float(settings.LLM_PRIORITY_WEIGHT_FACTOR)
    base = feature_weight(feature)
    line = f"{feature}~{priority}"
    weights[line] = base * factor if priority == "high" else base / factor
    return line, weights
