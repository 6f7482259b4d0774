"""Agent runs through the Procfile's workers with an instant fake provider: steps per second and
the overhead per step (from one step's end to the next one's start: enqueue, queue, claim and
commit, with the provider and the tool taking no time).

    make bench-agents                           # 100 concurrent runs of 10 turns, 2+1 workers
    BENCH_AGENTS_RUNS=200 BENCH_AGENTS_TURNS=5 make bench-agents

Uses its own MariaDB database (BENCH_AGENTS_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_agents, recreated) and Redis index 12
(BENCH_AGENTS_REDIS_URL, flushed). BENCH_AGENTS_WORKERS copies of the Procfile's worker_llm line
and BENCH_AGENTS_TOOL_WORKERS (1) of its worker_agents line run (not in burst mode: a run's next
turn is enqueued by its tool task, so a queue is empty between turns); each run is scripted for
the fake provider
(``fake_tool_script=``): TURNS - 1 turns of one ``calculator`` call, then the answer.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stack import Stack, machine, procfile_command, recreate_database  # noqa: E402

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from agents.models import AgentRun, AgentStep

RUNS = int(os.environ.get("BENCH_AGENTS_RUNS", "100"))
TURNS = int(os.environ.get("BENCH_AGENTS_TURNS", "10"))
WORKERS = int(os.environ.get("BENCH_AGENTS_WORKERS", "2"))
TOOL_WORKERS = int(os.environ.get("BENCH_AGENTS_TOOL_WORKERS", "1"))
DATABASE_URL = os.environ.get(
    "BENCH_AGENTS_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_agents"
)
REDIS_URL = os.environ.get("BENCH_AGENTS_REDIS_URL", "redis://127.0.0.1:6379/12")


def run_data(i: int) -> dict[str, object]:
    script = [
        [{"name": "calculator", "input": {"expression": f"{i}+{t}"}}] for t in range(TURNS - 1)
    ]
    script.append("done")
    return {
        "feature": f"bench-agent-{i % 4}",
        "model": "claude-haiku-4-5",
        "max_tokens": 128,
        "max_turns": TURNS,
        "tools": ["calculator"],
        "messages": [
            {"role": "user", "content": f"Run {i}. fake_tool_script={json.dumps(script)}"}
        ],
    }


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
        "LLM_AGENT_TOOL_MODULES": "agents.demo_tools",
    }
    recreate_database(DATABASE_URL)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    with tempfile.TemporaryDirectory(prefix="bench-agents-") as logs:
        stack = Stack(env, Path(logs))
        try:
            provider = stack.fake_provider(latency_ms=0)
            env["ANTHROPIC_BASE_URL"] = stack.env["ANTHROPIC_BASE_URL"] = provider
            os.environ.update(env)
            import django

            django.setup()
            measure(stack)
        finally:
            stack.stop()


def measure(stack: Stack) -> None:
    import django_rq
    from django.contrib.auth import get_user_model

    from agents.creation import agent_run_create
    from agents.models import AgentRun, AgentStep

    django_rq.get_connection("default").flushdb()
    tools_line = " ".join(procfile_command("worker_agents", respawn=False))
    print(
        f"{machine()}; {RUNS} runs of {TURNS} turns at once; {WORKERS} x worker_llm + "
        f"{TOOL_WORKERS} x worker_agents (`{tools_line}`, LLM_AGENT_WORKER_CONCURRENCY="
        f"{os.environ.get('LLM_AGENT_WORKER_CONCURRENCY', '16')}); fake provider at 0 ms"
    )
    user = get_user_model().objects.create_user("bench-agents")
    for _ in range(WORKERS):
        stack.start(procfile_command("worker_llm", respawn=False), "worker_llm")
    for _ in range(TOOL_WORKERS):
        stack.start(procfile_command("worker_agents", respawn=False), "worker_agents")
    # One run alone first: the overhead per step without any queue in front of it.
    alone = agent_run_create(user=user, data=run_data(-1))[0]
    wait_until_final(AgentRun.objects.filter(id=alone.id))
    report("one run alone", AgentStep.objects.filter(run=alone))
    started = time.perf_counter()
    for i in range(RUNS):
        agent_run_create(user=user, data=run_data(i))
    print(f"created {RUNS} runs in {time.perf_counter() - started:.2f} s")
    wait_until_final(AgentRun.objects.exclude(id=alone.id))
    report(f"{RUNS} runs at once", AgentStep.objects.exclude(run=alone))


def wait_until_final(runs: "QuerySet[AgentRun]") -> None:
    from agents.models import AgentRun

    deadline = time.monotonic() + 1800
    while runs.filter(status__in=AgentRun.ACTIVE_STATUSES).exists():
        if time.monotonic() > deadline:
            raise SystemExit("runs still active after 30 minutes")
        time.sleep(0.2)


def report(label: str, step_rows: "QuerySet[AgentStep]") -> None:
    from agents.models import AgentRun

    runs = AgentRun.objects.filter(id__in=step_rows.values("run_id"))
    statuses = {s: runs.filter(status=s).count() for s in AgentRun.Status.values}
    statuses = {s: n for s, n in statuses.items() if n}
    steps = list(
        step_rows.order_by("run_id", "index").values_list(
            "run_id", "kind", "started_at", "finished_at", "attempts"
        )
    )
    begin = min(s[2] for s in steps if s[2])
    end = max(s[3] for s in steps if s[3])
    seconds = (end - begin).total_seconds()
    gaps: dict[str, list[float]] = {"model": [], "tool": []}
    for previous, following in zip(steps, steps[1:], strict=False):
        if previous[0] == following[0] and previous[3] and following[2]:
            gaps[following[1]].append((following[2] - previous[3]).total_seconds() * 1000)
    tool_runs = [s[4] for s in steps if s[1] == "tool"]
    print(
        f"{label}: {statuses}; {len(steps)} steps in {seconds:.2f} s = {len(steps) / seconds:.1f} "
        f"steps/s ({sum(1 for s in steps if s[1] == 'model') / seconds:.1f} turns/s)"
    )
    for kind, values in gaps.items():
        if values:
            print(
                f"  overhead before a {kind} step (previous step's end to its start): "
                f"p50 {statistics.median(values):.1f} ms, p95 {percentile(values, 0.95):.1f} ms, "
                f"max {max(values):.1f} ms ({len(values)} steps)"
            )
    print(f"  tool calls run more than once: {sum(1 for a in tool_runs if a != 1)}")


if __name__ == "__main__":
    main()
