"""What streaming costs: the streamed provider call next to the old non-streaming one, and the
WebSocket ``job.delta`` fan-out of many jobs streaming at once.

    make bench-streaming
    BENCH_STREAMING_CALLS=50 BENCH_STREAMING_JOBS=40 .venv/bin/python bench/streaming.py
    BENCH_STREAMING_PARTS=2 .venv/bin/python bench/streaming.py     # the fan-out alone

Uses its own MariaDB database (BENCH_STREAMING_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_streaming, recreated) and Redis index 8
(BENCH_STREAMING_REDIS_URL, flushed), and its own fake provider on a free port.

1. Calls. BENCH_STREAMING_CALLS (200) calls for each reply length in BENCH_STREAMING_TOKENS
   (``256,4000`` output tokens: ``fake_output_tokens=N``, max_tokens N + 100), one after the
   other in this process's main thread, against the fake provider with no latency and no
   pacing, so what is measured is this process's work per call: CPU seconds
   (``time.process_time``, every thread of the process) and calls per second, after 5 warm-up
   calls of each kind. Three kinds, on the same requests (same bodies, same replies: checked):
   (a) ``AnthropicProvider.call`` (providers/anthropic_sdk.py: the SDK's ``messages.stream``)
   with an ``on_text`` that does nothing; (b) the same with the runner's ``on_text``, a real
   ``jobs.live_output.LiveOutput`` (the partial text kept in Redis, ``job.delta`` published to
   the channel layer, then ``close()`` and ``live_keys_clear`` as the runner does); (c) the call
   before it streamed: ``messages.with_raw_response.create`` then ``.parse()`` and the same
   outcome built (the success path of ``_call`` in ``git show
   c56a77d:providers/anthropic_sdk.py``, the commit before every call streamed). All three use
   the project's client (``get_client``: ``max_retries=0``, the same timeouts and connection
   pool) and a ``CallDeadline`` as the runner gives each call. Prints a table and the ratios
   streaming / non-streaming.
2. Fan-out. The Procfile's web line, BENCH_STREAMING_WORKERS (2) copies of its worker_llm line
   (``LLM_WORKER_CONCURRENCY`` = jobs / workers, rounded up, so every job runs at once;
   ``LLM_RATE_LIMIT_ENABLED=False``) and the fake provider paced at BENCH_STREAMING_PACE (400)
   tokens/s. BENCH_STREAMING_JOBS (200) jobs (``fake_output_tokens=2000``, max_tokens 2100) are
   submitted through ``job_submit``, spread over users of WS_MAX_CONNECTIONS_PER_USER jobs each
   (20: the per-user socket cap); right after each submit an asyncio client (``websockets``)
   opens ``/ws/jobs/?job=<id>&offset=0`` with the user's token and keeps every ``job.delta``
   until the job's final ``job.updated`` (a socket that has not heard it 10 s after the
   database says every job is final, or BENCH_STREAMING_TIMEOUT (180) s after the first submit,
   is given up). Each job's deltas of its last attempt, each put at its offset, must give
   exactly its ``output_text`` (and the event's ``output.text``), with no gap and no duplicate.
   Prints the jobs, the deltas, deltas per job per second (the deltas of one job after its
   first, over the time from its first to its last, as received: mean and max over the jobs;
   LLM_DELTA_INTERVAL_SECONDS 0.2 allows about 5), the mismatched jobs (must be 0) and the
   live events the workers logged as not published, the wall time from the first submit to the
   last completion, the CPU seconds of the worker, web and fake provider process trees
   (/proc/<pid>/stat) and of this client, and the peak RSS of each worker process (VmHWM).

BENCH_STREAMING_LOGS=<dir> keeps the processes' logs there (else a temporary directory).
"""

import asyncio
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stack import Stack, machine, procfile_command, recreate_database  # noqa: E402

