"""The race with LiteLLM (issue 40): llmops's front doors and LiteLLM's proxy side by side,
against the same fake provider, on this machine, in one run.

    make bench-gateway
    BENCH_GATEWAY_SECONDS=10 BENCH_GATEWAY_CALLS=100 .venv/bin/python bench/gateway.py
    BENCH_GATEWAY_GATEWAYS=llmops BENCH_GATEWAY_CASES=anthropic .venv/bin/python bench/gateway.py

The provider: the project's fake (``manage.py fake_anthropic``, its Messages API at /v1/messages
and its OpenAI-compatible API at /openai/v1), never a real one. Four cases, each driven with the
same client code (httpx, async) against each gateway and straight against the fake provider:
the Anthropic door (``POST /v1/messages``, ``claude-sonnet-4-6``) and the OpenAI door (``POST
/chat/completions``, ``gpt-4o-mini``, an OpenAI-compatible model on both gateways), each not
streaming and streaming (a stream is read to its ``message_stop`` / ``[DONE]``).

1. Added latency: one client, the provider at 0 ms. BENCH_GATEWAY_CALLS (200) calls per case,
   each request sent straight to the provider, through LiteLLM and through llmops, one after the
   other (so a slow moment of the shared machine falls on all three alike), after 10 warm-up
   calls each. The added latency of a call is its time through the gateway minus the same
   request's time straight to the provider; p50 and p99 of those.
2. Sustained calls per second: BENCH_GATEWAY_CLIENTS (64) clients, each sending its next call as
   soon as its last answered, the provider at BENCH_GATEWAY_PROVIDER_LATENCY_MS (1000), for
   BENCH_GATEWAY_WARMUP_SECONDS (3) then BENCH_GATEWAY_SECONDS (15) measured: calls answered in
   the measured window per second (the ceiling is clients / latency), errors over the whole
   phase (a status other than 200, a transport error, a body without its answer), and the CPU
   the gateway's processes used per call in the window (calls per CPU-second: its throughput per
   core, whatever the number of processes).
3. Memory: the resident set (RSS, summed) of the gateway's processes, idle after phase 1 and the
   most seen during phase 2 (sampled twice a second). llmops: the web processes (the uvicorn
   supervisor and its workers) and the llm worker(s), not the respawn wrappers; LiteLLM: its
   proxy process. Forked processes share pages, so a sum of RSS counts those more than once.

llmops runs with everything on: the ledger, budgets (a user and a feature budget of $1,000,000 a
day, never reached), the rate limiter and the breaker (settings' defaults), live events; the
submit throttle stays in the path at a rate no client reaches (bench/stack.py). Its processes are
the Procfile's web line and BENCH_GATEWAY_LLM_WORKERS (1) copies of its worker_llm line, with
LLM_WORKER_CONCURRENCY = clients / workers (rounded up) so every client's call can be in flight
at once, and WORKER_NICE=BENCH_GATEWAY_WORKER_NICE (0: LiteLLM's proxy runs at the niceness
it is given, and the default 10, which yields the worker's CPU to the web on a host of its own,
here yields it to whatever else runs on the shared machine; 10 to measure the default); its own
database (BENCH_GATEWAY_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_gateway, recreated and migrated) and Redis index 6
(BENCH_GATEWAY_REDIS_URL, flushed). The CPU of the MariaDB and Redis servers during each window
is printed apart: llmops uses them and LiteLLM does not, but they serve whatever else runs on the
machine too, which shows in both columns.

LiteLLM: ``litellm[proxy]`` BENCH_GATEWAY_LITELLM_VERSION (1.108.7, the version issue 40
measured) in its own virtualenv (BENCH_GATEWAY_LITELLM_VENV, default .bench-venv-litellm at the
project's root, git-ignored), installed by this script when missing; its proxy with one worker,
no database (no DATABASE_URL in its environment), a master key, and a config.yaml written here
naming the fake provider as the ``anthropic`` api_base of claude-sonnet-4-6 and as the
OpenAI-compatible api_base of gpt-4o-mini. If it cannot be installed or started, the run says so
and goes on with llmops alone.

BENCH_GATEWAY_GATEWAYS ("llmops,litellm") and BENCH_GATEWAY_CASES
("anthropic,anthropic-stream,openai,openai-stream") narrow a run; BENCH_GATEWAY_LOGS=<dir>
keeps the processes' logs (else a temporary directory).
"""

