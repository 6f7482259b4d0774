"""Settings as system checks: each app checks the values it owns (``alerts/checks.py``,
``jobs/checks.py``, ``ratelimits/checks.py``), tagged ``settings``, with stable ids.

Every manage.py command that runs system checks stops on an error (``rqworker``, the loop
commands, ``migrate``, ``runserver``, ``check``); the web server runs them before it starts any
worker (``llmops/web.py``). A check module stays pure (settings and pure helpers, no models), so
that the web server runs it without setting Django up (the agent tools' check, which imports
the tool modules, sets it up: ``check_agent_tools``).
"""

from collections.abc import Iterable
from importlib import import_module

from django.conf import settings
from django.core.checks import CheckMessage, Error, run_checks
from django.core.management.base import SystemCheckError

__all__ = ["SETTINGS", "check_agent_tools", "check_settings", "errors"]

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


def check_agent_tools() -> None:
    """The agent tools' check (agents.E001): their modules are imported as the apps load, so this
    one sets Django up (about a second) before the web server starts a worker; a bad tool module
    stops the web server as it stops every manage.py command."""
    import django

    django.setup()
    serious = [message for message in run_checks(tags=["agents"]) if message.is_serious()]
    if serious:
        raise SystemCheckError("\n".join(str(message) for message in serious))
