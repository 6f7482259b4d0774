"""Settings as system checks: each app checks the values it owns (``alerts/checks.py``,
``jobs/checks.py``, ``ratelimits/checks.py``), tagged ``settings``, with stable ids.

Every manage.py command that runs system checks stops on an error (``rqworker``, the loop
commands, ``migrate``, ``runserver``, ``check``); the web server runs them before it starts any
worker (``llmops/web.py``). A check module stays pure (settings and pure helpers, no models), so
that the web server runs it without setting Django up.
"""

from collections.abc import Iterable
from importlib import import_module

from django.conf import settings
from django.core.checks import CheckMessage, Error, run_checks
from django.core.management.base import SystemCheckError

__all__ = ["SETTINGS", "check_settings", "errors"]

SETTINGS = "settings"
"""The tag of the settings checks: ``manage.py check --tag settings`` runs them alone."""


def errors(check_id: str, problems: Iterable[str]) -> list[CheckMessage]:
    return [Error(problem, id=check_id) for problem in problems]


def check_settings() -> None:
    """Run every app's settings checks; raise SystemCheckError on any error, as manage.py does."""
    for app in settings.INSTALLED_APPS:
        if (settings.BASE_DIR / app / "checks.py").is_file():
            import_module(f"{app}.checks")
    serious = [message for message in run_checks(tags=[SETTINGS]) if message.is_serious()]
    if serious:
        raise SystemCheckError("\n".join(str(message) for message in serious))
