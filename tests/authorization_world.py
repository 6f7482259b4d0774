"""The world the authorization table (tests/test_authorization.py) is checked against: five actors
and one object of every kind, owned by (or about) the owner, and how an outcome is observed.

The actors:
- ``owner``: a plain user who owns every job, ledger row and budget below;
- ``another``: a plain user who owns nothing;
- ``anonymous``: no session, no token;
- ``staff``: ``is_staff`` with only the row's ``has`` permissions (not the one the door needs);
- ``staff_perm``: ``is_staff`` with the row's ``has`` and the row's ``perm`` permissions.

Objects are made through the services where one exists (``job_submit``,
``failure_record_create``), else as rows. Every owner-made thing carries ``MARK`` (its feature),
so a page or body that shows the owner's data contains it.
"""

import re
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

import django_rq
from asgiref.sync import async_to_sync
from django.apps import apps
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import Group, Permission, User
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.utils import timezone
from rq import Queue, Worker

from agents.creation import agent_run_create
from agents.models import AgentRun, AgentStep, DemoEmail
from alerts.models import (
    Alert,
    AlertDelivery,
    AlertRoute,
    LoopHeartbeat,
)
from audit.models import AuditRecord
from batches.models import Batch, BatchItem
from batches.services import batch_submit
from deferred.models import ProviderBatch, ProviderBatchItem
from dlq.models import BulkRequeue
from dlq.services import failure_record_create
from embeddings.validation import validate_embedding_request
from features.models import FeaturePolicy
from jobs.models import LlmJob, ProviderBreaker
from jobs.services import job_submit
from keys.models import ApiKey
from keys.testing import api_key_for
from ledger.models import Budget, CostEntry, ModelPrice
from llmops.queues import DEFAULT_QUEUE
from mcp_tools.models import MCPServer
from pipelines.services import pipeline_create
from providers.models import Provider
from ratelimits.models import RateLimit
from tests.conftest import seed_prices
from webhooks.models import WebhookDelivery

__all__ = [
    "ACTORS",
    "MARK",
    "METRICS_TOKEN",
    "World",
    "build_world",
    "client_for",
    "every_admin_action",
    "every_route",
    "observe",
    "route_of",
]

ACTORS = ("owner", "another", "anonymous", "staff", "staff_perm")
MARK = "owner-feature-7f3a"
"""The owner's feature name: a body that contains it shows the owner's data."""
METRICS_TOKEN = "authz-metrics-token-" + "x" * 20
"""What "the permission" is for the metrics endpoints: the scrape token, not a user's right."""
LOGIN_PATHS = ("/admin/login/", "/login/")


def _perms(names: tuple[str, ...]) -> list[Permission]:
    """Permissions by "app_label.codename"; an unknown name fails the test (a typo in the table)."""
    found = []
    for name in names:
        app_label, codename = name.split(".")
        found.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return found


def _user(username: str, *, is_staff: bool = False) -> User:
    # No password: the clients sign in with force_login, and hashing one costs ~0.3 s a user.
    return User.objects.create(username=username, is_staff=is_staff)


@dataclass
class World:
    users: dict[str, User | None]
    tokens: dict[str, str]
    ids: dict[str, str] = field(default_factory=dict)
    """What a path's placeholders stand for: ``{job}``, ``{failure}``, ``{budget}`` ..."""
    objects: dict[str, Any] = field(default_factory=dict)

    def path(self, template: str) -> str:
        return template.format(**self.ids)

    def grant(self, *, has: tuple[str, ...], perm: tuple[str, ...]) -> None:
        """``staff`` holds ``has``; ``staff_perm`` holds ``has`` and ``perm``."""
        self.users["staff"].user_permissions.set(_perms(has))  # type: ignore[union-attr]
        self.users["staff_perm"].user_permissions.set(_perms(has + perm))  # type: ignore[union-attr]

    def fill_redis(self) -> None:
        """An RQ job and a worker for django-rq's pages to show (Redis is emptied around every
        test). The worker is only registered: nothing runs."""
        # rq's own Queue: django-rq's would wait for a commit that this test never makes.
        queue = Queue(DEFAULT_QUEUE, connection=django_rq.get_connection(DEFAULT_QUEUE))
        queue.enqueue("builtins.len", MARK, job_id=self.ids["rq_job"])
        Worker([queue], name=self.ids["rq_worker"], connection=queue.connection).register_birth()


