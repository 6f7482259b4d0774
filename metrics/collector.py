"""The LLM metrics, read at scrape time from the database counters and from Redis.

Counters come from ``metrics/models.py`` (kept in the transactions of what they count), so they are
right whatever process or host did the work; gauges are read now: queue depth and oldest wait
and scheduled retries from Redis, budget use and the breaker from the database, live workers
from rq's worker registry. A source that cannot be read leaves its metrics out of this scrape
and sets ``llm_metrics_source_up{source}`` to 0, instead of failing the whole scrape.
"""

import logging
import os
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import django_rq
from django.db.models import Count
from django.utils import timezone
from django_rq.contrib.prometheus import RQCollector
from prometheus_client import REGISTRY, CollectorRegistry, multiprocess
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from redis.exceptions import RedisError
from rq import Worker

from llmops.queues import QUEUE_NAMES
from metrics.models import LATENCY_BUCKETS
from metrics.selectors import counter_totals
from providers.models import DEFAULT_PROVIDER
from tracing.setup import span_counts

__all__ = ["LlmCollector", "ProcessCollector", "llm_registry", "process_registry", "rq_registry"]

logger = logging.getLogger(__name__)

FEATURE_MODEL = ["feature", "model"]


class LlmCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        sources = {}
        # Read each source whole before yielding, so a failure never leaves half a source.
        try:
            yield from [*_counters(), *_database_gauges()]
            sources["database"] = 1
        except Exception:
            logger.exception("metrics: the database could not be read")
            sources["database"] = 0
        try:
            yield from list(_redis_gauges())
            sources["redis"] = 1
        except RedisError:
            logger.warning("metrics: Redis could not be read", exc_info=True)
            sources["redis"] = 0
        up = GaugeMetricFamily(
            "llm_metrics_source_up",
            "1 when the metrics' source answered this scrape, 0 when its metrics are missing.",
            labels=["source"],
        )
        for source, value in sources.items():
            up.add_metric([source], value)
        yield up


def _providers_of_models() -> dict[str, str]:
    """Each priced model's provider (its price in force): the ``provider`` label. A model
    belongs to one provider, so the label splits nothing the counters keep apart."""
    from ledger.models import ModelPrice

    providers: dict[str, str] = {}
    rows = ModelPrice.objects.filter(effective_from__lte=timezone.now()).order_by(
        "model", "-effective_from"
    )
    for model, provider in rows.values_list("model", "provider_id"):
        providers.setdefault(model, str(provider))
    return providers


def _with_provider(
    values: dict[tuple[str, ...], Any], providers: dict[str, str]
) -> dict[tuple[str, ...], Any]:
    """Keys (feature, model, ...) with the model's provider appended."""
    return {(*key, providers.get(key[1], DEFAULT_PROVIDER)): value for key, value in values.items()}


def _counters() -> Iterator[Metric]:
    totals = counter_totals()
    providers = _providers_of_models()

    yield _counter(
        "llm_jobs",
        "Jobs that entered each status.",
        [*FEATURE_MODEL, "status", "provider"],
        _with_provider(totals.jobs, providers),
    )
    yield _counter(
        "llm_attempts",
        "Provider attempts booked in the ledger, by outcome.",
        [*FEATURE_MODEL, "outcome", "provider"],
        _with_provider(totals.attempts, providers),
    )
    yield _counter(
        "llm_tokens",
        "Tokens booked in the ledger, by kind.",
        [*FEATURE_MODEL, "kind", "provider"],
        _with_provider(totals.tokens, providers),
    )

    cost = CounterMetricFamily(
        "llm_cost_usd",
        "USD booked in the ledger (attempts, estimates of unknown outcomes, upward corrections).",
        labels=[*FEATURE_MODEL, "provider"],
    )
    credited = CounterMetricFamily(
        "llm_cost_usd_credited",
        "USD taken off by downward corrections; net spend = llm_cost_usd - this.",
        labels=[*FEATURE_MODEL, "provider"],
    )
    for key in sorted(set(totals.cost_usd) | set(totals.cost_credited_usd)):
        labels = [*key, providers.get(key[1], DEFAULT_PROVIDER)]
        cost.add_metric(labels, float(totals.cost_usd.get(key, Decimal(0))))
        credited.add_metric(labels, float(totals.cost_credited_usd.get(key, Decimal(0))))
    yield cost
    yield credited

    latency = HistogramMetricFamily(
        "llm_provider_latency_seconds",
        "Duration of provider calls (ledger attempts with a measured latency).",
        labels=[*FEATURE_MODEL, "provider"],
    )
    for key, per_bucket in sorted(totals.latency_buckets.items()):
        cumulative, buckets = 0, []
        for bound, count in zip([*LATENCY_BUCKETS, float("inf")], per_bucket, strict=True):
            cumulative += count
            buckets.append((_le(bound), cumulative))
        latency.add_metric(
            [*key, providers.get(key[1], DEFAULT_PROVIDER)],
            buckets,
            sum_value=totals.latency_sum_ms[key] / 1000,
        )
    yield latency

    yield _counter(
        "llm_failures",
        "Dead-lettered jobs (FailureRecord rows), by severity and reason.",
        ["severity", "reason"],
        totals.failures,
    )


