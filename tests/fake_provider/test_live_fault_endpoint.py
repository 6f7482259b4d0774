"""The live page's fault endpoint (``POST /live/fault-jobs/``, jobs/live_faults.py): offered only
to a signed-in user in development against the fake provider, never reaching a real provider;
the fault it scripts is that one job's, in place before the job can reach a worker."""

from typing import Any

import httpx
import pytest
from rest_framework.test import APIClient

from jobs import live_faults
from jobs.models import LlmJob
from tests.conftest import _free_port, job_body

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

URL = "/live/fault-jobs/"


@pytest.fixture(autouse=True)
def fresh_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test asks again whether the provider is the fake one."""
    monkeypatch.setattr(live_faults, "_probed", {})


@pytest.fixture
def development(settings: Any, fake_provider: Any) -> Any:
    settings.DEBUG = True
    return fake_provider


def body(fault: Any = "429", **job: Any) -> dict[str, Any]:
    return {"fault": fault, "job": job_body(**job)}


def assert_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.content
    assert set(response.json()) == {"code", "message", "detail"}
    assert response.json()["code"] == code


def test_it_scripts_the_fault_for_that_job_alone(alice_client: APIClient, development: Any):
    response = alice_client.post(URL, body("529"), format="json")
    assert response.status_code == 202, response.content
    job_id = response.json()["id"]
    assert response.json()["status_url"] == f"/api/v1/jobs/{job_id}/"
    job = LlmJob.objects.get(id=job_id)
    assert job.status == "queued" and job.feature == "email-classify"
    script = development.http.get("/_fake/faults").json()["script"]
    assert script == {"next": [], "keys": {job_id: ["529", "529", "ok"]}}


def test_a_529_storm_retries_twice_then_completes(
    alice_client: APIClient, development: Any, workers: Any
):
    response = alice_client.post(URL, body("529"), format="json")
    workers.drain()
    job = LlmJob.objects.get(id=response.json()["id"])
    assert job.status == "completed" and job.attempts == 3
    assert development.stats()["by_status"] == {"200": 1, "529": 2}


def test_it_refuses_with_debug_off(alice_client: APIClient, fake_provider: Any, settings: Any):
    settings.DEBUG = False
    assert_error(alice_client.post(URL, body(), format="json"), 404, "fault_picker_unavailable")
    assert not LlmJob.objects.exists()
    assert fake_provider.http.get("/_fake/faults").json()["script"]["keys"] == {}


def test_it_refuses_an_anonymous_user(development: Any):
    assert_error(APIClient().post(URL, body(), format="json"), 401, "not_authenticated")
    assert not LlmJob.objects.exists()


def test_it_never_sends_a_real_provider_a_request(
    alice_client: APIClient, settings: Any, monkeypatch: pytest.MonkeyPatch
):
    settings.DEBUG = True
    settings.ANTHROPIC_BASE_URL = "https://api.anthropic.com"

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a request left for {args}")

    monkeypatch.setattr(httpx, "get", refuse)
    monkeypatch.setattr(httpx, "post", refuse)
    assert_error(alice_client.post(URL, body(), format="json"), 404, "fault_picker_unavailable")
    assert live_faults.fault_choices() == []


def test_it_refuses_a_provider_that_is_not_the_fake(alice_client: APIClient, settings: Any):
    settings.DEBUG = True
    settings.ANTHROPIC_BASE_URL = f"http://127.0.0.1:{_free_port()}"  # nothing answers there
    assert_error(alice_client.post(URL, body(), format="json"), 404, "fault_picker_unavailable")


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (body("boom"), "unknown_fault"),
        (body(None), "unknown_fault"),
        ({"fault": "429"}, "invalid_request"),
        ({**body(), "extra": 1}, "invalid_request"),
        (body(max_tokens=0), "invalid_max_tokens"),
    ],
)
def test_a_bad_body_submits_nothing_and_scripts_nothing(
    alice_client: APIClient, development: Any, payload: Any, code: str
):
    assert_error(alice_client.post(URL, payload, format="json"), 400, code)
    assert not LlmJob.objects.exists()
    assert development.http.get("/_fake/faults").json()["script"]["keys"] == {}


def test_no_job_when_the_fake_provider_does_not_take_the_script(
    alice_client: APIClient, development: Any, monkeypatch: pytest.MonkeyPatch
):
    def down(*args: Any, **kwargs: Any) -> None:
        raise httpx.ConnectError("connection refused")

    monkeypatch.setattr(httpx, "post", down)
    response = alice_client.post(URL, body(), format="json")
    assert_error(response, 503, "fake_provider_unavailable")
    assert not LlmJob.objects.exists()


def test_the_live_page_offers_the_picker_only_in_development(
    client: Any, alice: Any, fake_provider: Any, settings: Any
):
    client.force_login(alice)
    settings.DEBUG = False
    assert 'id="fault"' not in client.get("/live/").content.decode()
    settings.DEBUG = True
    page = client.get("/live/").content.decode()
    assert 'id="fault"' in page and 'data-fault-url="/live/fault-jobs/"' in page
    for fault in live_faults.FAULTS.values():
        assert fault.label in page
