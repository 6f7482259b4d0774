"""What keys tells the rest of the product without importing it: a key rotated or revoked
(changes that are not saves of the key's row), for the audit trail (audit/recorders.py)."""

from django.dispatch import Signal

__all__ = ["api_key_event"]

api_key_event = Signal()
"""Sent with ``key``, ``action`` ("rotated" or "revoked") and ``changes`` ({field: (before,
after)}), inside the transaction of the change."""