import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stack import (  # noqa: E402
    Stack,
    free_port,
    machine,
    procfile_command,
    recreate_database,
    wait_for,
)

SECONDS = float(os.environ.get("BENCH_GATEWAY_SECONDS", "15"))
WARMUP_SECONDS = float(os.environ.get("BENCH_GATEWAY_WARMUP_SECONDS", "3"))
CALLS = int(os.environ.get("BENCH_GATEWAY_CALLS", "200"))
CLIENTS = int(os.environ.get("BENCH_GATEWAY_CLIENTS", "64"))
PROVIDER_LATENCY_MS = int(os.environ.get("BENCH_GATEWAY_PROVIDER_LATENCY_MS", "1000"))
LLM_WORKERS = int(os.environ.get("BENCH_GATEWAY_LLM_WORKERS", "1"))
WORKER_NICE = os.environ.get("BENCH_GATEWAY_WORKER_NICE", "0")
GATEWAYS = os.environ.get("BENCH_GATEWAY_GATEWAYS", "llmops,litellm").split(",")
CASES = os.environ.get(
    "BENCH_GATEWAY_CASES", "anthropic,anthropic-stream,openai,openai-stream"
).split(",")
DATABASE_URL = os.environ.get(
    "BENCH_GATEWAY_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_gateway"
)
REDIS_URL = os.environ.get("BENCH_GATEWAY_REDIS_URL", "redis://127.0.0.1:6379/6")
LITELLM_VERSION = os.environ.get("BENCH_GATEWAY_LITELLM_VERSION", "1.108.7")
LITELLM_VENV = Path(os.environ.get("BENCH_GATEWAY_LITELLM_VENV", str(ROOT / ".bench-venv-litellm")))
LOGS = os.environ.get("BENCH_GATEWAY_LOGS", "")

WARMUP_CALLS = 10
"""Calls per case and target before phase 1 is timed: every web worker has served the door."""
ANTHROPIC_MODEL = "claude-sonnet-4-6"
OPENAI_MODEL = "gpt-4o-mini"
"""An OpenAI-compatible model on both gateways (llmops: the provider ``local-openai``)."""
PROVIDER_KEY = "bench-fake-provider-key"
LITELLM_MASTER_KEY = "sk-bench-gateway-litellm"
MAX_TOKENS = 256
TICK = os.sysconf("SC_CLK_TCK")


