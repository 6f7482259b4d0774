"""Where a provider's calls go (issue 36, fault 1): a staff user with the provider permissions
cannot make a call carry a server secret to a host of their choosing. The key variable must be
a provider key's (``*_API_KEY`` or ``LLM_PROVIDER_KEY_ENVS``), never one of llmops's own
settings; changing the URL or the variable needs a permission of its own, is audited and raises
a WARNING alert; a row written before the rule still sends nothing but its own key. Real
MariaDB, Redis, RQ worker and an HTTP listener standing in for the attacker's host."""

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from alerts.models import Alert
from audit.models import AuditRecord
from jobs.models import LlmJob
from providers.models import Provider
from tests.conftest import make_user, submit

pytestmark = pytest.mark.django_db

CHANGE = "/admin/providers/provider/{}/change/"
SERVER_SECRETS = ["DJANGO_SECRET_KEY", "DATABASE_URL", "API_KEY_HASH_SECRET", "REDIS_URL"]


class Listener:
    """A host of the attacker's: records every request it gets, answers 400 (a fatal error,
    so that the job stops at once)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append(str(self.headers) + body.decode(errors="replace"))
                answer = b'{"type":"error","error":{"type":"invalid_request_error","message":"x"}}'
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def listener() -> Iterator[Listener]:
    host = Listener()
    yield host
    host.server.shutdown()


def admin_client(*perms: str) -> Client:
    client = Client()
    client.force_login(make_user("mallory", *perms, is_staff=True))
    return client


def change_form(provider: Provider, **changes: str) -> dict[str, str]:
    form = {
        "kind": provider.kind,
        "base_url": provider.base_url,
        "api_key_env": provider.api_key_env,
        "enabled": "on",
    }
    return {**form, **changes}


def test_provider_permissions_alone_cannot_change_where_calls_go(listener: Listener) -> None:
    staff = admin_client("view_provider", "change_provider", "add_provider")
    row = Provider.objects.get(name="anthropic")
    page = staff.get(CHANGE.format(row.pk))
    assert page.status_code == 200 and b'name="base_url"' not in page.content
    answer = staff.post(
        CHANGE.format(row.pk),
        change_form(row, base_url=listener.url, api_key_env="DJANGO_SECRET_KEY", enabled=""),
    )
    assert answer.status_code == 302, answer.content.decode()[-1500:]
    row.refresh_from_db()
    assert (row.base_url, row.api_key_env, row.enabled) == ("", "ANTHROPIC_API_KEY", False)
    # Nor may a new provider name a URL or a variable.
    staff.post(
        "/admin/providers/provider/add/",
        {"name": "evil", "kind": "anthropic", "base_url": listener.url,
         "api_key_env": "DJANGO_SECRET_KEY", "enabled": "on"},
    )  # fmt: skip
    evil = Provider.objects.filter(name="evil").first()
    assert evil is None or (evil.base_url, evil.api_key_env) == ("", "")


@pytest.mark.parametrize("variable", SERVER_SECRETS + ["SECRET_KEY", "MY_GATEWAY_TOKEN"])
def test_no_one_may_name_a_server_secret_as_a_providers_key(variable: str) -> None:
    staff = admin_client("view_provider", "change_provider", "change_provider_endpoint")
    row = Provider.objects.get(name="anthropic")
    answer = staff.post(CHANGE.format(row.pk), change_form(row, api_key_env=variable))
    assert answer.status_code == 200 and b"api_key_env" in answer.content
    assert b"errorlist" in answer.content
    row.refresh_from_db()
    assert row.api_key_env == "ANTHROPIC_API_KEY"
    with pytest.raises(CommandError, match="api_key_env"):
        call_command(
            "llm_provider", "add", "gw", "--kind", "openai", "--base-url", "http://gw/v1",
            "--api-key-env", variable,
        )  # fmt: skip
    assert not Provider.objects.filter(name="gw").exists()


def test_a_listed_variable_is_allowed_and_a_provider_key_variable_always(settings: Any) -> None:
    call_command(
        "llm_provider", "add", "gw", "--kind", "openai", "--base-url", "http://gw/v1",
        "--api-key-env", "GATEWAY_API_KEY",
    )  # fmt: skip
    settings.LLM_PROVIDER_KEY_ENVS = ["MY_GATEWAY_TOKEN"]
    call_command(
        "llm_provider", "add", "gw", "--kind", "openai", "--base-url", "http://gw/v1",
        "--api-key-env", "MY_GATEWAY_TOKEN",
    )  # fmt: skip
    assert Provider.objects.get(name="gw").api_key_env == "MY_GATEWAY_TOKEN"
    settings.LLM_PROVIDER_KEY_ENVS = ["DJANGO_SECRET_KEY"]  # a listed setting is still refused
    with pytest.raises(CommandError, match="own settings"):
        call_command(
            "llm_provider", "add", "gw", "--kind", "openai", "--base-url", "http://gw/v1",
            "--api-key-env", "DJANGO_SECRET_KEY",
        )  # fmt: skip


def test_an_endpoint_change_is_audited_and_alerted(listener: Listener) -> None:
    staff = admin_client("view_provider", "change_provider", "change_provider_endpoint")
    row = Provider.objects.get(name="anthropic")
    answer = staff.post(
        CHANGE.format(row.pk), change_form(row, base_url=listener.url, api_key_env="EU_API_KEY")
    )
    assert answer.status_code == 302, answer.content.decode()[-1500:]
    record = AuditRecord.objects.get(target_type="providers.provider", action="changed")
    assert (record.source, record.actor, record.target) == ("admin", "mallory", "anthropic")
    assert record.where == f"POST {CHANGE.format(row.pk)}"
    assert record.changes == {
        "base_url": ["", listener.url],
        "api_key_env": ["ANTHROPIC_API_KEY", "EU_API_KEY"],
    }
    alert = Alert.objects.get(source="audit")
    assert alert.severity == "WARNING" and "mallory" in alert.title
    assert listener.url in alert.body and "EU_API_KEY" in alert.body


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_row_written_before_the_rule_sends_no_server_secret(
    listener: Listener, alice_client: Any, workers: Any, settings: Any, monkeypatch: Any
) -> None:
    secrets = {name: f"server-secret-{name.lower()}-0123456789" for name in SERVER_SECRETS}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    settings.ANTHROPIC_API_KEY = "sk-ant-the-real-provider-key-0123456789"
    for variable in [*SERVER_SECRETS, ""]:
        # As the fault was used: the row rewritten behind the admin's back (or before the fix).
        Provider.objects.filter(name="anthropic").update(
            base_url=listener.url, api_key_env=variable
        )
        Provider.objects.get(name="anthropic").save()  # the processes' copies load it again
        job = submit(alice_client)
        workers.drain()
        job.refresh_from_db()
        assert job.status == LlmJob.Status.FAILED, (variable, job.status)
    assert len(listener.requests) == len(SERVER_SECRETS) + 1  # the calls went, no secret did
    seen = "\n".join(listener.requests)
    for value in [*secrets.values(), settings.ANTHROPIC_API_KEY, settings.SECRET_KEY]:
        assert value not in seen
