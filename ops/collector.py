"""The LLM metrics, read at scrape time (being built)."""

from prometheus_client import CollectorRegistry


def llm_registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=False)


def rq_registry() -> CollectorRegistry:
    from django_rq.contrib.prometheus import RQCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(RQCollector())
    return registry