def build_world() -> World:
    # The seeded prices are gone after a transactional test (a reused database, the WebSocket rows).
    seed_prices.seed(apps, None)
    owner = _user("owner")
    users: dict[str, User | None] = {
        "owner": owner,
        "another": _user("another"),
        "anonymous": None,
        "staff": _user("staff", is_staff=True),
        "staff_perm": _user("staff_perm", is_staff=True),
    }
    tokens = {name: api_key_for(user) for name, user in users.items() if user is not None}
    world = World(users=users, tokens=tokens)
    body = {
        "feature": MARK,
        "model": "claude-sonnet-4-6",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 64,
    }
    # Two jobs of the owner: one waiting (cancel), one dead-lettered (the DLQ, the ledger).
    queued, _ = job_submit(user=owner, data=body)
    failed, _ = job_submit(user=owner, data=body)
    LlmJob.objects.filter(id=failed.id).update(status=LlmJob.Status.FAILED, attempts=1)
    failed.refresh_from_db()
    with transaction.atomic():
        failure = failure_record_create(
            job=failed, severity="ERROR", reason_code="invalid_request", http_status=400
        )
    price = ModelPrice.objects.filter(model="claude-sonnet-4-6").first()
    entry = CostEntry.objects.create(
        job=failed,
        attempt=1,
        feature=MARK,
        model=failed.model,
        user=owner,
        price=price,
        outcome=CostEntry.Outcome.ERROR_RESPONSE,
        http_status=400,
        reason_code="invalid_request",
    )
    budget = Budget.objects.create(
        scope=Budget.Scope.FEATURE, feature=MARK, limit_usd=Decimal("10")
    )
    breaker = ProviderBreaker.objects.create(
        provider="anthropic",
        state=ProviderBreaker.State.OPEN,
        reason_code="authentication_failed",
        opened_at=timezone.now(),
        opened_by_job=failed,
    )
    route = AlertRoute.objects.create(
        severity="ERROR", kind="webhook", target="https://hooks.example.com/authz", name=MARK
    )
    alert = Alert.objects.create(
        fingerprint=f"failure:{MARK}", severity="ERROR", source="failure", title=MARK,
        failure=failure,
    )  # fmt: skip
    AlertDelivery.objects.create(alert=alert, route=route, kind=route.kind, target=route.target)
    bulk = BulkRequeue.objects.create(
        created_by=users["staff_perm"], description=MARK, record_ids=[failure.id], total=1
    )
    heartbeat = LoopHeartbeat.objects.create(name=MARK, interval_seconds=5)
    rate_limit = RateLimit.objects.create(model=f"{MARK}-model", rpm=10)
    provider = Provider.objects.create(
        name=f"{MARK}-provider", kind="openai", base_url="http://h/v1"
    )
    victim_price = ModelPrice.objects.create(
        model=f"{MARK}-model",
        effective_from=timezone.now() + timedelta(days=365),
        input_per_mtok=Decimal("1"),
        output_per_mtok=Decimal("1"),
        cache_write_5m_per_mtok=Decimal("1"),
        cache_write_1h_per_mtok=Decimal("1"),
        cache_read_per_mtok=Decimal("1"),
        max_output_tokens=1000,
    )
    ModelPrice.objects.create(
        model=f"{MARK}-embed",
        provider=provider,
        kind=ModelPrice.Kind.EMBEDDING,
        effective_from=timezone.now() - timedelta(seconds=1),
        input_per_mtok=Decimal("0.02"),
        output_per_mtok=Decimal("0"),
        cache_write_5m_per_mtok=Decimal("0.02"),
        cache_write_1h_per_mtok=Decimal("0.02"),
        cache_read_per_mtok=Decimal("0.02"),
        max_output_tokens=1,
    )
    embedding, _ = job_submit(
        user=owner,
        request=validate_embedding_request(
            {"feature": MARK, "model": f"{MARK}-embed", "input": ["hello"]}
        ),
    )
    embedding_batch, _ = batch_submit(
        user=owner,
        data={
            "kind": "embedding",
            "feature": MARK,
            "model": f"{MARK}-embed",
            "items": [{"input": "hello", "metadata": {"mark": MARK}}],
        },
    )
    item = {"messages": body["messages"], "max_tokens": 64}
    batch, _ = batch_submit(
        user=owner, data={"name": MARK, "feature": MARK, "model": body["model"], "items": [item]}
    )
    # A Message Batch of the Anthropic door that has ended: its one request's custom_id is MARK.
    message_batch = Batch.objects.create(
        user=owner, door="anthropic", feature=MARK, model=body["model"], total=1, jobs_total=1,
        pending=0, failed=1, finished_at=timezone.now(),
    )  # fmt: skip
    BatchItem.objects.create(
        batch=message_batch, index=0, job=failed, runs_job=True, metadata={"custom_id": MARK}
    )
    pipeline = pipeline_create(user=owner, data={"name": MARK, "steps": [body, body]})
    agent_run = waiting_agent_run(owner)
    demo_email = DemoEmail.objects.create(call_id="toolu_authz_mail", to="a@example.com",
                                          subject=MARK, body=MARK)  # fmt: skip
    # Another key of the owner's (not the one its API calls use): what revoke and rotate act on.
    # Its scope is admin alone: a key with admin alone covers it (keys/services.py
    # api_key_check_covers), so the admin scope opens those doors on its own.
    api_key = ApiKey.objects.get(
        prefix=api_key_for(owner, name=MARK, scopes=["admin"])[:12], user=owner
    )
    group = Group.objects.create(name=MARK)
    feature_policy = FeaturePolicy.objects.create(feature=MARK, fallback_models=[])
    mcp_server = MCPServer.objects.create(
        name=MARK,
        url="http://127.0.0.1:9/mcp",
        tools=[{"name": "echo", "description": MARK, "input_schema": {"type": "object"}}],
    )
    provider_batch = ProviderBatch.objects.create(
        provider="anthropic", model=MARK, provider_batch_id=f"msgbatch_{MARK}", status="booked"
    )
    provider_batch_item = ProviderBatchItem.objects.create(
        batch=provider_batch, job=failed, attempt=99
    )
    victim_user = User.objects.create(username=f"{MARK}-user")
    webhook_delivery = webhook_delivery_for(failed)
    world.objects = {
        "queued": queued,
        "failed": failed,
        "failure": failure,
        "entry": entry,
        "budget": budget,
        "breaker": breaker,
        "route": route,
        "alert": alert,
        "bulk": bulk,
        "heartbeat": heartbeat,
        "rate_limit": rate_limit,
        "provider": provider,
        "price": victim_price,
        "group": group,
        "batch": batch,
        "pipeline": pipeline,
        "agent_run": agent_run,
        "demo_email": demo_email,
        "victim_user": victim_user,
        "api_key": api_key,
        "feature_policy": feature_policy,
        "mcp_server": mcp_server,
        "provider_batch": provider_batch,
        "provider_batch_item": provider_batch_item,
        "webhook_delivery": webhook_delivery,
    }
    queue_index = sorted(settings.RQ_QUEUES).index(DEFAULT_QUEUE)
    world.ids = {
        "job": str(failed.id),
        "queued_job": str(queued.id),
        "no_job": str(uuid.uuid4()),
        "failure": str(failure.id),
        "entry": str(entry.id),
        "budget": str(budget.id),
        "breaker": str(breaker.id),
        "route": str(route.id),
        "alert": str(alert.id),
        "bulk": str(bulk.id),
        "heartbeat": str(heartbeat.id),
        "rate_limit": str(rate_limit.id),
        "provider": str(provider.id),
        "price": str(victim_price.id),
        "group": str(group.id),
        "batch": str(batch.id),
        "batch_item": str(batch.items.get().id),
        "message_batch": f"msgbatch_{message_batch.id.hex}",
        "embedding": str(embedding.id),
        "embedding_batch": str(embedding_batch.id),
        "pipeline": str(pipeline.id),
        "agent_run": str(agent_run.id),
        "agent_call": AGENT_CALL_ID,
        "demo_email": str(demo_email.id),
        "user": str(victim_user.id),
        "api_key": str(api_key.id),
        "feature": MARK,
        "feature_policy": str(feature_policy.id),
        "mcp_server": str(mcp_server.id),
        "audit_record": str(AuditRecord.objects.order_by("id").values_list("id", flat=True)[0]),
        "provider_batch": str(provider_batch.id),
        "provider_batch_item": str(provider_batch_item.id),
        "webhook_delivery": str(webhook_delivery.id),
        "owner": str(owner.id),
        "user_ct": str(_content_type_id(User)),
        "queue": str(queue_index),
        "rq_job": f"authz-{uuid.uuid4().hex}",
        "rq_worker": f"authz-{uuid.uuid4().hex}",
    }
    return world


