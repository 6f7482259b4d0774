"""CSRF on every write a session cookie can reach: the API (DRF's SessionAuthentication), the
admin's forms and actions, django-rq's pages, the sign-in pages; an API token needs none.

Django's test client skips CSRF checks unless asked: every client here is built with
``enforce_csrf_checks=True``, as a browser's requests are checked."""

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.authentication import SessionAuthentication

from api.authentication import ApiTokenAuthentication
from gateway.calls import API_KEY_ONLY
from jobs.models import LlmJob
from keys.testing import api_key_for
from ledger.models import Budget
from tests.conftest import job_body, make_user

pytestmark = pytest.mark.django_db

UUID = "00000000-0000-0000-0000-000000000001"


def _routes(resolver: URLResolver | None = None, prefix: str = "/") -> Iterator[tuple[str, Any]]:
    resolver = resolver or get_resolver()
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _routes(entry, route)
        elif isinstance(entry, URLPattern):
            yield route, entry.callback


def _concrete(route: str) -> str | None:
    """A path ``route`` matches (converters and simple regex groups filled), or None."""
    path = route.replace("^", "").replace("$", "").replace("/?", "/").replace("\\Z", "")
    path = re.sub(r"<int:[^>]+>|\(\?P<[^>]+>\[0-9\]\+\)|\(\?P<[^>]+>\\d\+\)", "1", path)
    path = re.sub(r"<(uuid:|str:|slug:|path:)?[^>]+>|\(\?P<[^>]+>[^)]+\)", UUID, path)
    return None if re.search(r"[()\[\]*+?\\|]", path) else re.sub("//+", "/", path)


def _all_paths() -> list[tuple[str, Any]]:
    found = [(_concrete(route), view) for route, view in _routes()]
    return [(path, view) for path, view in found if path is not None]


def _csrf_refusal(response: Any) -> bool:
    text = response.content.decode(errors="replace")
    return response.status_code == 403 and (
        "CSRF verification failed" in text or "CSRF Failed" in text
    )


@pytest.fixture
def root() -> Client:
    user = make_user("root", is_staff=True)
    user.is_superuser = True
    user.save()
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def _csrf_token(client: Client) -> str:
    client.get("/login/")
    return str(client.cookies["csrftoken"].value)


def test_the_csrf_middleware_is_installed_and_only_drf_views_skip_it():
    """Django exempts every DRF view from the middleware: DRF then checks CSRF itself, in
    SessionAuthentication, for every request a session authenticates. No other view is exempt
    but the front doors' (gateway/), which authenticate an API key only, never a session, and
    no API view authenticates a session in a way that skips that check."""
    assert "django.middleware.csrf.CsrfViewMiddleware" in settings.MIDDLEWARE
    paths = _all_paths()
    assert len(paths) > 50  # the admin's URLs are in
    for path, view in paths:
        if not getattr(view, "csrf_exempt", False) or getattr(view, API_KEY_ONLY, False):
            continue
        drf_view = getattr(view, "cls", None)
        assert drf_view is not None, f"{path}: csrf_exempt but not a DRF view"
        for auth in drf_view.authentication_classes:
            if issubclass(auth, SessionAuthentication):
                assert auth.enforce_csrf is SessionAuthentication.enforce_csrf, (path, auth)
            else:
                assert issubclass(auth, ApiTokenAuthentication), (path, auth)


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_every_url_refuses_a_session_write_without_a_csrf_token(root, method):
    """Every URL the project serves, as a superuser's session (so that no permission check can
    answer first): refused for CSRF, or (the API schema and its docs, which authenticate
    nobody and take no writes) 405; a front door (API keys only) refuses the session as no key
    (401) or the method (405)."""
    for path, view in _all_paths():
        response = getattr(root, method)(path)
        if _csrf_refusal(response):
            continue
        if getattr(view, API_KEY_ONLY, False):
            assert response.status_code in (401, 404, 405), (method, path, response.status_code)
            continue
        drf_view = getattr(view, "cls", None)
        assert response.status_code == 405, (method, path, response.status_code)
        assert drf_view is not None and not hasattr(drf_view, method), (method, path)
        assert not any(
            issubclass(auth, SessionAuthentication) for auth in drf_view.authentication_classes
        ), (method, path)


