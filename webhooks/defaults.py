"""Webhooks' settings (retry schedule, timeout, the signing key), each from its environment
variable; the settings take them as they are (llmops/settings.py). In webhooks/checks.py:
whether each value is right."""

from llmops.env import env

__all__ = [
    "WEBHOOK_RETRY_JITTER",
    "WEBHOOK_RETRY_SCHEDULE",
    "WEBHOOK_SECRET_ROLL_GRACE_SECONDS",
    "WEBHOOK_SIGNING_KEY",
    "WEBHOOK_TIMEOUT_SECONDS",
]

# Seconds before retry n of a delivery: times three each time (10 s ... 6 h), about 9 h in all,
# so a receiver down for a working day still gets every event. 8 retries, 9 attempts.
WEBHOOK_RETRY_SCHEDULE = env.json_value(
    "WEBHOOK_RETRY_SCHEDULE", [10, 30, 90, 270, 810, 2430, 7290, 21870]
)
# Each delay is stretched by up to this fraction: receivers back after an outage are not hit by
# every delivery in the same second.
WEBHOOK_RETRY_JITTER = env.number("WEBHOOK_RETRY_JITTER", 0.1, minimum=0.0)
# Per phase (connect, write, read) of one POST.
WEBHOOK_TIMEOUT_SECONDS = env.number("WEBHOOK_TIMEOUT_SECONDS", 10.0, minimum=0.1)
# Signing secrets are derived from this key (never stored); empty: from DJANGO_SECRET_KEY.
WEBHOOK_SIGNING_KEY = env.str("WEBHOOK_SIGNING_KEY", "")
# After a roll, deliveries carry a signature with the old secret too for this long (a day).
WEBHOOK_SECRET_ROLL_GRACE_SECONDS = env.integer(
    "WEBHOOK_SECRET_ROLL_GRACE_SECONDS", 86400, minimum=0
)