AGENT_CALL_ID = "toolu_authz"


def webhook_delivery_for(job: LlmJob) -> WebhookDelivery:
    """A failed delivery of the job's final state, to a host that names the world (the log
    shows the host alone)."""
    return WebhookDelivery.objects.create(
        subject_kind="job",
        subject_id=str(job.id),
        event="job.failed",
        url=f"https://{MARK}.example.com/hooks?token=authz",
        signer=f"feature:{MARK}",
        payload={"type": "job.failed"},
        state=WebhookDelivery.State.FAILED,
        attempts=1,
    )


def waiting_agent_run(owner: User) -> AgentRun:
    """An agent run of ``owner`` whose demo ``send_email`` call waits for a human."""
    data = {
        "feature": MARK,
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Mail the team."}],
        "tools": ["send_email"],
    }
    run, _ = agent_run_create(user=owner, data=data)
    AgentStep.objects.create(
        run=run, index=1, turn=1, kind=AgentStep.Kind.TOOL, name="send_email",
        call_id=AGENT_CALL_ID, input={"to": "team@example.com", "subject": "hi", "body": "hi"},
        status=AgentStep.Status.WAITING_APPROVAL,
    )  # fmt: skip
    AgentRun.objects.filter(id=run.id).update(
        status=AgentRun.Status.WAITING_APPROVAL, waiting_since=timezone.now()
    )
    run.refresh_from_db()
    return run


