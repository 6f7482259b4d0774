"""The web process: uvicorn serving ``llmops.asgi`` in ``WEB_CONCURRENCY`` worker processes.

    python -m llmops.web [uvicorn option ...]      # the Procfile's ``web`` line

Within one process, Django's ASGI handler already serves requests at once: each request's sync
code (middleware, the DRF view) runs on a thread of its own, so one request's waits on MariaDB
or Redis never hold up another's. What one process cannot do is run Python on more than one core
(the GIL), and an API request is mostly Python. So this starts ``WEB_CONCURRENCY`` processes (one
per core by default) through uvicorn's ``--workers``: a supervisor process binds the port once,
starts the workers (which all accept on that one socket), starts again a worker that dies, and on
SIGTERM lets each worker finish its requests within ``--timeout-graceful-shutdown`` before it
exits itself. WebSockets work in any worker: the channel layer is Redis, shared by every process.

Each worker closes its database connection at the end of every request (``CONN_MAX_AGE`` 0, as
Django advises under ASGI): the request's thread ends with the request, and a connection kept
"for reuse" there would stay open, unused, until the garbage collector found it; under load the
web process alone reached MariaDB's ``max_connections`` (151) that way and workers failed with
"Too many connections". A request now opens one connection and closes it.

Before the workers start, this sets up what they must share:

- The Prometheus multiprocess directory. django-prometheus's HTTP and database metrics live in
  each process; with several, each writes them to files in ``PROMETHEUS_MULTIPROC_DIR`` and
  ``/metrics`` (metrics/views.py) sums them, whichever worker answers the scrape. The variable is
  set here, for the web processes only (the LLM metrics are read from the database and never
  need it; rq workers must not write such files, one per work horse), in a fresh private
  directory that is removed at exit; a directory named in the environment is emptied at start.
  Counters start from zero with each start of the server, as they do with one process.
- One ``SECRET_KEY``. Without ``DJANGO_SECRET_KEY`` each process would draw a random key of its
  own, and a session logged in by one worker would be refused by the next. With it goes the API
  key hash secret the server derived without it (else derived from the key just set).
- One logging configuration: ``settings.LOGGING`` is handed to uvicorn as ``--log-config``, so
  the supervisor's lines are formatted like every other process's.

Each worker asks the kernel (Linux) for SIGTERM when the supervisor dies: a supervisor killed
outright (``kill -9``, or its respawn wrapper killed) leaves no worker holding the port.

Every uvicorn option passes through (``--host``, ``--port``, ``--timeout-graceful-shutdown``,
``--proxy-headers`` ...); an explicit ``--workers`` wins over ``WEB_CONCURRENCY``.
"""

import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["APPLICATION_FACTORY", "SUPERVISOR_PID_VARIABLE", "main", "worker_application"]

APPLICATION_FACTORY = "llmops.web:worker_application"
"""What uvicorn loads in each worker (``--factory``)."""
SUPERVISOR_PID_VARIABLE = "LLMOPS_WEB_SUPERVISOR_PID"
"""Set for the workers: the supervisor whose death they must not outlive."""

_PR_SET_PDEATHSIG = 1


def worker_application() -> Any:
    """uvicorn's application factory, called once in each worker process as it starts."""
    _exit_with_supervisor()
    from django.conf import settings

    # Before any connection exists: see the module's docstring.
    for database in settings.DATABASES.values():
        database["CONN_MAX_AGE"] = 0
    from llmops.asgi import application

    return application


def _exit_with_supervisor() -> None:
    supervisor = os.environ.get(SUPERVISOR_PID_VARIABLE)
    if not supervisor or not sys.platform.startswith("linux"):
        return
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return
    ctypes.CDLL(libc_name, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    # The supervisor died before the prctl: the kernel will not tell us any more.
    if os.getppid() != int(supervisor):
        os.kill(os.getpid(), signal.SIGTERM)


def _option(args: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in uvicorn's arguments, if given."""
    for index, arg in enumerate(args):
        if arg == name and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _empty(directory: Path) -> None:
    for path in directory.glob("*.db"):
        path.unlink()


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmops.settings")
    # Settings and their checks only (no django.setup()): nothing starts on a bad value.
    from django.conf import settings
    from django.core.management.base import SystemCheckError

    from llmops.checks import check_agent_tools, check_settings

    try:
        check_settings()
        check_agent_tools()
    except SystemCheckError as exc:
        sys.exit(f"SystemCheckError: {exc}")

    workers = int(_option(args, "--workers") or settings.WEB_CONCURRENCY)
    extra = [] if _option(args, "--workers") else ["--workers", str(workers)]
    if _option(args, "--lifespan") is None:
        # Django's ASGI handler has no lifespan protocol: "auto" said so in every worker's log.
        extra += ["--lifespan", "off"]
    if _option(args, "--ws-max-size") is None:
        # uvicorn's own default is 16 MiB a message, for a socket whose clients send nothing.
        extra += ["--ws-max-size", str(settings.WS_MAX_MESSAGE_BYTES)]
    runtime = Path(tempfile.mkdtemp(prefix="llmops-web-"))
    try:
        if _option(args, "--log-config") is None:
            log_config = runtime / "logging.json"
            log_config.write_text(json.dumps(settings.LOGGING))
            extra += ["--log-config", str(log_config)]
        if not os.environ.get("DJANGO_SECRET_KEY"):
            # DEBUG on: the development key every process would take anyway; off: one random
            # key for this start of the server, as one process had before.
            os.environ["DJANGO_SECRET_KEY"] = settings.SECRET_KEY
            if not os.environ.get("API_KEY_HASH_SECRET"):
                # Else the workers would derive it from the key just set, and no key made by
                # another process (make token, llm_key) would work here.
                os.environ["API_KEY_HASH_SECRET"] = settings.API_KEY_HASH_SECRET
        if workers > 1 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            metrics = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or runtime / "metrics")
            metrics.mkdir(mode=0o700, parents=True, exist_ok=True)
            _empty(metrics)
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)
        if workers > 1:
            os.environ[SUPERVISOR_PID_VARIABLE] = str(os.getpid())

        from uvicorn.main import main as uvicorn_main

        uvicorn_main.main(
            args=[APPLICATION_FACTORY, "--factory", *extra, *args], prog_name="llmops.web"
        )
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    main()