CALLS = int(os.environ.get("BENCH_STREAMING_CALLS", "200"))
TOKENS = [int(n) for n in os.environ.get("BENCH_STREAMING_TOKENS", "256,4000").split(",")]
JOBS = int(os.environ.get("BENCH_STREAMING_JOBS", "200"))
WORKERS = int(os.environ.get("BENCH_STREAMING_WORKERS", "2"))
PACE = float(os.environ.get("BENCH_STREAMING_PACE", "400"))
PARTS = os.environ.get("BENCH_STREAMING_PARTS", "1,2").split(",")
TIMEOUT = float(os.environ.get("BENCH_STREAMING_TIMEOUT", "180"))
GRACE = 10.0
LOGS = os.environ.get("BENCH_STREAMING_LOGS", "")
DATABASE_URL = os.environ.get(
    "BENCH_STREAMING_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_streaming"
)
REDIS_URL = os.environ.get("BENCH_STREAMING_REDIS_URL", "redis://127.0.0.1:6379/8")
MODEL = "claude-haiku-4-5"
WARM_UP_CALLS = 5
JOB_OUTPUT_TOKENS = 2000
JOB_MAX_TOKENS = 2100
FINAL_STATUSES = ("completed", "failed", "cancelled")


# --- part 1: one call, streamed or not ----------------------------------------------------------


def call_body(tokens: int, i: int) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": tokens + 100,
        "messages": [{"role": "user", "content": f"Call {i}: fake_output_tokens={tokens}"}],
    }


def provider_request(body: dict[str, Any], on_text: Callable[[str], None] | None) -> Any:
    """The request as the runner builds it (jobs/runner.py ``_call_and_record``)."""
    from providers.base import ProviderRequest
    from providers.call_deadline import CallDeadline
    from providers.registry import get_provider

    provider = get_provider()
    return ProviderRequest(
        body=body,
        idempotency_key=str(uuid.uuid4()),
        read_timeout=provider.read_timeout_for(body["max_tokens"]),
        deadline=CallDeadline(provider.call_deadline_for(body["max_tokens"])),
        on_text=on_text,
    )


def ignore(text: str) -> None:
    """The ``on_text`` that does nothing."""


def streamed(body: dict[str, Any]) -> Any:
    from providers.registry import get_provider

    return get_provider().call(provider_request(body, ignore))


def streamed_live(body: dict[str, Any]) -> Any:
    """As the runner calls: a LiveOutput per attempt, closed after the call, its keys cleared."""
    from jobs.live_output import LiveOutput, live_keys_clear
    from providers.registry import get_provider

    job_id = uuid.uuid4()
    live = LiveOutput(job_id=job_id, user_id=0, attempt=1)
    try:
        return get_provider().call(provider_request(body, live))
    finally:
        live.close()
        if live.events:
            live_keys_clear(job_id)


def not_streamed(body: dict[str, Any]) -> Any:
    """The call before every call streamed (c56a77d's ``_call``, its success path), on the same
    client: ``messages.with_raw_response.create``, ``parse()``, the same outcome built."""
    import anthropic
    from django.conf import settings

    from providers.anthropic_sdk import _usage, get_client
    from providers.base import ProviderOutcome
    from providers.ratelimit_headers import rate_limit_headers

    request = provider_request(body, None)
    client = get_client(
        settings.ANTHROPIC_BASE_URL,
        settings.LLM_STREAM_IDLE_SECONDS,
        settings.LLM_PROVIDER_CONNECT_TIMEOUT,
    )
    timeout = anthropic.Timeout(
        request.read_timeout or settings.LLM_STREAM_IDLE_SECONDS,
        connect=settings.LLM_PROVIDER_CONNECT_TIMEOUT,
    )
    started = time.monotonic()
    with request.deadline:
        raw = client.messages.with_raw_response.create(
            **request.body,
            extra_headers={"Idempotency-Key": request.idempotency_key},
            timeout=timeout,
        )
        message = raw.parse()
    return ProviderOutcome(
        "success",
        int((time.monotonic() - started) * 1000),
        http_status=raw.http_response.status_code,
        request_id=raw.headers.get("request-id", ""),
        text="".join(block.text for block in message.content if block.type == "text"),
        content=[block.model_dump(mode="json", exclude_unset=True) for block in message.content],
        stop_reason=message.stop_reason or "",
        usage=_usage(message.usage),
        rate_limit_headers=rate_limit_headers(raw.headers),
    )


KINDS: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
    ("(a) streaming, on_text does nothing", streamed),
    ("(b) streaming, LiveOutput publishing", streamed_live),
    ("(c) non-streaming (old _call)", not_streamed),
]


@dataclass
class CallRow:
    kind: str
    tokens: int
    cpu: float
    wall: float

    @property
    def cpu_ms(self) -> float:
        return self.cpu / CALLS * 1000

    @property
    def rate(self) -> float:
        return CALLS / self.wall


