from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from ledger.models import CostEntry, ModelPrice
from ledger.pricing import attempt_cost, upper_bound_cost
from ledger.selectors import price_for_model

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "kind,rate",
    [
        ("input_tokens", "3"),
        ("output_tokens", "15"),
        ("cache_write_5m_tokens", "3.75"),
        ("cache_write_1h_tokens", "6"),
        ("cache_read_tokens", "0.30"),
    ],
)
def test_it_prices_every_token_kind_at_its_own_rate(kind, rate):
    price = price_for_model(model="claude-sonnet-4-6")
    assert price is not None
    assert attempt_cost(price, {kind: 1_000_000}) == Decimal(rate)
    assert attempt_cost(price, {kind: 1234}) == (Decimal(rate) * 1234 / 1_000_000).quantize(
        Decimal("0.000001")
    )


def test_it_sums_kinds_and_applies_the_batch_discount():
    price = price_for_model(model="claude-haiku-4-5")
    assert price is not None
    usage = {
        "input_tokens": 1000,
        "output_tokens": 500,
        "cache_write_5m_tokens": 2000,
        "cache_write_1h_tokens": 100,
        "cache_read_tokens": 4000,
    }
    # 1000*1 + 500*5 + 2000*1.25 + 100*2 + 4000*0.1 = 6600 -> $0.0066
    assert attempt_cost(price, usage) == Decimal("0.006600")
    assert attempt_cost(price, usage, batch=True) == Decimal("0.003300")


def test_seeded_prices_match_the_published_table():
    expected = {
        "claude-opus-4-6": ("5", "6.25", "10", "0.50", "25"),
        "claude-opus-4-5": ("5", "6.25", "10", "0.50", "25"),
        "claude-opus-4-1": ("15", "18.75", "30", "1.50", "75"),
        "claude-sonnet-4-6": ("3", "3.75", "6", "0.30", "15"),
        "claude-sonnet-4-5": ("3", "3.75", "6", "0.30", "15"),
        "claude-sonnet-4": ("3", "3.75", "6", "0.30", "15"),
        "claude-haiku-4-5": ("1", "1.25", "2", "0.10", "5"),
    }
    for model, rates in expected.items():
        p = price_for_model(model=model)
        assert p is not None, model
        assert (
            p.input_per_mtok,
            p.cache_write_5m_per_mtok,
            p.cache_write_1h_per_mtok,
            p.cache_read_per_mtok,
            p.output_per_mtok,
        ) == tuple(Decimal(r) for r in rates)
        assert p.batch_discount == Decimal("0.5")


def test_a_price_change_is_effective_dated_and_never_rewrites_history():
    old = price_for_model(model="claude-haiku-4-5")
    assert old is not None
    change_at = timezone.now() - timedelta(hours=1)
    ModelPrice.objects.create(
        model="claude-haiku-4-5",
        effective_from=change_at,
        input_per_mtok=Decimal("2"),
        output_per_mtok=Decimal("10"),
        cache_write_5m_per_mtok=Decimal("2.5"),
        cache_write_1h_per_mtok=Decimal("4"),
        cache_read_per_mtok=Decimal("0.2"),
        max_output_tokens=64_000,
    )
    assert price_for_model(model="claude-haiku-4-5").input_per_mtok == Decimal("2")  # type: ignore[union-attr]
    before = price_for_model(model="claude-haiku-4-5", at=change_at - timedelta(seconds=1))
    assert before == old


def test_the_upper_bound_covers_max_tokens_at_the_output_rate():
    price = price_for_model(model="claude-sonnet-4-6")
    assert price is not None
    bound = upper_bound_cost(
        price, messages=[{"role": "user", "content": "x" * 300}], system=None, max_tokens=1000
    )
    assert bound >= Decimal("0.015")  # 1000 output tokens at $15/MTok alone


def test_cost_entries_are_append_only(alice):
    from jobs.models import LlmJob

    job = LlmJob.objects.create(
        user=alice,
        feature="f",
        model="claude-haiku-4-5",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        request_fingerprint="x",
    )
    entry = CostEntry.objects.create(
        job=job, attempt=1, feature="f", model="claude-haiku-4-5", outcome="success"
    )
    entry.cost_usd = Decimal("9")
    with pytest.raises(ValueError):
        entry.save()
