"""The published API schema (/api/schema/, /api/docs/) and schemathesis against every operation
in it, with a plain user's token and with a staff token.

The fuzzed app is the real one: the web server as the Procfile starts it (uvicorn, the ASGI app
and its middleware, DEBUG off), on the test MariaDB (transactional: what a request commits is
real, and a submit enqueues into the test's Redis index), with a few real objects made through
the services so that ids in paths hit something. The operations come from the schema the app
serves, so a new endpoint is fuzzed as soon as it is in the schema; none is listed here.

Checks: no 5xx, every status documented, the documented content type, the body matching its
schema, and documented response headers of the right type. Reproducible: derandomized, one seed,
no example database.
"""

import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from django.contrib.auth.models import Permission, User
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.db import transaction
from hypothesis import strategies as st
from rest_framework.test import APIClient

from dlq.services import failure_record_create
from jobs.models import LlmJob
from jobs.services import job_submit
from keys.models import ApiKey
from keys.testing import api_key_for
from ledger.models import Budget
from pipelines.services import pipeline_create
from tests.conftest import job_body, web_server

MAX_EXAMPLES = int(os.environ.get("SCHEMA_FUZZ_EXAMPLES", "5"))
"""Fuzzed cases per operation and actor, after the schema's examples and schemathesis' coverage
cases (every parameter's boundaries, missing and wrong-typed values: most of the ~2,000
requests, and about 55 s of CPU for both actors). Generating bodies is what costs: each fuzzed
case per operation adds about 3.5 s, so 5 keeps the test near 75 s on two cores. Deeper runs
(``SCHEMA_FUZZ_EXAMPLES=150 SCHEMA_FUZZ_SEED=11``, 10 minutes) found nothing more."""
SEED = int(os.environ.get("SCHEMA_FUZZ_SEED", "20261201"))
STAFF_PERMISSIONS = (
    "view_failurerecord",
    "requeue_failurerecord",
    "requeue_other_model_failurerecord",
    "resolve_failurerecord",
    "ignore_failurerecord",
)
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
)


def test_it_generates_a_valid_schema_without_warnings(tmp_path: Any) -> None:
    # Every view annotated: an unannotated APIView, a component name clash or an unknown field
    # type is a warning, and a warning fails here.
    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml")
    )


