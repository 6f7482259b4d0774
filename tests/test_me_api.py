"""GET /api/v1/me/: who the caller is, for a token or a session, and nothing for anyone else."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def test_it_answers_the_token_owner(alice, alice_client):
    response = alice_client.get("/api/v1/me/")
    assert response.status_code == 200
    assert response.json() == {"id": alice.id, "username": "alice", "is_staff": False}


def test_it_answers_a_staff_session_and_says_so(client):
    staff = make_user("carol", is_staff=True)
    client.force_login(staff)
    assert client.get("/api/v1/me/").json() == {
        "id": staff.id,
        "username": "carol",
        "is_staff": True,
    }


def test_it_reads_nothing_beyond_the_token(alice_client):
    # The key's first use this minute also writes its last_used_at; the others read only it.
    assert alice_client.get("/api/v1/me/").status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert alice_client.get("/api/v1/me/").status_code == 200
    assert len(queries) == 1, [q["sql"] for q in queries]


def test_it_refuses_anonymous_and_bad_tokens(alice):
    anonymous = APIClient().get("/api/v1/me/")
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "not_authenticated"
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert bad.get("/api/v1/me/").status_code == 401


def test_it_is_read_only(alice_client):
    assert alice_client.post("/api/v1/me/", {}, format="json").status_code == 405
