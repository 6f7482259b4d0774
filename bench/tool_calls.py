"""The cost of running an agent tool call in a child process of its own (agents/tool_processes.py)
next to the thread it used to run on, which its timeout could not stop.

    .venv/bin/python bench/tool_calls.py [N]

Calls the demo ``clock`` tool N times (default 300) through ``tool_call`` (schema check, fork,
answer over a pipe, kill and reap), and the same function N times on a thread started and
joined per call (the old way), and prints the median and p99 wall time per call. Then again
with 32 idle threads and some 300 MB more of Python objects in the process, as a loaded worker:
a fork copies the page tables, so its cost grows with the memory the parent has mapped. Needs no
database and no Redis (the tool uses neither; a tool that does opens its own connection in
either way).
"""

import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmops.settings")
os.environ.setdefault("DATABASE_URL", "sqlite:///")

import django  # noqa: E402

django.setup()

from agents.tools import registered_tool, tool_call  # noqa: E402

CALL = {"timezone": "Europe/Paris"}


def on_a_thread() -> None:
    clock = registered_tool("clock")
    assert clock is not None
    box: dict[str, object] = {}
    thread = threading.Thread(target=lambda: box.update(value=clock.function(**CALL)))
    thread.start()
    thread.join(clock.timeout)


def in_a_child() -> None:
    outcome = tool_call(name="clock", tool_input=CALL, call_id="bench")
    assert not outcome.is_error, outcome


def measure(label: str, call: Callable[[], None], n: int) -> None:
    call()  # warm
    times = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    times.sort()
    median, p99 = statistics.median(times), times[int(len(times) * 0.99) - 1]
    print(f"{label:<44} median {median * 1e3:7.2f} ms   p99 {p99 * 1e3:7.2f} ms   (n={n})")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    print(f"process: {rss_mb():.0f} MB resident, {threading.active_count()} threads")
    measure("thread per call (before)", on_a_thread, n)
    measure("child process per call (tool_call)", in_a_child, n)

    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(32)]
    for thread in idle:
        thread.start()
    # About 300 MB of small Python objects, as a heap grows (not a few big buffers).
    ballast = [{"n": n, "text": f"object {n}"} for n in range(1_000_000)]
    print(f"process: {rss_mb():.0f} MB resident, {threading.active_count()} threads")
    measure("thread per call (before)", on_a_thread, n)
    measure("child process per call (tool_call)", in_a_child, n)
    stop.set()
    del ballast


if __name__ == "__main__":
    main()
