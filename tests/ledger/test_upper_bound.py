"""The upper bound on an attempt's cost is never below what the provider can bill."""

import base64
import random
from decimal import Decimal

import pytest

from ledger.models import ModelPrice
from ledger.pricing import (
    BLOCK_FRAMING_TOKENS,
    IMAGE_BLOCK_MAX_TOKENS,
    PDF_BLOCK_MAX_TOKENS,
    attempt_cost,
    estimate_input_tokens,
    upper_bound_cost,
)
from ledger.selectors import price_for_model
from providers.base import ProviderRequest
from providers.registry import get_provider

pytestmark = pytest.mark.django_db

CJK = "東京都の天気予報によると、明日は晴れのち曇りでしょう。서울의 날씨는 맑습니다。"
EMOJI = "👩‍👩‍👧‍👦🎉🚀🇯🇵✨🧑🏽‍💻"
MIXED = "Refund order #4411 — Müller café, Ωμέγα, Привет, 你好, 🙂 and “quotes”."

# Alphabets of 1, 2, 3 and 4 UTF-8 bytes a character, and joiners that glue emoji together.
ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyz ,.!?\n\t0123456789",
    "éüßøñçΩμέγαПриветשלום",
    "東京都天気予報晴曇서울날씨맑あいうえおカタカナ",
    "😀🎉🚀🧑🏽💻👩👧🇯🇵",
    "\u200d\u0301\ufe0f",
]


def utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def random_text(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(rng.choice(ALPHABETS)) for _ in range(length)) or "x"


def random_request(rng: random.Random) -> tuple[list[dict], object]:
    messages: list[dict] = []
    markers = 1  # the provider takes at most 4 cache_control markers; keep one for the system
    for turn in range(rng.randint(1, 4) * 2 - 1):
        role = "user" if turn % 2 == 0 else "assistant"
        if rng.random() < 0.4:
            messages.append({"role": role, "content": random_text(rng, rng.randint(1, 400))})
            continue
        blocks: list[dict] = []
        for _ in range(rng.randint(1, 3)):
            block: dict = {"type": "text", "text": random_text(rng, rng.randint(1, 400))}
            if markers < 4 and rng.random() < 0.3:
                markers += 1
                block["cache_control"] = {"type": "ephemeral", "ttl": rng.choice(["5m", "1h"])}
            blocks.append(block)
        messages.append({"role": role, "content": blocks})
    system: object = None
    if rng.random() < 0.5:
        system = random_text(rng, rng.randint(1, 600))
    elif rng.random() < 0.5:
        system = [
            {
                "type": "text",
                "text": random_text(rng, rng.randint(1, 600)),
                "cache_control": {"type": "ephemeral", "ttl": rng.choice(["5m", "1h"])},
            }
        ]
    return messages, system


def all_prices() -> list[ModelPrice]:
    models = ModelPrice.objects.values_list("model", flat=True).distinct()
    prices = [price_for_model(model=m) for m in models]
    return [p for p in prices if p is not None]


@pytest.mark.parametrize("text", [CJK, EMOJI, MIXED, CJK * 50, EMOJI * 50])
def test_text_counts_at_least_its_utf8_bytes(text):
    assert utf8(text) > len(text)
    for messages, system in [
        ([{"role": "user", "content": text}], None),
        ([{"role": "user", "content": [{"type": "text", "text": text}]}], text),
    ]:
        counted = utf8(text) * (1 if system is None else 2)
        assert estimate_input_tokens(messages=messages, system=system) >= counted


def test_cjk_is_bounded_by_bytes_not_by_an_average_of_characters_per_token():
    text = "漢" * 3_000
    # 3,000 characters are 9,000 bytes: a byte-level tokenizer may bill up to 9,000 tokens,
    # three times what a characters-per-token average (1,000 at 3 a token) would reserve.
    assert estimate_input_tokens(messages=[{"role": "user", "content": text}]) >= 9_000


@pytest.mark.parametrize("text", [CJK, EMOJI, MIXED, "hi", CJK * 40 + EMOJI * 40])
def test_the_estimate_is_at_least_what_the_fake_provider_bills(fake_provider, text):
    messages = [{"role": "user", "content": text}]
    system = f"Answer in the language of: {text}"
    body = {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": messages, "system": system}
    outcome = get_provider().call(ProviderRequest(body=body, idempotency_key="bound-check"))
    assert outcome.kind == "success", outcome.message
    billed_input = sum(
        outcome.usage[k]
        for k in (
            "input_tokens",
            "cache_write_5m_tokens",
            "cache_write_1h_tokens",
            "cache_read_tokens",
        )
    )
    assert estimate_input_tokens(messages=messages, system=system) >= billed_input
    assert outcome.usage["output_tokens"] <= 64


def test_an_image_costs_the_per_block_maximum_whatever_its_base64_size():
    def with_image(raw: bytes) -> int:
        data = base64.b64encode(raw).decode()
        block = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": data},
        }
        content = [block, {"type": "text", "text": "Describe."}]
        return estimate_input_tokens(messages=[{"role": "user", "content": content}])

    without = estimate_input_tokens(
        messages=[{"role": "user", "content": [{"type": "text", "text": "Describe."}]}]
    )
    tiny, large = with_image(b"\x89PNG" * 4), with_image(b"\x89PNG" * 1_000_000)
    assert tiny == large == without + IMAGE_BLOCK_MAX_TOKENS + BLOCK_FRAMING_TOKENS
    # A newer model's highest resolution, 2576 px on the long edge, ~3.75 MP: at most 4,784
    # visual tokens; older models cap near 1,600.
    assert IMAGE_BLOCK_MAX_TOKENS >= 4_784


