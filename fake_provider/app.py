"""A fake, Anthropic-compatible Messages API: a pure ASGI app (stdlib only, no Django models)
served by uvicorn (``build_server``; ``python manage.py fake_anthropic``).

Routes:
    POST /v1/messages        the Messages API, deterministic replies; with "stream": true as
                             server-sent events (streaming.py), faults inside the stream too
    POST /openai/v1/chat/completions   the OpenAI-compatible API (openai_compat.py): the same
                             replies, faults and scripts, in that API's words
    POST /openai/v1/embeddings   deterministic unit vectors, float or base64
                             (openai_embeddings.py), with the same faults and scripts, and its
                             own: repeat_index, skip_index (a 200 with wrong ``index`` fields)
    POST /v1/messages/batches    the Message Batches API (batches.py): create; GET lists them;
    GET  /v1/messages/batches/{id}   one batch (DELETE deletes an ended one);
    POST /v1/messages/batches/{id}/cancel, GET .../results (JSONL, once ended); items end over
                             "batch_processing_seconds", billed at half price
    POST /v1/messages/count_tokens   the input tokens of a Messages body (count_tokens.py)
    GET  /_fake/health       {"ok": true}
    GET  /_fake/stats        counters and the bill (see below)
    GET  /_fake/billing      every billed call: request id, Idempotency-Key, cost, how it ended
    GET  /_fake/arrivals     when each POST /v1/messages arrived (epoch seconds, the last 10,000)
    GET  /_fake/in_flight    the Idempotency-Keys (our job ids) of the calls in flight now
    GET  /_fake/faults       the active configuration
    POST /_fake/faults       change the configuration, optionally for a window of seconds:
                             {"faults": {"529": 1.0}, "for_seconds": 120,
                              "latency_ms": "20-400", "rpm": 60, "itpm": 30000,
                              "otpm": 8000, "rate_window_seconds": 60,
                              "short_interval_seconds": 5,
                              "batch_processing_seconds": 1, "batch_errored_rate": 0.1,
                              "batch_expired_rate": 0.05}
                             or script the next answers (scripts.py), for everyone's next calls
                             or only for those carrying one Idempotency-Key (our job id):
                             {"next": ["429", "ok"], "key": "<job id>"}
    POST /_fake/reset        start configuration back; counters, cache memory, rpm window,
                             scripts and message batches cleared

Order of work for POST /v1/messages: read the body (413 past 32 MB), check the key (401), the
body (400), the model (404), the rate windows (429: requests, input and output tokens, checked on
arrival as the real API does, so a 429 answers at once), sleep the latency, draw a fault, answer;
a scripted step, when one is due for the call, gives the latency and the answer instead.
Rate-limit headers (state.py) come with every answer, success or error, once a limit is set.

Stats: ``requests`` counts every POST /v1/messages when it arrives. ``by_status`` counts the
status of every complete response sent. A ``drop`` (200 head sent, body cut) counts ONLY under
``dropped`` and a ``timeout`` (never answered) ONLY under ``timed_out``, never in ``by_status``;
so once nothing is in flight, requests == sum(by_status) + dropped + timed_out. Successful,
dropped and timed-out requests are billed (the work was done); error responses bill nothing.
Message batches count apart: ``batch_requests`` (items of the batches created), ``batch_results``
(how they ended); their succeeded items are in ``billed`` and also in ``billed.batch_cost_usd``.
``in_flight`` is the number of POST /v1/messages being handled now (answered or held), and
``peak_in_flight`` the most at once since the last reset (bench/concurrency.py reads it);
``GET /_fake/in_flight`` lists the Idempotency-Keys (job ids) of the calls in flight.
``GET /_fake/billing`` lists every billed call with its request id and the caller's
``Idempotency-Key`` (our workers send the job id): which job was billed how often, and for which
answer (the chaos drill, chaos/, compares it with the ledger job by job).

Faults: one uniform draw per request; each configured fault owns a slice of its rate, in the
order given (rates adding up to more than 1 cut the later ones). An injected 429 says
``retry-after: 1``; ``spendcap`` (429 with error.details.error_code
"enforced_spend_limit_reached") has no retry-after and ``x-should-retry: false``; ``credit`` is
the 400 "Your credit balance is too low". ``garbage`` answers 200 with a non-JSON body
(``text/html``, a proxy's error page) and is billed like a success. A ``timeout``
holds the request until the client goes away; if the server shuts down first, the connection
is cut after a 200 head (as a drop) instead of answering. A ``trickle`` sends the 200 head at
once, then its body one byte every ``TRICKLE_INTERVAL_SECONDS``: a read timeout never fires, only
a deadline on the whole call ends it (billed; a client that goes away first counts under
``timed_out``, a body sent to its end under ``by_status``).

Prompt caching: the prefix up to the last block with ``cache_control`` is written the first
time (per model) and read on a repeat within its ttl (a read refreshes the ttl). Earlier
breakpoints and Anthropic's 20-block lookback are not modelled.

All state lives in one FakeProviderState on the loop of a single uvicorn worker; the handlers
never await between reading and updating it, so no lock is needed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from .batches import BATCHES_PATH, MAX_BATCH_BYTES, advance_batches
from .batches import handle as answer_batches
from .count_tokens import COUNT_TOKENS_PATH, count_tokens
from .openai_compat import CHAT_COMPLETIONS_PATH, OPENAI_ONLY_FAULTS, chat_completions
from .openai_embeddings import EMBEDDINGS_PATH, embeddings
from .responses import (
    FAULT_ERRORS,
    GARBAGE_BODY,
    GARBAGE_CONTENT_TYPE,
    ApiError,
    build_message,
    error_body,
    new_request_id,
    parse_request,
    should_retry,
    stream_seconds,
)
from .scripts import parse_key, parse_script
from .state import (
    TRICKLE_INTERVAL_SECONDS,
    FakeProviderState,
    parse_batch_seconds,
    parse_faults,
    parse_latency,
    parse_rate_window,
    parse_rpm,
    parse_share,
    parse_short_interval,
    parse_stream_pace,
)
from .streaming import STREAM_FAULTS, StreamPlan, stream_answer

__all__ = ["FakeAnthropicApp", "create_app"]

MAX_BODY_BYTES = 32 * 1024 * 1024  # the Messages API limit
_BILLED_AS = {
    "timeout": "timed_out",
    "drop": "dropped",
    "garbage": "garbage",
    "trickle": "trickled",
}
"""How a billed call ended, for the billing log, by the fault drawn for it (none: answered)."""
_STREAM_BILLED_AS = {
    "answered": "answered",
    "error_event": "error_event",
    "stalled": "stalled",
    "dropped": "dropped",
    "gone": "client_gone",
}
"""How a billed stream ended (streaming.py ``StreamEnd.how``): for what it streamed."""

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Headers = list[tuple[str, str]]


class _TooLarge(Exception):
    pass


async def _read_body(receive: Receive, limit: int = MAX_BODY_BYTES) -> bytes | None:
    """The whole request body; None when the client went away; _TooLarge past the limit."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _encode(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