def test_it_serves_the_schema_and_its_docs_to_anyone_without_a_cdn() -> None:
    anonymous = APIClient()
    schema = anonymous.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    assert schema.json()["openapi"].startswith("3.")
    assert "/api/v1/jobs/" in schema.json()["paths"]
    # A stale token in the browser does not hide the schema.
    stale = APIClient(HTTP_AUTHORIZATION="Token not-a-token")
    assert stale.get("/api/schema/").status_code == 200

    docs = anonymous.get("/api/docs/")
    assert docs.status_code == 200
    page = docs.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    # Nothing loaded from another host (the page's random CSRF token may spell "cdn").
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.I), page
    assert not re.search(r"cdn\.|jsdelivr|unpkg|cdnjs", page, re.I)
    for name in ("swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "swagger-ui.css"):
        assert finders.find(f"drf_spectacular_sidecar/swagger-ui-dist/{name}"), name


def test_every_operation_names_the_scope_its_key_needs() -> None:
    """Each operation's ``x-required-scope`` is the scope the authorization table's ``SCOPES``
    gives its door (null: any key), its description says it, and an operation that needs one
    documents ``403 insufficient_scope``; the key scheme is ``Bearer``."""
    from tests.test_authorization import SCOPES

    schema = APIClient().get("/api/schema/", {"format": "json"}).json()
    assert schema["components"]["securitySchemes"]["apiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["apiKey"]["description"],
    }
    by_route = {}
    for scope, doors in SCOPES.items():
        for door in doors:
            if door.startswith("/ws/"):
                continue
            method, path = door.split(" ", 1)
            route = re.sub(r"\{[^}]+\}", "{id}", path.split("?")[0])
            by_route[(method, route)] = scope
    seen = 0
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            scope = by_route[(method.upper(), re.sub(r"\{[^}]+\}", "{id}", path))]
            assert operation["x-required-scope"] == scope, (method, path)
            assert {"apiKey": []} in operation["security"], (method, path)
            if scope is None:
                assert "**Scope:** any API key." in operation["description"]
                continue
            assert f"**Scope:** `{scope}`." in operation["description"], (method, path)
            assert "`insufficient_scope`" in operation["responses"]["403"]["description"]
            seen += 1
    assert seen >= 25


@dataclass(frozen=True)
class Web:
    url: str
    log: Path
    schema: dict[str, Any]
    """The schema as the server serves it, fetched once for both actors."""


def _user(username: str, *, is_staff: bool = False, perms: tuple[str, ...] = ()) -> User:
    # No password: tokens only, and hashing one costs a second of CPU.
    user = User.objects.create_user(username=username, is_staff=is_staff)
    user.user_permissions.add(*Permission.objects.filter(codename__in=perms))
    return user


def _known_ids() -> dict[str, list[str]]:
    """Objects for the path parameters to hit, by parameter name: the actors' own and another
    user's jobs, a dead-lettered job's failure record, budgets. A new ``<name>_id`` parameter
    is fuzzed with random values until an object for it is added here."""
    alice = User.objects.get(username="alice")
    bob = _user("bob")
    queued, _ = job_submit(user=alice, data=job_body())
    failed, _ = job_submit(user=alice, data=job_body(max_tokens=64))
    others, _ = job_submit(user=bob, data=job_body())
    # As the runner leaves a dead-lettered job: failed, with its record.
    LlmJob.objects.filter(id=failed.id).update(status=LlmJob.Status.FAILED, attempts=1)
    failed.refresh_from_db()
    with transaction.atomic():
        failure = failure_record_create(
            job=failed, severity="ERROR", reason_code="invalid_request", http_status=400
        )
    budgets = [
        Budget.objects.create(scope=Budget.Scope.FEATURE, feature="email-classify", limit_usd=100),
        Budget.objects.create(scope=Budget.Scope.USER, user=alice, limit_usd=50),
    ]
    return {
        "job_id": [str(queued.id), str(failed.id), str(others.id)],
        "failure_id": [str(failure.id)],
        "budget_id": [str(budget.id) for budget in budgets],
        "pipeline_id": [
            str(pipeline_create(user=owner, data={"steps": [job_body()]}).id)
            for owner in (alice, bob)
        ],
        # Keys of alice's and bob's other than the actor's own (revoking that one would leave
        # the rest of the run at 401).
        "key_id": [
            str(ApiKey.objects.get(prefix=api_key_for(owner, name="fuzzed")[:12]).id)
            for owner in (alice, bob)
        ],
    }


@pytest.fixture(scope="module")
def web(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """One web server for both actors: each actor's test commits its own objects (transactional)
    and the server, on the same test database, sees them."""
    log = tmp_path_factory.mktemp("web") / "web.log"
    with web_server(workers=1, log=log) as url:
        served = httpx.get(f"{url}/api/schema/", params={"format": "json"}, timeout=60)
        served.raise_for_status()
        yield Web(url=url, log=log, schema=served.json())


@pytest.fixture(params=["user", "staff"])
def api_schema(
    request: pytest.FixtureRequest, web: Web, transactional_db: None, prices: None
) -> Iterator[Any]:
    _user("alice")
    staff = _user("staff", is_staff=True, perms=STAFF_PERMISSIONS)
    known = _known_ids()
    actor = staff if request.param == "staff" else User.objects.get(username="alice")
    token = api_key_for(actor)
    config = schemathesis.Config.from_dict(
        {
            "base-url": web.url,
            "seed": SEED,
            "headers": {"Authorization": f"Token {token}"},
            "generation": {
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                "database": "none",
            },
            "phases": {"stateful": {"enabled": False}},
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
        }
    )
    schema = schemathesis.openapi.from_dict(web.schema, config=config)

    @schema.hook
    def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any]) -> Any:
        # Random ids reach the 404s; these reach the objects themselves.
        variants = [path_parameters] + [
            {**path_parameters, name: value}
            for name in path_parameters or {}
            for value in known.get(name, [])
        ]
        return st.sampled_from(variants)

    logged = web.log.stat().st_size
    yield schema
    # A 500's body says nothing (DEBUG is off): its traceback is in the server's log, one JSON
    # object a line with the traceback in "exc".
    with web.log.open("rb") as log:
        log.seek(logged)
        lines = log.read().decode(errors="replace").splitlines()
    for line in [line for line in lines if '"exc": ' in line][:3]:
        entry = json.loads(line)
        print(f"server: {entry['message']}\n{entry['exc']}", file=sys.stderr)


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.mark.slow  # every operation fuzzed: two minutes, started first (tests/parallel.py)
@pytest.mark.long  # a minute and a half of CPU per actor: make test-long
@schema.parametrize()
def test_it_answers_every_operation_as_documented(case: Any) -> None:
    case.call_and_validate()
