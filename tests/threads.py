"""Run one function on several threads at once, as that many clients or worker processes
would: each thread closes its own database connection at the end, and any exception a thread
raised fails the test (a thread's exception would otherwise only be printed)."""

import threading
from collections.abc import Callable

from django.db import close_old_connections, connection


def in_threads(count: int, target: Callable[[threading.Barrier], None], timeout: float) -> None:
    """``count`` threads run ``target(start)``; each should ``start.wait()`` before its work so
    that all begin together."""
    start = threading.Barrier(count)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target(start)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    close_old_connections()
    assert not errors, errors
