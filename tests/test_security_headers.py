"""Cookie, header and host settings with DEBUG off, in the documented production environment:
the settings themselves, and what the Procfile's web line really sends behind a TLS proxy on
the same host (uvicorn trusts its X-Forwarded-Proto, as docs/operations.md describes)."""

import re
import secrets
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import make_user
from tests.test_deploy_settings import documented_production_environment, settings_in

SITE = "llmops.example.com"


def test_the_documented_production_environment_sets_every_cookie_and_header_rule():
    values = settings_in(
        documented_production_environment(),
        "DEBUG",
        "SESSION_COOKIE_SECURE",
        "SESSION_COOKIE_HTTPONLY",
        "SESSION_COOKIE_SAMESITE",
        "CSRF_COOKIE_SECURE",
        "CSRF_COOKIE_HTTPONLY",
        "CSRF_COOKIE_SAMESITE",
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD",
        "SECURE_CONTENT_TYPE_NOSNIFF",
        "SECURE_REFERRER_POLICY",
        "SECURE_CROSS_ORIGIN_OPENER_POLICY",
        "X_FRAME_OPTIONS",
        "ALLOWED_HOSTS",
        "CSRF_TRUSTED_ORIGINS",
    )

    assert values == {
        "DEBUG": False,
        "SESSION_COOKIE_SECURE": True,
        "SESSION_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Lax",
        "CSRF_COOKIE_SECURE": True,
        # The live page reads it to send X-CSRFToken; HttpOnly would protect nothing (Django).
        "CSRF_COOKIE_HTTPONLY": False,
        "CSRF_COOKIE_SAMESITE": "Lax",
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31_536_000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": True,
        "SECURE_CONTENT_TYPE_NOSNIFF": True,
        "SECURE_REFERRER_POLICY": "same-origin",
        "SECURE_CROSS_ORIGIN_OPENER_POLICY": "same-origin",
        "X_FRAME_OPTIONS": "DENY",
        "ALLOWED_HOSTS": [SITE],
        "CSRF_TRUSTED_ORIGINS": [f"https://{SITE}"],
    }


@pytest.fixture
def production_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The documented production environment for the web server subprocess (asgi_server copies
    os.environ when it starts), with 127.0.0.1 allowed too so that the fixture's health probe
    answers, and no provider key (nothing here calls it)."""
    for name, value in documented_production_environment().items():
        if name not in ("DATABASE_URL", "REDIS_URL", "ANTHROPIC_API_KEY"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    monkeypatch.setenv("DJANGO_ALLOWED_HOSTS", f"{SITE},127.0.0.1")
    monkeypatch.delenv("DJANGO_DEBUG", raising=False)
    yield


def _cookie(response: httpx.Response, name: str) -> str:
    found = [v for v in response.headers.get_list("set-cookie") if v.startswith(f"{name}=")]
    assert found, (name, response.headers.get_list("set-cookie"))
    return found[0]


@pytest.mark.django_db(transaction=True)
def test_the_web_line_behind_a_tls_proxy_sends_secure_cookies_and_headers(
    production_environment, asgi_server
):
    make_user("paula", password="a-long-enough-password-for-paula")
    proxied = {"Host": SITE, "X-Forwarded-Proto": "https"}

    with httpx.Client(base_url=asgi_server, timeout=30) as client:
        plain = client.get("/login/", headers={"Host": SITE})
        assert plain.status_code == 301
        assert plain.headers["Location"] == f"https://{SITE}/login/"

        # Probes inside the network stay on plain http (SECURE_REDIRECT_EXEMPT).
        assert client.get("/healthz").status_code == 200

        page = client.get("/login/", headers=proxied)
        assert page.status_code == 200
        assert page.headers["Strict-Transport-Security"] == (
            "max-age=31536000; includeSubDomains; preload"
        )
        assert page.headers["X-Frame-Options"] == "DENY"
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        assert page.headers["Referrer-Policy"] == "same-origin"
        assert page.headers["Cross-Origin-Opener-Policy"] == "same-origin"
        csrf_cookie = _cookie(page, "csrftoken")
        assert "; Secure" in csrf_cookie and "; SameSite=Lax" in csrf_cookie
        assert "HttpOnly" not in csrf_cookie
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token

        signed_in = client.post(
            "/login/",
            data={
                "username": "paula",
                "password": "a-long-enough-password-for-paula",
                "csrfmiddlewaretoken": token.group(1),
            },
            headers={
                **proxied,
                "Origin": f"https://{SITE}",
                # The client keeps Secure cookies for https: the proxy's side is plain http.
                "Cookie": csrf_cookie.split(";")[0],
            },
        )
        assert signed_in.status_code == 302, signed_in.text[-500:]
        session_cookie = _cookie(signed_in, "sessionid")
        for attribute in ("; Secure", "; HttpOnly", "; SameSite=Lax", "; Path=/"):
            assert attribute in session_cookie, session_cookie
        assert "Domain=" not in session_cookie

        forged_host = client.get("/login/", headers={"Host": "evil.example"})
        assert forged_host.status_code == 400
