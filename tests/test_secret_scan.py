"""No secret is written anywhere: the provider's API key and the alert targets, after a real run.

The Procfile's web, llm worker and alerts worker lines and the fake provider run as processes
with ``ANTHROPIC_API_KEY`` set to a recognisable canary, and every alert destination (a Slack
URL, a webhook URL with a token in its path and its query, a PagerDuty routing key, a route from
``ALERT_ROUTES``, a batch's callback URL) carries canaries too. Destinations echo back what they
are sent, secrets included, in their error bodies. Jobs succeed, and fail with 400, 401, 429,
500 and "prompt too long", so error messages, dead letters, alerts and failed deliveries are
made; the API's error paths are called; an admin opens every admin page. Then the canaries are
looked for in every column of every row of every table, every key and value of the test's Redis
database (rq's compressed job payloads opened), every line every process wrote (at DEBUG), every
HTTP response the test got (body and headers), and every log line of the test process itself.

The one allowed place: a destination is stored as configured in ``alerts_alertroute.target``
(the route staff set), ``alerts_alertdelivery.target`` (a delivery, and its retries and resolve,
go where they were meant), ``batches_batch.callback_url`` and the webhooks' ``url`` (a delivery
and a job's subscription); its own admin edit form shows it.
The provider's API key is stored nowhere.

Our own API keys too: the client's key is created over the API (``POST /api/v1/keys/``), used
for every call, rotated (``POST .../rotate/``) and the new secret used in turn, and a revoked
key is sent as well. Each secret may appear in the one response that created it, and nowhere
else: not in any row (the database holds hashes and prefixes), Redis, log line or other response.
"""

import io
import logging
import uuid
from typing import Any

import django_rq
import httpx
import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django_rq.settings import get_queues_list
from rq import Worker

from alerts.models import AlertDelivery, AlertRoute
from dlq.models import FailureRecord
from jobs.models import LlmJob
from keys.testing import api_key_for
from llmops.logs import JsonFormatter
from llmops.queues import ALERTS_QUEUE, LLM_QUEUE
from tests.conftest import FakeProvider, _free_port, job_body, procfile_command
from tests.jobs.test_reconciler import _env_for_subprocess
from tests.jobs.test_takeover import wait_for
from tests.secret_scan import (
    EchoDestination,
    Found,
    Processes,
    json_env,
    python_first_on_path,
    scan_database,
    scan_redis,
    scan_text,
)
from webhooks.models import WebhookDelivery

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

TAG = uuid.uuid4().hex[:16]
API_KEY = f"sk-ant-api03-CANARY-{TAG}-AAAAAAAAAAAAAAAAAAAAAAAA"
SECRETS = {
    "api_key": API_KEY,
    "slack": f"SLACKCANARY{TAG}",
    "webhook_path": f"HOOKCANARY{TAG}",
    "webhook_query": f"QUERYCANARY{TAG}",
    "routing_key": f"PDCANARY{TAG}".ljust(32, "0"),
    "env_route": f"ENVCANARY{TAG}",
    "callback": f"CALLBACKCANARY{TAG}",
}
"""What must not leak, by name. Hosts are not secret (the admin shows them): paths, queries and
keys are."""

TARGET_COLUMNS = {
    ("alerts_alertroute", "target"),
    ("alerts_alertdelivery", "target"),
    ("batches_batch", "callback_url"),
    ("webhooks_webhookdelivery", "url"),
    ("webhooks_webhooksubscription", "url"),
}
"""The one allowed place of a destination's secrets: where it is configured and delivered from."""
METRICS_TOKEN = f"metrics-{TAG}"


