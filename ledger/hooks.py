"""The hook every ledger row is booked through, inside the transaction that writes it.

``_create_row`` in ``ledger/services.py`` calls ``cost_entry_booked(entry)`` right after the row
(an attempt or a correction) and its budget settlement. Every subscriber registered with
``on_cost_entry`` runs then, in that transaction: what it writes commits or rolls back with the
row (the metrics' counters, ``metrics/apps.py``), and an exception it raises rolls the row back.
Keep subscribers to a few indexed statements.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger.models import CostEntry

__all__ = ["CostEntrySubscriber", "cost_entry_booked", "on_cost_entry"]

CostEntrySubscriber = Callable[["CostEntry"], None]

_subscribers: list[CostEntrySubscriber] = []


def on_cost_entry(subscriber: CostEntrySubscriber) -> CostEntrySubscriber:
    """Register a subscriber; call it from an ``AppConfig.ready``."""
    if subscriber not in _subscribers:
        _subscribers.append(subscriber)
    return subscriber


def cost_entry_booked(entry: "CostEntry") -> None:
    """Call every subscriber with the new row. Call in the transaction that creates it."""
    for subscriber in _subscribers:
        subscriber(entry)