def _content_type_id(model: type) -> int:
    from django.contrib.contenttypes.models import ContentType

    return ContentType.objects.get_for_model(model).id


def client_for(world: World, actor: str, *, api: bool, bearer: str | None = None) -> Client:
    """A test client as the actor: the API token for API doors, a session for every other."""
    headers = {}
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}"
    elif api and actor in world.tokens:
        headers["Authorization"] = f"Token {world.tokens[actor]}"
    client = Client(headers=headers)
    user = world.users[actor]
    if user is not None and not api:
        client.force_login(user)
    return client


def observe(response: Any, expected: object) -> object:
    """The response in the table's terms: "login" for a redirect to a sign-in page; "200+" or
    "200-" (the owner's data shown or not) where the table asks for it; else the status code."""
    status = response.status_code
    if status == 302 and any(
        re.match(rf"^(https?://[^/]+)?{path}", response["Location"]) for path in LOGIN_PATHS
    ):
        return "login"
    if status == 200 and expected in ("200+", "200-"):
        body = _body(response)
        return "200+" if MARK.encode() in body else "200-"
    return status


def _body(response: Any) -> bytes:
    """The whole body; a front door's async stream read as the ASGI server reads it (iterating it
    synchronously works too, but only with Django's warning that a sync server buffers it)."""
    if not response.streaming:
        return bytes(response.content)
    if not response.is_async:
        return b"".join(response)

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return bytes(async_to_sync(read)())


# --- every door there is ------------------------------------------------------------------------


def _join(route1: str, route2: str) -> str:
    # As django.urls.URLResolver joins a route with its include's (ResolverMatch.route), and
    # without any "^": a regex at the root and the same one in an include are one door.
    return (route1 + route2).replace("^", "")


def every_route(patterns: list[Any] | None = None, prefix: str = "") -> list[str]:
    """Every URL pattern of the project, as the route ``route_of`` gives for a path it serves."""
    routes = []
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            routes += every_route(pattern.url_patterns, _join(prefix, str(pattern.pattern)))
        elif isinstance(pattern, URLPattern):
            routes.append(_join(prefix, str(pattern.pattern)))
    return routes


class _AnyId(dict[str, str]):
    """Fills a path's placeholders with something every converter accepts, to resolve it."""

    def __missing__(self, key: str) -> str:
        return "1"


def route_of(template: str) -> str:
    """The URL pattern serving a row's path (its placeholders filled, its query dropped)."""
    path = template.split("?")[0].format_map(_AnyId())
    return resolve(path).route.replace("^", "")


def every_admin_action() -> set[str]:
    """Every action of every admin class, as "app_label.Model name", whoever may run it."""
    actions = set()
    for model, model_admin in admin.site._registry.items():
        if model_admin.actions is None:  # Django offers none then, not even delete_selected
            continue
        for _func, name, _description in model_admin._get_base_actions():  # type: ignore[attr-defined]
            actions.add(f"{model._meta.label} {name}")
    return actions
