"""Before a drill: is this a place where breaking things on purpose is safe?

A drill wipes the Redis database the system uses (FLUSHDB), fills the database with jobs, opens
the provider circuit breaker and adds alert routes. A user who runs it against production by
mistake expects to be stopped, not warned after the fact. So it refuses (exit 2) when it sees a
sign of a system in use, unless ``--yes-really`` is given; and it always refuses what cannot
work (SQLite, an unreachable Redis).
"""

from datetime import timedelta
from itertools import islice

import django_rq
from django.conf import settings
from django.db import connection
from django.utils import timezone
from rq import Worker

from alerts.models import AlertRoute, LoopHeartbeat
from jobs.models import LlmJob
from llmops.env import database_url as env_database_url
from llmops.queues import KEY_PREFIX, LLM_QUEUE

__all__ = ["DRILL_USERNAME", "Refused", "database_url", "production_signs", "redis_description"]

DRILL_USERNAME = "llm-chaos"
"""The user who owns the drill's jobs (created without a usable password)."""
_OWN_KEY_PREFIXES = ("rq:", KEY_PREFIX)
_KEYS_LOOKED_AT = 2000


class Refused(Exception):
    """The drill will not run here; the message says why and what to do."""


def database_url() -> str:
    """The database this process uses, as a DATABASE_URL for the processes the drill starts
    (under pytest the test database, whose name only the connection knows)."""
    db = connection.settings_dict
    if connection.vendor not in ("mysql", "postgresql"):
        raise Refused(
            "the drill runs several worker processes on one database: it needs MariaDB/MySQL "
            "or PostgreSQL (DATABASE_URL=mysql://... or postgres://...), "
            f"not {db['ENGINE'].rsplit('.', 1)[-1]}"
        )
    return env_database_url(db)


def redis_description() -> str:
    kwargs = django_rq.get_connection(LLM_QUEUE).connection_pool.connection_kwargs
    host, port, db = kwargs.get("host", "?"), kwargs.get("port", "?"), kwargs.get("db", 0)
    return f"redis://{host}:{port}/{db}"


def production_signs() -> list[str]:
    """Every sign that this database and Redis serve a real system. Raises Refused for what
    no flag can make work."""
    redis = django_rq.get_connection(LLM_QUEUE)
    try:
        redis.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means the same here
        raise Refused(f"Redis at {redis_description()} does not answer ({exc})") from None
    signs = []
    if settings.ANTHROPIC_API_KEY:
        signs.append("ANTHROPIC_API_KEY is set: a real provider account is configured here")
    if settings.SECURE_SSL_REDIRECT:
        signs.append("DJANGO_SECURE is on: these are production settings")
    workers = Worker.all(connection=redis)
    if workers:
        signs.append(
            f"{len(workers)} rq worker(s) already run against {redis_description()}: they would "
            "run the drill's jobs, and the flush would take their queues away"
        )
    now = timezone.now()
    for loop in LoopHeartbeat.objects.exclude(last_pass_at=None):
        assert loop.last_pass_at is not None
        if now - loop.last_pass_at < timedelta(seconds=3 * loop.interval_seconds + 5):
            signs.append(f"the {loop.name} loop is running against this database ({loop.host})")
    routes = AlertRoute.objects.filter(enabled=True).count()
    if routes or settings.ALERT_ROUTES:
        signs.append(
            f"alert routes are configured ({routes} in the admin"
            f"{', and ALERT_ROUTES' if settings.ALERT_ROUTES else ''}): the drill's alerts, "
            "CRITICAL ones included, would reach real people"
        )
    keys = islice(redis.scan_iter(count=500), _KEYS_LOOKED_AT)
    foreign = sum(not key.decode(errors="replace").startswith(_OWN_KEY_PREFIXES) for key in keys)
    if foreign:
        signs.append(
            f"{redis_description()} holds keys that are not this system's ({foreign} among the "
            f"first {_KEYS_LOOKED_AT} looked at): the flush would delete them"
        )
    others = (
        LlmJob.objects.filter(created_at__gte=now - timedelta(days=1))
        .exclude(user__username=DRILL_USERNAME)
        .count()
    )
    if others:
        signs.append(f"{others} jobs of other users were submitted here in the last day")
    return signs
