"""The banner ``make run`` prints once every process is ready: where everything is, the demo
login and the API key, after the start-up logs rather than lost above them.

Ready means: the web server answers ``/readyz`` (database, Redis, an ``llm`` worker), a worker
listens on the ``default`` and ``alerts`` queues, the reconciler, the queue monitor and the
deferred loop have each finished a pass since the start, and the fake provider answers when no
real key is set."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone
from rq import Queue, Worker

from alerts.models import LoopHeartbeat
from keys.demo import demo_key_ensure
from llmops.queues import QUEUE_NAMES
from runtime.redis_clients import queue_connection

__all__ = ["DemoLogin", "banner_lines", "demo_login", "not_ready", "wait_until_ready"]

LOOPS = ("reconciler", "monitor", "deferred")
LOOP_PASS_SLACK_SECONDS = 10


@dataclass(frozen=True)
class DemoLogin:
    username: str
    password: str | None
    """The password when it is still ``DEMO_PASSWORD``; None once someone changed it."""
    token: str


def demo_login() -> DemoLogin | None:
    """The demo user ``make run`` creates (``ensure_demo_user``) and its API key (every scope)."""
    user = get_user_model().objects.filter(username=settings.DEMO_USERNAME).first()
    if user is None:
        return None
    key = demo_key_ensure(user=user)
    password = settings.DEMO_PASSWORD if user.check_password(settings.DEMO_PASSWORD) else None
    return DemoLogin(user.username, password, key)


def _web_ready(base_url: str) -> str | None:
    try:
        answer = httpx.get(f"{base_url}/readyz", timeout=3)
    except httpx.HTTPError as error:
        return f"web server ({type(error).__name__})"
    if answer.status_code != 200:
        checks = answer.json().get("checks", {})
        failing = [name for name, check in checks.items() if not check.get("ok", True)]
        return f"web server (/readyz: {', '.join(failing) or answer.status_code})"
    return None


def _queue_workers(*names: str) -> list[str]:
    connection = queue_connection("default")
    return [
        f"worker on the {name} queue"
        for name in names
        if not Worker.all(queue=Queue(name, connection=connection))
    ]


def _loops_passed(since: datetime) -> list[str]:
    passed = set(
        LoopHeartbeat.objects.filter(name__in=LOOPS, last_pass_at__gte=since).values_list(
            "name", flat=True
        )
    )
    return [f"{name} loop" for name in LOOPS if name not in passed]


def _fake_provider() -> str | None:
    if settings.ANTHROPIC_API_KEY:
        return None
    try:
        httpx.get(f"{settings.ANTHROPIC_BASE_URL.rstrip('/')}/_fake/faults", timeout=3)
    except httpx.HTTPError:
        return "fake provider"
    return None


def not_ready(*, base_url: str, since: datetime) -> list[str]:
    """What is not ready yet, in words (empty: everything is)."""
    missing = [_web_ready(base_url), _fake_provider()]
    return [
        *(m for m in missing if m),
        *_queue_workers(*QUEUE_NAMES),
        *_loops_passed(since),
    ]


def wait_until_ready(
    *,
    base_url: str,
    timeout: float,
    every: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
) -> list[str]:
    """Wait for every process (at most ``timeout`` s); return what is still not ready."""
    # A loop's pass from just before this started counts; a killed loop's older one does not
    # (a loop that stops cleanly blanks its own, loops/loop_health.py).
    since = timezone.now() - timedelta(seconds=LOOP_PASS_SLACK_SECONDS)
    deadline = clock() + timeout
    while True:
        missing = not_ready(base_url=base_url, since=since)
        if not missing or clock() >= deadline:
            return missing
        time.sleep(every)


def banner_lines(*, base_url: str, login: DemoLogin | None, missing: list[str]) -> list[str]:
    rule = "=" * 72
    lines = [rule, "  LLM job queue: ready" if not missing else "  LLM job queue: started"]
    if missing:
        lines.append(f"  (still waiting for: {', '.join(missing)})")
    lines += [
        "",
        f"  Home           {base_url}/",
        f"  Live page      {base_url}/live/",
        f"  Admin, DLQ     {base_url}/admin/",
        f"  Ops dashboard  {base_url}/admin/ops/dashboard/",
        f"  API docs       {base_url}/api/docs/",
        f"  Metrics        {base_url}/metrics",
    ]
    if login is not None:
        password = login.password or "(changed since it was created; DEMO_PASSWORD no longer works)"
        lines += [
            "",
            f"  Demo login     {login.username} / {password}",
            f"  API key        {login.token}   (again: make token)",
            "",
            "  First job:",
            f"    curl -s -X POST {base_url}/api/v1/jobs/ \\",
            f"      -H 'Authorization: Bearer {login.token}' \\",
            "      -H 'Content-Type: application/json' \\",
            '      -d \'{"feature": "summarize", '
            '"model": "claude-sonnet-4-6", "max_tokens": 200, "messages": '
            '[{"role": "user", "content": "Say hello"}]}\'',
        ]
    lines.append(rule)
    return lines
