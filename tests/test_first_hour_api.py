"""The API's first-hour mistakes: a path without its trailing slash (every operation, every
method, DEBUG on and off), an unknown path under /api/ with DEBUG on, ``Bearer`` instead of
``Token``, a typo in a model name, a missing ``feature``."""

import re
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from jobs.models import LlmJob
from keys.models import ApiKey
from keys.testing import api_key_for
from tests.conftest import job_body, make_user, submit

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]

METHODS = ("get", "post", "put", "patch", "delete")


def operations() -> list[tuple[str, str]]:
    """(path template, method) of every operation in the published schema."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [
        (path, method)
        for path, item in schema["paths"].items()
        for method in item
        if method in METHODS
    ]


def test_every_operation_is_in_the_list():
    found = operations()
    assert ("/api/v1/jobs/", "post") in found
    assert ("/api/v1/jobs/{job_id}/cancel/", "post") in found
    assert len(found) >= 15


def call(
    client: APIClient,
    template: str,
    method: str,
    body: Any,
    *,
    strip: bool,
    ids: dict[str, str] | None = None,
) -> Any:
    """One operation on a job of its own (a cancel answers 409 for a job already cancelled);
    ``ids`` fills the other placeholders (else "1")."""
    ids = {**(ids or {}), "job_id": str(submit(client).id)}
    path = re.sub(r"\{(\w+)\}", lambda m: ids.get(m.group(1), "1"), template)
    return getattr(client, method)(path.rstrip("/") if strip else path, body, format="json")


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "no-debug"])
def test_every_operation_answers_without_its_trailing_slash_as_with_it(settings, debug):
    """Never a 500 (DEBUG's APPEND_SLASH error for a POST), never a redirect that turns a POST
    into a GET: the slash-less path answers as the path itself does, with the API's JSON."""
    settings.DEBUG = debug
    staff = make_user("sam", is_staff=True)
    staff.is_superuser = True
    staff.save()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_for(staff)}")
    # The revoke and rotate calls act on another user's key (404 both ways), never on the key
    # this client calls with: as "1" it was this client's own key in a fresh database, and the
    # operations after the revoke answered 401.
    other_key = ApiKey.objects.get(
        prefix=api_key_for(make_user("olga"))[:12], user__username="olga"
    )
    ids = {"key_id": str(other_key.id)}
    checked = 0
    for template, method in operations():
        body: dict[str, Any] = job_body() if method in ("post", "put", "patch") else {}

        with_slash, without = (
            call(client, template, method, body, strip=False, ids=ids),
            call(client, template, method, body, strip=True, ids=ids),
        )
        where = f"{method.upper()} {template.rstrip('/')}"
        assert without.status_code not in (301, 302, 307, 308, 500), (where, without)
        assert without.status_code == with_slash.status_code, (where, without.content)
        if without.status_code != 204:
            assert without["Content-Type"].startswith("application/json"), where
        checked += 1
    assert checked >= 15


def test_a_slash_less_submit_runs_the_job_once(settings):
    settings.DEBUG = True
    alice = make_user("alice")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_for(alice)}")
    response = client.post("/api/v1/jobs", job_body(), format="json")
    assert response.status_code == 202, response.content
    assert LlmJob.objects.filter(id=response.json()["id"], user=alice).count() == 1
    assert client.get("/api/v1/jobs").json()["count"] == 1


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "no-debug"])
@pytest.mark.parametrize(
    "method,path",
    [("get", "/api/v1/no-such-thing/"), ("post", "/api/v1/jobz"), ("get", "/api/v2/jobs/")],
)
def test_an_api_path_no_view_serves_answers_json_404(settings, debug, method, path):
    settings.DEBUG = debug
    response = getattr(APIClient(), method)(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "not_found"


def test_bearer_is_accepted_for_an_api_token(alice):
    key = api_key_for(alice)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/me/").json()["username"] == "alice"
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}x")
    refused = client.get("/api/v1/me/")
    assert refused.status_code == 401 and refused.json()["code"] == "authentication_failed"


def test_another_scheme_is_told_which_ones_work(alice):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Basic YWxpY2U6cHc=")
    response = client.get("/api/v1/jobs/")
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"
    assert "Token <key>" in response.json()["message"]
    assert "Bearer <key>" in response.json()["message"]


def test_a_model_typo_names_the_nearest_model_and_every_priced_one(alice_client):
    response = alice_client.post("/api/v1/jobs/", job_body(model="claude-sonet-4-6"), format="json")
    assert response.status_code == 400
    error = response.json()
    assert error["code"] == "unknown_model"
    assert "Did you mean 'claude-sonnet-4-6'?" in error["message"]
    assert error["detail"]["did_you_mean"] == "claude-sonnet-4-6"
    assert "claude-haiku-4-5" in error["detail"]["models"]
    # Far from every name: no guess, the list in the message.
    far = alice_client.post("/api/v1/jobs/", job_body(model="gpt-4o"), format="json").json()
    assert "did_you_mean" not in far["detail"]
    assert "claude-sonnet-4-6" in far["message"]


@pytest.mark.parametrize("field", ["feature", "model", "messages", "max_tokens"])
def test_a_missing_field_is_said_to_be_required(alice_client, field):
    body = job_body()
    del body[field]
    response = alice_client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    error = response.json()
    assert error["message"].startswith(f"{field} is required"), error
    assert error["detail"] == {"field": field}
