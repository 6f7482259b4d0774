"""DLQ fixtures: the alert settings the DLQ's tests ran under in tests/alerts/ (no destination
routed, so a dead letter's alert is recorded and sent nowhere)."""

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def alert_settings(settings: Any) -> None:
    settings.ALERT_ROUTES = {}
    settings.ALERT_DEDUP_SECONDS = 600
    settings.ALERT_RETRY_SCHEDULE = [5.0, 30.0, 120.0]
    settings.ALERT_DELIVERY_TIMEOUT = 5.0
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
