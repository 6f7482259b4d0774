"""Run a command as the terminal's foreground job, so that Ctrl-C stops it and not ``make``.

    python -m runtime.foreground -- <command> [arg ...]

``make run`` starts honcho through this. At a terminal, Ctrl-C sends SIGINT to the terminal's
foreground process group; without this, ``make`` is in that group, takes the SIGINT itself and
ends a clean stop with ``make: *** [Makefile: run] Interrupt`` (or ``Error 130``, honcho's exit
code for a stop by Ctrl-C). Here the wrapper moves itself and the command to a process group of
their own and gives it the terminal: Ctrl-C reaches the command (and the wrapper, which ignores
it), never ``make``. The command's exit code is passed on, except that a stop by Ctrl-C (130, or
death by SIGINT) is a clean stop: 0. When the wrapper ends, ``make`` ends, and the user's shell
takes the terminal back as after any foreground job. Without a terminal (CI, a pipe) it only runs
the command and passes on its exit code, Ctrl-C's included. SIGTERM and SIGHUP are passed on to
the command, and the wrapper still waits for it to end.
"""

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["INTERRUPTED", "main"]

INTERRUPTED = (128 + signal.SIGINT, -signal.SIGINT)
"""The exit codes of a command stopped by Ctrl-C: its own 130 (honcho), or death by SIGINT."""


def _take_terminal() -> bool:
    """Make this process group the terminal's foreground group; False without a terminal."""
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        return False
    try:
        os.setpgid(0, 0)
        # A background group that sets the foreground group is sent SIGTTOU: ignore it here.
        previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            os.tcsetpgrp(tty, os.getpgrp())
        finally:
            signal.signal(signal.SIGTTOU, previous)
        return True
    except OSError:
        return False
    finally:
        os.close(tty)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m runtime.foreground -- <command> [arg ...]", file=sys.stderr)
        return 2
    at_terminal = _take_terminal()
    # The command gets Ctrl-C from the terminal (it shares this group); the wrapper waits for it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    process = subprocess.Popen(args, preexec_fn=_default_sigint)

    def forward(signum: int, _frame: object) -> None:
        # SIGTERM or SIGHUP to the wrapper (a killpg reaches the command too; honcho takes a
        # second one as the first): the command stops as it would, and this waits for it, so
        # that whoever waits for make waits for honcho's own stop of every process.
        process.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    code = process.wait()
    if at_terminal and code in INTERRUPTED:
        return 0
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