# --- processes: their trees, CPU and memory --------------------------------------------------


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    return children


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def process_tree(roots: list[int]) -> list[int]:
    """``roots`` and every process below them, less the respawn wrappers (runtime/respawn.py:
    a supervisor's supervisor, which a deployment under systemd would not have)."""
    children = _children()
    found: list[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return [pid for pid in found if "runtime.respawn" not in _cmdline(pid)]


def by_name(*names: str) -> list[int]:
    """Every process whose command name is one of ``names`` (MariaDB, Redis)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() in names:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def rss_mb(pids: list[int]) -> float:
    total_kb = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return total_kb / 1024


# --- the calls -------------------------------------------------------------------------------


@dataclass
class Target:
    """Where a case's calls go: the provider itself, or a gateway in front of it."""

    name: str
    anthropic_base: str
    """``POST {anthropic_base}/v1/messages``"""
    openai_base: str
    """``POST {openai_base}/chat/completions``"""
    key: str
    roots: list[int] = field(default_factory=list)
    """The processes whose trees are the gateway (for CPU and memory)."""

    def processes(self) -> list[int]:
        return process_tree(self.roots)


@dataclass(frozen=True)
class Case:
    door: str  # "anthropic" or "openai"
    stream: bool

    @classmethod
    def parse(cls, name: str) -> "Case":
        door, _, stream = name.partition("-")
        if door not in ("anthropic", "openai") or stream not in ("", "stream"):
            raise SystemExit(f"BENCH_GATEWAY_CASES: unknown case {name!r}")
        return cls(door, stream == "stream")

    def __str__(self) -> str:
        path = (
            "/anthropic/v1/messages" if self.door == "anthropic" else "/openai/v1/chat/completions"
        )
        how = "streaming" if self.stream else "not streaming"
        return f"{'Anthropic' if self.door == 'anthropic' else 'OpenAI'} door ({path}), {how}"

    @property
    def short(self) -> str:
        return f"{self.door}{' stream' if self.stream else ''}"


def request_of(target: Target, case: Case, i: int) -> tuple[str, dict[str, str], dict[str, Any]]:
    message = [{"role": "user", "content": f"Classify ticket {i}: please refund my order"}]
    if case.door == "anthropic":
        url = f"{target.anthropic_base}/v1/messages"
        headers = {"x-api-key": target.key, "anthropic-version": "2023-06-01"}
        body: dict[str, Any] = {"model": ANTHROPIC_MODEL, "max_tokens": MAX_TOKENS}
    else:
        url = f"{target.openai_base}/chat/completions"
        headers = {"Authorization": f"Bearer {target.key}"}
        body = {"model": OPENAI_MODEL, "max_tokens": MAX_TOKENS}
        if case.stream:
            body["stream_options"] = {"include_usage": True}
    body["messages"] = message
    if case.stream:
        body["stream"] = True
    return url, headers, body


def _problem(case: Case, status: int, content: bytes) -> str | None:
    """What is wrong with an answer (None: a whole answer)."""
    if status != 200:
        return f"status {status}: {content[:200]!r}"
    if case.stream:
        end = b"event: message_stop" if case.door == "anthropic" else b"data: [DONE]"
        return None if end in content else f"stream without its end: {content[-200:]!r}"
    try:
        answer = json.loads(content)
        if case.door == "anthropic":
            text = answer["content"][0]["text"]
        else:
            text = answer["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return f"not an answer: {content[:200]!r}"
    return None if text else "an empty answer"


async def call(http: httpx.AsyncClient, target: Target, case: Case, i: int) -> str | None:
    """One call, read to its end; what went wrong, or None."""
    url, headers, body = request_of(target, case, i)
    try:
        if case.stream:
            async with http.stream("POST", url, headers=headers, json=body) as response:
                content = b"".join([chunk async for chunk in response.aiter_bytes()])
        else:
            response = await http.post(url, headers=headers, json=body)
            content = response.content
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    return _problem(case, response.status_code, content)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


# --- phase 1: added latency at one client ----------------------------------------------------


@dataclass
class Latency:
    own: list[float] = field(default_factory=list)
    """Each call's time through this target, seconds."""
    errors: list[str] = field(default_factory=list)


async def latency_phase(provider: Target, gateways: list[Target], case: Case) -> dict[str, Latency]:
    results = {target.name: Latency() for target in [provider, *gateways]}
    async with httpx.AsyncClient(timeout=60) as http:
        for i in range(-WARMUP_CALLS, CALLS):
            for target in [provider, *gateways]:
                started = time.perf_counter()
                problem = await call(http, target, case, i)
                took = time.perf_counter() - started
                if i < 0:
                    continue
                results[target.name].own.append(took)
                if problem:
                    results[target.name].errors.append(problem)
    return results


def added(provider: Latency, gateway: Latency) -> list[float]:
    return [through - straight for through, straight in zip(gateway.own, provider.own, strict=True)]


# --- phase 2: sustained calls per second -----------------------------------------------------


@dataclass
class Sustained:
    calls: int = 0
    """Answered (whole, status 200) within the measured window."""
    errors: list[str] = field(default_factory=list)
    sent: int = 0
    cpu_seconds: float = 0.0
    servers_cpu_seconds: float = 0.0
    peak_rss_mb: float = 0.0

    @property
    def per_second(self) -> float:
        return self.calls / SECONDS


class RssSampler(threading.Thread):
    def __init__(self, target: Target) -> None:
        super().__init__(daemon=True)
        self.target, self.peak, self.done = target, 0.0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.peak = max(self.peak, rss_mb(self.target.processes()))


async def sustained_phase(target: Target, case: Case) -> Sustained:
    result = Sustained()
    servers = by_name("mariadbd", "mysqld", "redis-server")
    started = time.monotonic()
    window_start, window_end = started + WARMUP_SECONDS, started + WARMUP_SECONDS + SECONDS
    cpu: dict[str, tuple[float, float]] = {}
    sampler = RssSampler(target)
    sampler.start()

    async def client(n: int) -> None:
        i = n * 1_000_000
        while time.monotonic() < window_end:
            i += 1
            result.sent += 1
            problem = await call(http, target, case, i)
            if problem:
                result.errors.append(problem)
            elif window_start <= time.monotonic() < window_end:
                result.calls += 1

    async def stamp_cpu() -> None:
        await asyncio.sleep(max(0.0, window_start - time.monotonic()))
        cpu["start"] = (cpu_seconds(target.processes()), cpu_seconds(servers))
        await asyncio.sleep(max(0.0, window_end - time.monotonic()))
        cpu["end"] = (cpu_seconds(target.processes()), cpu_seconds(servers))

    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        await asyncio.gather(stamp_cpu(), *(client(n) for n in range(CLIENTS)))
    sampler.done.set()
    sampler.join()
    result.peak_rss_mb = sampler.peak
    result.cpu_seconds = cpu["end"][0] - cpu["start"][0]
    result.servers_cpu_seconds = cpu["end"][1] - cpu["start"][1]
    return result


# --- the gateways ----------------------------------------------------------------------------


def litellm_installed() -> str | None:
    python = LITELLM_VENV / "bin" / "python"
    if not python.exists():
        return None
    found = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
    )
    return found.stdout.strip() or None if found.returncode == 0 else None


def litellm_install() -> str:
    """LiteLLM's version in its virtualenv, installed first if missing (or another version)."""
    version = litellm_installed()
    if version == LITELLM_VERSION:
        return version
    print(f"installing litellm[proxy]=={LITELLM_VERSION} into {LITELLM_VENV} ...", flush=True)
    if not (LITELLM_VENV / "bin" / "python").exists():
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(LITELLM_VENV)], check=True)
    subprocess.run(
        [str(LITELLM_VENV / "bin" / "pip"), "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"],
        check=True,
    )
    installed = litellm_installed()
    if not installed:
        raise RuntimeError("litellm does not import after its install")
    return installed


