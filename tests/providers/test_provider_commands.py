"""``manage.py llm_provider`` and ``manage.py llm_model``: add, update, list, and clear errors."""

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger.models import ModelPrice
from ledger.selectors import price_for_model
from providers.models import Provider
from providers.registry import provider_for

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_it_adds_an_ollama_endpoint_and_its_model_in_two_commands():
    assert "added provider ollama" in run(
        "llm_provider", "add", "ollama", "--kind", "openai", "--base-url",
        "http://127.0.0.1:11434/v1/",
    )  # fmt: skip
    out = run(
        "llm_model", "add", "llama3.1:8b", "--provider", "ollama", "--input-price", "0",
        "--output-price", "0", "--max-output-tokens", "8192",
    )  # fmt: skip
    assert "added model llama3.1:8b on ollama (chat)" in out
    ollama = Provider.objects.get(name="ollama")
    assert ollama.base_url == "http://127.0.0.1:11434/v1" and ollama.api_key_env == ""
    price = price_for_model(model="llama3.1:8b")
    assert price is not None and price.provider_name == "ollama"
    assert price.input_per_mtok == price.output_per_mtok == 0 and price.max_output_tokens == 8192
    provider = provider_for("llama3.1:8b")
    assert provider.name == "ollama" and type(provider).__name__ == "OpenAICompatProvider"
    listing = run("llm_model", "list")
    assert "llama3.1:8b" in listing and "claude-sonnet-4-6" in listing
    assert "ollama" in run("llm_provider", "list")


def test_add_of_an_existing_name_updates_it_with_a_new_price_row():
    run("llm_provider", "add", "openai", "--kind", "openai", "--base-url",
        "https://api.openai.com/v1", "--api-key-env", "OPENAI_API_KEY")  # fmt: skip
    assert "updated provider openai" in run(
        "llm_provider", "add", "openai", "--kind", "openai", "--base-url",
        "https://gateway.example/v1", "--api-key-env", "GATEWAY_API_KEY",
    )  # fmt: skip
    provider = Provider.objects.get(name="openai")
    assert (provider.base_url, provider.api_key_env) == (
        "https://gateway.example/v1",
        "GATEWAY_API_KEY",
    )
    args = ["llm_model", "add", "gpt-4.1", "--provider", "openai", "--output-price", "8"]
    run(*args, "--input-price", "2")
    assert "unchanged" in run(*args, "--input-price", "2")
    assert "updated model gpt-4.1" in run(*args, "--input-price", "2.5")
    rows = ModelPrice.objects.filter(model="gpt-4.1").order_by("effective_from")
    assert [row.input_per_mtok for row in rows] == [Decimal("2"), Decimal("2.5")]
    assert rows.last().max_output_tokens == 4096  # type: ignore[union-attr]


def test_a_claude_model_keeps_its_cache_write_rates_when_its_prices_change():
    run("llm_model", "add", "claude-haiku-4-5", "--provider", "anthropic", "--input-price", "1",
        "--output-price", "6")  # fmt: skip
    price = price_for_model(model="claude-haiku-4-5")
    assert price is not None and price.output_per_mtok == 6
    assert price.cache_write_5m_per_mtok == Decimal("1.25") and price.max_output_tokens == 64_000


def test_an_embedding_model_is_priced_as_one_and_refused_for_a_chat_job(alice_client):
    # The Messages API has no embeddings: such a model belongs to an OpenAI-compatible provider.
    with pytest.raises(CommandError, match="has no embeddings"):
        run("llm_model", "add", "text-embedding-3-small", "--provider", "anthropic",
            "--input-price", "0.02", "--output-price", "0", "--embedding")  # fmt: skip
    run("llm_provider", "add", "openai", "--kind", "openai", "--base-url",
        "https://api.openai.com/v1", "--api-key-env", "OPENAI_API_KEY")  # fmt: skip
    run("llm_model", "add", "text-embedding-3-small", "--provider", "openai",
        "--input-price", "0.02", "--output-price", "0", "--embedding")  # fmt: skip
    assert price_for_model(model="text-embedding-3-small").kind == "embedding"  # type: ignore[union-attr]
    response = alice_client.post(
        "/api/v1/jobs/",
        {"feature": "f", "model": "text-embedding-3-small", "max_tokens": 10,
         "messages": [{"role": "user", "content": "hi"}]},
        format="json",
    )  # fmt: skip
    assert response.status_code == 400 and response.json()["code"] == "invalid_model"


def test_a_disabled_provider_refuses_submits_for_its_models(alice_client):
    run("llm_provider", "add", "vllm", "--kind", "openai", "--base-url", "http://10.0.0.5:8000/v1",
        "--disabled")  # fmt: skip
    run("llm_model", "add", "qwen", "--provider", "vllm", "--input-price", "0", "--output-price",
        "0")  # fmt: skip
    response = alice_client.post(
        "/api/v1/jobs/",
        {"feature": "f", "model": "qwen", "max_tokens": 10,
         "messages": [{"role": "user", "content": "hi"}]},
        format="json",
    )  # fmt: skip
    assert response.status_code == 400 and response.json()["code"] == "provider_disabled"


@pytest.mark.parametrize(
    "args,message",
    [
        (["llm_provider", "add", "x", "--kind", "openai"], "base_url: an openai provider needs"),
        (["llm_provider", "add", "Bad Name", "--kind", "openai", "--base-url", "http://h/v1"],
         "name:"),
        (["llm_provider", "add", "x", "--kind", "openai", "--base-url", "not a url"], "base_url:"),
        (["llm_provider", "add", "x", "--kind", "openai", "--base-url", "http://h/v1",
          "--api-key-env", "sk-live-123"], "api_key_env:"),
        (["llm_model", "add", "m", "--provider", "nope", "--input-price", "0", "--output-price",
          "0"], "Provider 'nope' does not exist"),
        (["llm_model", "add", "m", "--provider", "anthropic", "--input-price", "-1",
          "--output-price", "0"], "input_price must be"),
        (["llm_model", "add", "m", "--provider", "anthropic", "--input-price", "1",
          "--output-price", "1", "--max-output-tokens", "0"], "max_output_tokens must be"),
        (["llm_model", "add", "m", "--provider", "anthropic", "--input-price", "abc",
          "--output-price", "1"], "invalid usd value"),
    ],
)  # fmt: skip
def test_bad_input_gets_a_clear_error(args, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        run(*args)
    assert not Provider.objects.filter(name="x").exists()
