"""Admin actions of the authorization table: how each is posted, on what, and how the database
shows that it happened. Each actor gets a fresh object, so one actor's action cannot hide
another's refusal."""

import itertools
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents.models import AgentRun, AgentStep, DemoEmail
from alerts.models import Alert, AlertRoute, LoopHeartbeat
from audit.models import AuditRecord
from audit.services import audit_record
from batches.models import Batch, BatchItem
from batches.services import batch_submit
from deferred.models import ProviderBatch, ProviderBatchItem
from dlq.models import BulkRequeue, FailureRecord
from dlq.services import failure_record_create
from features.models import FeaturePolicy
from jobs.models import LlmJob, ProviderBreaker
from jobs.services import job_submit
from keys.models import ApiKey
from keys.testing import api_key_for
from ledger.models import Budget, CostEntry, ModelPrice
from mcp_tools.models import MCPServer
from pipelines.models import Pipeline
from pipelines.services import pipeline_create
from providers.models import Provider
from ratelimits.models import RateLimit
from tests.authorization_world import MARK, World, waiting_agent_run, webhook_delivery_for
from webhooks.models import WebhookDelivery

__all__ = ["ACTION_EFFECTS", "post_action"]

_serial = itertools.count(1)


def _name() -> str:
    return f"{MARK}-{next(_serial)}"


_STEP = {"feature": MARK, "model": "claude-sonnet-4-6", "max_tokens": 64,
         "messages": [{"role": "user", "content": "hello"}]}  # fmt: skip


def _audit_record() -> AuditRecord:
    return audit_record(
        action="changed", target_type="ledger.budget", target_id=0, target=_name(), changes={}
    )


def _failed_job(world: World) -> LlmJob:
    body = {
        "feature": MARK,
        "model": "claude-sonnet-4-6",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 64,
    }
    job, _ = job_submit(user=world.users["owner"], data=body)  # type: ignore[arg-type]
    LlmJob.objects.filter(id=job.id).update(status=LlmJob.Status.FAILED, attempts=1)
    job.refresh_from_db()
    return job


def _running_job(world: World) -> LlmJob:
    """A job its worker runs: the cancel action marks it for the worker to end."""
    job = _failed_job(world)
    LlmJob.objects.filter(id=job.id).update(status=LlmJob.Status.RUNNING)
    job.refresh_from_db()
    return job


def _failure(world: World) -> FailureRecord:
    with transaction.atomic():
        return failure_record_create(
            job=_failed_job(world), severity="ERROR", reason_code="invalid_request"
        )


def _open_breaker(world: World) -> ProviderBreaker:
    breaker = world.objects["breaker"]
    ProviderBreaker.objects.filter(id=breaker.id).update(
        state=ProviderBreaker.State.OPEN, closed_at=None, closed_by=None
    )
    return breaker


def _cost_entry(world: World) -> CostEntry:
    job = _failed_job(world)
    return CostEntry.objects.create(
        job=job, attempt=1, feature=MARK, model=job.model, user=world.users["owner"],
        outcome=CostEntry.Outcome.ERROR_RESPONSE, http_status=400,
    )  # fmt: skip


def _price(world: World) -> ModelPrice:
    one = Decimal("1")
    return ModelPrice.objects.create(
        model=_name(), effective_from=timezone.now(), input_per_mtok=one, output_per_mtok=one,
        cache_write_5m_per_mtok=one, cache_write_1h_per_mtok=one, cache_read_per_mtok=one,
        max_output_tokens=1000,
    )  # fmt: skip


def _batch(world: World) -> Batch:
    item = {"messages": _STEP["messages"], "max_tokens": 64}
    data = {"feature": MARK, "model": "claude-sonnet-4-6", "items": [item]}
    return batch_submit(user=world.users["owner"], data=data)[0]  # type: ignore[arg-type]


def _pipeline(world: World) -> Pipeline:
    return pipeline_create(user=world.users["owner"], data={"steps": [_STEP]})  # type: ignore[arg-type]


def _state(model: Any, state: Any, field: str = "state") -> Callable[[World, Any], bool]:
    return lambda world, target: getattr(model.objects.get(pk=target.pk), field) == state


def _gone(model: Any) -> Callable[[World, Any], bool]:
    return lambda world, target: not model.objects.filter(pk=target.pk).exists()