def test_a_pdf_costs_its_maximum_and_a_text_document_its_bytes():
    pdf = {
        "type": "document",
        "source": {
            "type": "base64",
            "media_type": "application/pdf",
            "data": base64.b64encode(b"%PDF-1.4 tiny").decode(),
        },
    }
    text_doc = {
        "type": "document",
        "title": "Memo",
        "source": {"type": "text", "media_type": "text/plain", "data": CJK},
    }
    content_doc = {
        "type": "document",
        "source": {"type": "content", "content": [{"type": "text", "text": EMOJI}]},
    }
    base = estimate_input_tokens(
        messages=[{"role": "user", "content": [{"type": "text", "text": "Q"}]}]
    )

    def plus(block: dict) -> int:
        content = [block, {"type": "text", "text": "Q"}]
        return estimate_input_tokens(messages=[{"role": "user", "content": content}]) - base

    assert plus(pdf) == PDF_BLOCK_MAX_TOKENS + BLOCK_FRAMING_TOKENS
    assert PDF_BLOCK_MAX_TOKENS >= 100 * 1_600  # 100 pages, each at least an image's worth
    assert plus(text_doc) >= utf8(CJK) + utf8("Memo")
    assert plus(content_doc) >= utf8(EMOJI)


def test_tool_calls_results_and_thinking_count_their_bytes():
    tool_input = {"city": "東京", "note": EMOJI}
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": CJK, "signature": "sig" * 20},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": tool_input},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": MIXED}],
                }
            ],
        },
    ]
    counted = utf8("Weather?") + utf8(CJK) + utf8("東京") + utf8(EMOJI) + utf8(MIXED)
    assert estimate_input_tokens(messages=messages) >= counted


def test_the_bound_covers_any_usage_the_provider_could_report():
    rng = random.Random(20260611)
    prices = all_prices()
    assert prices
    for _ in range(300):
        messages, system = random_request(rng)
        price = rng.choice(prices)
        max_tokens = rng.randint(1, price.max_output_tokens)
        bound = upper_bound_cost(price, messages=messages, system=system, max_tokens=max_tokens)
        budget = estimate_input_tokens(messages=messages, system=system)
        # The worst case: every input token a 1-hour cache write, every output token used.
        worst = {"cache_write_1h_tokens": budget, "output_tokens": max_tokens}
        assert attempt_cost(price, worst) <= bound
        for _ in range(5):
            cuts = sorted(rng.randint(0, rng.randint(0, budget)) for _ in range(3))
            usage = {
                "input_tokens": cuts[0],
                "cache_write_5m_tokens": cuts[1] - cuts[0],
                "cache_write_1h_tokens": cuts[2] - cuts[1],
                "cache_read_tokens": rng.randint(0, budget - cuts[2]),
                "output_tokens": rng.randint(0, max_tokens),
            }
            assert attempt_cost(price, usage) <= bound
            assert attempt_cost(price, usage, batch=True) <= bound


def test_the_bound_covers_what_the_fake_provider_bills_for_random_requests(fake_provider):
    rng = random.Random(7)
    price = price_for_model(model="claude-haiku-4-5")
    assert price is not None
    for i in range(12):
        messages, system = random_request(rng)
        body: dict = {"model": price.model, "max_tokens": rng.randint(1, 300), "messages": messages}
        if system is not None:
            body["system"] = system
        bound = upper_bound_cost(
            price, messages=messages, system=system, max_tokens=body["max_tokens"]
        )
        for repeat in range(2):  # the second call reads what the first wrote to the cache
            outcome = get_provider().call(
                ProviderRequest(body=body, idempotency_key=f"random-{i}-{repeat}")
            )
            assert outcome.kind == "success", outcome.message
            assert attempt_cost(price, outcome.usage) <= bound


def test_the_bound_rounds_up_to_the_micro_dollar():
    price = price_for_model(model="claude-haiku-4-5")
    assert price is not None
    bound = upper_bound_cost(
        price, messages=[{"role": "user", "content": "a"}], system=None, max_tokens=1
    )
    exact = (
        Decimal(estimate_input_tokens(messages=[{"role": "user", "content": "a"}]))
        * price.cache_write_1h_per_mtok
        + price.output_per_mtok
    ) / Decimal(1_000_000)
    assert bound >= exact
