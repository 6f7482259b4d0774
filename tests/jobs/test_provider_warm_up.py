"""A worker's main process builds, once, what every provider call would otherwise build first
(the provider's ``warm_up``, providers/anthropic_sdk.py), so that a forked work horse inherits
it instead of paying for it on every job. Each check runs in a fresh interpreter: in the test
process earlier tests have long since warmed everything, and a check there could not fail."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = """
import os, sys
sys.path.insert(0, {root!r})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmops.settings")
import django
django.setup()
"""


# One real call to the fake provider, as a worker makes it.
CALL = """
outcome = get_provider().call(ProviderRequest(
    body={"model": "claude-haiku-4-5", "max_tokens": 16,
          "messages": [{"role": "user", "content": "hi"}]},
    idempotency_key="warm-up-test",
    read_timeout=10,
))
assert outcome.kind == "success", outcome
"""


def run_fresh(body: str, **env: str) -> str:
    body = textwrap.dedent(body).replace("{call}", CALL)
    script = PRELUDE.format(root=str(ROOT)) + body
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "LOG_LEVEL": "WARNING", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_call_after_warm_up_builds_no_parser_and_loads_no_module(fake_provider: Any) -> None:
    out = run_fresh(
        """
        import anthropic._models as models
        from providers.base import ProviderRequest
        from providers.registry import get_provider

        from providers.anthropic_sdk import _client

        get_provider().warm_up()
        adapters = models._CachedTypeAdapter.cache_info().misses
        clients = _client.cache_info().misses
        modules = set(sys.modules)
        {call}
        print("new adapters:", models._CachedTypeAdapter.cache_info().misses - adapters)
        print("new clients:", _client.cache_info().misses - clients)
        print("new modules:", sorted(set(sys.modules) - modules))
        """,
        ANTHROPIC_BASE_URL=fake_provider.url,
    )
    assert "new adapters: 0\n" in out, out
    # The call uses the client the warm-up built (a second one costs its TLS context, tens of
    # ms after the limiter stamped the call as sent: the provider saw two calls too close).
    assert "new clients: 0\n" in out, out
    assert "new modules: []\n" in out, out


COUNT_GENERIC_CLASSES = """
import gc
import pydantic._internal._generics as generics
built = []
original = generics.create_generic_submodel
def counting(*args, **kwargs):
    built.append(args[0])
    return original(*args, **kwargs)
generics.create_generic_submodel = counting
from providers.base import ProviderRequest
from providers.registry import get_provider
"""


@pytest.mark.parametrize("warm", [True, False])
def test_a_call_after_warm_up_builds_no_pydantic_class(fake_provider: Any, warm: bool) -> None:
    """The stream accumulator's ``ParsedMessage[...]`` is parametrized at every call; without
    the warm-up's reference each call builds the class again once the collector has run (the
    control)."""
    out = run_fresh(
        COUNT_GENERIC_CLASSES
        + ("get_provider().warm_up()\n" if warm else "")
        + """
        {call}
        before = len(built)
        gc.collect()  # as a worker's collector runs between jobs
        {call}
        gc.collect()
        {call}
        print("classes built by two calls:", len(built) - before, built[before:])
        """.replace("        ", ""),
        ANTHROPIC_BASE_URL=fake_provider.url,
    )
    if warm:
        assert "classes built by two calls: 0 []" in out, out
    else:
        assert "classes built by two calls: 2 " in out, out


def test_without_warm_up_the_same_call_builds_them(fake_provider: Any) -> None:
    """The check above can fail: the first call of a cold process builds adapters."""
    out = run_fresh(
        """
        import anthropic._models as models
        from providers.anthropic_sdk import get_client
        from providers.base import ProviderRequest
        from providers.registry import get_provider
        from django.conf import settings

        get_client(settings.ANTHROPIC_BASE_URL, settings.LLM_STREAM_IDLE_SECONDS,
                   settings.LLM_PROVIDER_CONNECT_TIMEOUT)
        adapters = models._CachedTypeAdapter.cache_info().misses
        {call}
        print("new adapters:", models._CachedTypeAdapter.cache_info().misses - adapters)
        """,
        ANTHROPIC_BASE_URL=fake_provider.url,
    )
    assert "new adapters: 0\n" not in out, out


@pytest.mark.redis
def test_a_work_horse_opens_redis_connections_without_the_metadata_lookup() -> None:
    """A forked child opens its own connections on the shared clients; naming them must not
    read the installed packages' metadata again (about 2 ms a connection)."""
    out = run_fresh(
        """
        import redis.utils
        from llmops.queues import LLM_QUEUE
        from runtime.redis_clients import queue_connection
        from ratelimits.limiter import redis_client

        client = queue_connection(LLM_QUEUE)
        client.ping()
        assert redis_client() is client
        calls = []
        original = redis.utils.get_lib_version
        redis.utils.get_lib_version = lambda: calls.append(1) or original()
        pid = os.fork()
        if pid == 0:
            client.ping()  # a new connection: the parent's is not used across the fork
            os._exit(0 if not calls else 3)
        _, status = os.waitpid(pid, 0)
        print("child exit:", os.waitstatus_to_exitcode(status))
        """
    )
    assert "child exit: 0\n" in out, out
