"""``GET /api/v1/features/``, ``GET``/``PUT /api/v1/features/<feature>/``: the feature policy
(fallback models now), staff with the change permission; the admin form checks it alike."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from features.models import FeaturePolicy
from keys.testing import api_key_for
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

URL = "/api/v1/features/email-classify/"


def _client(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_for(user)}")
    return client


@pytest.fixture
def editor(db: None) -> APIClient:
    return _client(make_user("editor", "change_featurepolicy", "view_featurepolicy", is_staff=True))


@pytest.fixture
def viewer(db: None) -> APIClient:
    return _client(make_user("viewer", "view_featurepolicy", is_staff=True))


def test_it_shows_the_defaults_of_a_feature_without_a_policy(editor):
    response = editor.get(URL)
    assert response.status_code == 200, response.content
    assert response.json() == {
        "feature": "email-classify",
        "fallback_models": [],
        "mode": "realtime",
        "deadline_seconds": None,
        "paused": False,
        "default_priority": None,
        "waiting": 0,
        "configured": False,
        "updated_at": None,
        "updated_by": None,
    }
    assert not FeaturePolicy.objects.exists()


def test_it_sets_and_lists_fallback_models_in_order(editor):
    response = editor.put(
        URL, {"fallback_models": ["claude-haiku-4-5", "claude-opus-4-6"]}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["fallback_models"] == ["claude-haiku-4-5", "claude-opus-4-6"]
    assert body["configured"] is True and body["updated_by"] == "editor"
    assert editor.get(URL).json()["fallback_models"] == ["claude-haiku-4-5", "claude-opus-4-6"]
    listed = editor.get("/api/v1/features/").json()
    assert [row["feature"] for row in listed["results"]] == ["email-classify"]
    # A field left out keeps its value; [] removes every fallback.
    body = editor.put(URL, {"mode": "deferred"}, format="json").json()
    assert body["mode"] == "deferred" and body["fallback_models"] == [
        "claude-haiku-4-5",
        "claude-opus-4-6",
    ]
    assert editor.put(URL, {"fallback_models": []}, format="json").json()["fallback_models"] == []
    assert editor.get(URL).json()["mode"] == "deferred"


def test_a_typo_in_a_model_name_is_refused_with_the_nearest_priced_one(editor):
    response = editor.put(URL, {"fallback_models": ["claude-haiku-4.5"]}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "unknown_model"
    assert body["detail"]["did_you_mean"] == "claude-haiku-4-5"
    assert body["detail"]["field"] == "fallback_models"
    assert not FeaturePolicy.objects.exists()  # nothing half-written


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"fallback_models": "claude-haiku-4-5"}, "invalid_fallback_models"),
        ({"fallback_models": ["claude-haiku-4-5", "claude-haiku-4-5"]}, "invalid_fallback_models"),
        ({"fallback_models": ["claude-haiku-4-5"] * 6}, "invalid_fallback_models"),
        ({"fallback_models": [1]}, "invalid_fallback_models"),
        ({}, "invalid_request"),
        ({"mode": "later"}, "invalid_mode"),
        ({"deadline_seconds": 0}, "invalid_deadline"),
        ({"deadline_seconds": "3600"}, "invalid_deadline"),
        ({"fallback_models": None}, "invalid_fallback_models"),
        ({"fallback_models": [], "fallbacks": []}, "unknown_field"),
    ],
)
def test_a_bad_body_gets_a_stable_code(editor, body, code):
    response = editor.put(URL, body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code
    assert not FeaturePolicy.objects.exists()


def test_a_feature_that_is_not_a_slug_is_refused(editor):
    response = editor.put(
        "/api/v1/features/Email Classify/", {"fallback_models": []}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_feature"


def test_the_view_permission_reads_but_does_not_change(viewer):
    assert viewer.get(URL).status_code == 200
    response = viewer.put(URL, {"fallback_models": ["claude-haiku-4-5"]}, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert not FeaturePolicy.objects.exists()


def test_a_plain_user_gets_403(alice_client):
    assert alice_client.get(URL).status_code == 403
    assert alice_client.put(URL, {"fallback_models": []}, format="json").status_code == 403


def test_the_admin_form_checks_the_models_as_the_api_does(db):
    from django.test import Client

    make_user("admin-editor", "change_featurepolicy", "add_featurepolicy", "view_featurepolicy",
              is_staff=True, password="pw")  # fmt: skip
    client = Client()
    assert client.login(username="admin-editor", password="pw")
    add = "/admin/features/featurepolicy/add/"
    response = client.post(add, {"feature": "summaries", "fallback_models": "claude-haiku-4.5"})
    assert response.status_code == 200 and b"Did you mean" in response.content
    assert not FeaturePolicy.objects.exists()
    response = client.post(
        add, {"feature": "summaries", "fallback_models": "", "mode": "deferred",
              "deadline_seconds": "99999999"},
    )  # fmt: skip
    assert response.status_code == 200 and b"deadline_seconds must be between" in response.content
    assert not FeaturePolicy.objects.exists()
    response = client.post(
        add,
        {
            "feature": "summaries",
            "fallback_models": "claude-haiku-4-5\nclaude-opus-4-6",
            "mode": "realtime",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    policy = FeaturePolicy.objects.get(feature="summaries")
    assert policy.fallback_models == ["claude-haiku-4-5", "claude-opus-4-6"]
    assert policy.updated_by is not None
