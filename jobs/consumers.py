"""The WebSocket of live job events: ``/ws/jobs/`` (see docs/api.md).

Authentication comes from the ASGI stack (llmops/asgi.py): the session cookie, or the API token
sent as the subprotocol pair ``token, <key>``. Refusals close before the handshake completes
with an application code: 4401 unauthenticated, 4403 ``?all=1`` for a user who may not read
every job (staff with ``jobs.view_llmjob``), 4404 a ``?job=`` that is not the user's.
"""

import uuid
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from jobs.models import LlmJob
from llmops.queues import all_jobs_group, job_events_group, job_group

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_MESSAGE_TOO_BIG = 1009


@database_sync_to_async
def _owns_job(user_id: int, job_id: uuid.UUID) -> bool:
    return LlmJob.objects.filter(id=job_id, user_id=user_id).exists()


@database_sync_to_async
def _may_watch_every_job(user: Any) -> bool:
    """Staff who may read every job in the admin: the events carry each job's output, which the
    jobs API shows to its owner only, so staff status alone is not enough."""
    return bool(user.is_staff and user.has_perm("jobs.view_llmjob"))


def _parse_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


class JobEventsConsumer(AsyncJsonWebsocketConsumer):
    groups: list[str] = []

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        job_ids = query.get("job")
        if job_ids:
            job_id = _parse_uuid(job_ids[0])
            if job_id is None or not await _owns_job(user.id, job_id):
                await self.close(code=CLOSE_NOT_FOUND)
                return
            group = job_group(job_id)
        elif query.get("all", ["0"])[0] in ("1", "true"):
            if not await _may_watch_every_job(user):
                await self.close(code=CLOSE_FORBIDDEN)
                return
            group = all_jobs_group()
        else:
            group = job_events_group(user.id)
        self.joined = group
        await self.channel_layer.group_add(group, self.channel_name)
        subprotocol = "token" if self.scope.get("token_auth") else None
        await self.accept(subprotocol=subprotocol)

    async def disconnect(self, code: int) -> None:
        group = getattr(self, "joined", None)
        if group is not None:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """The socket is server-to-client only: what a client sends is ignored, never decoded.
        One over WS_MAX_MESSAGE_BYTES (which uvicorn already refuses, llmops/web.py) closes it."""
        size = len(text_data.encode()) if text_data is not None else len(bytes_data or b"")
        if size > settings.WS_MAX_MESSAGE_BYTES:
            await self.close(code=CLOSE_MESSAGE_TOO_BIG)

    async def job_updated(self, message: dict[str, Any]) -> None:
        await self.send_json({"type": message["type"], "job": message["job"]})

    async def pipeline_step_completed(self, message: dict[str, Any]) -> None:
        """Pipeline events (pipelines/events.py) go to their owner's group only."""
        await self.send_json({"type": message["type"], "pipeline": message["pipeline"]})

    pipeline_finished = pipeline_step_completed

    async def batch_progress(self, message: dict[str, Any]) -> None:
        """Batch events (batches/events.py) go to their owner's group only."""
        await self.send_json({"type": message["type"], "batch": message["batch"]})

    batch_finished = batch_progress