def litellm_start(stack: Stack, provider: str, log_dir: Path) -> Target:
    config = {
        "model_list": [
            {
                "model_name": ANTHROPIC_MODEL,
                "litellm_params": {
                    "model": f"anthropic/{ANTHROPIC_MODEL}",
                    "api_base": provider,
                    "api_key": PROVIDER_KEY,
                },
            },
            {
                "model_name": OPENAI_MODEL,
                "litellm_params": {
                    "model": f"openai/{OPENAI_MODEL}",
                    "api_base": f"{provider}/openai/v1",
                    "api_key": PROVIDER_KEY,
                },
            },
        ],
        "general_settings": {"master_key": LITELLM_MASTER_KEY},
    }
    path = log_dir / "litellm-config.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    port = free_port()
    # No database: nothing in its environment names one (nor llmops's Redis).
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL") and not key.startswith(("LLM_", "DJANGO_"))
    }
    env.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"})
    log = (log_dir / "litellm.log").open("wb")
    process = subprocess.Popen(
        [str(LITELLM_VENV / "bin" / "litellm"), "--config", str(path), "--host", "127.0.0.1",
         "--port", str(port), "--num_workers", "1", "--telemetry", "False"],
        cwd=log_dir, env=env, stdout=log, stderr=log,
    )  # fmt: skip
    stack.processes.append(process)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(
                f"LiteLLM's proxy exited: {(log_dir / 'litellm.log').read_text()[-2000:]}"
            )
        return httpx.get(f"{url}/health/liveliness", timeout=2).status_code == 200

    wait_for(ready, timeout=180, what="LiteLLM's proxy")
    return Target("LiteLLM", url, f"{url}/v1", LITELLM_MASTER_KEY, roots=[process.pid])


