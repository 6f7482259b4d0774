"""The WebSocket of live job events: ``/ws/jobs/`` (see docs/api.md).

Authentication comes from the ASGI stack (llmops/asgi.py): the session cookie, or the API token
sent as the subprotocol pair ``token, <key>``. Refusals at connect close before the handshake
completes with an application code: 4401 unauthenticated, 4403 ``?all=1`` for a user who may not
read every job (staff with ``jobs.view_llmjob``), 4404 a ``?job=`` that is not the user's.

An open socket keeps only what its user still has: every ``WS_REAUTH_SECONDS`` it authorizes
again, with the code connect uses, and closes 4401 or 4403 when the key (revoked, expired),
session, user or permission (or the key's ``jobs:read`` scope) is gone. The same beat renews
its group (a Redis restart loses groups) and its place among its user's sockets (at most
``WS_MAX_CONNECTIONS_PER_USER``: one more is accepted, then closed 4429). Events wait for a
slow client in a queue of at most ``WS_MAX_QUEUED_BYTES``; past it the socket is closed 4413,
and the client catches up over the REST API.
"""

import asyncio
import logging
import random
import uuid
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch
from django.conf import settings
from redis.exceptions import RedisError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from api.websocket_auth import current_credentials
from jobs.live_output import DELTA_EVENT, partial_text
from jobs.models import LlmJob
from jobs.sockets import socket_register, socket_rejoin, socket_renew, socket_unregister
from keys.scopes import JOBS_READ
from llmops.queues import all_jobs_group, job_events_group, job_group

logger = logging.getLogger("jobs.consumers")

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_TOO_FAR_BEHIND = 4413
CLOSE_TOO_MANY_CONNECTIONS = 4429
CLOSE_MESSAGE_TOO_BIG = 1009
CLOSE_CANNOT_CHECK = 1011

RESYNC_EVENT = {"type": "resync"}
"""Sent when the socket's group was lost (Redis restarted) and is back: events went missing, the
client fetches the current state over the REST API."""

_CLOSE_WAIT_SECONDS = 5.0
"""How long a close frame may wait behind a client that does not read; then the socket ends."""
_FAILED_CHECKS_BEFORE_CLOSE = 3
"""Checks in a row that could not run (database or Redis down) before the socket closes 1011: a
blip keeps it open, but access is never kept unchecked for long."""
_LAYER_RETRY_CAP_SECONDS = 5.0

_LAYER_ERRORS = (RedisError, OSError)
_DELTA_JOBS_KEPT = 1000
"""Running jobs whose text position a socket remembers (the oldest forgotten first)."""


@database_sync_to_async
def _owns_job(user_id: int, job_id: uuid.UUID) -> bool:
    return LlmJob.objects.filter(id=job_id, user_id=user_id).exists()


@database_sync_to_async
def _may_watch_every_job(user: Any) -> bool:
    """Staff who may read every job in the admin: the events carry each job's output, which the
    jobs API shows to its owner only, so staff status alone is not enough."""
    return bool(user.is_staff and user.has_perm("jobs.view_llmjob"))


def _parse_offset(value: str) -> int | None:
    return int(value) if value.isdigit() else None


@database_sync_to_async
def _resume_point(job_id: uuid.UUID) -> tuple[int, str, dict[str, Any] | None] | None:
    """What a socket resuming ``?job=&offset=`` has to catch up on, from one reading of the job:
    the running attempt's partial text, or a finished job's output with its ``job.updated`` end
    (published before the socket joined, or about to reach it too: ``job_updated`` drops that
    copy). Text and end come from the same reading: an end read after a running job's partial
    text would reach the client before the rest of that text."""
    from jobs.events import event_for

    job = LlmJob.objects.filter(id=job_id).first()
    if job is None:
        return None
    if job.status == LlmJob.Status.RUNNING:
        kept = partial_text(job_id)
        if kept is not None and kept[0] == job.attempts:
            return kept[0], kept[1], None
        # Ended meanwhile (its text is cleared once the job's end commits): read it again.
        job.refresh_from_db()
        if job.status == LlmJob.Status.RUNNING:
            return job.attempts, "", None
    final = event_for(job) if job.is_final else None
    if job.output_text is not None:
        return job.attempts, job.output_text, final
    return (job.attempts, "", final) if final is not None else None


