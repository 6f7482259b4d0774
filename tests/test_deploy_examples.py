"""deploy/supervisord and deploy/systemd: every Procfile process is there with the Procfile's own
command, is stopped with SIGTERM to its main process only, and is given longer to stop than the
longest RQ job timeout, computed here from the code with the default settings (not a number
copied into the test). supervisor's own config parser and ``systemd-analyze verify`` read the
files, and a real supervisord stops a real llm worker with calls in flight: they finish first.
"""

import configparser
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs.models import LlmJob
from ledger.models import CostEntry
from tests.conftest import ROOT, submit
from tests.jobs.test_takeover import requests_seen, wait_for, worker_env
from tests.test_deploy_settings import run_python

SUPERVISORD = ROOT / "deploy" / "supervisord" / "llmops.conf"
SYSTEMD = ROOT / "deploy" / "systemd"
CHECKOUT = "/srv/llmops"
VENV_PYTHON = f"{CHECKOUT}/.venv/bin/python"
RESPAWN = "python -m runtime.respawn -- "

# The longest an RQ job of ours may run with the default settings, from the code that sets each
# timeout. The background bulk requeue and batch cancel (BULK_REQUEUE_JOB_TIMEOUT and batches'
# CANCEL_JOB_TIMEOUT, an hour) are left out on purpose: both resume where they stopped when
# their job is killed (the monitor's sweeps), so a deploy need not wait for them.
_LONGEST_JOB = """
import json, django
django.setup()
from django.conf import settings
from alerts.dispatch import _job_timeout as alert_delivery_timeout
from jobs.timeouts import job_timeout_for
print(json.dumps({
    # The largest max_tokens of a seeded model (claude-opus-4-6): a stream has no other cap.
    "llm": job_timeout_for(128_000),
    "alert_delivery": alert_delivery_timeout(),
    **{f"queue {name}": conf["DEFAULT_TIMEOUT"] for name, conf in settings.RQ_QUEUES.items()},
}))
"""


@pytest.fixture(scope="module")
def longest_job_timeout() -> int:
    result = run_python(["-c", _LONGEST_JOB], {"DJANGO_SETTINGS_MODULE": "llmops.settings"})
    assert result.returncode == 0, result.stderr
    timeouts = json.loads(result.stdout)
    # Sanity: an LLM job at the largest max_tokens is the longest (connect + 2 h + margin).
    assert timeouts["llm"] == max(timeouts.values()), timeouts
    return int(max(timeouts.values()))


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return {
        name.strip(): command.strip()
        for name, _, command in (line.partition(":") for line in lines if line.strip())
    }


def core(command: str) -> str:
    """What a command runs, whatever wraps it: ``manage.py ...`` or ``-m llmops.web ...``."""
    match = re.search(r"python (manage\.py [^;'\"]+|-m llmops\.web [^;'\"]+)", command)
    assert match, command
    return match.group(1).strip()


def unit_file(name: str) -> Path:
    stem = "llmops-" + name.replace("_", "-")
    found = [p for p in (SYSTEMD / f"{stem}.service", SYSTEMD / f"{stem}@.service") if p.exists()]
    assert len(found) == 1, f"deploy/systemd has no unit for the Procfile's {name}"
    return found[0]


def read_unit(path: Path) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(path)
    return unit


def _supervisor_copy(directory: Path, text: str, environment_file: Path) -> Path:
    """The example as it would run from this checkout: paths here, no user switch."""
    text = text.replace(CHECKOUT, str(ROOT))
    text = text.replace("/etc/llmops/llmops.env", str(environment_file))
    text = text.replace("/var/log/llmops", str(directory))
    text = re.sub(r"^user=.*\n", "", text, flags=re.M)
    text = text.replace(f"{ROOT}/.venv/bin:", str(Path(sys.executable).parent) + ":")
    config = directory / "llmops.conf"
    config.write_text(text)
    main = directory / "supervisord.conf"
    main.write_text(
        "[unix_http_server]\n"
        f"file={directory}/supervisor.sock\n"
        "[supervisord]\n"
        f"logfile={directory}/supervisord.log\n"
        f"pidfile={directory}/supervisord.pid\n"
        "nodaemon=true\n"
        "[rpcinterface:supervisor]\n"
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n"
        "[supervisorctl]\n"
        f"serverurl=unix://{directory}/supervisor.sock\n"
        "[include]\n"
        f"files={config}\n"
    )
    return main