@pytest.mark.usefixtures("prices")
def test_a_session_submit_with_the_token_is_accepted(root):
    token = _csrf_token(root)

    response = root.post(
        "/api/v1/jobs/", job_body(), content_type="application/json", HTTP_X_CSRFTOKEN=token
    )

    assert response.status_code == 202, response.content
    assert LlmJob.objects.count() == 1


def test_an_api_session_refusal_is_in_the_project_error_format(root):
    response = root.post("/api/v1/jobs/", job_body(), content_type="application/json")

    assert response.status_code == 403
    assert response.json() == {
        "code": "permission_denied",
        "message": "CSRF Failed: CSRF cookie not set.",
        "detail": None,
    }


@pytest.mark.usefixtures("prices")
def test_an_api_token_needs_no_csrf_token():
    client = Client(enforce_csrf_checks=True)
    key = api_key_for(make_user("tess"))

    response = client.post(
        "/api/v1/jobs/",
        job_body(),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )

    assert response.status_code == 202, response.content


def test_an_admin_form_with_the_token_is_saved(root):
    token = _csrf_token(root)
    form = {
        "csrfmiddlewaretoken": token,
        "scope": "feature",
        "feature": "email-classify",
        "period": "month",
        "limit_usd": "200",
        "soft_alert_percent": "80",
        "on_exceed": "reject",
        "enabled": "on",
    }

    without = root.post(
        "/admin/ledger/budget/add/", {k: v for k, v in form.items() if k != "csrfmiddlewaretoken"}
    )
    assert _csrf_refusal(without)
    assert Budget.objects.count() == 0

    response = root.post("/admin/ledger/budget/add/", form)
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert Budget.objects.count() == 1


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_signing_in_needs_the_token(path):
    make_user("sam", password="pw-sam-long-enough", is_staff=True)
    client = Client(enforce_csrf_checks=True)
    credentials = {"username": "sam", "password": "pw-sam-long-enough"}

    assert _csrf_refusal(client.post(path, credentials))
    assert "_auth_user_id" not in client.session

    token = _csrf_token(client)
    response = client.post(path, {**credentials, "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert "_auth_user_id" in client.session


def test_signing_out_of_the_admin_needs_the_token(root):
    assert _csrf_refusal(root.post("/admin/logout/"))
    assert "_auth_user_id" in root.session


def test_over_https_a_post_from_another_origin_is_refused_even_with_the_token(settings, caplog):
    """With DJANGO_SECURE the site is HTTPS only: Django then also checks the Origin header
    against the site's host and DJANGO_CSRF_TRUSTED_ORIGINS."""
    settings.CSRF_COOKIE_SECURE = True
    make_user("sam", password="pw-sam-long-enough")
    client = Client(enforce_csrf_checks=True)
    client.get("/login/", secure=True)
    token = client.cookies["csrftoken"].value
    form = {"username": "sam", "password": "pw-sam-long-enough", "csrfmiddlewaretoken": token}

    foreign = client.post("/login/", form, secure=True, HTTP_ORIGIN="https://evil.example")
    assert _csrf_refusal(foreign)
    assert any("Origin checking failed" in r.getMessage() for r in caplog.records)

    ours = client.post("/login/", form, secure=True, HTTP_ORIGIN="https://testserver")
    assert ours.status_code == 302


def test_a_csrf_refusal_under_api_where_no_view_answers_is_json(root):
    """The /api/ catch-all (the JSON 404) is a plain view: Django's middleware checks CSRF for
    it, and its refusal under /api/ is the API's error body, not Django's HTML page."""
    response = root.post("/api/v1/failures/null,null/requeue/")
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "permission_denied"
    assert response.json()["message"].startswith("CSRF Failed: ")
    page = root.post("/admin/logout/")
    assert page.status_code == 403 and page["Content-Type"].startswith("text/html")
