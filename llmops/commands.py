"""``OperatorCommand``: the base of the management commands a person types and reads
(``llm_key``, ``llm_feature``, ``llm_provider``, ``llm_prune``...).

Their output is plain text for a person (and a secret alone on standard output for ``$(...)``).
The project's log lines (JSON by default, one per audited change) would land among it, so at
the default verbosity the console shows only WARNING and above while the command runs; ``-v 2``
shows every line. Nothing is lost: what they change is in the audit log (``audit/``) either way,
and a shipped log still gets every WARNING and ERROR.
"""

import logging
from typing import Any

from django.core.management.base import BaseCommand

__all__ = ["OperatorCommand"]


class OperatorCommand(BaseCommand):
    quiet_log_level = logging.WARNING
    """The console's level while the command runs at verbosity 0 or 1."""

    def execute(self, *args: Any, **options: Any) -> Any:
        if int(options.get("verbosity", 1)) >= 2:
            return super().execute(*args, **options)
        handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
        levels = [handler.level for handler in handlers]
        for handler in handlers:
            handler.setLevel(max(handler.level, self.quiet_log_level))
        try:
            return super().execute(*args, **options)
        finally:
            for handler, level in zip(handlers, levels, strict=True):
                handler.setLevel(level)