def supervisor_programs(tmp_path: Path) -> dict[str, Any]:
    """Every program of deploy/supervisord/llmops.conf as supervisor itself reads it."""
    from supervisor.options import ServerOptions

    main = _supervisor_copy(tmp_path, SUPERVISORD.read_text(), tmp_path / "env")
    options = ServerOptions()
    options.realize(args=["-c", str(main)])
    return {
        process.name: process
        for group in options.process_group_configs
        for process in group.process_configs
    }


def test_supervisord_runs_every_procfile_process_as_the_procfile_does(tmp_path):
    programs = supervisor_programs(tmp_path)
    for name, command in procfile().items():
        matching = [p for n, p in programs.items() if re.fullmatch(rf"{name}(_\d\d)?", n)]
        assert matching, f"deploy/supervisord/llmops.conf has no program for {name}"
        for program in matching:
            # The environment file is read by sh, which then execs the Procfile's command.
            args = shlex.split(program.command)
            assert args[:2] == ["/bin/sh", "-c"], program.command
            exec_part = args[2].split("exec ", 1)[1]
            if "sh -c" in command:  # fake_provider's line idles when a key is set; not here
                assert core(exec_part) == core(command) and exec_part.startswith(RESPAWN)
            else:
                assert exec_part == command, (name, exec_part)


def test_supervisord_stops_each_process_with_sigterm_to_it_alone_after_the_longest_job(
    tmp_path, longest_job_timeout
):
    programs = supervisor_programs(tmp_path)
    assert {p.rsplit("_", 1)[0] if p[-1].isdigit() else p for p in programs} == set(procfile())
    for name, program in programs.items():
        assert program.stopsignal == signal.SIGTERM, name
        assert program.stopwaitsecs > longest_job_timeout, (name, program.stopwaitsecs)
        # Not the group: an rq work horse (its own group, default SIGTERM) would die mid-job.
        assert program.stopasgroup is False, name
        assert program.killasgroup is True, name
        assert program.autorestart is True or program.autorestart, name
    assert [n for n, p in programs.items() if not p.autostart] == ["fake_provider"]


def test_systemd_has_a_unit_per_procfile_process_with_the_procfile_command():
    for name, command in procfile().items():
        service = read_unit(unit_file(name))["Service"]
        exec_start = service["ExecStart"]
        assert exec_start.startswith(f"{VENV_PYTHON} -m runtime.respawn -- python "), exec_start
        if "sh -c" in command:
            assert core(exec_start) == core(command)
        else:
            assert "python " + exec_start.removeprefix(VENV_PYTHON + " ") == command, exec_start
        assert service["WorkingDirectory"] == CHECKOUT
        assert service["EnvironmentFile"] == "/etc/llmops/llmops.env"


def test_systemd_stops_each_unit_with_sigterm_to_its_main_process_after_the_longest_job(
    longest_job_timeout,
):
    for name in procfile():
        unit = read_unit(unit_file(name))
        service = unit["Service"]
        assert service.get("KillSignal", "SIGTERM") == "SIGTERM", name
        # control-group (the default) would SIGTERM an rq work horse directly: killed mid-job.
        assert service["KillMode"] == "mixed", name
        assert int(service["TimeoutStopSec"]) > longest_job_timeout, name
        assert service["Restart"] == "always", name
        assert unit["Unit"]["StartLimitIntervalSec"] == "0", name