def deltas_per_call(tokens: int) -> tuple[int, int]:
    """The text deltas one reply of ``tokens`` streams, and the ``job.delta`` events LiveOutput
    publishes for it (one call each, outside any timing)."""
    from jobs.live_output import LiveOutput, live_keys_clear
    from providers.registry import get_provider

    pieces: list[str] = []
    get_provider().call(provider_request(call_body(tokens, -1), pieces.append))
    job_id = uuid.uuid4()
    live = LiveOutput(job_id=job_id, user_id=0, attempt=1)
    get_provider().call(provider_request(call_body(tokens, -1), live))
    live.close()
    live_keys_clear(job_id)
    return len(pieces), live.events


def calls(provider: str) -> None:
    import httpx

    httpx.post(f"{provider}/_fake/reset").raise_for_status()
    print(
        f"part 1: {CALLS} calls of each kind and reply length, one after the other in one thread, "
        f"against the fake provider (no latency, no pacing); {WARM_UP_CALLS} warm-up calls each"
    )
    counts = [(tokens, *deltas_per_call(tokens)) for tokens in TOKENS]
    print(
        "  per reply: "
        + "; ".join(f"{t:,} tokens: {n} text deltas, {e} job.delta events" for t, n, e in counts)
    )

    rows: list[CallRow] = []
    texts: dict[tuple[int, int], str] = {}
    for tokens in TOKENS:
        for kind, call in KINDS:
            for i in range(CALLS, CALLS + WARM_UP_CALLS):
                call(call_body(tokens, i))
            cpu, wall = time.process_time(), time.perf_counter()
            outcomes = [call(call_body(tokens, i)) for i in range(CALLS)]
            row = CallRow(kind, tokens, time.process_time() - cpu, time.perf_counter() - wall)
            rows.append(row)
            for i, outcome in enumerate(outcomes):
                assert outcome.kind == "success", (kind, outcome)
                assert outcome.usage["output_tokens"] == tokens, (kind, outcome.usage)
                digest = hashlib.sha256(outcome.text.encode()).hexdigest()
                assert texts.setdefault((tokens, i), digest) == digest, f"{kind}: call {i} differs"
    print(f"  {'output tokens':>13}  {'call':<38} {'CPU ms/call':>11} {'calls/s':>9}")
    for row in rows:
        print(f"  {row.tokens:>13,}  {row.kind:<38} {row.cpu_ms:>11.2f} {row.rate:>9.1f}")
    for tokens in TOKENS:
        a, b, c = (row for row in rows if row.tokens == tokens)
        print(
            f"  {tokens:,} tokens, streaming / non-streaming: CPU per call (a)/(c) "
            f"{a.cpu_ms / c.cpu_ms:.2f}, (b)/(c) {b.cpu_ms / c.cpu_ms:.2f}; calls/s (a)/(c) "
            f"{a.rate / c.rate:.2f}, (b)/(c) {b.rate / c.rate:.2f}"
        )
    print("  replies identical across the three kinds: yes")


# --- processes, from /proc --------------------------------------------------------------------


def children_of() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The command may hold spaces and parentheses: the parent pid follows the last ")".
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    return children