async def _send(
    send: Send,
    status: int,
    body: bytes,
    headers: Headers | None = None,
    content_type: str = "application/json",
) -> None:
    raw = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers or []]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class FakeAnthropicApp:
    """The ASGI callable; ``.state`` is its FakeProviderState."""

    def __init__(self, state: FakeProviderState | None = None) -> None:
        self.state = state or FakeProviderState()
        self._closing: asyncio.Event | None = None

    @property
    def closing(self) -> asyncio.Event:
        """Set when the server shuts down: requests held by a ``timeout`` fault end then."""
        if self._closing is None:
            self._closing = asyncio.Event()
        return self._closing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self._closing = asyncio.Event()  # bound to this server's loop
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/v1/messages":
            if method == "POST":
                key = dict(scope["headers"]).get(b"idempotency-key", b"").decode("latin-1")
                arrived = self.state.call_started(key)
                try:
                    return await self.messages(scope, receive, send)
                finally:
                    client = (scope.get("client") or ("", 0))[0]
                    self.state.call_ended(key, client=client, arrived=arrived)
            return await self.plain_error(
                send, ApiError(405, f"Method {method} not allowed for {path}")
            )
        if path in (CHAT_COMPLETIONS_PATH, EMBEDDINGS_PATH):
            if method != "POST":
                return await self.plain_error(
                    send, ApiError(405, f"Method {method} not allowed for {path}")
                )
            key = dict(scope["headers"]).get(b"idempotency-key", b"").decode("latin-1")
            self.state.call_started(key)
            try:
                try:
                    body = await _read_body(receive)
                except _TooLarge:
                    return await self.plain_error(send, ApiError(413, "Request body too large"))
                if body is None:
                    return None
                answer = chat_completions if path == CHAT_COMPLETIONS_PATH else embeddings
                return await answer(self.state, self.closing, scope, receive, send, body)
            finally:
                self.state.call_ended(key)
        if path == BATCHES_PATH or path.startswith(BATCHES_PATH + "/"):
            return await self.batches(scope, receive, send)
        routes = {
            ("GET", "/_fake/health"): lambda body: {"ok": True},
            ("GET", "/_fake/stats"): lambda body: self.settled().stats(),
            ("GET", "/_fake/billing"): lambda body: self.settled().billing_log(),
            ("GET", "/_fake/arrivals"): lambda body: self.state.arrival_log(),
            ("GET", "/_fake/in_flight"): lambda body: self.state.calls_in_flight(),
            ("GET", "/_fake/calls"): lambda body: self.state.call_log(),
            ("GET", "/_fake/faults"): lambda body: self.state.describe(),
            ("POST", "/_fake/faults"): self.set_faults,
            ("POST", "/_fake/reset"): self.reset,
            ("POST", COUNT_TOKENS_PATH): count_tokens,
        }
        handler = routes.get((method, path))
        if handler is None:
            known = any(p == path for _, p in routes)
            error = (
                ApiError(405, f"Method {method} not allowed")
                if known
                else ApiError(404, "Not found")
            )
            return await self.plain_error(send, error)
        try:
            body = await _read_body(receive)
        except _TooLarge:
            return await self.plain_error(send, ApiError(413, "Request body too large"))
        if body is None:
            return
        try:
            payload = handler(body)
        except ApiError as error:
            return await self.plain_error(send, error)
        await _send(send, 200, _encode(payload))

    # --- the Message Batches API ----------------------------------------------------------------

    async def batches(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = MAX_BATCH_BYTES if scope["method"] == "POST" else MAX_BODY_BYTES
        try:
            body = await _read_body(receive, limit)
        except _TooLarge:
            error = ApiError(413, "Request exceeds the maximum allowed number of bytes.")
            return await self.plain_error(send, error)
        if body is None:
            return None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host") or "{}:{}".format(*(scope.get("server") or ("127.0.0.1", 80)))
        base_url = f"{scope.get('scheme', 'http')}://{host}"
        query = scope.get("query_string", b"").decode("latin-1")
        method, path = scope["method"], scope["path"]
        answer = answer_batches(self.state, method, path, headers, query, body, base_url)
        await _send(send, answer.status, answer.body, answer.headers, answer.content_type)

    def settled(self) -> FakeProviderState:
        """The state, once every batch item whose moment has come has ended (and been billed)."""
        advance_batches(self.state)
        return self.state

    # --- control endpoints ------------------------------------------------------------------------

    def set_faults(self, body: bytes) -> dict[str, Any]:
        try:
            payload = json.loads(body or b"null")
        except ValueError:
            raise ApiError(400, "body must be JSON") from None
        allowed = {
            "faults",
            "next",
            "key",
            "for_seconds",
            "latency_ms",
            "rpm",
            "itpm",
            "otpm",
            "rate_window_seconds",
            "short_interval_seconds",
            "stream_tokens_per_second",
            "batch_processing_seconds",
            "batch_errored_rate",
            "batch_expired_rate",
        }
        if not isinstance(payload, dict) or not payload or set(payload) - allowed:
            raise ApiError(
                400, f"body must be a JSON object with some of: {', '.join(sorted(allowed))}"
            )
        changes: dict[str, Any] = {}
        script, key = None, None
        try:
            if "key" in payload and "next" not in payload:
                raise ValueError("key names whose script next is: send both")
            if "next" in payload:
                script = parse_script(payload["next"])
                key = parse_key(payload["key"]) if "key" in payload else None
            if "faults" in payload:
                if not isinstance(payload["faults"], dict):
                    raise ValueError("faults must be an object of CODE: RATE")
                changes["faults"] = parse_faults(payload["faults"])
            if "latency_ms" in payload:
                changes["latency_ms"] = parse_latency(payload["latency_ms"])
            for limit in ("rpm", "itpm", "otpm"):
                if limit in payload:
                    changes[limit] = parse_rpm(payload[limit])
            if "rate_window_seconds" in payload:
                changes["rate_window_seconds"] = parse_rate_window(payload["rate_window_seconds"])
            if "short_interval_seconds" in payload:
                changes["short_interval_seconds"] = parse_short_interval(
                    payload["short_interval_seconds"]
                )
            if "stream_tokens_per_second" in payload:
                changes["stream_tokens_per_second"] = parse_stream_pace(
                    payload["stream_tokens_per_second"]
                )
            if "batch_processing_seconds" in payload:
                changes["batch_processing_seconds"] = parse_batch_seconds(
                    payload["batch_processing_seconds"]
                )
            for share in ("batch_errored_rate", "batch_expired_rate"):
                if share in payload:
                    changes[share] = parse_share(share, payload[share])
            seconds = payload.get("for_seconds")
            if seconds is not None and (
                isinstance(seconds, bool)
                or not isinstance(seconds, (int, float))
                or not 0 < seconds <= 86_400
            ):
                raise ValueError("for_seconds must be a number of seconds in (0, 86400]")
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        if script is not None:
            self.state.scripts.arm(script, key)
        if set(payload) - {"next", "key"}:
            # A script alone leaves the configuration (and its window) as it is.
            self.state.update_config(self.state.with_changes(**changes), seconds)
        return self.state.describe()

    def reset(self, body: bytes) -> dict[str, Any]:
        self.state.reset()
        return {"ok": True, **self.state.describe()}

    async def plain_error(
        self, send: Send, error: ApiError, headers: Headers | None = None, request_id: str = ""
    ) -> None:
        request_id = request_id or new_request_id()
        retry = "true" if should_retry(error) else "false"
        all_headers = [("request-id", request_id), ("x-should-retry", retry), *(headers or [])]
        await _send(send, error.status, _encode(error_body(error, request_id)), all_headers)

    # --- the Messages API -------------------------------------------------------------------------

    async def messages(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.state
        epoch = state.count_request()
        request_id = new_request_id()

        async def fail(error: ApiError, headers: Headers | None = None) -> None:
            state.count_status(error.status, epoch)
            await self.plain_error(send, error, headers, request_id)

        try:
            body = await _read_body(receive)
        except _TooLarge:
            return await fail(ApiError(413, "Request exceeds the maximum allowed number of bytes."))
        if body is None:
            return

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        bearer = headers.get("authorization", "")
        if not headers.get("x-api-key") and not (
            bearer.lower().startswith("bearer ") and bearer[7:].strip()
        ):
            return await fail(ApiError(401, "x-api-key header is required"))
        try:
            request = parse_request(json.loads(body))
        except ValueError:
            return await fail(
                ApiError(
                    400,
                    "There was an error parsing the body of your request. "
                    "Please check that it is valid JSON.",
                )
            )
        except ApiError as error:
            return await fail(error)

        decision = state.take_rate_slot(
            input_tokens=sum(segment.tokens for segment in request.segments),
            max_tokens=request.max_tokens,
        )
        rate_headers = decision.headers() if decision else []
        if decision and not decision.allowed:
            limited = ApiError(
                429,
                "This request would exceed your organization's rate limit "
                f"({state.config.describe_limits()}).",
            )
            return await fail(limited, [("retry-after", str(decision.retry_after)), *rate_headers])
        # A scripted step (scripts.py) answers in place of the configured latency and faults.
        step = state.scripts.take(headers.get("idempotency-key", ""))
        if step is None or step.latency_ms is None:
            delay = state.draw_latency()
        else:
            delay = step.delay(state.rng)
        if delay:
            await asyncio.sleep(delay)

        fault = state.draw_fault() if step is None else step.fault
        if fault in OPENAI_ONLY_FAULTS:
            fault = None  # the OpenAI-compatible API's own fault: this API answers
        if not request.stream and fault in STREAM_FAULTS:
            # Without a stream: an overload is a 529, a stall a call never answered.
            fault = "529" if fault == "overloaded_midstream" else "timeout"
        if fault in FAULT_ERRORS:
            status, message, details = FAULT_ERRORS[fault]
            extra = rate_headers
            if fault == "429":
                injected = state.injected_rate_headers()
                extra = [
                    ("retry-after", str(injected.retry_after)),
                    *(rate_headers or injected.headers()),
                ]
            return await fail(ApiError(status, message, details), extra)

        reply = build_message(request, state)
        state.settle_tokens(decision, reply["usage"])
        if request.stream and fault not in ("timeout", "trickle", "garbage"):
            plan = StreamPlan(
                reply, state.config.stream_tokens_per_second, fault, stream_seconds(request)
            )
            return await self._stream(
                plan,
                scope,
                send,
                receive,
                request,
                epoch,
                [("request-id", request_id), *rate_headers],
            )
        state.bill(
            request.price,
            reply["usage"],
            epoch,
            request_id=request_id,
            idempotency_key=headers.get("idempotency-key", ""),
            how=_BILLED_AS.get(fault or "", "answered"),
        )
        body_out = _encode(reply)
        if fault == "timeout":
            state.count_timed_out(epoch)
            if await self._hold(receive):
                return
            # The server is shutting down: cut the connection rather than answer.
            return await self._cut(send, body_out, request_id, 0)
        if fault == "drop":
            state.count_dropped(epoch)
            return await self._cut(send, body_out, request_id, len(body_out) // 2)
        if fault == "trickle":
            if await self._trickle(send, receive, body_out, [("request-id", request_id)]):
                state.count_status(200, epoch)
            else:
                state.count_timed_out(epoch)
            return
        if fault == "garbage":
            state.count_status(200, epoch)
            return await _send(
                send,
                200,
                GARBAGE_BODY,
                [("request-id", request_id), *rate_headers],
                content_type=GARBAGE_CONTENT_TYPE,
            )
        state.count_status(200, epoch)
        await _send(send, 200, body_out, [("request-id", request_id), *rate_headers])

    async def _stream(
        self,
        plan: StreamPlan,
        scope: Scope,
        send: Send,
        receive: Receive,
        request: Any,
        epoch: int,
        answer_headers: Headers,
    ) -> None:
        """Stream the answer (streaming.py), its head carrying the request id and the rate-limit
        headers as a plain answer's does; bill what was generated before it ended."""
        state = self.state
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        request_id = dict(answer_headers)["request-id"]
        end = await stream_answer(plan, send, receive, answer_headers, self.closing)
        usage = dict(plan.reply["usage"])
        usage["output_tokens"] = end.output_tokens
        state.bill(
            request.price,
            usage,
            epoch,
            request_id=request_id,
            idempotency_key=headers.get("idempotency-key", ""),
            how=_STREAM_BILLED_AS[end.how],
        )
        if end.how in ("answered", "error_event"):
            state.count_status(200, epoch)
        elif end.how == "dropped":
            state.count_dropped(epoch)
        else:
            state.count_timed_out(epoch)

    async def _hold(self, receive: Receive) -> bool:
        """Waits without answering; True once the client went away, False on server shutdown."""

        async def gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        waits = [asyncio.ensure_future(gone()), asyncio.ensure_future(self.closing.wait())]
        done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return waits[0] in done

    async def _trickle(self, send: Send, receive: Receive, body: bytes, headers: Headers) -> bool:
        """A 200 head, then the body a byte at a time; True once it was all sent, False when the
        client went away (or the server shut down) first."""
        raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        raw += [(k.encode(), v.encode()) for k, v in headers]
        await send({"type": "http.response.start", "status": 200, "headers": raw})

        async def gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        ends = [asyncio.ensure_future(gone()), asyncio.ensure_future(self.closing.wait())]
        try:
            for index in range(len(body)):
                last = index == len(body) - 1
                await send(
                    {
                        "type": "http.response.body",
                        "body": body[index : index + 1],
                        "more_body": not last,
                    }
                )
                if last:
                    return True
                done, _ = await asyncio.wait(ends, timeout=TRICKLE_INTERVAL_SECONDS)
                if done:
                    return False
            return True
        finally:
            for task in ends:
                task.cancel()

    @staticmethod
    async def _cut(send: Send, body: bytes, request_id: str, keep: int) -> None:
        """A 200 head announcing the full body, ``keep`` bytes of it, then the connection dies."""
        raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        raw.append((b"request-id", request_id.encode()))
        await send({"type": "http.response.start", "status": 200, "headers": raw})
        await send({"type": "http.response.body", "body": body[:keep], "more_body": True})
        # Returning now makes uvicorn close the connection mid-body (its log line is filtered).


def create_app(state: FakeProviderState | None = None) -> FakeAnthropicApp:
    return FakeAnthropicApp(state)