class Seen:
    """Every response the test got, kept for the scan."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def keep(self, where: str, response: Any) -> Any:
        headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
        body = response.content.decode(errors="replace")
        self.texts.append((f"{where} -> {response.status_code}", f"{headers}\n{body}"))
        return response


def _job_final(job_id: str) -> bool:
    return LlmJob.objects.get(id=job_id).status in ("completed", "failed", "cancelled")


def _deliveries_final() -> bool:
    return not (
        AlertDelivery.objects.filter(state=AlertDelivery.State.PENDING).exists()
        or WebhookDelivery.objects.filter(state=WebhookDelivery.State.PENDING).exists()
    )


@pytest.mark.slow
def test_no_secret_is_written_anywhere(tmp_path: Any) -> None:
    web_port, provider_port = _free_port(), _free_port()
    destinations = EchoDestination(
        # Slack takes it; PagerDuty, the webhooks and the callback refuse, echoing.
        {"/services/": 200, "/v2/enqueue": 400, "/hooks/": 500, "/env/": 400, "/callback/": 400}
    )
    base = destinations.base
    slack = f"{base}/services/T0/B0/{SECRETS['slack']}"
    webhook = f"{base}/hooks/{SECRETS['webhook_path']}?token={SECRETS['webhook_query']}"
    refused = f"http://127.0.0.1:{_free_port()}/hooks/{SECRETS['webhook_path']}"  # nobody listens
    env_route = f"{base}/env/{SECRETS['env_route']}"
    callback = f"{base}/callback/{SECRETS['callback']}"
    AlertRoute.objects.create(severity="CRITICAL", kind="slack", target=slack, name="chat")
    AlertRoute.objects.create(severity="CRITICAL", kind="pagerduty", target=SECRETS["routing_key"])
    AlertRoute.objects.create(severity="ERROR", kind="webhook", target=webhook, name="hook")
    AlertRoute.objects.create(severity="ERROR", kind="webhook", target=refused, name="down")

    owner = get_user_model().objects.create_user("owner")
    keys: dict[str, str] = {"bootstrap": api_key_for(owner)}  # made in this process: never sent

    env = python_first_on_path(_env_for_subprocess())
    env.update(
        ANTHROPIC_API_KEY=API_KEY,
        ANTHROPIC_BASE_URL=f"http://127.0.0.1:{provider_port}",
        LOG_LEVEL="DEBUG",
        LOG_FORMAT="json",
        WEB_CONCURRENCY="1",
        LLM_RETRY_DELAY_SCALE="0.001",
        LLM_HEARTBEAT_SECONDS="0.5",
        ALERT_ROUTES=json_env({"WARNING": [{"kind": "webhook", "target": env_route}]}),
        ALERT_RETRY_SCHEDULE="[0.2, 0.2]",
        WEBHOOK_RETRY_SCHEDULE="[0.2, 0.2]",
        ALERT_PAGERDUTY_EVENTS_URL=f"{base}/v2/enqueue",
        METRICS_TOKEN=METRICS_TOKEN,
        CALLBACK_ALLOW_PRIVATE_HOSTS="True",
    )
    processes = Processes(tmp_path)
    seen = Seen()
    try:
        processes.start(
            "fake_provider",
            ["python", "manage.py", "fake_anthropic", "--port", str(provider_port)],
            env,
        )
        processes.start("web", procfile_command("web", port=web_port), env)
        processes.start("worker_llm", procfile_command("worker_llm"), env)
        processes.start("worker_default", procfile_command("worker_default"), env)
        provider = FakeProvider(f"http://127.0.0.1:{provider_port}")
        web = httpx.Client(base_url=f"http://127.0.0.1:{web_port}", timeout=10)

        def up() -> bool:
            processes.alive()
            try:
                provider.stats()
                web.get("/healthz")
            except httpx.TransportError:
                return False
            llm, alerts = (django_rq.get_queue(q) for q in (LLM_QUEUE, ALERTS_QUEUE))
            return bool(Worker.count(queue=llm) and Worker.count(queue=alerts))

        wait_for(up, timeout=60, what="the processes to start", every=0.2)
        bootstrap = {"Authorization": f"Bearer {keys['bootstrap']}"}
        created = seen.keep(
            "POST /api/v1/keys/",
            web.post(
                "/api/v1/keys/",
                json={"name": "integration", "scopes": ["jobs:read", "jobs:write", "admin"]},
                headers=bootstrap,
            ),
        )
        assert created.status_code == 201, created.text
        keys["client"] = created.json()["key"]
        key_id = created.json()["id"]
        creations = {"POST /api/v1/keys/ -> 201": "client"}
        auth = {"Authorization": f"Token {keys['client']}"}

        def run_job(faults: dict[str, float], **extra: Any) -> str:
            provider.faults(faults, **extra)
            response = seen.keep("submit", web.post("/api/v1/jobs/", json=job_body(), headers=auth))
            assert response.status_code == 202, response.text
            job_id = str(response.json()["id"])
            wait_for(lambda: _job_final(job_id), timeout=30, what=f"job {job_id}", every=0.1)
            seen.keep("job", web.get(f"/api/v1/jobs/{job_id}/", headers=auth))
            return job_id

        # --- jobs that succeed and fail -------------------------------------------------------
        ok = run_job({})
        rate_limited = run_job({"429": 1.0}, for_seconds=1.0)  # 429, then the retry succeeds
        invalid = run_job({"400": 1.0})  # ERROR: the webhook refuses (500) and one is down
        server_error = run_job({"500": 1.0})  # ERROR after its retries
        too_long = run_job({"context": 1.0})  # WARNING: the route from ALERT_ROUTES refuses
        provider.faults({})
        batch = seen.keep(
            "batch",
            web.post(
                "/api/v1/batches/",
                headers=auth,
                json={
                    "feature": "email-classify",
                    "model": "claude-sonnet-4-6",
                    "callback_url": callback,
                    "items": [{"messages": job_body()["messages"], "max_tokens": 64}],
                },
            ),
        )
        assert batch.status_code == 202, batch.text
        batch_url = f"/api/v1/batches/{batch.json()['id']}/"
        wait_for(
            lambda: seen.keep("batch", web.get(batch_url, headers=auth)).json()["status"]
            == "completed",
            timeout=30,
            what="the batch (its callback is refused, echoing)",
        )
        bad_key = run_job({"401": 1.0})  # CRITICAL, opens the breaker: Slack and PagerDuty
        statuses = dict(LlmJob.objects.values_list("id", "status"))
        assert [statuses[uuid.UUID(j)] for j in (ok, rate_limited)] == ["completed"] * 2
        assert {statuses[uuid.UUID(j)] for j in (invalid, server_error, too_long, bad_key)} == {
            "failed"
        }
        assert LlmJob.objects.get(id=rate_limited).attempts == 2
        wait_for(
            lambda: AlertDelivery.objects.count() >= 6 and _deliveries_final(),
            timeout=30,
            what="every alert delivery to end",
        )

        # --- the key rotated: the new secret in turn, the old one through its grace period ----
        rotate = f"/api/v1/keys/{key_id}/rotate/"
        rotated = seen.keep(
            f"POST {rotate}", web.post(rotate, json={"grace_seconds": 0}, headers=auth)
        )
        assert rotated.status_code == 200, rotated.text
        keys["rotated"] = rotated.json()["key"]
        creations[f"POST {rotate} -> 200"] = "rotated"
        seen.keep("old key", web.get("/api/v1/jobs/", headers=auth))  # 401: grace 0
        auth = {"Authorization": f"Bearer {keys['rotated']}"}
        # (The breaker is open since the 401s above: a job is accepted and held, not run.)
        held = seen.keep("submit", web.post("/api/v1/jobs/", json=job_body(), headers=auth))
        assert held.status_code == 202, held.text
        seen.keep("job", web.get(f"/api/v1/jobs/{held.json()['id']}/", headers=auth))
        doomed = seen.keep(
            "POST /api/v1/keys/ (doomed)",
            web.post(
                "/api/v1/keys/", json={"name": "doomed", "scopes": ["jobs:read"]}, headers=auth
            ),
        )
        keys["revoked"] = doomed.json()["key"]
        creations["POST /api/v1/keys/ (doomed) -> 201"] = "revoked"
        seen.keep("revoke", web.post(f"/api/v1/keys/{doomed.json()['id']}/revoke/", headers=auth))
        revoked = {"Authorization": f"Bearer {keys['revoked']}"}
        seen.keep("revoked key", web.get("/api/v1/jobs/", headers=revoked))
        seen.keep("keys", web.get("/api/v1/keys/", headers=auth))

        # --- the API's error paths ------------------------------------------------------------
        calls: list[tuple[str, str, dict[str, Any]]] = [
            ("GET", "/api/v1/jobs/", {"headers": {"Authorization": "Token wrong"}}),
            ("POST", "/api/v1/jobs/", {"headers": auth, "content": b"{not json"}),
            ("POST", "/api/v1/jobs/", {"headers": auth, "json": job_body(model="no-such-model")}),
            ("POST", "/api/v1/jobs/", {"headers": auth, "json": job_body(max_tokens=10**9)}),
            ("POST", f"/api/v1/jobs/{ok}/cancel/", {"headers": auth}),
            ("GET", f"/api/v1/jobs/{uuid.uuid4()}/", {"headers": auth}),
            ("GET", "/api/v1/no-such-endpoint/", {"headers": auth}),
            ("DELETE", "/api/v1/jobs/", {"headers": auth}),
            ("GET", "/api/v1/failures/", {"headers": auth}),
            ("GET", "/api/v1/costs/?since=yesterday", {"headers": auth}),
            ("GET", "/metrics", {}),
            ("GET", "/metrics", {"headers": {"Authorization": f"Bearer {METRICS_TOKEN}"}}),
            (
                "GET",
                "/django-rq/metrics/",
                {"headers": {"Authorization": f"Bearer {METRICS_TOKEN}"}},
            ),
            ("GET", "/readyz", {}),
            ("GET", "/api/schema/", {}),
        ]
        calls += [
            ("GET", "/api/v1/costs/", {"headers": revoked}),
            ("POST", "/api/v1/keys/", {"headers": auth, "json": {"name": "x", "scopes": ["no"]}}),
            ("POST", f"/api/v1/keys/{key_id}/rotate/", {"headers": auth, "json": {"x": 1}}),
            ("GET", "/api/v1/costs/", {"headers": {"Authorization": f"Bearer {keys['client']}"}}),
        ]
        for method, path, kwargs in calls:
            seen.keep(f"{method} {path}", web.request(method, path, **kwargs))
        assert provider.stats()["requests"] >= 7
    finally:
        processes.stop_all()
        destinations.close()

    # --- an admin opens every admin page --------------------------------------------------------
    own_form = _admin_pages(seen)

    # --- the scan -------------------------------------------------------------------------------
    # Our keys' secrets: found nowhere but in the one response that created each.
    key_secrets = {f"our key {name}": secret for name, secret in keys.items()}
    key_leaks: list[Found] = []
    for (table, column), names in sorted(scan_database(key_secrets).items()):
        key_leaks += [(f"database {table}.{column}", name) for name in names]
    key_leaks += scan_redis(django_rq.get_connection(LLM_QUEUE), key_secrets)[1]
    for name, output in processes.outputs():
        key_leaks += scan_text(f"output of {name}", output, key_secrets)
    for where, text in seen.texts:
        allowed = creations.get(where)
        canaries = {n: v for n, v in key_secrets.items() if n != f"our key {allowed}"}
        key_leaks += scan_text(f"response {where}", text, canaries)
    assert not key_leaks, "\n".join(f"{n} found in {w}" for w, n in sorted(set(key_leaks)))
    for where, name in creations.items():  # and the creations did show them
        assert any(keys[name] in text for w, text in seen.texts if w == where), where

    targets = {name: value for name, value in SECRETS.items() if name != "api_key"}
    leaks: list[Found] = []
    in_database = scan_database(SECRETS)
    for (table, column), names in sorted(in_database.items()):
        allowed = (table, column) in TARGET_COLUMNS
        leaks += [(f"database {table}.{column}", n) for n in names if n == "api_key" or not allowed]
    keys, in_redis = scan_redis(django_rq.get_connection(LLM_QUEUE), SECRETS)
    leaks += in_redis
    for name, output in processes.outputs():
        leaks += scan_text(f"output of {name}", output, SECRETS)
    for where, text in seen.texts:
        canaries = {"api_key": API_KEY} if where in own_form else SECRETS
        leaks += scan_text(f"response {where}", text, canaries)
    assert not leaks, "\n".join(f"{name} found in {where}" for where, name in sorted(set(leaks)))

    # The scan looked where the secrets are meant to be, and found them there.
    assert keys > 10, "Redis was empty: nothing was scanned"
    every_target_stored = {n for names in in_database.values() for n in names}
    assert every_target_stored == set(targets), in_database
    for where in own_form:
        assert any(
            value in text for w, text in seen.texts if w == where for value in targets.values()
        )
    # And the failures really produced errors that could have carried them.
    failed = AlertDelivery.objects.filter(state=AlertDelivery.State.FAILED)
    assert failed.count() >= 4 and all(d.last_error for d in failed)
    assert FailureRecord.objects.filter(http_status__in=[400, 401, 500]).count() >= 3


def _admin_pages(seen: Seen) -> set[str]:
    """Open every admin page an admin can reach (each list, and each object's change, history
    and delete pages), the ops dashboard and django-rq's pages, logging what the test process
    writes meanwhile. Returns the pages that are an alert route's own edit form."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    own_form: set[str] = set()
    try:
        client = Client()
        client.force_login(get_user_model().objects.create_superuser("root", "r@example.com"))
        paths = ["/admin/", "/admin/ops/dashboard/", "/admin/ops/dashboard/data.json?hours=1"]
        paths += ["/admin/ledger/costentry/report/?group_by=user", "/django-rq/"]
        for model, model_admin in admin.site._registry.items():
            info = (model._meta.app_label, model._meta.model_name)
            if not model._meta.managed:  # django-rq's, a page of its own: opened below
                continue
            paths.append(reverse("admin:{}_{}_changelist".format(*info)))
            for pk in model_admin.get_queryset(_request()).values_list("pk", flat=True)[:20]:
                for view in ("change", "history", "delete"):
                    path = reverse(f"admin:{info[0]}_{info[1]}_{view}", args=[pk])
                    paths.append(path)
                    if model is AlertRoute and view == "change":
                        own_form.add(f"GET {path}")
        for index, queue in enumerate(get_queues_list()):  # django-rq's queue_index
            for page in ("", "finished/", "failed/", "scheduled/", "started/", "deferred/"):
                paths.append(f"/django-rq/queues/{index}/{page}")
            rq_queue = django_rq.get_queue(queue["name"])
            for registry in (rq_queue.finished_job_registry, rq_queue.failed_job_registry):
                paths += [f"/django-rq/queues/{index}/{j}/" for j in registry.get_job_ids()[:20]]
        for path in paths:
            response = seen.keep(f"GET {path}", client.get(path))
            assert response.status_code in (200, 302, 403), (path, response.status_code)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    seen.texts.append(("log lines of the test process", stream.getvalue()))
    return {f"{where} -> 200" for where in own_form}


def _request() -> Any:
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.get(username="root")
    return request
