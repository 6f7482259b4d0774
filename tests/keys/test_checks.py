"""The API key hash secret's deploy check (keys/checks.py): ``check --deploy`` fails while keys
are hashed under the development value printed in the source, and passes with a real secret."""

import secrets

from django.core.checks import Error, Warning

from keys.checks import check_api_key_hash_secret
from keys.hashing import derived_hash_secret
from llmops.env import DEVELOPMENT_SECRET_KEY
from tests.test_deploy_settings import documented_production_environment, run_python


def check_deploy(environment: dict[str, str]) -> tuple[int, str]:
    result = run_python(["manage.py", "check", "--deploy"], environment)
    return result.returncode, result.stdout + result.stderr


def test_check_deploy_fails_without_a_real_hash_secret() -> None:
    for environment in (
        {},  # neither API_KEY_HASH_SECRET nor DJANGO_SECRET_KEY
        {"DJANGO_DEBUG": "True"},  # make run
        {"DJANGO_SECRET_KEY": DEVELOPMENT_SECRET_KEY},
        {"API_KEY_HASH_SECRET": DEVELOPMENT_SECRET_KEY},
        {**documented_production_environment(), "API_KEY_HASH_SECRET": DEVELOPMENT_SECRET_KEY},
    ):
        returncode, output = check_deploy(environment)

        assert returncode == 1, (environment, output)
        assert "(keys.E001) API_KEY_HASH_SECRET is the development value" in output


def test_check_deploy_passes_with_a_real_hash_secret() -> None:
    production = documented_production_environment()
    without_hash_secret = {k: v for k, v in production.items() if k != "API_KEY_HASH_SECRET"}
    for environment in (
        {"API_KEY_HASH_SECRET": secrets.token_urlsafe(50)},
        {"DJANGO_SECRET_KEY": secrets.token_urlsafe(50)},  # derived from it, DJANGO_SECURE off
        production,
        without_hash_secret,
    ):
        returncode, output = check_deploy(environment)

        assert returncode == 0, (environment, output)
        assert "keys.E001" not in output and "keys.W001" not in output


def test_the_development_value_left_in_the_fallbacks_is_a_warning(settings) -> None:
    settings.API_KEY_HASH_SECRET = secrets.token_urlsafe(50)
    settings.API_KEY_HASH_SECRET_FALLBACKS = [derived_hash_secret(DEVELOPMENT_SECRET_KEY)]

    [message] = check_api_key_hash_secret()

    assert isinstance(message, Warning) and message.id == "keys.W001"


def test_the_check_names_the_development_value_in_either_form(settings) -> None:
    settings.API_KEY_HASH_SECRET_FALLBACKS = []
    for value in (DEVELOPMENT_SECRET_KEY, derived_hash_secret(DEVELOPMENT_SECRET_KEY)):
        settings.API_KEY_HASH_SECRET = value

        [message] = check_api_key_hash_secret()

        assert isinstance(message, Error) and message.id == "keys.E001"
    settings.API_KEY_HASH_SECRET = derived_hash_secret(secrets.token_urlsafe(50))
    assert check_api_key_hash_secret() == []