def _new_bulk_requeue(world: World, before: int) -> bool:
    return BulkRequeue.objects.count() > before


Effect = tuple[Callable[[World], Any], Callable[[World, Any], bool]]


def _agent_run(world: World) -> AgentRun:
    return waiting_agent_run(world.users["owner"])  # type: ignore[arg-type]


def _call_is(status: str, is_error: bool) -> Callable[[World, Any], bool]:
    return lambda world, run: AgentStep.objects.filter(
        run=run, kind="tool", status=status, is_error=is_error
    ).exists()


ACTION_EFFECTS: dict[tuple[str, str], Effect] = {
    ("agents.AgentRun", "approve_calls"): (_agent_run, _call_is("pending", False)),
    ("agents.AgentRun", "reject_calls"): (_agent_run, _call_is("completed", True)),
    ("agents.AgentRun", "cancel_runs"): (_agent_run, _state(AgentRun, "cancelled", "status")),
    ("agents.AgentRun", "delete_selected"): (_agent_run, _gone(AgentRun)),
    ("agents.DemoEmail", "delete_selected"): (
        lambda world: DemoEmail.objects.create(call_id=_name(), to="a@example.com", subject="s"),
        _gone(DemoEmail),
    ),
    ("dlq.FailureRecord", "requeue"): (_failure, _state(FailureRecord, "requeued")),
    ("dlq.FailureRecord", "requeue_with_model"): (_failure, _state(FailureRecord, "requeued")),
    ("dlq.FailureRecord", "resolve"): (_failure, _state(FailureRecord, "resolved")),
    ("dlq.FailureRecord", "ignore"): (_failure, _state(FailureRecord, "ignored")),
    ("dlq.FailureRecord", "requeue_matching"): (
        lambda world: (_failure(world), BulkRequeue.objects.count())[1],
        _new_bulk_requeue,
    ),
    ("jobs.ProviderBreaker", "close_breaker"): (_open_breaker, _state(ProviderBreaker, "closed")),
    ("features.FeaturePolicy", "pause_features"): (
        lambda world: FeaturePolicy.objects.create(feature=_name()),
        _state(FeaturePolicy, True, "paused"),
    ),
    ("features.FeaturePolicy", "resume_features"): (
        lambda world: FeaturePolicy.objects.create(feature=_name(), paused=True),
        _state(FeaturePolicy, False, "paused"),
    ),
    ("providers.Provider", "pause_providers"): (
        lambda world: Provider.objects.create(
            name=_name(), kind="openai", base_url="http://127.0.0.1:9/v1"
        ),
        _state(Provider, True, "paused"),
    ),
    ("providers.Provider", "resume_providers"): (
        lambda world: Provider.objects.create(
            name=_name(), kind="openai", base_url="http://127.0.0.1:9/v1", paused=True
        ),
        _state(Provider, False, "paused"),
    ),
    ("batches.Batch", "cancel_batches"): (_batch, _state(Batch, "cancelled", "status")),
    ("webhooks.WebhookDelivery", "deliver_again"): (
        lambda world: webhook_delivery_for(world.objects["failed"]),
        _state(WebhookDelivery, "pending"),
    ),
    ("webhooks.WebhookDelivery", "delete_selected"): (
        lambda world: webhook_delivery_for(world.objects["failed"]),
        _gone(WebhookDelivery),
    ),
    ("pipelines.Pipeline", "cancel_pipelines"): (
        _pipeline,
        _state(Pipeline, "cancelled", "status"),
    ),
    ("jobs.LlmJob", "cancel_jobs"): (
        _running_job,
        lambda world, job: LlmJob.objects.get(pk=job.pk).cancel_requested_at is not None,
    ),
    ("jobs.LlmJob", "delete_selected"): (_failed_job, _gone(LlmJob)),
    ("jobs.ProviderBreaker", "delete_selected"): (_open_breaker, _gone(ProviderBreaker)),
    ("ledger.CostEntry", "delete_selected"): (_cost_entry, _gone(CostEntry)),
    ("deferred.ProviderBatch", "delete_selected"): (
        lambda world: world.objects["provider_batch"],
        _gone(ProviderBatch),
    ),
    ("deferred.ProviderBatchItem", "delete_selected"): (
        lambda world: world.objects["provider_batch_item"],
        _gone(ProviderBatchItem),
    ),
    ("ledger.Budget", "delete_selected"): (
        lambda world: Budget.objects.create(scope="feature", feature=_name(), limit_usd=1),
        _gone(Budget),
    ),
    ("ledger.ModelPrice", "delete_selected"): (_price, _gone(ModelPrice)),
    ("features.FeaturePolicy", "delete_selected"): (
        lambda world: FeaturePolicy.objects.create(feature=_name()),
        _gone(FeaturePolicy),
    ),
    ("mcp_tools.MCPServer", "delete_selected"): (
        lambda world: MCPServer.objects.create(name=_name(), url="http://127.0.0.1:9/mcp"),
        _gone(MCPServer),
    ),
    ("dlq.FailureRecord", "delete_selected"): (_failure, _gone(FailureRecord)),
    ("dlq.BulkRequeue", "delete_selected"): (
        lambda world: BulkRequeue.objects.create(description=_name()),
        _gone(BulkRequeue),
    ),
    ("alerts.Alert", "delete_selected"): (
        lambda world: Alert.objects.create(
            fingerprint=_name(), severity="ERROR", source="failure", title=MARK
        ),
        _gone(Alert),
    ),
    ("alerts.AlertRoute", "delete_selected"): (
        lambda world: AlertRoute.objects.create(
            severity="ERROR", kind="email", target="ops@example.com", name=_name()
        ),
        _gone(AlertRoute),
    ),
    ("alerts.LoopHeartbeat", "delete_selected"): (
        lambda world: LoopHeartbeat.objects.create(name=_name(), interval_seconds=5),
        _gone(LoopHeartbeat),
    ),
    ("batches.Batch", "delete_selected"): (_batch, _gone(Batch)),
    ("batches.BatchItem", "delete_selected"): (
        lambda world: _batch(world).items.get(),
        _gone(BatchItem),
    ),
    ("pipelines.Pipeline", "delete_selected"): (_pipeline, _gone(Pipeline)),
    ("providers.Provider", "delete_selected"): (
        lambda world: Provider.objects.create(name=_name(), kind="openai", base_url="http://h/v1"),
        _gone(Provider),
    ),
    ("ratelimits.RateLimit", "delete_selected"): (
        lambda world: RateLimit.objects.create(model=_name(), rpm=10),
        _gone(RateLimit),
    ),
    ("keys.ApiKey", "revoke_keys"): (
        lambda world: ApiKey.objects.get(
            user=world.users["owner"],
            prefix=api_key_for(world.users["owner"])[:12],  # type: ignore[arg-type]
        ),
        lambda world, key: ApiKey.objects.get(pk=key.pk).revoked_at is not None,
    ),
    ("keys.ApiKey", "delete_selected"): (
        lambda world: ApiKey.objects.get(
            user=world.users["owner"],
            prefix=api_key_for(world.users["owner"])[:12],  # type: ignore[arg-type]
        ),
        _gone(ApiKey),
    ),
    ("audit.AuditRecord", "delete_selected"): (
        lambda world: _audit_record(),
        _gone(AuditRecord),
    ),
    ("auth.User", "delete_selected"): (
        lambda world: User.objects.create(username=_name()),
        _gone(User),
    ),
    ("auth.Group", "delete_selected"): (
        lambda world: Group.objects.create(name=_name()),
        _gone(Group),
    ),
}

# What each action's confirmation step posts (Django's "Yes, I'm sure", the DLQ's forms).
_CONFIRM: dict[str, dict[str, str]] = {
    "delete_selected": {"post": "yes"},
    "requeue_with_model": {"apply": "1", "model": "claude-haiku-4-5"},
    "resolve": {"apply": "1", "comment": ""},
    "ignore": {"apply": "1", "comment": ""},
}


def post_action(client: Client, world: World, label: str, action: str, target: Any) -> None:
    """Post the action as the admin's changelist form does, confirmed."""
    app_label, model_name = label.lower().split(".")
    if action == "requeue_matching":
        url = reverse(f"admin:{app_label}_{model_name}_requeue_matching")
        client.post(url, {"confirm": "yes"})
        return
    url = reverse(f"admin:{app_label}_{model_name}_changelist")
    data = {"action": action, "_selected_action": [str(target.pk)], "index": "0"}
    client.post(url, {**data, **_CONFIRM.get(action, {})})
