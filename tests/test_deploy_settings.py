"""Safe defaults: DEBUG is off unless asked for, bad values stop start-up, and the production
environment documented in docs/operations.md passes `manage.py check --deploy`.

Settings are read once per process, so each case starts a fresh Python with exactly the
environment it names (nothing inherited from the test run but PATH and HOME)."""

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS_DOC = ROOT / "docs" / "operations.md"


def documented_production_environment() -> dict[str, str]:
    """The ```sh block under "### Production environment", placeholders filled in."""
    text = OPERATIONS_DOC.read_text()
    section = text.split("### Production environment", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "docs/operations.md: no ```sh block under ### Production environment"
    environment = {}
    for line in block.group(1).splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, value = line.partition("=")
        environment[name] = re.sub(r"<[^>]*>", lambda _: secrets.token_urlsafe(50), value)
    return environment


def run_python(args: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **environment}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def settings_in(environment: dict[str, str], *names: str) -> dict[str, object]:
    code = (
        "import json, llmops.settings as s; "
        f"print(json.dumps({{n: getattr(s, n) for n in {list(names)!r}}}))"
    )
    result = run_python(["-c", code], environment)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def start_up_error(environment: dict[str, str]) -> str:
    result = run_python(["-c", "import llmops.settings"], environment)
    assert result.returncode != 0, "start-up should have failed"
    return result.stderr.strip().splitlines()[-1]


def settings_check_errors(environment: dict[str, str]) -> str:
    """What the settings' system checks report (llmops/checks.py); they must fail."""
    result = run_python(["manage.py", "check", "--tag", "settings"], environment)
    assert result.returncode != 0, "the settings checks should have failed"
    return result.stderr


def test_it_passes_check_deploy_with_the_documented_production_environment() -> None:
    environment = documented_production_environment()
    assert "DJANGO_DEBUG" not in environment
    assert len(environment["DJANGO_SECRET_KEY"]) >= 50

    result = run_python(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], environment)

    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "System check identified no issues" in output
    assert "WARNING" not in output


def test_the_documented_production_environment_is_https_only() -> None:
    values = settings_in(
        documented_production_environment(),
        "DEBUG",
        "SECURE_SSL_REDIRECT",
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_HSTS_SECONDS",
        "ALLOWED_HOSTS",
    )
    assert values == {
        "DEBUG": False,
        "SECURE_SSL_REDIRECT": True,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": 31_536_000,
        "ALLOWED_HOSTS": ["llmops.example.com"],
    }


def test_debug_is_off_when_DJANGO_DEBUG_is_unset() -> None:
    values = settings_in({}, "DEBUG", "ALLOWED_HOSTS", "SECURE_SSL_REDIRECT", "X_FRAME_OPTIONS")

    assert values == {
        "DEBUG": False,
        "ALLOWED_HOSTS": ["localhost", "127.0.0.1", "[::1]"],
        # Plain http stays possible until DJANGO_SECURE says the site is HTTPS only.
        "SECURE_SSL_REDIRECT": False,
        "X_FRAME_OPTIONS": "DENY",
    }


def test_it_uses_a_random_secret_key_per_process_when_debug_is_off_and_none_is_set() -> None:
    first = settings_in({}, "SECRET_KEY", "DEVELOPMENT_SECRET_KEY")
    second = settings_in({}, "SECRET_KEY")

    assert first["SECRET_KEY"] != second["SECRET_KEY"]
    assert first["SECRET_KEY"] != first["DEVELOPMENT_SECRET_KEY"]


def test_make_run_gets_debug_and_the_development_key() -> None:
    values = settings_in(
        {"DJANGO_DEBUG": "True"}, "DEBUG", "SECRET_KEY", "DEVELOPMENT_SECRET_KEY", "SECURE"
    )

    assert values["DEBUG"] is True
    assert values["SECRET_KEY"] == values["DEVELOPMENT_SECRET_KEY"]
    assert values["SECURE"] is False


def test_a_bad_DJANGO_DEBUG_value_stops_start_up() -> None:
    error = start_up_error({"DJANGO_DEBUG": "maybe"})

    assert "ImproperlyConfigured" in error
    assert "DJANGO_DEBUG must be True or False" in error


def test_the_production_switch_refuses_to_start_without_a_secret_key() -> None:
    environment = documented_production_environment()
    del environment["DJANGO_SECRET_KEY"]

    assert "DJANGO_SECRET_KEY must be set" in start_up_error(environment)


def test_the_production_switch_refuses_a_short_secret_key() -> None:
    environment = {**documented_production_environment(), "DJANGO_SECRET_KEY": "s3cret" * 5}

    assert "at least 50 random characters" in start_up_error(environment)


def test_the_production_switch_refuses_to_answer_any_host() -> None:
    environment = {**documented_production_environment(), "DJANGO_ALLOWED_HOSTS": "*"}

    assert "DJANGO_ALLOWED_HOSTS must name the site's hosts" in start_up_error(environment)


def test_the_proxy_ssl_header_is_trusted_only_when_set() -> None:
    assert settings_in({}, "SECURE_PROXY_SSL_HEADER") == {"SECURE_PROXY_SSL_HEADER": None}
    assert settings_in(
        {"DJANGO_SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO"}, "SECURE_PROXY_SSL_HEADER"
    ) == {"SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"]}
    assert "must look like HTTP_X_FORWARDED_PROTO" in start_up_error(
        {"DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto"}
    )


def test_the_key_hash_secret_is_derived_from_a_set_secret_key_with_DJANGO_SECURE_off() -> None:
    development = settings_in({}, "API_KEY_HASH_SECRET")["API_KEY_HASH_SECRET"]
    first_key, second_key = secrets.token_urlsafe(50), secrets.token_urlsafe(50)

    first = settings_in({"DJANGO_SECRET_KEY": first_key}, "API_KEY_HASH_SECRET", "SECURE")
    again = settings_in({"DJANGO_SECRET_KEY": first_key}, "API_KEY_HASH_SECRET")
    second = settings_in({"DJANGO_SECRET_KEY": second_key}, "API_KEY_HASH_SECRET")

    assert first["SECURE"] is False
    assert first["API_KEY_HASH_SECRET"] != development
    assert first["API_KEY_HASH_SECRET"] == again["API_KEY_HASH_SECRET"]  # every process agrees
    assert first["API_KEY_HASH_SECRET"] != second["API_KEY_HASH_SECRET"]


def test_without_any_secret_every_process_hashes_keys_under_the_development_value() -> None:
    # DEBUG off draws a random SECRET_KEY per process: the hash secret must not follow it, or a
    # key made by `make token` would not work in the web server. check --deploy refuses this.
    first = settings_in({}, "API_KEY_HASH_SECRET", "DEVELOPMENT_SECRET_KEY")
    debug = settings_in({"DJANGO_DEBUG": "True"}, "API_KEY_HASH_SECRET")

    assert first["API_KEY_HASH_SECRET"] == debug["API_KEY_HASH_SECRET"]
    assert first["DEVELOPMENT_SECRET_KEY"] in first["API_KEY_HASH_SECRET"]  # type: ignore[operator]