def _counter(
    name: str, documentation: str, labels: list[str], values: dict[tuple[str, ...], int]
) -> CounterMetricFamily:
    """One counter family, a sample per label set, in a stable order."""
    family = CounterMetricFamily(name, documentation, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else f"{bound:g}"


def _database_gauges() -> Iterator[Metric]:
    from features.models import FeaturePolicy
    from jobs.models import LlmJob, ProviderBreaker
    from jobs.pauses import FEATURE_PAUSED, PROVIDER_PAUSED
    from ledger.budgets import budgets_used_ratio
    from providers.models import Provider

    ratios = GaugeMetricFamily(
        "llm_budget_used_ratio",
        "Settled spend / limit in each budget's current window (the worst of its periods).",
        labels=["scope", "name"],
    )
    for (scope, name), ratio in sorted(budgets_used_ratio(at=timezone.now()).items()):
        ratios.add_metric([scope, name], ratio)
    yield ratios

    breaker = GaugeMetricFamily(
        "llm_breaker_open", "1 while the provider's circuit breaker is open.", labels=["provider"]
    )
    for provider, state in ProviderBreaker.objects.values_list("provider", "state"):
        breaker.add_metric([provider], 1 if state == ProviderBreaker.State.OPEN else 0)
    yield breaker

    paused = GaugeMetricFamily(
        "llm_paused",
        "1 for each paused feature or provider (its jobs wait; jobs/pauses.py).",
        labels=["kind", "name"],
    )
    for feature in FeaturePolicy.objects.filter(paused=True).values_list("feature", flat=True):
        paused.add_metric(["feature", feature], 1)
    for name in Provider.objects.filter(paused=True).values_list("name", flat=True):
        paused.add_metric(["provider", name], 1)
    yield paused
    held = GaugeMetricFamily(
        "llm_jobs_held",
        "Jobs parked by a paused feature or provider, by reason.",
        labels=["reason"],
    )
    counts = dict(
        LlmJob.objects.filter(status__in=LlmJob.WAITING_STATUSES)
        .exclude(held_reason="")
        .values_list("held_reason")
        .annotate(count=Count("id"))
        .values_list("held_reason", "count")
    )
    for reason in (FEATURE_PAUSED, PROVIDER_PAUSED):
        held.add_metric([reason], counts.get(reason, 0))
    yield held


def _redis_gauges() -> Iterator[Metric]:
    from loops.queue_health import oldest_wait_seconds

    depth = GaugeMetricFamily("llm_queue_depth", "Jobs waiting in each queue.", labels=["queue"])
    oldest = GaugeMetricFamily(
        "llm_queue_oldest_job_age_seconds",
        "How long the job at the head of each queue has waited (0 when empty).",
        labels=["queue"],
    )
    scheduled = GaugeMetricFamily(
        "llm_retries_scheduled",
        "Jobs scheduled to run later in each queue (delayed retries).",
        labels=["queue"],
    )
    workers = GaugeMetricFamily(
        "llm_workers", "Live rq workers listening on each queue.", labels=["queue"]
    )
    connection = django_rq.get_connection(QUEUE_NAMES[0])
    listening: dict[str, int] = defaultdict(int)
    for worker in Worker.all(connection=connection):
        for name in worker.queue_names():
            listening[name] += 1
    for name in QUEUE_NAMES:
        waiting, wait = oldest_wait_seconds(queue_name=name)
        depth.add_metric([name], waiting)
        oldest.add_metric([name], wait or 0.0)
        scheduled.add_metric([name], django_rq.get_queue(name).scheduled_job_registry.count)
        workers.add_metric([name], listening[name])
    yield depth
    yield oldest
    yield scheduled
    yield workers
    spans = CounterMetricFamily(
        "llm_trace_spans",
        "Trace spans by what became of them, over every process: exported to the OTLP "
        "collector, failed (refused, or the collector away), dropped (the export queue full).",
        labels=["outcome"],
    )
    for outcome, count in span_counts().items():
        spans.add_metric([outcome], count)
    yield spans


class ProcessCollector(Collector):
    """django-prometheus's HTTP and database metrics of the web process, or of every web
    process (their files in ``PROMETHEUS_MULTIPROC_DIR``, llmops/web.py), without the families
    the exposition format refuses.

    Whatever a library registers in the process-wide registry (or, under the multiprocess
    directory, writes to its files) would be served here. django-rq times its own collector with
    a Summary named ``rq_request_processing_seconds_total`` as soon as its modules are imported:
    a summary named like a counter, which ``promtool check metrics`` refuses. Unregistering it
    does not reach the multiprocess files, so such families are left out here, at scrape time.
    """

    def collect(self) -> Iterator[Metric]:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            families = multiprocess.MultiProcessCollector(None).collect()  # type: ignore[no-untyped-call]
        else:
            families = REGISTRY.collect()
        for family in families:
            if family.type != "counter" and family.name.endswith("_total"):
                continue  # "non-counter metrics should not have _total suffix"
            yield family


def process_registry() -> CollectorRegistry:
    """The web process's own metrics (``ProcessCollector``), read at each scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProcessCollector())
    return registry


def llm_registry() -> CollectorRegistry:
    """A registry holding only the LLM metrics (read fresh at each scrape)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LlmCollector())
    return registry


def rq_registry() -> CollectorRegistry:
    """django-rq's collector, for /django-rq/metrics/."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RQCollector())
    return registry
