"""A provider nobody answers (a row pointing at a closed port): the job's error and the ledger
row name the host and port tried, never the URL's path (a gateway may put a token there) nor
the key. Real MariaDB, Redis, RQ workers and the SDKs; nothing listens on the port."""

from decimal import Decimal
from typing import Any

import pytest

from jobs.models import LlmJob
from ledger.models import CostEntry
from ledger.price_table import model_price_set
from providers.services import provider_save
from tests.conftest import _free_port, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

PATH_TOKEN = "tenant-7f3a9c-secret-path-token"
KEY = "sk-unreachable-test-key-0123456789"


def _gateway(kind: str, model: str, base_url: str) -> None:
    """A provider row ``gateway`` at ``base_url``, its key from GATEWAY_API_KEY, serving
    ``model``."""
    provider_save(name="gateway", kind=kind, base_url=base_url, api_key_env="GATEWAY_API_KEY")
    model_price_set(
        model=model,
        provider="gateway",
        input_per_mtok=Decimal("1"),
        output_per_mtok=Decimal("2"),
        max_output_tokens=4096,
    )


@pytest.mark.parametrize(("kind", "model"), [("openai", "gpt-4o-mini"), ("anthropic", "claude-x")])
def test_it_names_the_host_and_port_of_an_unreachable_provider_without_path_or_key(
    alice_client: Any, workers: Any, monkeypatch: pytest.MonkeyPatch, kind: str, model: str
):
    port = _free_port()  # bound and released: nothing listens there
    monkeypatch.setenv("GATEWAY_API_KEY", KEY)
    _gateway(kind, model, f"http://127.0.0.1:{port}/{PATH_TOKEN}/v1")
    job = submit(alice_client, model=model)
    workers.work_once()

    job.refresh_from_db()
    assert job.status == "retrying" and job.error_code == "connection_error"
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.outcome == "connection_error" and entry.cost_usd == 0
    error = alice_client.get(f"/api/v1/jobs/{job.id}/").json()["error"]
    for message in (job.error_message, entry.error_message, error["message"]):
        assert message.startswith(f"ConnectError: could not connect to 127.0.0.1:{port}"), message
        assert "Connection refused" in message
        assert PATH_TOKEN not in message and KEY not in message and "/v1" not in message
    assert LlmJob.objects.filter(status="running").count() == 0


@pytest.mark.parametrize(
    ("kind", "model", "path", "key_set"),
    [
        # Models no other test prices (a dated id the fake knows; a self-hosted name).
        ("openai", "gateway-llama", "/openai/v1", True),
        ("anthropic", "claude-haiku-4-5-20251001", "", True),
        ("openai", "gateway-llama", "/openai/v1", False),
    ],
    ids=["openai", "anthropic", "unset-variable"],
)
def test_a_401_names_the_provider_row_and_the_variable_its_key_comes_from(
    alice_client: Any,
    workers: Any,
    fake_provider: Any,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    model: str,
    path: str,
    key_set: bool,
):
    """Issue 43, 4: "invalid x-api-key" alone does not say which of several keys was wrong."""
    if key_set:
        monkeypatch.setenv("GATEWAY_API_KEY", KEY)
    else:
        monkeypatch.delenv("GATEWAY_API_KEY", raising=False)
    _gateway(kind, model, f"{fake_provider.url}{path}")
    fake_provider.faults({"401": 1.0})
    job = submit(alice_client, model=model)
    workers.work_once()

    job.refresh_from_db()
    assert job.status == "failed" and job.error_code == "authentication_failed"
    error = alice_client.get(f"/api/v1/jobs/{job.id}/").json()["error"]
    for message in (job.error_message, error["message"]):
        assert "invalid x-api-key" in message, message
        assert "provider 'gateway'" in message and "GATEWAY_API_KEY" in message, message
        assert ("is not set" in message) is not key_set, message
        assert KEY not in message
