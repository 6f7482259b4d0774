"""System checks of the webhooks' settings (tag ``settings``, see llmops/checks.py), and the
deploy check of the signing key. Pure: settings only, no model import."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register

from alerts.checks import alert_retry_schedule_problems
from llmops.checks import SETTINGS, errors
from llmops.env import DEVELOPMENT_SECRET_KEY
from webhooks.signing import signing_key

__all__ = ["check_webhook_settings", "check_webhook_signing_key"]


@register(SETTINGS)
def check_webhook_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    problems = alert_retry_schedule_problems(
        settings.WEBHOOK_RETRY_SCHEDULE, name="WEBHOOK_RETRY_SCHEDULE"
    )
    if not 0 <= settings.WEBHOOK_RETRY_JITTER <= 1:
        problems.append("WEBHOOK_RETRY_JITTER must be a fraction from 0 to 1, e.g. 0.1")
    return errors("webhooks.E001", problems)


@register(Tags.security, deploy=True)
def check_webhook_signing_key(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    development = signing_key(configured="", secret_key=DEVELOPMENT_SECRET_KEY)
    key = signing_key(configured=settings.WEBHOOK_SIGNING_KEY, secret_key=settings.SECRET_KEY)
    if key not in (development, DEVELOPMENT_SECRET_KEY):
        return []
    return [
        Error(
            "The webhooks' signing key is the development value printed in the source "
            "(WEBHOOK_SIGNING_KEY and DJANGO_SECRET_KEY are unset): anyone can compute every "
            "signing secret and forge a webhook.",
            hint="Set WEBHOOK_SIGNING_KEY (or DJANGO_SECRET_KEY) to 50 or more random "
            "characters; changing it later changes every signing secret.",
            id="webhooks.E002",
        )
    ]
