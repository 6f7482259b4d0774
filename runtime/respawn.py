"""Run a command, and start it again whenever it exits, so that one failing process never takes
the others down: honcho (``make run``) stops every process as soon as any one of them exits.

    python -m runtime.respawn [--name NAME] -- <command> [arg ...]

Whatever the exit (a crash, ``kill -9``, a clean exit code), the command starts again after a
back-off: 1 s, doubled after each exit up to 30 s, and back to 1 s once a run lasted 60 s, so that
a command that cannot start does not spin. SIGTERM and SIGINT are passed on to the command,
once; the wrapper then waits for it to finish and exits 0 without restarting it.

The command runs in a process group of its own, so that a signal sent to the wrapper's group
(honcho's ``killpg``, Ctrl-C at a terminal) reaches it once, through the wrapper, and not twice:
a second SIGTERM would turn an RQ worker's warm shutdown (finish the job) into a cold one and
force uvicorn to drop its requests. On Linux it is also killed if the wrapper is killed outright
(honcho's SIGKILL after its grace period), so that nothing is left running.
"""

import argparse
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

__all__ = ["FIRST_BACKOFF_SECONDS", "HEALTHY_RUN_SECONDS", "MAX_BACKOFF_SECONDS", "main"]

FIRST_BACKOFF_SECONDS = 1.0
"""A crash-and-restart costs a second: short enough for a blip, long enough not to spin."""
MAX_BACKOFF_SECONDS = 30.0
"""A command that keeps failing (a port taken, a setting wrong) is tried twice a minute."""
HEALTHY_RUN_SECONDS = 60.0
"""A run this long was a real run: the next exit starts the back-off from the beginning."""

_PR_SET_PDEATHSIG = 1


def _log(name: str, message: str) -> None:
    print(f"respawn[{name}]: {message}", file=sys.stderr, flush=True)


def _describe(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"code {returncode}"


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A preexec_fn that has the kernel SIGKILL the child when the wrapper dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    libc = ctypes.CDLL(libc_name, use_errno=True)
    parent = os.getpid()

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The wrapper died between fork and prctl: the kernel will not tell us any more.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


class Respawner:
    def __init__(self, command: Sequence[str], name: str) -> None:
        self.command = list(command)
        self.name = name
        self.stopping = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        self._preexec = _die_with_parent_hook()

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        first = not self.stopping.is_set()
        self.stopping.set()
        if first:
            _log(self.name, f"{signal.Signals(signum).name} received: stopping, no restart")
        self._forward(signum)

    def _forward(self, signum: int) -> None:
        child = self.child
        if child is not None and child.returncode is None:
            try:
                os.killpg(child.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def run(self) -> int:
        backoff = FIRST_BACKOFF_SECONDS
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self.child = subprocess.Popen(
                    self.command,
                    process_group=0,
                    preexec_fn=self._preexec,  # safe: the wrapper runs no other thread
                )
            except OSError as error:
                _log(self.name, f"cannot start {self.command[0]!r}: {error}")
                returncode = 127
            else:
                # A signal that came between fork and the assignment above found no child.
                if self.stopping.is_set():
                    self._forward(signal.SIGTERM)
                returncode = self.child.wait()
            ran = time.monotonic() - started
            if self.stopping.is_set():
                break
            if ran >= HEALTHY_RUN_SECONDS:
                backoff = FIRST_BACKOFF_SECONDS
            _log(
                self.name,
                f"exited with {_describe(returncode)} after {ran:.1f}s; "
                f"starting it again in {backoff:g}s",
            )
            self.stopping.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
        if self.child is not None and self.child.returncode is None:
            self.child.wait()
        _log(self.name, "stopped")
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtime.respawn",
        description="Run a command and start it again whenever it exits.",
    )
    parser.add_argument("--name", default="", help="How log lines name the command.")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- command [arg ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given: python -m runtime.respawn -- <command> [arg ...]")
    respawner = Respawner(command, args.name or " ".join(" ".join(command).split())[:60])
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, respawner.on_signal)
    return respawner.run()


if __name__ == "__main__":
    sys.exit(main())