def tree(pids: list[int]) -> list[int]:
    """These processes and all their descendants."""
    children, found, todo = children_of(), [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User + system time of these processes and their descendants (and of the children they
    reaped)."""
    total = 0
    for pid in tree(pids):
        try:
            fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime, stime, cutime, cstime: fields 14-17 of stat(5), 11-14 after the command.
        total += sum(int(value) for value in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- part 2: the fan-out ----------------------------------------------------------------------


@dataclass(frozen=True)
class Delta:
    at: float
    attempt: int
    offset: int
    text: str


@dataclass
class Watch:
    """One job and what its socket heard."""

    index: int
    key: str
    job_id: str = ""
    deltas: list[Delta] = field(default_factory=list)
    status: str = ""
    event_text: str | None = None
    done_at: float | None = None
    ended: str = ""
    """Why the socket ended before the job's final event, if it did."""

    def assemble(self, attempt: int) -> tuple[str, int, int]:
        """The attempt's text, each delta put at its offset; and the gaps and the duplicates
        (a delta starting past the end, or before it)."""
        text, gaps, duplicates = "", 0, 0
        for delta in self.deltas:
            if delta.attempt != attempt:
                continue
            if delta.offset > len(text):
                gaps += 1
                text += "\0" * (delta.offset - len(text))
            elif delta.offset < len(text):
                duplicates += 1
            text = text[: delta.offset] + delta.text
        return text, gaps, duplicates

    def rate(self, attempt: int) -> float | None:
        times = [d.at for d in self.deltas if d.attempt == attempt]
        if len(times) < 2 or times[-1] <= times[0]:
            return None
        return (len(times) - 1) / (times[-1] - times[0])


def job_data(i: int) -> dict[str, Any]:
    return {
        "feature": "bench-streaming",
        "model": MODEL,
        "messages": [
            {"role": "user", "content": f"Job {i}: fake_output_tokens={JOB_OUTPUT_TOKENS}"}
        ],
        "max_tokens": JOB_MAX_TOKENS,
    }


async def listen(watch: Watch, ws_base: str) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed
    from websockets.typing import Subprotocol

    url = f"{ws_base}/ws/jobs/?job={watch.job_id}&offset=0"
    try:
        async with connect(
            url, subprotocols=[Subprotocol("token"), Subprotocol(watch.key)], open_timeout=60
        ) as ws:
            async for raw in ws:
                at = time.monotonic()
                message = json.loads(raw)
                if message.get("type") == "job.delta":
                    watch.deltas.append(
                        Delta(at, message["attempt"], message["offset"], message["text"])
                    )
                elif message.get("type") == "job.updated":
                    job = message["job"]
                    if job["status"] in FINAL_STATUSES:
                        watch.status, watch.done_at = job["status"], at
                        watch.event_text = (job.get("output") or {}).get("text")
                        return
            watch.ended = f"closed by the server, code {ws.close_code}"
    except ConnectionClosed as exc:
        watch.ended = f"connection closed: {exc!r}"
    except Exception as exc:
        watch.ended = f"{type(exc).__name__}: {exc}"


async def submit_and_listen(
    watches: list[Watch], submit: Callable[[int], str], unfinished: Callable[[], int], ws_base: str
) -> tuple[float, float]:
    """Submit the jobs one after the other (on one thread: its own database connection), each
    socket opened as soon as its job exists, then listen until every socket heard its job's
    final event; a socket still waiting GRACE seconds after the database says every job is
    final (or TIMEOUT after the first submit) is given up. Returns when the first and the last
    job was submitted."""
    from django.db import connections

    loop = asyncio.get_running_loop()
    tasks = []
    with ThreadPoolExecutor(max_workers=1) as executor:
        first = time.monotonic()
        for watch in watches:
            watch.job_id = await loop.run_in_executor(executor, submit, watch.index)
            tasks.append(asyncio.create_task(listen(watch, ws_base)))
        last = time.monotonic()
        all_final: float | None = None
        pending: set[asyncio.Task[None]] = set(tasks)
        while pending and time.monotonic() - first < TIMEOUT:
            _, pending = await asyncio.wait(pending, timeout=1.0)
            if pending and all_final is None:
                if not await loop.run_in_executor(executor, unfinished):
                    all_final = time.monotonic()
            if all_final is not None and time.monotonic() - all_final > GRACE:
                break
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for watch in watches:
            if watch.done_at is None and not watch.ended:
                watch.ended = (
                    f"no final event on the socket {GRACE:g} s after every job was final"
                    if all_final is not None
                    else f"no final event within {TIMEOUT:g} s"
                )
        await loop.run_in_executor(executor, connections.close_all)
    return first, last


def unpublished(log_dir: Path) -> Counter[str]:
    """The live events the workers logged as not published, by kind and reason."""
    counts: Counter[str] = Counter()
    for log in log_dir.glob("*-worker_llm.log"):
        for line in log.read_text(errors="replace").splitlines():
            if '"logger": "jobs.events"' not in line or "not published" not in line:
                continue
            message = json.loads(line)["message"]
            kind = "job.delta" if " delta event " in message else "job.updated"
            counts[f"{kind}: {message.rsplit(': ', 1)[-1].split('(')[0]}"] += 1
    return counts


def fan_out(stack: Stack, provider: str) -> None:
    import django_rq
    import httpx
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from rq import Worker

    from jobs.models import LlmJob
    from jobs.services import job_submit
    from keys.testing import api_key_for
    from llmops.queues import LLM_QUEUE

    queue = django_rq.get_queue(LLM_QUEUE)
    concurrency = math.ceil(JOBS / WORKERS)
    stack.env.update(
        {"LLM_WORKER_CONCURRENCY": str(concurrency), "LLM_RATE_LIMIT_ENABLED": "False"}
    )
    httpx.post(f"{provider}/_fake/reset").raise_for_status()
    httpx.post(
        f"{provider}/_fake/faults", json={"stream_tokens_per_second": PACE}
    ).raise_for_status()
    web = stack.web()
    fake_pid = stack.processes[0].pid
    web_pid = stack.processes[-1].pid
    workers = [stack.start(procfile_command("worker_llm"), "worker_llm") for _ in range(WORKERS)]
    deadline = time.monotonic() + 120
    while Worker.count(connection=queue.connection, queue=queue) < WORKERS:
        if time.monotonic() > deadline:
            raise TimeoutError("the llm workers did not start")
        time.sleep(0.2)
    worker_pids = [w.pid for w in workers]

    per_user = settings.WS_MAX_CONNECTIONS_PER_USER
    users = []
    for u in range(math.ceil(JOBS / per_user)):
        user = get_user_model().objects.create_user(f"bench-streaming-{u}")
        users.append((user, api_key_for(user)))
    watches = [Watch(i, users[i // per_user][1]) for i in range(JOBS)]

    def submit(i: int) -> str:
        job, _ = job_submit(user=users[i // per_user][0], data=job_data(i))
        return str(job.id)

    seconds = JOB_OUTPUT_TOKENS / PACE
    web_concurrency = stack.env.get("WEB_CONCURRENCY", str(settings.WEB_CONCURRENCY))
    print(
        f"part 2: {JOBS} jobs of {JOB_OUTPUT_TOKENS} output tokens (max_tokens {JOB_MAX_TOKENS}), "
        f"the fake provider paced at {PACE:g} tokens/s ({seconds:g} s a reply at best); "
        f"web: the Procfile's web line, WEB_CONCURRENCY={web_concurrency}; {WORKERS} x "
        f"`{' '.join(procfile_command('worker_llm', respawn=False))}`, "
        f"LLM_WORKER_CONCURRENCY={concurrency}, LLM_RATE_LIMIT_ENABLED=False; one socket per job "
        f"(?job=&offset=0), {len(users)} user(s) of at most {per_user} sockets each "
        f"(WS_MAX_CONNECTIONS_PER_USER); LLM_DELTA_INTERVAL_SECONDS="
        f"{settings.LLM_DELTA_INTERVAL_SECONDS:g}"
    )

    ids = [w.job_id for w in watches]  # filled in as they are submitted

    def unfinished() -> int:
        return LlmJob.objects.filter(id__in=[i for i in ids if i]).exclude(
            status__in=LlmJob.FINAL_STATUSES
        ).count() + sum(1 for i in ids if not i)

    cpu_before = {
        "worker": cpu_seconds(worker_pids),
        "web": cpu_seconds([web_pid]),
        "fake provider": cpu_seconds([fake_pid]),
        "this client": time.process_time(),
    }
    clock = time.time() - time.monotonic()
    ws_base = web.replace("http://", "ws://")

    def submit_one(i: int) -> str:
        ids[i] = submit(i)
        return ids[i]

    first, last = asyncio.run(submit_and_listen(watches, submit_one, unfinished, ws_base))
    listened = time.monotonic() - first
    cpu = {
        "worker": cpu_seconds(worker_pids) - cpu_before["worker"],
        "web": cpu_seconds([web_pid]) - cpu_before["web"],
        "fake provider": cpu_seconds([fake_pid]) - cpu_before["fake provider"],
        "this client": time.process_time() - cpu_before["this client"],
    }
    rq_workers = [pid for w in worker_pids for pid in children_of().get(w, [])]
    peaks = [peak_rss_mb(pid) for pid in rq_workers]
    stats = httpx.get(f"{provider}/_fake/stats").json()

    rows = {
        str(row["id"]): row
        for row in LlmJob.objects.filter(id__in=ids).values(
            "id", "status", "attempts", "output_text", "started_at", "completed_at"
        )
    }
    mismatched: list[str] = []
    gaps = duplicates = gapped = short = deaf = 0
    rates: list[float] = []
    for watch in watches:
        row = rows[watch.job_id]
        text, job_gaps, job_duplicates = watch.assemble(row["attempts"])
        gaps, duplicates = gaps + job_gaps, duplicates + job_duplicates
        rate = watch.rate(row["attempts"])
        if rate is not None:
            rates.append(rate)
        output = row["output_text"] or ""
        problems = []
        if watch.ended:
            deaf += 1
            problems.append(watch.ended)
        if row["status"] != "completed":
            problems.append(f"status {row['status']}")
        if job_gaps or job_duplicates:
            gapped += 1
            problems.append(f"{job_gaps} gaps, {job_duplicates} duplicates")
        if text != output:
            if len(text) < len(output) and output.startswith(text):
                short += 1
            problems.append(f"assembled {len(text)} characters, output_text {len(output)}")
        if watch.done_at is not None and watch.event_text != row["output_text"]:
            problems.append("the completed event's output.text differs from output_text")
        if problems:
            mismatched.append(f"job {watch.job_id}: " + "; ".join(problems))

    total = sum(len(w.deltas) for w in watches)
    runs = [
        (r["completed_at"] - r["started_at"]).total_seconds()
        for r in rows.values()
        if r["completed_at"] and r["started_at"]
    ]
    completed = sum(1 for r in rows.values() if r["status"] == "completed")
    print(f"  jobs: {JOBS}, completed {completed}; all submitted in {last - first:.2f} s")
    print(
        f"  peak calls in flight at the provider: {stats['peak_in_flight']} "
        f"({stats['requests']} requests)"
    )
    if runs:
        print(
            f"  claim to complete per job: p50 {statistics.median(runs):.2f} s, "
            f"max {max(runs):.2f} s (the reply streams in {seconds:g} s at best)"
        )
    print(f"  total deltas: {total:,} ({total / JOBS:.1f} per job)")
    if rates:
        print(
            f"  deltas per job per second: mean {statistics.mean(rates):.2f}, "
            f"max {max(rates):.2f} ({len(rates)} jobs with 2 or more)"
        )
    print(
        f"  mismatched jobs: {len(mismatched)} (with a gap: {gapped}, {gaps} gaps in all; "
        f"duplicates: {duplicates}; a socket without the final event: {deaf}; text short of "
        f"output_text without a gap: {short})"
    )
    for line in mismatched[:5]:
        print(f"    {line}")
    lost = unpublished(stack.log_dir)
    if lost:
        print(
            "  events the workers logged as not published: "
            + ", ".join(f"{what} {n}" for what, n in sorted(lost.items()))
        )
    heard = [w.done_at for w in watches if w.done_at is not None]
    done = [r["completed_at"].timestamp() - clock for r in rows.values() if r["completed_at"]]
    if heard:
        print(
            f"  wall time, first submit to last completion: {max(heard) - first:.2f} s as the "
            f"sockets heard it, {max(done) - first:.2f} s by completed_at"
        )
    cores = len(os.sched_getaffinity(0))
    print(
        f"  CPU seconds from the first submit to the end of listening ({listened:.1f} s, "
        f"{listened * cores:.0f} core-seconds): "
        + ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu.items())
    )
    print(
        f"  worker CPU per job {cpu['worker'] / JOBS * 1000:.0f} ms; web CPU (connects, "
        f"re-checks and deltas) per delta delivered {cpu['web'] / max(total, 1) * 1000:.2f} ms"
    )
    print(
        "  worker peak RSS (VmHWM): "
        + ", ".join(f"{peak:.0f} MB" for peak in peaks)
        + f" ({len(peaks)} rqworker processes)"
    )


def main() -> None:
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
    }
    env.pop("ANTHROPIC_API_KEY", None)  # never a real provider
    recreate_database(DATABASE_URL)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)

    with tempfile.TemporaryDirectory(prefix="bench-streaming-") as temporary:
        logs = Path(LOGS or temporary)
        logs.mkdir(parents=True, exist_ok=True)
        stack = Stack(env, logs)
        try:
            provider = stack.fake_provider(latency_ms=0)
            env["ANTHROPIC_BASE_URL"] = stack.env["ANTHROPIC_BASE_URL"] = provider
            os.environ.update(env)
            os.environ.pop("ANTHROPIC_API_KEY", None)
            import django

            django.setup()
            import django_rq

            from llmops.queues import LLM_QUEUE

            django_rq.get_connection(LLM_QUEUE).flushdb()
            print(machine())
            if "1" in PARTS:
                calls(provider)
            if "2" in PARTS:
                fan_out(stack, provider)
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
    print(
        "command: make bench-streaming  (or: .venv/bin/python bench/streaming.py; "
        f"BENCH_STREAMING_CALLS={CALLS} BENCH_STREAMING_JOBS={JOBS} "
        f"BENCH_STREAMING_WORKERS={WORKERS} BENCH_STREAMING_PACE={PACE:g})"
    )
