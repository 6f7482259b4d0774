"""Concurrency of the fake provider: C simultaneous connections, each one request at a latency.

    .venv/bin/python bench/fake_provider.py            # 200 connections, 200 ms latency
    BENCH_CONNECTIONS=500 BENCH_LATENCY_MS=100 .venv/bin/python bench/fake_provider.py

Prints the wall time; fully concurrent service takes about one latency, serial service C of them.
"""

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "200"))
LATENCY_MS = int(os.environ.get("BENCH_LATENCY_MS", "200"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def fire(url: str) -> tuple[list[int], float]:
    limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "ping"}],
    }
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        started = time.perf_counter()
        responses = await asyncio.gather(
            *(
                client.post("/v1/messages", json=body, headers={"x-api-key": "bench"})
                for _ in range(CONNECTIONS)
            )
        )
        return [r.status_code for r in responses], time.perf_counter() - started


def main() -> None:
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "llmops.settings"}
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "fake_anthropic", "--port", str(port),
         "--latency-ms", str(LATENCY_MS)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(f"{url}/_fake/health", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        statuses, elapsed = asyncio.run(fire(url))
    finally:
        proc.terminate()
        proc.wait()
    ok = statuses.count(200)
    print(f"{CONNECTIONS} concurrent connections, {LATENCY_MS} ms latency each")
    print(f"{ok}/{CONNECTIONS} answered 200 in {elapsed:.2f} s "
          f"(serial would take {CONNECTIONS * LATENCY_MS / 1000:.0f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