def _parse_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


async def authorize(
    user: Any, query_string: bytes, scopes: list[str] | None = None
) -> tuple[str | None, int | None]:
    """The group ``user`` may hear for this query, or the close code that refuses it: at connect
    and at every re-check alike. ``scopes``: those of the API key the socket opened with (None
    for a session); the events are the jobs API's reads, so a key needs ``jobs:read``."""
    if user is None or not user.is_authenticated:
        return None, CLOSE_UNAUTHENTICATED
    if scopes is not None and JOBS_READ not in scopes:
        return None, CLOSE_FORBIDDEN
    query = parse_qs(query_string.decode())
    job_ids = query.get("job")
    if job_ids:
        job_id = _parse_uuid(job_ids[0])
        if job_id is None or not await _owns_job(user.id, job_id):
            return None, CLOSE_NOT_FOUND
        return job_group(job_id), None
    if query.get("all", ["0"])[0] in ("1", "true"):
        if not await _may_watch_every_job(user):
            return None, CLOSE_FORBIDDEN
        return all_jobs_group(), None
    return job_events_group(user.id), None


class JobEventsConsumer(AsyncJsonWebsocketConsumer):
    groups: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """AsyncConsumer's loop, with three changes: a channel-layer receive that outlives Redis
        errors (they ended the socket), a third source that ends the loop when the socket must
        go, and a clean-up that runs however the socket ends."""
        self.scope = scope
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        self.channel_name = await self.channel_layer.new_channel()
        self.base_send = send
        self.joined: str | None = None
        self.user_id: int | None = None
        self.ending = False
        self.layer_lost = False
        self.stopped = asyncio.Event()
        self.outbox: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        self.queued_bytes = 0
        self.tasks: list[asyncio.Task[None]] = []
        self.deltas: dict[str, tuple[int, int]] = {}
        """job id -> (attempt, characters this socket has of its text), for the running jobs."""
        self.ends_sent: dict[str, tuple[str, int]] = {}
        """job id -> (status, attempts) of the end a resume sent (``_catch_up``)."""
        try:
            await await_many_dispatch(
                [receive, self._receive_from_layer, self._until_stopped], self.dispatch
            )
        except StopConsumer:
            pass
        finally:
            await self._clean_up()

    async def connect(self) -> None:
        user = self.scope.get("user")
        group, refusal = await authorize(
            user, self.scope.get("query_string", b""), self.scope.get("api_key_scopes")
        )
        if refusal is not None or group is None:
            await self.close(code=refusal)
            return
        subprotocol = "token" if self.scope.get("token_auth") else None
        if not await socket_register(
            layer=self.channel_layer, user_id=user.id, channel_name=self.channel_name
        ):
            # Accepted first so that the client sees why: a refused handshake shows no code.
            await self.accept(subprotocol=subprotocol)
            await self.close(code=CLOSE_TOO_MANY_CONNECTIONS)
            return
        self.user_id = user.id
        self.joined = group
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept(subprotocol=subprotocol)
        self.tasks = [
            asyncio.ensure_future(self._write()),
            asyncio.ensure_future(self._check_again()),
        ]
        await self._catch_up()

    async def _catch_up(self) -> None:
        """``?job=<id>&offset=<n>``: first the text from ``n`` that the client missed (the
        running attempt's partial text, or a finished job's output), as one ``job.delta``, and a
        finished job's ``job.updated``; the live deltas after it are trimmed to what the client
        does not have, and the live copy of that end is dropped. The group was joined first and
        the text is appended before each delta is published (jobs/live_output.py), so nothing
        falls between the two."""
        query = parse_qs(self.scope.get("query_string", b"").decode())
        job_id = _parse_uuid((query.get("job") or [""])[0])
        offset = _parse_offset((query.get("offset") or [""])[0])
        if job_id is None or offset is None:
            return
        resumed = await _resume_point(job_id)
        if resumed is None:
            return
        attempt, text, final = resumed
        self._delta_seen(str(job_id), attempt, max(offset, len(text)))
        if len(text) > offset:
            await self._queue(
                {
                    "type": DELTA_EVENT,
                    "job": str(job_id),
                    "attempt": attempt,
                    "offset": offset,
                    "text": text[offset:],
                }
            )
        if final is not None:
            # A job that has ended: its end too, after its text, and once only (below).
            job = final["job"]
            self.ends_sent[job["id"]] = (job["status"], job["attempts"])
            await self._queue(final)

    async def job_delta(self, message: dict[str, Any]) -> None:
        """A streaming job's text (jobs/live_output.py): only what this socket has not had yet
        (a delta sent again after a lost hand-off overlaps the last one, and a socket that
        resumed from an offset has the start); a new attempt's text starts again at 0."""
        job, start, text = message["job"], message["offset"], message["text"]
        attempt = message.get("attempt") or 0
        had = self.deltas.get(job)
        if had is not None:
            had_attempt, had_end = had
            if attempt < had_attempt:
                return
            if attempt == had_attempt:
                end = start + len(text)
                if end <= had_end:
                    return
                if start < had_end:
                    text, start = text[had_end - start :], had_end
        self._delta_seen(job, attempt, start + len(text))
        await self._queue(
            {"type": DELTA_EVENT, "job": job, "attempt": attempt, "offset": start, "text": text}
        )

    def _delta_seen(self, job: str, attempt: int, end: int) -> None:
        self.deltas.pop(job, None)
        self.deltas[job] = (attempt, end)
        if len(self.deltas) > _DELTA_JOBS_KEPT:
            self.deltas.pop(next(iter(self.deltas)))

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """The socket is server-to-client only: what a client sends is ignored, never decoded.
        One over WS_MAX_MESSAGE_BYTES (which uvicorn already refuses, llmops/web.py) closes it."""
        size = len(text_data.encode()) if text_data is not None else len(bytes_data or b"")
        if size > settings.WS_MAX_MESSAGE_BYTES:
            await self.close(code=CLOSE_MESSAGE_TOO_BIG)

    async def job_updated(self, message: dict[str, Any]) -> None:
        job = message["job"]
        if job.get("status") in LlmJob.FINAL_STATUSES:
            self.deltas.pop(job.get("id"), None)
            if self.ends_sent.pop(job.get("id"), None) == (job["status"], job.get("attempts")):
                # The end a resume already sent: it was published after this socket joined.
                return
        await self._queue({"type": message["type"], "job": job})

    async def pipeline_step_completed(self, message: dict[str, Any]) -> None:
        """Pipeline events (pipelines/events.py) go to their owner's group only."""
        await self._queue({"type": message["type"], "pipeline": message["pipeline"]})

    pipeline_finished = pipeline_step_completed

    async def agent_step(self, message: dict[str, Any]) -> None:
        """Agent run events (agents/events.py): to the owner's group and to ``?all=1`` staff."""
        event = {"type": message["type"], "run": message["run"]}
        if "step" in message:
            event["step"] = message["step"]
        await self._queue(event)

    agent_updated = agent_step

    async def batch_progress(self, message: dict[str, Any]) -> None:
        """Batch events (batches/events.py) go to their owner's group only."""
        await self._queue({"type": message["type"], "batch": message["batch"]})

    batch_finished = batch_progress

    async def consumer_stop(self, message: dict[str, Any]) -> None:
        raise StopConsumer()

    # The outbound queue: handlers never wait on the client, so the channel layer's buffer
    # (counted in messages, not bytes) stays empty and this queue holds the bytes, bounded.

    async def _queue(self, event: dict[str, Any]) -> None:
        if self.ending:
            return
        text = await self.encode_json(event)
        size = len(text.encode())
        if self.queued_bytes + size > settings.WS_MAX_QUEUED_BYTES:
            logger.warning(
                "socket %s of user %s closed: the client reads too slowly (%d bytes waiting)",
                self.channel_name,
                self.user_id,
                self.queued_bytes,
            )
            await self._end(CLOSE_TOO_FAR_BEHIND)
            return
        self.queued_bytes += size
        self.outbox.put_nowait((text, size))

    async def _write(self) -> None:
        while True:
            text, size = await self.outbox.get()
            try:
                # Waits while the client's TCP window and uvicorn's buffer are full.
                await self.send(text_data=text)
            finally:
                self.queued_bytes -= size

    async def _check_again(self) -> None:
        """Every WS_REAUTH_SECONDS: authorize again as at connect, then renew the group and the
        connection count (both lost with a Redis restart)."""
        failures = 0
        while True:
            # A little early at random, so that sockets opened together do not check together.
            await asyncio.sleep(settings.WS_REAUTH_SECONDS * random.uniform(0.8, 1.0))
            try:
                user, scopes = await current_credentials(self.scope)
                group, refusal = await authorize(user, self.scope.get("query_string", b""), scopes)
                if group is None or group != self.joined or user.id != self.user_id:
                    refusal = refusal or CLOSE_FORBIDDEN
                    logger.info("socket %s closed %d: access lost", self.channel_name, refusal)
                    await self._end(refusal)
                    return
                lost = await socket_rejoin(
                    layer=self.channel_layer, group=group, channel_name=self.channel_name
                )
                await socket_renew(
                    layer=self.channel_layer, user_id=user.id, channel_name=self.channel_name
                )
            except Exception as exc:  # any failure: a socket left unchecked must end
                failures += 1
                logger.warning("socket %s not checked (%d): %r", self.channel_name, failures, exc)
                if failures >= _FAILED_CHECKS_BEFORE_CLOSE:
                    await self._end(CLOSE_CANNOT_CHECK)
                    return
                continue
            failures = 0
            if lost or self.layer_lost:
                self.layer_lost = False
                await self._queue(RESYNC_EVENT)

    async def _receive_from_layer(self) -> dict[str, Any]:
        """channels-redis's receive, again after a Redis error instead of ending the socket: the
        next check rejoins the group once Redis is back, and tells the client to catch up."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(_LAYER_ERRORS),
            # 0.1 s, doubled after each failure, at most _LAYER_RETRY_CAP_SECONDS; never gives up.
            wait=wait_exponential(multiplier=0.1, max=_LAYER_RETRY_CAP_SECONDS),
            before_sleep=self._on_layer_error,
        )
        message: dict[str, Any] = await retrying(self.channel_layer.receive, self.channel_name)
        return message

    def _on_layer_error(self, state: RetryCallState) -> None:
        if not self.layer_lost:
            exc = state.outcome.exception() if state.outcome is not None else None
            logger.warning("socket %s lost the channel layer: %r", self.channel_name, exc)
        self.layer_lost = True

    async def _until_stopped(self) -> dict[str, Any]:
        await self.stopped.wait()
        return {"type": "consumer.stop"}

    async def _end(self, code: int) -> None:
        """Close with ``code``, sending nothing more: leave the group first, drop what waits."""
        if self.ending:
            return
        self.ending = True
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        while not self.outbox.empty():
            self.outbox.get_nowait()
        await self._leave()
        try:
            # Behind a client that does not read, the close frame waits on uvicorn's buffer.
            await asyncio.wait_for(self.close(code=code), _CLOSE_WAIT_SECONDS)
        except Exception as exc:
            logger.info("socket %s: close %d not sent: %r", self.channel_name, code, exc)
        self.stopped.set()

    async def _leave(self) -> None:
        group, self.joined = self.joined, None
        user_id, self.user_id = self.user_id, None
        try:
            if group is not None:
                await self.channel_layer.group_discard(group, self.channel_name)
            if user_id is not None:
                await socket_unregister(
                    layer=self.channel_layer, user_id=user_id, channel_name=self.channel_name
                )
        except _LAYER_ERRORS as exc:
            # Both expire on their own: the group's entry with group_expiry, the count's with
            # the renewals it no longer gets.
            logger.warning("socket %s not deregistered: %r", self.channel_name, exc)

    async def _clean_up(self) -> None:
        self.ending = True
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self._leave()
