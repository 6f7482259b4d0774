"""LoopCommand: the one base of every long-running loop command (reconciler, queue monitor, ...).

A loop must outlive what it talks to. With ``--loop``, an error in a pass (Redis gone, the
database restarted, a bug) is logged with its traceback and noted in the loop's
``LoopHeartbeat`` row; the loop then backs off (LOOP_ERROR_BACKOFF_SECONDS, doubled on each
further failure, at most LOOP_ERROR_BACKOFF_MAX_SECONDS or the interval), drops its database
connections and tries again. Its start and each finished pass are recorded in the heartbeat
row, a stop on SIGTERM/SIGINT (between passes) clears it, and every pass of every loop runs the
loop health check, so that loops watch each other: a loop that has not passed for three
intervals raises an ERROR alert (``loops/loop_health.py``).

Without ``--loop`` a command runs one pass and lets errors raise: the exit code tells.
"""

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import Error as DatabaseError
from django.db import close_old_connections, connections

from loops.loop_health import (
    error_summary,
    loop_error_record,
    loop_health_check,
    loop_pass_record,
    loop_start_record,
    loop_stop_record,
)
from runtime.db_connections import bound_database_waits

__all__ = ["LoopCommand", "error_backoff_seconds"]

logger = logging.getLogger(__name__)


def error_backoff_seconds(*, failures: int, interval: float) -> float:
    """The wait after ``failures`` failed passes in a row: doubling from the first back-off, up
    to the maximum or the interval, whichever is shorter (a loop never waits longer after an
    error than it would after a good pass)."""
    ceiling = min(settings.LOOP_ERROR_BACKOFF_MAX_SECONDS, interval)
    first = settings.LOOP_ERROR_BACKOFF_SECONDS
    return float(min(ceiling, first * 2 ** min(max(failures - 1, 0), 30)))


class LoopCommand(BaseCommand):
    """Subclasses set ``loop_name`` and ``interval_setting`` and implement ``run_pass``."""

    loop_name: str = ""
    """The loop's name in its LoopHeartbeat row and its stall alert; unique per loop."""
    interval_setting: str = ""
    """The setting holding the default seconds between passes."""

    looping = False
    """True under ``--loop``: ``run_pass`` may then report only what changed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop = threading.Event()

    def run_pass(self) -> str:
        """One pass; returns what to print (may be empty). Raise on failure."""
        raise NotImplementedError

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="Keep running.")
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help=f"Seconds between passes with --loop (default: settings.{self.interval_setting}).",
        )

    def request_stop(self) -> None:
        """End the loop after the current pass (what SIGTERM and SIGINT do)."""
        self._stop.set()

    def handle(self, *args: Any, loop: bool, interval: float | None, **options: Any) -> None:
        interval = interval or float(getattr(settings, self.interval_setting))
        if not loop:
            self._write(self.run_pass())
            self._watch_other_loops()
            return
        self.looping = True
        bound_database_waits()  # a frozen database path fails a pass, never hangs the loop
        previous = {
            signum: signal.signal(signum, self._on_signal)
            for signum in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            self._loop(interval)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        logger.info("%s: %s received, stopping after this pass", self.loop_name, name)
        self._stop.set()

    def _loop(self, interval: float) -> None:
        host = f"{socket.gethostname()}:{os.getpid()}"
        failures = 0
        logger.info("%s: loop started, every %gs", self.loop_name, interval)
        self._record(
            lambda: loop_start_record(name=self.loop_name, interval_seconds=interval, host=host)
        )
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                # A long-lived process: drop connections the database closed while we slept.
                close_old_connections()
                self._write(self.run_pass())
            except Exception as error:
                failures += 1
                wait = error_backoff_seconds(failures=failures, interval=interval)
                logger.exception(
                    "%s: pass failed (%d in a row); next try in %gs",
                    self.loop_name,
                    failures,
                    wait,
                )
                self._reset_connections(error)
                self._record(
                    partial(
                        loop_error_record,
                        name=self.loop_name,
                        interval_seconds=interval,
                        host=host,
                        error=error,
                    )
                )
            else:
                failures, wait = 0, interval
                self._record(
                    lambda: loop_pass_record(
                        name=self.loop_name, interval_seconds=interval, host=host
                    )
                )
            self._watch_other_loops()
            logger.debug("%s: pass took %.2fs", self.loop_name, time.monotonic() - started)
            self._stop.wait(wait)
        # A deliberate stop is not a stall: no alert for a loop an operator stopped.
        self._record(lambda: loop_stop_record(name=self.loop_name, host=host))
        logger.info("%s: loop stopped", self.loop_name)

    def _write(self, report: str) -> None:
        """A pass's report: a log line when looping (one JSON line per pass, like every other
        process's output), the command's output for a single pass run by hand."""
        if not report:
            return
        if self.looping:
            logger.info("%s: %s", self.loop_name, report, extra={"loop": self.loop_name})
        else:
            self.stdout.write(report)

    def _record(self, write: Callable[[], object]) -> None:
        try:
            write()
        except Exception as error:
            # The database may be what failed: never let bookkeeping stop the loop.
            logger.warning(
                "%s: could not record the pass in its heartbeat: %s",
                self.loop_name,
                error_summary(error),
            )
            self._reset_connections(error)

    def _watch_other_loops(self) -> None:
        try:
            for report in loop_health_check():
                if report.alert is not None:
                    self._write(f"loops: {report}")
        except Exception as error:
            if not self.looping:
                raise
            logger.exception("%s: loop health check failed", self.loop_name)
            self._reset_connections(error)

    @staticmethod
    def _reset_connections(error: BaseException) -> None:
        # Django reconnects on next use. Closing only after a database error: a healthy
        # connection is worth keeping, and close_old_connections() drops unusable ones anyway.
        # django-rq builds a new Redis client (and pool) on every get_connection()/get_queue(),
        # so the next pass reconnects to Redis without help; no pool is cached to reset.
        if isinstance(error, DatabaseError):
            for connection in connections.all(initialized_only=True):
                try:
                    connection.close()
                except DatabaseError:
                    logger.debug("closing a broken database connection failed", exc_info=True)
        try:
            close_old_connections()
        except DatabaseError:
            logger.debug("closing old database connections failed", exc_info=True)
