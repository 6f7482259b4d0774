"""Liveness and readiness: what /healthz and /readyz answer (ops/health_views.py).

Liveness says the process answers; it touches nothing else, so that a database or Redis outage
never gets every web process restarted by its orchestrator. Readiness says this process can do
its job now: the database answers ``SELECT 1``, Redis answers ``PING``, and at least one rq
worker listens on the ``llm`` queue.

A live ``llm`` worker is one whose rq worker key still exists: rq writes ``last_heartbeat`` and
extends the key's expiry at every heartbeat, and the key is gone once that expiry passes without
one (or at once on a clean shutdown). An idle worker blocks on the queue for ``worker_ttl - 15``
seconds between heartbeats (405 s with django-rq's default ``--worker-ttl 420``), its key living
``worker_ttl + 60`` (480 s); a busy one beats every 30 s (rq's job monitoring interval) with a
90 s expiry. So ``last_heartbeat`` of a healthy idle worker may be minutes old: the key's expiry,
not the heartbeat's age, is the test. The other side of the same rule: a worker killed with -9
still counts until its key expires (at most 480 s idle, 90 s busy).

Each check runs on its own thread with short socket timeouts (``CHECK_TIMEOUT_SECONDS``), and
the whole answer waits at most ``READY_DEADLINE_SECONDS``: a check still running then is
reported as timed out (its thread ends on its socket timeout). The detail names each check's
result and the error's class only, never a URL, host, user or message that could hold a secret.
"""

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.utils import load_backend
from django_rq.connection_utils import get_redis_connection
from redis import Redis
from rq import Queue, Worker
from rq.worker import WorkerStatus

from llmops.queues import LLM_QUEUE
from llmops.redis_config import probe_config

__all__ = [
    "CHECK_TIMEOUT_SECONDS",
    "READY_DEADLINE_SECONDS",
    "Readiness",
    "liveness",
    "readiness",
]

logger = logging.getLogger(__name__)

CHECK_TIMEOUT_SECONDS = 1.0
"""Connect and read timeout of each check's own connection: a healthy local database or Redis
answers in milliseconds; a second is an outage, not a slow day."""
READY_DEADLINE_SECONDS = 1.5
"""The most /readyz waits for all checks (they run at once): probes typically give up after
1-5 s, and a ready answer must come well within that."""


@dataclass
class Readiness:
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return all(check["ok"] for check in self.checks.values())

    def as_dict(self) -> dict[str, Any]:
        return {"status": "ready" if self.ready else "not_ready", "checks": self.checks}


def liveness() -> dict[str, str]:
    """The process answers: nothing is called."""
    return {"status": "ok"}


def _redis_client() -> Redis:
    """A client of its own on the llm queue's Redis (or its primary, through Sentinel), with
    short timeouts and no retries (django-rq's client waits for minutes on a blocking dequeue
    and retries)."""
    config: dict[str, Any] = settings.RQ_QUEUES[LLM_QUEUE]
    return get_redis_connection(probe_config(config, CHECK_TIMEOUT_SECONDS))


def check_database() -> dict[str, Any]:
    """``SELECT 1`` on a connection of its own: never one a request is using, and with its own
    timeouts (the shared one has none, and may be stuck on a dead socket)."""
    settings_dict = dict(connections.settings[DEFAULT_DB_ALIAS])
    backend = load_backend(settings_dict["ENGINE"])
    vendor = backend.DatabaseWrapper.vendor
    options = dict(settings_dict.get("OPTIONS") or {})
    seconds = max(1, math.ceil(CHECK_TIMEOUT_SECONDS))  # MySQL and PostgreSQL take whole seconds
    if vendor == "mysql":
        options.update(connect_timeout=seconds, read_timeout=seconds, write_timeout=seconds)
    elif vendor == "postgresql":
        options.update(connect_timeout=seconds)
    settings_dict["OPTIONS"] = options
    wrapper = backend.DatabaseWrapper(settings_dict, DEFAULT_DB_ALIAS)
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        wrapper.close()
    return {}


def check_redis(client: Redis) -> dict[str, Any]:
    client.ping()
    return {}


def check_llm_workers(client: Redis) -> dict[str, Any]:
    """Workers whose key still exists (rq's own liveness, see the module docstring) and that
    are not suspended (``rq suspend``: they take no job)."""
    workers = Worker.all(queue=Queue(LLM_QUEUE, connection=client))
    live = [
        worker
        for worker in workers
        if worker.last_heartbeat is not None and worker.get_state() != WorkerStatus.SUSPENDED
    ]
    return {"ok": bool(live), "count": len(live)}


def _timed(check: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    started = time.monotonic()
    try:
        result = {"ok": True, **check()}
    except Exception as exc:  # noqa: BLE001 - any failure is "not ready", with its class
        result = {"ok": False, "error": type(exc).__name__}
        result["_cause"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    result["ms"] = round((time.monotonic() - started) * 1000, 1)
    return result


_last_failed: frozenset[str] = frozenset()
"""The checks that failed last time, so that an outage is logged when it starts and ends, not
at every probe (a load balancer asks every few seconds)."""


def readiness() -> Readiness:
    """Run every check at once; each one that has not answered by the deadline has failed."""
    global _last_failed
    client = _redis_client()
    checks: dict[str, Callable[[], dict[str, Any]]] = {
        "database": check_database,
        "redis": lambda: check_redis(client),
        "llm_workers": lambda: check_llm_workers(client),
    }
    executor = ThreadPoolExecutor(max_workers=len(checks), thread_name_prefix="readyz")
    started = time.monotonic()
    try:
        futures = {name: executor.submit(_timed, check) for name, check in checks.items()}
        wait_for_futures(futures.values(), timeout=READY_DEADLINE_SECONDS)
    finally:
        # Never wait for a stuck check: its thread ends on its own socket timeout.
        executor.shutdown(wait=False, cancel_futures=True)
    result = Readiness()
    causes: dict[str, str] = {}
    for name, future in futures.items():
        if future.done():
            detail = future.result()
            cause = detail.pop("_cause", "")
        else:
            elapsed = round((time.monotonic() - started) * 1000, 1)
            detail = {"ok": False, "error": "timed out", "ms": elapsed}
            cause = f"no answer within {READY_DEADLINE_SECONDS} s"
        result.checks[name] = detail
        if not detail["ok"]:
            causes[name] = cause or f"count {detail.get('count')}"
    client.close()

    failed = frozenset(causes)
    if failed != _last_failed:
        if failed:
            logger.warning(
                "not ready: %s",
                "; ".join(f"{name}: {cause}" for name, cause in sorted(causes.items())),
            )
        else:
            logger.info("ready again")
    _last_failed = failed
    return result
