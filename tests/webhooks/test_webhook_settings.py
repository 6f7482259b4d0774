"""The webhooks' settings checks (webhooks/checks.py): a bad retry schedule or jitter stops
start-up under ``webhooks.E001``; ``check --deploy`` refuses a signing key derived from the
development secret (``webhooks.E002``), and accepts a set one."""

from tests.test_deploy_settings import run_python, settings_check_errors


def test_a_bad_schedule_or_jitter_stops_start_up():
    errors = settings_check_errors(
        {"WEBHOOK_RETRY_SCHEDULE": '{"a": 1}', "WEBHOOK_RETRY_JITTER": "2"}
    )
    assert "(webhooks.E001) WEBHOOK_RETRY_SCHEDULE must be a JSON list of seconds" in errors
    assert "(webhooks.E001) WEBHOOK_RETRY_JITTER must be a fraction from 0 to 1" in errors


def test_check_deploy_refuses_the_development_signing_key_and_accepts_a_set_one():
    development = run_python(["manage.py", "check", "--deploy"], {"DJANGO_DEBUG": "True"})
    assert "webhooks.E002" in development.stderr
    own_key = {"DJANGO_DEBUG": "True", "WEBHOOK_SIGNING_KEY": "k" * 50}
    assert "webhooks.E002" not in run_python(["manage.py", "check", "--deploy"], own_key).stderr
