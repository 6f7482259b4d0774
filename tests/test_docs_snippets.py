"""Every code block of README.md and docs/*.md (tests/snippets.py reads them) runs against the
stack ``make run`` starts, or says why it cannot.

The stack, once for the module: the web server as the Procfile starts it, the llm worker (with
its scheduler), the agents worker, the deferred loop and the fake provider, on the test database
and Redis index, with the demo user ``ensure_demo_user`` makes and its key as ``$TOKEN``. Two of
the deferred loop's intervals are a second instead of a minute (time compressed, as in the other
tests); ``LLM_CANCEL_WAIT_SECONDS`` allows a loaded machine 10 s. The default queue's worker is
not started: a batch example's ``callback_url`` names example.com, and nothing here leaves the
machine.

Blocks run in reading order, each with the fake provider as it starts (reset before the block).
A shell block runs command by command with bash, ``127.0.0.1:8000`` and ``:8787`` being the
stack's: each must exit 0, each HTTP answer be 2xx, and each answer match the sample commented
under it (a read is repeated until it does, as a reader polls: a job shown ``completed``). A
Python block must exit 0 and print what a ``print(...)  # shown`` line shows. A block marked
``<!-- run: NAME -->`` runs by the check NAME below.
"""

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import django_rq
import httpx
import pytest

from tests.conftest import ROOT, FakeProvider, seed_prices, seed_providers, web_server
from tests.jobs.test_takeover import Processes, worker_env
from tests.snippets import (
    DATA_LANGUAGES,
    RUN_LANGUAGES,
    Block,
    compare,
    doc_blocks,
    parse_samples,
    shell_steps,
    substitute,
)

BLOCKS = doc_blocks(ROOT)
POLL_SECONDS = 30.0
"""How long a read is repeated until its answer is the one its sample shows."""
BLOCK_SECONDS = 120.0

SHELL_PRELUDE = r"""set -eo pipefail
if [ -f "$DOCS_VARIABLES" ]; then source "$DOCS_VARIABLES"; fi
# Every HTTP status on stderr, for the test; the answer itself as the reader sees it.
curl() { command curl -w '%{stderr}\nDOCS-HTTP %{http_code}\n' "$@"; }
# The virtualenv is taken as built: a test never reinstalls it.
make() { command make -o .venv/.installed "$@"; }
"""
PYTHON_PRELUDE = 'LLMOPS_KEY = __import__("os").environ["TOKEN"]  # front-doors.md\'s name\n'
_ASSIGNMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)
_PRINTED = re.compile(r"^\s*print\(.*\)\s*#\s*(.+)$", re.MULTILINE)
_WRITE = re.compile(r"(^|\s)(-X\s*(POST|PUT|PATCH|DELETE)|-d|--data\S*)(\s|$)")


@dataclass
class Stack:
    url: str
    fake: FakeProvider
    env: dict[str, str]
    workdir: Path
    processes: Processes
    web_log: Path

    def localize(self, text: str) -> str:
        """The text with the hosts ``make run`` listens on replaced by the stack's."""
        web, fake = self.url.removeprefix("http://"), self.fake.url.removeprefix("http://")
        text = text.replace("127.0.0.1:8000", web)
        return text.replace("127.0.0.1:8787", fake).replace("localhost:8787", fake)

    def api(self, method: str, path: str, **options: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.env['TOKEN']}"}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=30, **options)

    def logs(self) -> str:
        web = self.web_log.read_text(errors="replace")[-3000:] if self.web_log.exists() else ""
        return f"{self.processes.logs()}\n--- web ---\n{web}"


# --- the marks ------------------------------------------------------------------------------


