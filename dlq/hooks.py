"""What others hear from the DLQ: a record written, a record taken out of ``open``.

The DLQ imports nobody who listens to it. The alerts app registers here (in its
``AppConfig.ready``) to raise a dead-lettered job's alert and to resolve its incident once it is
handled. Subscribers run inside the DLQ service's transaction, so what they register with
``transaction.on_commit`` never runs for a rolled-back record; keep them to that.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlq.models import FailureRecord

__all__ = ["FailureSubscriber", "failure_handled", "failure_recorded", "on_failure"]

FailureSubscriber = Callable[["FailureRecord"], None]

_recorded: list[FailureSubscriber] = []
_handled: list[FailureSubscriber] = []


def on_failure(
    *, recorded: FailureSubscriber | None = None, handled: FailureSubscriber | None = None
) -> None:
    """Register: ``recorded`` once a job's record is written, ``handled`` once a record leaves
    ``open`` (requeued, resolved or ignored). Call it from an ``AppConfig.ready``."""
    for registry, subscriber in ((_recorded, recorded), (_handled, handled)):
        if subscriber is not None and subscriber not in registry:
            registry.append(subscriber)


def failure_recorded(record: "FailureRecord") -> None:
    for subscriber in _recorded:
        subscriber(record)


def failure_handled(record: "FailureRecord") -> None:
    for subscriber in _handled:
        subscriber(record)
