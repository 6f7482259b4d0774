"""A key may always read what it submitted (issue 43, 9): the README's least-privilege key
(``jobs:write`` alone) polls its own job's and batch's ``status_url``; another key of the same
user without ``jobs:read`` still gets ``403 insufficient_scope``, and lists stay behind
``jobs:read``."""

import logging
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from keys.testing import api_key_for
from tests.batches.helpers import batch_body, item
from tests.conftest import job_body

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]


def _client(user: Any, scopes: list[str]) -> APIClient:
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key_for(user, scopes=scopes)}")


@pytest.mark.parametrize(
    ("path", "body"),
    [("/api/v1/jobs/", job_body(max_tokens=16)), ("/api/v1/batches/", batch_body([item("a")]))],
    ids=["job", "batch"],
)
def test_a_write_only_key_reads_what_it_submitted_and_nothing_else(
    alice: Any, path: str, body: dict[str, Any]
) -> None:
    writer = _client(alice, ["jobs:write"])
    submitted = writer.post(path, body, format="json")
    assert submitted.status_code == 202, submitted.content
    status_url = submitted.json()["status_url"]

    own = writer.get(status_url)
    assert own.status_code == 200, own.content
    assert own.json()["id"] == submitted.json()["id"]

    other = _client(alice, ["jobs:write"]).get(status_url)
    assert other.status_code == 403, other.content
    assert other.json()["code"] == "insufficient_scope"
    assert other.json()["detail"]["required_scope"] == "jobs:read"

    listing = writer.get(path)
    assert listing.status_code == 403 and listing.json()["code"] == "insufficient_scope"
    assert _client(alice, ["jobs:read"]).get(status_url).status_code == 200


def test_the_same_key_of_another_user_still_gets_404(alice: Any, bob: Any) -> None:
    submitted = _client(alice, ["jobs:write"]).post(
        "/api/v1/jobs/", job_body(max_tokens=16), format="json"
    )
    answer = _client(bob, ["jobs:write", "jobs:read"]).get(submitted.json()["status_url"])
    assert answer.status_code == 404, answer.content


def _console_lines(*args: str) -> str:
    """What the console log handler shows while ``manage.py llm_key ...`` runs."""
    stream = StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        call_command("llm_key", *args, stdout=StringIO(), stderr=StringIO())
    finally:
        root.removeHandler(handler)
    return stream.getvalue()


def test_llm_key_create_prints_no_log_line_unless_asked(alice: Any) -> None:
    """Issue 43, 10: the audit's INFO lines stayed among the plain output; ``-v 2`` shows them."""
    quiet = _console_lines("create", "--user", "alice", "--name", "one", "--scopes", "jobs:write")
    assert quiet == ""
    loud = _console_lines(
        "-v", "2", "create", "--user", "alice", "--name", "two", "--scopes", "jobs:write"
    )
    assert "created keys.apikey two" in loud
