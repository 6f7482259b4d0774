"""Starting an agent run: validate, insert the run and submit its first turn's job (the turns
and tool calls after it: agents/services.py)."""

import logging
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from agents.models import AgentRun, AgentRunTag
from agents.services import _submit_turn
from agents.validation import AgentRunRequest, validate_agent_run_request
from api.errors import Conflict
from jobs.admission import idempotency_key_hash
from tracing.context import new_trace_fields
from webhooks.models import Subject
from webhooks.services import webhook_subscribe
from webhooks.signing_secrets import signer_for

__all__ = ["agent_run_create"]

logger = logging.getLogger(__name__)


def agent_run_create(
    *,
    user: User,
    data: Any,
    idempotency_key: str | None = None,
    api_key_id: int | None = None,
) -> tuple[AgentRun, bool]:
    """Validate, insert the run and submit its first turn's job (enqueued on commit). A repeated
    ``Idempotency-Key`` returns the first run (409 ``idempotency_conflict`` for another body).
    Every turn's job records ``api_key_id``, the key that started the run."""
    request = validate_agent_run_request(data, user=user, api_key_id=api_key_id)
    fingerprint = request.fingerprint()
    key_hash = None
    if idempotency_key:
        key_hash = idempotency_key_hash(idempotency_key)
        existing = AgentRun.objects.filter(user=user, idempotency_key_hash=key_hash).first()
        if existing is not None:
            return _replay(existing, fingerprint), False
    try:
        with transaction.atomic():
            run = _insert(user, request, fingerprint, idempotency_key, key_hash, api_key_id)
    except IntegrityError:
        if not key_hash:
            raise
        existing = AgentRun.objects.get(user=user, idempotency_key_hash=key_hash)
        return _replay(existing, fingerprint), False
    return run, True


def _replay(run: AgentRun, fingerprint: str) -> AgentRun:
    if run.request_fingerprint != fingerprint:
        raise Conflict(
            "This Idempotency-Key was used with a different request body.",
            code="idempotency_conflict",
            detail={"run_id": str(run.id)},
        )
    return run


def _insert(
    user: User,
    request: AgentRunRequest,
    fingerprint: str,
    idempotency_key: str | None,
    key_hash: str | None,
    api_key_id: int | None,
) -> AgentRun:
    run = AgentRun.objects.create(
        user=user,
        api_key_id=api_key_id,
        feature=request.feature,
        model=request.model,
        system=request.system,
        messages=request.messages,
        tools=request.tools,
        max_tokens=request.max_tokens,
        max_turns=request.max_turns,
        max_cost_usd=request.max_cost_usd,
        metadata=request.metadata,
        deadline=request.deadline,
        tags=request.tags,
        priority=request.priority,
        idempotency_key=idempotency_key or None,
        idempotency_key_hash=key_hash,
        request_fingerprint=fingerprint,
        **new_trace_fields(),
    )
    AgentRunTag.objects.bulk_create(AgentRunTag(run=run, tag=tag) for tag in request.tags)
    if request.callback_url:
        webhook_subscribe(
            subject_kind=Subject.AGENT_RUN,
            subject_id=run.id,
            url=request.callback_url,
            signer=signer_for(api_key_id=api_key_id, feature=run.feature),
        )
    _submit_turn(run, steps=[], user=user, refuse=True)
    logger.info(
        "agent run %s created: %s tools, at most %s turns",
        run.id,
        len(run.tools),
        run.max_turns,
        extra={"agent_run_id": str(run.id)},
    )
    return run