def test_the_target_starts_every_unit_but_the_fake_provider():
    target = (SYSTEMD / "llmops.target").read_text()
    wanted = {w for line in re.findall(r"^Wants=(.*)$", target, re.M) for w in line.split()}
    for name in procfile():
        unit = unit_file(name)
        instance = unit.name.replace("@.service", "@1.service")
        if name == "fake_provider":
            assert instance not in wanted
            assert "Install" not in read_unit(unit)
        else:
            assert instance in wanted, name
            assert read_unit(unit)["Unit"]["PartOf"] == "llmops.target", name
            assert read_unit(unit)["Install"]["WantedBy"] == "llmops.target", name


def test_systemd_analyze_verifies_every_unit(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    (tmp_path / "env").write_text("")
    for path in SYSTEMD.iterdir():
        text = path.read_text().replace(CHECKOUT, str(ROOT))
        text = text.replace("/etc/llmops/llmops.env", str(tmp_path / "env"))
        text = re.sub(r"^(User|Group)=llmops$", r"\1=root", text, flags=re.M)
        text = text.replace(f"{ROOT}/.venv/bin/python", sys.executable)
        (tmp_path / path.name).write_text(text)
    units = sorted(str(p) for p in tmp_path.iterdir() if p.suffix in (".service", ".target"))

    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *units],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


# --- A real supervisord ---------------------------------------------------------------------


@pytest.fixture
def supervisord(tmp_path: Path, fake_provider: Any) -> Iterator[Any]:
    """supervisord running deploy/supervisord/llmops.conf from this checkout, with only one llm
    worker started (on the test database, Redis and fake provider); yields supervisorctl."""
    if shutil.which("supervisord", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("supervisor is not installed (requirements-dev.txt)")
    environment = {
        k: v
        for k, v in worker_env(fake_provider).items()
        if k in ("DATABASE_URL", "REDIS_URL", "ANTHROPIC_BASE_URL")
    }
    env_file = tmp_path / "env"
    env_file.write_text("".join(f"{k}='{v}'\n" for k, v in environment.items()))
    text = SUPERVISORD.read_text().replace("numprocs=2", "numprocs=1")
    text = re.sub(r"^autostart=true$", "autostart=false", text, flags=re.M)
    main = _supervisor_copy(tmp_path, text, env_file)
    bin_dir = Path(sys.executable).parent
    server = subprocess.Popen(
        [str(bin_dir / "supervisord"), "-c", str(main)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def ctl(*args: str, timeout: float = 120) -> str:
        result = subprocess.run(
            [str(bin_dir / "supervisorctl"), "-c", str(main), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return result.stdout + result.stderr

    try:
        wait_for(lambda: "STOPPED" in ctl("status"), timeout=30, what="supervisord")
        yield ctl
    finally:
        ctl("stop", "all")
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


@pytest.mark.long  # supervisord and its programs, 28 s of CPU: make test-long
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_supervisorctl_stop_lets_the_calls_in_flight_finish(
    alice_client, fake_provider, supervisord, tmp_path
):
    fake_provider.faults({}, latency_ms="4000")
    jobs = [submit(alice_client, messages=[{"role": "user", "content": f"n {i}"}]) for i in (1, 2)]
    assert "started" in supervisord("start", "llmops:worker_llm_00")
    wait_for(
        lambda: requests_seen(fake_provider) == 2,
        timeout=90,
        what=f"two calls in flight: {supervisord('tail', 'llmops:worker_llm_00')}",
    )

    started = time.monotonic()
    stopped = supervisord("stop", "llmops:worker_llm_00")
    took = time.monotonic() - started

    assert "stopped" in stopped, stopped
    # It waited for the calls (about 4 s) and did not need a SIGKILL.
    assert took >= 2, took
    assert "SIGKILL" not in (tmp_path / "supervisord.log").read_text()
    statuses = LlmJob.objects.filter(id__in=[j.id for j in jobs]).values_list("status", flat=True)
    assert list(statuses) == ["completed", "completed"]
    assert CostEntry.objects.filter(job__in=jobs).count() == 2
    assert "warm shut down requested" in (tmp_path / "worker_llm_00.log").read_text()