def llmops_setup(provider: str) -> str:
    """The bench's user, its key (every scope), the OpenAI-compatible provider at the fake and
    the budgets; returns the key's secret."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model

    from keys.testing import api_key_for
    from ledger.models import Budget
    from ledger.price_table import model_price_set
    from providers.services import provider_save

    provider_save(name="local-openai", kind="openai", base_url=f"{provider}/openai/v1")
    model_price_set(
        model=OPENAI_MODEL,
        provider="local-openai",
        input_per_mtok=Decimal("0.15"),
        output_per_mtok=Decimal("0.60"),
        cache_read_per_mtok=Decimal("0.075"),
        max_output_tokens=16_384,
    )
    user = get_user_model().objects.create_user("bench-gateway")
    never_reached = Decimal("1000000")
    Budget.objects.create(scope="user", user=user, period="day", limit_usd=never_reached)
    Budget.objects.create(scope="feature", feature="default", period="day", limit_usd=never_reached)
    return api_key_for(user)


def llmops_start(stack: Stack, secret: str) -> Target:
    web_started = len(stack.processes)
    url = stack.web()
    roots = [process.pid for process in stack.processes[web_started:]]
    for _ in range(LLM_WORKERS):
        roots.append(stack.start(procfile_command("worker_llm"), "worker_llm").pid)
    return Target("llmops", f"{url}/anthropic", f"{url}/openai/v1", secret, roots=roots)


# --- the run ---------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def main() -> None:
    cases = [Case.parse(name) for name in CASES]
    concurrency = math.ceil(CLIENTS / LLM_WORKERS)
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
        "LLM_WORKER_CONCURRENCY": str(concurrency),
        "WORKER_NICE": WORKER_NICE,
    }
    litellm_version, litellm_blocked = "", ""
    if "litellm" in GATEWAYS:
        try:
            litellm_version = litellm_install()
        except (subprocess.CalledProcessError, RuntimeError, OSError) as exc:
            litellm_blocked = f"not installed ({exc})"
    load_before = os.getloadavg()
    started = time.monotonic()
    if "llmops" in GATEWAYS:
        recreate_database(DATABASE_URL)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
    os.environ.update(env)
    import django

    django.setup()
    import django_rq
    from django.conf import settings

    django_rq.get_connection("default").flushdb()

    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as temporary:
        log_dir = Path(LOGS or temporary)
        log_dir.mkdir(parents=True, exist_ok=True)
        stack = Stack(env, log_dir)
        try:
            provider_url = stack.fake_provider(latency_ms=0)
            stack.env["ANTHROPIC_BASE_URL"] = provider_url
            provider = Target("provider", provider_url, f"{provider_url}/openai/v1", PROVIDER_KEY)
            gateways: list[Target] = []
            if "llmops" in GATEWAYS:
                gateways.append(llmops_start(stack, llmops_setup(provider_url)))
            if litellm_version:
                try:
                    gateways.append(litellm_start(stack, provider_url, log_dir))
                except (RuntimeError, TimeoutError) as exc:
                    litellm_blocked = f"did not start ({exc})"
            print(
                f"{machine()}; load average {load_before[0]:.1f} at the start; fake provider "
                f"(manage.py fake_anthropic) at 0 ms for phase 1, {PROVIDER_LATENCY_MS} ms for "
                "phase 2"
            )
            if "llmops" in GATEWAYS:
                print(
                    f"llmops: web: the Procfile's web line, WEB_CONCURRENCY="
                    f"{settings.WEB_CONCURRENCY}; {LLM_WORKERS} x `"
                    f"{' '.join(procfile_command('worker_llm', respawn=False))}`, "
                    f"LLM_WORKER_CONCURRENCY={concurrency}, WORKER_NICE={WORKER_NICE}; ledger, "
                    "budgets (user and feature, $1,000,000 a day), rate limiter, breaker and live "
                    "events on"
                )
            if litellm_version and not litellm_blocked:
                print(
                    f"LiteLLM: litellm[proxy] {litellm_version}, `litellm --config "
                    "<config.yaml> --num_workers 1`, no database, a master key; claude-sonnet-4-6 "
                    "as anthropic/ and gpt-4o-mini as openai/ at the fake provider"
                )
            elif "litellm" in GATEWAYS:
                print(f"LiteLLM: BLOCKED: {litellm_blocked}")
            names = [target.name for target in gateways]
            latency: dict[Case, dict[str, Latency]] = {}
            for case in cases:
                latency[case] = asyncio.run(latency_phase(provider, gateways, case))
            idle = {target.name: rss_mb(target.processes()) for target in gateways}
            httpx.post(
                f"{provider_url}/_fake/faults", json={"latency_ms": PROVIDER_LATENCY_MS}
            ).raise_for_status()
            sustained: dict[Case, dict[str, Sustained]] = {}
            for case in cases:
                sustained[case] = {}
                for target in gateways:
                    sustained[case][target.name] = asyncio.run(sustained_phase(target, case))
            report(cases, names, latency, sustained, idle)
        finally:
            stack.stop()
    load_after = os.getloadavg()
    print(
        f"run: {time.monotonic() - started:.0f} s; load average {load_before[0]:.1f} at the "
        f"start, {load_after[0]:.1f} at the end (1 min), {load_after[2]:.1f} (15 min)"
    )
    print(
        "reproduce: make bench-gateway  (or BENCH_GATEWAY_CALLS="
        f"{CALLS} BENCH_GATEWAY_CLIENTS={CLIENTS} BENCH_GATEWAY_SECONDS={SECONDS:g} "
        f"BENCH_GATEWAY_PROVIDER_LATENCY_MS={PROVIDER_LATENCY_MS} "
        f"BENCH_GATEWAY_LLM_WORKERS={LLM_WORKERS} BENCH_GATEWAY_WORKER_NICE={WORKER_NICE} "
        f"WEB_CONCURRENCY={settings.WEB_CONCURRENCY} "
        f"BENCH_GATEWAY_LITELLM_VERSION={LITELLM_VERSION} .venv/bin/python bench/gateway.py)"
    )


def report(
    cases: list[Case],
    names: list[str],
    latency: dict[Case, dict[str, Latency]],
    sustained: dict[Case, dict[str, Sustained]],
    idle: dict[str, float],
) -> None:
    width = 26

    def line(figure: str, values: dict[str, str]) -> None:
        print(f"  {figure:<52}" + "".join(f"{values.get(name, '-'):>{width}}" for name in names))

    print(f"  {'':<52}" + "".join(f"{name:>{width}}" for name in names))
    errors_seen: list[str] = []
    for case in cases:
        print(f"{case}:")
        straight = latency[case]["provider"]
        line(
            f"straight to the provider, 1 client: p50 {ms(statistics.median(straight.own))}",
            {},
        )
        extra = {name: added(straight, latency[case][name]) for name in names}
        line("added latency p50 (1 client, provider 0 ms)",
             {name: ms(percentile(extra[name], 0.5)) for name in names})  # fmt: skip
        line("added latency p99",
             {name: ms(percentile(extra[name], 0.99)) for name in names})  # fmt: skip
        line("errors at 1 client",
             {name: f"{len(latency[case][name].errors)} of {CALLS}" for name in names})  # fmt: skip
        line(
            f"calls/s ({CLIENTS} clients, provider {PROVIDER_LATENCY_MS / 1000:g} s; "
            f"ceiling {CLIENTS * 1000 / PROVIDER_LATENCY_MS:.0f})",
            {name: f"{sustained[case][name].per_second:.1f}" for name in names},
        )
        line(
            f"errors at {CLIENTS} clients",
            {name: f"{len(s.errors)} of {s.sent}" for name, s in sustained[case].items()},
        )
        line(
            "gateway CPU per call (its processes)",
            {
                name: ms(s.cpu_seconds / s.calls) if s.calls else "-"
                for name, s in sustained[case].items()
            },
        )
        line(
            "calls per CPU-second (per core)",
            {
                name: f"{s.calls / s.cpu_seconds:.1f}" if s.cpu_seconds else "-"
                for name, s in sustained[case].items()
            },
        )
        line(
            "MariaDB + Redis CPU per call (shared servers)",
            {
                name: ms(s.servers_cpu_seconds / s.calls) if s.calls else "-"
                for name, s in sustained[case].items()
            },
        )
        for name in names:
            errors_seen += [f"{name}, {case.short}: {e}" for e in latency[case][name].errors[:2]]
            errors_seen += [f"{name}, {case.short}: {e}" for e in sustained[case][name].errors[:2]]
    print("memory (RSS of the gateway's processes, summed):")
    line("idle, after phase 1", {name: f"{idle[name]:.0f} MB" for name in names})
    line(
        f"most seen at {CLIENTS} clients",
        {name: f"{max(s[name].peak_rss_mb for s in sustained.values()):.0f} MB" for name in names},
    )
    for error in errors_seen[:10]:
        print(f"  error: {error}")


if __name__ == "__main__":
    main()
