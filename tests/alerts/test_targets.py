"""One check of alert targets: the admin and ALERT_ROUTES accept and refuse the same targets."""

import subprocess
import sys

import pytest
from django.core.exceptions import ValidationError

from alerts.checks import alert_route_problems
from alerts.models import AlertRoute
from alerts.targets import KINDS, scrub, target_problem
from tests.alerts.conftest import ROUTING_KEY

# Every refused target carries this marker, so that an error quoting the target is caught.
SECRET = "S3CRET"

GOOD = [
    ("slack", f"https://hooks.slack.com/services/T000/B111/{SECRET}"),
    ("webhook", f"http://127.0.0.1:8080/hooks/{SECRET}?token={SECRET}"),
    ("pagerduty", ROUTING_KEY),
    ("pagerduty", f"  {ROUTING_KEY}  "),
    ("email", "ops@example.com"),
    ("email", "ops@example.com, oncall@example.com,"),
]

BAD = [
    ("slack", f"hooks.slack.com/services/{SECRET}"),
    ("slack", "   "),
    ("webhook", f"ftp://ops.example.com/{SECRET}"),
    ("webhook", f"https:///{SECRET}/path"),
    ("pagerduty", f"KEY{SECRET}"),
    ("pagerduty", f"R0UT1NGKEY {SECRET}000000000009f3a"),  # 32 characters, one a space
    ("pagerduty", f"R0UT1NGKEY-{SECRET}000000000009f3a"),  # 32, one a dash
    ("pagerduty", f"{ROUTING_KEY}{SECRET}"),
    ("email", f"nobody-{SECRET}"),
    ("email", f"{SECRET} ops@example.com"),
    ("email", f"ops@{SECRET}@example.com"),
    ("email", ", ,"),
]


def _from_settings(*, kind: str, target: str) -> str:
    """The problem the ALERT_ROUTES check reports for the target; "" if it is accepted."""
    return "; ".join(alert_route_problems({"ERROR": [{"kind": kind, "target": target}]}))


def _from_admin(*, kind: str, target: str) -> str:
    """The problem AlertRoute.full_clean() reports for the target; "" if it is accepted."""
    route = AlertRoute(severity="ERROR", kind=kind, target=target)
    try:
        route.full_clean()
    except ValidationError as exc:
        return str(exc) or "refused"
    assert route.target == target.strip()
    return ""


def test_the_table_covers_every_kind():
    assert {kind for kind, _ in GOOD} == set(KINDS) == {kind for kind, _ in BAD}


@pytest.mark.parametrize(("kind", "target"), GOOD)
def test_it_accepts_a_good_target_in_the_admin_and_in_alert_routes(kind, target):
    assert target_problem(kind=kind, target=target) == ""
    assert _from_settings(kind=kind, target=target) == ""
    assert _from_admin(kind=kind, target=target) == ""


@pytest.mark.parametrize(("kind", "target"), BAD)
def test_it_refuses_a_bad_target_everywhere_without_echoing_it(kind, target):
    problems = [
        target_problem(kind=kind, target=target),
        _from_settings(kind=kind, target=target),
        _from_admin(kind=kind, target=target),
    ]
    assert all(problems), problems
    for problem in problems:
        assert SECRET not in problem
    # The settings error names the entry, so the operator can find it without the target.
    assert "ALERT_ROUTES[ERROR][0]" in problems[1]


def test_an_unknown_kind_is_a_problem_of_its_own():
    assert "Unknown kind" in target_problem(kind="sms", target="+100")


def test_the_module_loads_without_django_so_settings_can_import_it():
    code = (
        "import sys, alerts.targets; "
        "sys.exit(any(m == 'django' or m.startswith('django.') for m in sys.modules))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_scrub_removes_each_piece_of_a_url_that_a_destination_may_quote_alone():
    url = "https://hooks.example.com/services/T000/B000/XXslacksecretXX?token=q%2Fsecret-value&v=2"
    reply = (
        "no such hook XXslacksecretXX; bad token q/secret-value (q%2Fsecret-value); "
        f"for {url}; see https://hooks.example.com/docs/v2"
    )
    scrubbed = scrub(reply, target=url)
    for secret in ("XXslacksecretXX", "q/secret-value", "q%2Fsecret-value", "/services/"):
        assert secret not in scrubbed
    # The host and short words are not secrets: the message still says where and what.
    assert "hooks.example.com/docs/v2" in scrubbed
    credentials = "https://admin:hunter2pw@x.example/"
    assert scrub("as admin:hunter2pw, not hunter2pw", target=credentials) == (
        "as [redacted], not [redacted]"
    )