def test_every_block_runs_or_says_why_not() -> None:
    """A new block is run by the stack test below, or is data, or says why it cannot run: the
    suite fails on a snippet nobody runs."""
    problems = []
    for block in BLOCKS:
        kind, detail = block.marker or ("", "")
        if kind == "not-run" and not detail:
            problems.append(f"{block.where}: not-run needs a reason")
        elif kind == "run" and (detail.split() or [""])[0] not in CHECKS:
            problems.append(f"{block.where}: no check named {detail!r} ({', '.join(CHECKS)})")
        elif not kind and block.language not in RUN_LANGUAGES | DATA_LANGUAGES:
            problems.append(
                f"{block.where}: a ```{block.language} block nothing runs: tag it text, json or "
                "yaml if it is output, or put <!-- not-run: why --> on the line before it"
            )
    assert not problems, "\n".join(problems)


def test_every_sample_and_data_block_reads_as_json() -> None:
    """The answers the docs show, in json blocks and under commands, are JSON (``...`` for what
    is left out): a sample that does not read cannot be compared with the real answer."""
    problems = []
    for block in BLOCKS:
        samples = [block.text] if block.language == "json" else []
        if block.language in ("sh", "bash"):
            samples += [step.sample for step in shell_steps(block.text) if step.sample]
        for sample in samples:
            try:
                parse_samples(sample)
            except ValueError as exc:
                problems.append(f"{block.where}: {exc}")
    assert not problems, "\n".join(problems)


def test_a_sample_binds_ids_checks_claims_and_ignores_examples() -> None:
    (sample,) = parse_samples(
        '{"id": "6f0c...", "status": "completed", "attempts": 1, ...,\n'
        ' "output": {"text": "...", "stop_reason": "end_turn"}, "error": null}'
    )
    real = {
        "id": "9c9a",
        "status": "completed",
        "attempts": 3,
        "output": {"text": "Hi", "stop_reason": "end_turn"},
        "error": None,
        "cost_usd": "0.1",
    }
    bindings: dict[str, str] = {}
    assert compare(sample, real, bindings) == []
    assert bindings == {"6f0c...": "9c9a"}
    assert substitute("curl /jobs/6f0c.../cancel/", bindings) == "curl /jobs/9c9a/cancel/"
    assert compare(sample, {**real, "status": "running"}, bindings) == [
        "status is 'running', the sample says 'completed'"
    ]
    assert compare(sample, {**real, "id": "other"}, bindings)
    assert compare(sample, {k: v for k, v in real.items() if k != "error"}, bindings) == [
        "error is missing"
    ]
    assert substitute("curl /keys/12/rotate/ -d 12", {"12": "31"}) == "curl /keys/31/rotate/ -d 12"


# --- the stack ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def redis_clean() -> Iterator[None]:
    """Overrides the project-wide flush around each test: the stack's Redis index is flushed
    once before it starts and once after it stops, never under its running processes."""
    yield


