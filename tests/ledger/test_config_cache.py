"""Prices and budgets kept in each process (ledger/config_cache.py): read without a query while
current, and a change seen by every process at its next use after the commit."""

import subprocess
import sys
import textwrap
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from ledger import config_cache
from ledger.budgets import budgets_for
from ledger.models import Budget, ModelPrice
from ledger.selectors import price_for_model
from llmops.queues import LLM_QUEUE, config_token_key
from runtime.redis_clients import queue_connection
from tests.conftest import ROOT, make_user
from tests.jobs.test_reconciler import _env_for_subprocess

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

MODEL = "claude-haiku-4-5"


def new_price(model: str = MODEL, rate: str = "7", seconds_ago: int = 1) -> dict[str, Any]:
    return {
        "model": model,
        "effective_from": timezone.now() - timedelta(seconds=seconds_ago),
        "input_per_mtok": Decimal(rate),
        "output_per_mtok": Decimal(rate),
        "cache_write_5m_per_mtok": Decimal(rate),
        "cache_write_1h_per_mtok": Decimal(rate),
        "cache_read_per_mtok": Decimal(rate),
        "max_output_tokens": 64000,
    }


def in_another_process(code: str, **env: str) -> None:
    """Run ``code`` in a fresh interpreter on the test database and Redis, as another worker or
    web process on another host would."""
    script = (
        "import os, sys, django\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'llmops.settings')\n"
        "django.setup()\n" + textwrap.dedent(code)
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**_env_for_subprocess(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_current_copy_answers_without_a_query() -> None:
    price_for_model(model=MODEL)
    budgets_for(feature="summarize", user_id=None)
    with CaptureQueriesContext(connection) as queries:
        price = price_for_model(model=MODEL)
        assert budgets_for(feature="summarize", user_id=None) == []
    assert price is not None and price.model == MODEL
    assert len(queries.captured_queries) == 0


def test_a_price_saved_by_another_process_is_used_at_the_next_call() -> None:
    before = price_for_model(model=MODEL)
    assert before is not None and before.input_per_mtok != Decimal("7")
    in_another_process(
        """
        from ledger.models import ModelPrice
        from tests.ledger.test_config_cache import new_price
        ModelPrice.objects.create(**new_price(rate="7"))
        """
    )
    after = price_for_model(model=MODEL)
    assert after is not None and after.input_per_mtok == Decimal("7")


def test_without_the_new_token_the_other_process_change_would_not_be_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check above can fail: a copy is only loaded again when the token changes."""
    price_for_model(model=MODEL)
    in_another_process(
        """
        from ledger import config_cache
        from ledger.models import ModelPrice
        from tests.ledger.test_config_cache import new_price
        config_cache._new_token = lambda: None
        ModelPrice.objects.create(**new_price(rate="7"))
        """
    )
    stale = price_for_model(model=MODEL)
    assert stale is not None and stale.input_per_mtok != Decimal("7")
    queue_connection(LLM_QUEUE).delete(config_token_key())  # as a flushed Redis would
    fresh = price_for_model(model=MODEL)
    assert fresh is not None and fresh.input_per_mtok == Decimal("7")


def test_a_budget_disabled_in_another_process_stops_applying_at_once() -> None:
    budget = Budget.objects.create(
        scope=Budget.Scope.FEATURE, feature="summarize", limit_usd=Decimal("1")
    )
    assert [b.id for b in budgets_for(feature="summarize", user_id=None)] == [budget.id]
    in_another_process(
        f"""
        from ledger.models import Budget
        budget = Budget.objects.get(id={budget.id})
        budget.enabled = False
        budget.save()
        """
    )
    assert budgets_for(feature="summarize", user_id=None) == []


def test_user_budgets_apply_to_their_user_only_and_come_in_id_order() -> None:
    alice, bob = make_user("alice"), make_user("bob")
    mine = Budget.objects.create(scope=Budget.Scope.USER, user=alice, limit_usd=Decimal("1"))
    feature = Budget.objects.create(
        scope=Budget.Scope.FEATURE, feature="summarize", limit_usd=Decimal("1")
    )
    Budget.objects.create(scope=Budget.Scope.USER, user=bob, limit_usd=Decimal("1"))
    Budget.objects.create(
        scope=Budget.Scope.FEATURE, feature="other", limit_usd=Decimal("1"), enabled=True
    )
    Budget.objects.create(
        scope=Budget.Scope.FEATURE, feature="summarize", limit_usd=Decimal("1"), enabled=False
    )
    found = budgets_for(feature="summarize", user_id=alice.id)
    assert [b.id for b in found] == [mine.id, feature.id]
    assert found[0].user.username == "alice"  # loaded with its user: no query per budget


def test_a_price_only_in_force_later_is_not_used_before_its_time() -> None:
    ModelPrice.objects.create(**new_price(rate="9", seconds_ago=-3600))
    now_price = price_for_model(model=MODEL)
    later = price_for_model(model=MODEL, at=timezone.now() + timedelta(hours=2))
    assert now_price is not None and now_price.input_per_mtok != Decimal("9")
    assert later is not None and later.input_per_mtok == Decimal("9")
    assert price_for_model(model="no-such-model") is None


def test_its_own_open_transaction_sees_its_change_and_nobody_keeps_a_rolled_back_one() -> None:
    price_for_model(model=MODEL)

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        ModelPrice.objects.create(**new_price(rate="7"))
        inside = price_for_model(model=MODEL)
        assert inside is not None and inside.input_per_mtok == Decimal("7")
        raise Undo
    after = price_for_model(model=MODEL)
    assert after is not None and after.input_per_mtok != Decimal("7")


def test_with_redis_unreachable_every_call_reads_the_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unreachable() -> str:
        raise RedisConnectionError("Redis is down")

    monkeypatch.setattr(config_cache, "_token", unreachable)
    with CaptureQueriesContext(connection) as queries:
        price = price_for_model(model=MODEL)
    assert price is not None and len(queries.captured_queries) == 1
    ModelPrice.objects.create(**new_price(rate="7"))  # its token cannot be set either
    again = price_for_model(model=MODEL)
    assert again is not None and again.input_per_mtok == Decimal("7")


def test_a_token_expires_so_a_lost_announcement_is_seen_later() -> None:
    price_for_model(model=MODEL)
    ttl = queue_connection(LLM_QUEUE).ttl(config_token_key())
    assert 0 < ttl <= config_cache.TOKEN_TTL_SECONDS