@pytest.fixture(scope="module")
def stack(
    django_db_setup: None,
    django_db_blocker: Any,
    fake_provider_process: FakeProvider,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    from django.apps import apps
    from django.core.management import call_command
    from django.db import connection

    from ledger.models import ModelPrice
    from ops.ready_banner import demo_login

    # Never the database the run was given: only the test database pytest-django made of it.
    assert connection.settings_dict["NAME"].startswith("test_"), connection.settings_dict["NAME"]
    logs = tmp_path_factory.mktemp("docs_stack")
    # The reader's working directory: the checkout's files, and anything a block writes.
    workdir = tmp_path_factory.mktemp("docs_workdir")
    for name in ("manage.py", "Makefile", "requirements.txt", ".venv"):
        (workdir / name).symlink_to(ROOT / name)
    redis = django_rq.get_connection("llm")
    redis.flushdb()
    with django_db_blocker.unblock():
        if not ModelPrice.objects.exists():
            seed_providers.seed(apps, None)
            seed_prices.seed(apps, None)
    fake = fake_provider_process
    settings = {
        "DJANGO_DEBUG": "True",
        "LOG_FORMAT": "plain",
        "FAKE_PROVIDER_URL": fake.url,
        "ANTHROPIC_BASE_URL": fake.url,
        "LLM_DEFERRED_FLUSH_SECONDS": "1",
        "LLM_DEFERRED_POLL_SECONDS": "1",
        "LLM_CANCEL_WAIT_SECONDS": "10",
    }
    env = worker_env(fake, **settings)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    processes = Processes(logs)
    try:
        processes.start(env, "rqworker", "llm", "--with-scheduler")
        processes.start(env, "rqworker", "agents")
        processes.start(env, "deferred_batches", "--loop")
        made = subprocess.run([sys.executable, "manage.py", "ensure_demo_user"], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert made.returncode == 0, made.stderr
        with django_db_blocker.unblock():
            login = demo_login()  # what make token prints
        assert login is not None
        env["TOKEN"] = login.token
        with pytest.MonkeyPatch.context() as patch:
            for name, value in settings.items():
                patch.setenv(name, value)
            with web_server(workers=1, log=logs / "web.log") as url:
                yield Stack(url, fake, env, workdir, processes, logs / "web.log")
    finally:
        processes.stop_all()
        redis.flushdb()
        fake.reset()
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)


@pytest.mark.slow  # a Django process starts for each manage.py line: 1.5 to 4 min here
@pytest.mark.long  # most of a minute of CPU: make test-long
@pytest.mark.django_db(transaction=True)  # the test database, which the stack's processes share
def test_every_runnable_block_does_what_it_shows(stack: Stack) -> None:
    failures = []
    for block in BLOCKS:
        marker = block.marker or ("", "")
        if marker[0] == "not-run" or block.language not in RUN_LANGUAGES:
            continue
        stack.fake.reset()
        started = time.monotonic()
        try:
            if marker[0] == "run":
                CHECKS[marker[1].split()[0]](block, stack)
            elif block.language == "python":
                run_python(block, stack)
            else:
                run_shell(block, stack)
        except (AssertionError, subprocess.TimeoutExpired, ValueError) as exc:
            failures.append(f"--- {block.where} ({time.monotonic() - started:.1f} s)\n{exc}")
        print(f"{block.where}: {time.monotonic() - started:.1f} s")
    assert not failures, "\n".join(failures) + "\n\n" + stack.logs()


# --- how a block runs -------------------------------------------------------------------------


def run_shell(block: Block, stack: Stack) -> None:
    """Command by command, the block's variables carried from one to the next, the sample
    under each compared with its answer."""
    variables = stack.workdir / f"variables-{block.where.replace('/', '-')}.sh"
    names = " ".join(sorted(set(_ASSIGNMENT.findall(block.text))))
    keep = f'\ndeclare -p {names} > "$DOCS_VARIABLES" 2>/dev/null || true\n' if names else "\n"
    bindings: dict[str, str] = {}
    for step in shell_steps(block.text):
        command = stack.localize(substitute(step.command, bindings))
        samples = parse_samples(step.sample) if step.sample else []
        reads = samples and "curl" in command and not _WRITE.search(command)
        deadline = time.monotonic() + (POLL_SECONDS if reads else 0)
        while True:
            bound = dict(bindings)
            result = subprocess.run(
                ["bash", "-c", SHELL_PRELUDE + command + keep],
                cwd=stack.workdir, env={**stack.env, "DOCS_VARIABLES": str(variables)},
                capture_output=True, text=True, timeout=BLOCK_SECONDS,
            )  # fmt: skip
            problems = _problems(result, samples, bound)
            if not problems or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        bindings = bound
        assert not problems, (
            f"$ {command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}\n" + "\n".join(problems)
        )


def _problems(
    result: subprocess.CompletedProcess[str], samples: list[Any], bindings: dict[str, str]
) -> list[str]:
    if result.returncode != 0:
        return [f"exit status {result.returncode}"]
    statuses = re.findall(r"DOCS-HTTP (\d{3})", result.stderr)
    refused = [status for status in statuses if not status.startswith("2")]
    if refused:
        return [f"HTTP {', '.join(refused)}"]
    if not samples:
        return []
    try:
        answer = json.loads(result.stdout)
    except ValueError:
        return ["the answer is not JSON, the sample is"]
    return compare(samples[0], answer, bindings)


def run_python(block: Block, stack: Stack, *, code: str = "") -> str:
    """The block exits 0, and what a ``print(...)  # shown`` line shows is in its output (up to a
    trailing ``...``)."""
    result = subprocess.run(
        [sys.executable, "-u", "-c", PYTHON_PRELUDE + stack.localize(block.text) + code],
        cwd=stack.workdir, env=stack.env, capture_output=True, text=True, timeout=BLOCK_SECONDS,
    )  # fmt: skip
    assert result.returncode == 0, f"exit status {result.returncode}\n{result.stderr[-3000:]}"
    for shown in _PRINTED.findall(block.text):
        assert shown.removesuffix("...").strip() in result.stdout, (shown, result.stdout[-2000:])
    return result.stdout


# --- the checks a block can ask for (<!-- run: NAME -->) -------------------------------------


def listener(block: Block, stack: Stack) -> None:
    """A socket that prints events until stopped: it must live through a streamed job's
    ``job.delta`` events and print the job's ``completed``. A job it did not hear (submitted
    before it connected, on a slow machine) is followed by another, three at most."""
    output = stack.workdir / "listener.out"
    with output.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-u", "-c", PYTHON_PRELUDE + stack.localize(block.text)],
            cwd=stack.workdir, env=stack.env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        time.sleep(2)
        for _ in range(3):
            answer = stack.api("POST", "/api/v1/jobs/", json={
                "feature": "docs-listener", "model": "claude-haiku-4-5", "max_tokens": 256,
                "messages": [{"role": "user", "content": "Say it slowly. fake_stream_seconds=2"}],
            })  # fmt: skip
            assert answer.status_code == 202, answer.text
            job = answer.json()["id"]
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and process.poll() is None:
                if f"{job} completed" in output.read_text():
                    break
                time.sleep(0.2)
            if process.poll() is not None or f"{job} completed" in output.read_text():
                break
        printed = output.read_text()
        assert process.poll() is None, f"the listener died:\n{printed[-3000:]}"
        assert f"{job} completed" in printed, f"no completed event:\n{printed[-3000:]}"
        assert f"{job} running" in printed and re.search(rf"{job} \+ \d+", printed), printed
    finally:
        process.kill()
        process.wait(timeout=10)


def verifier(block: Block, stack: Stack) -> None:
    """A receiver's check of a webhook's signature: true for what the sender signs (with the
    new secret or, while a roll's grace runs, the old one), false for anything else."""
    from webhooks.signing import signature_header

    body = b'{"type": "job.completed", "job": {"id": "6f0c"}}'
    header = signature_header(secrets=["whsec_new", "whsec_old"], body=body)
    stale = signature_header(secrets=["whsec_new"], body=body, timestamp=int(time.time()) - 3600)
    expected = [True, True, False, False, False]
    calls = [
        (body, header, "whsec_new"),
        (body, header, "whsec_old"),
        (body + b" ", header, "whsec_new"),
        (body, header, "whsec_other"),
        (body, stale, "whsec_new"),
    ]
    code = f"\nimport json as _json\nprint(_json.dumps([verify(*call) for call in {calls!r}]))\n"
    printed = run_python(block, stack, code=code)
    assert json.loads(printed) == expected, printed


def pause(block: Block, stack: Stack) -> None:
    """Pausing commands, then what they paused resumed: the blocks after run on a live stack."""
    from features.models import FeaturePolicy
    from features.services import feature_policy_update
    from providers.models import Provider
    from providers.services import provider_pause

    run_shell(block, stack)
    assert Provider.objects.get(name="anthropic").paused
    assert FeaturePolicy.objects.get(feature="summarize").paused
    provider_pause(name="anthropic", paused=False, by="tests/test_docs_snippets.py")
    feature_policy_update(feature="summarize", paused=False)


CHECKS: dict[str, Callable[[Block, Stack], None]] = {
    "listener": listener,
    "verifier": verifier,
    "pause": pause,
}
