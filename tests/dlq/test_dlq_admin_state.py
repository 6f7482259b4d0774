"""The DLQ console opens on what still needs someone: the open records, newest first; the other
states (and all of them, open first) when asked, by its filter or by a link that names one."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from dlq.models import FailureRecord
from tests.conftest import make_user
from tests.ops.test_dashboard import dead_letter, make_job

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/dlq/failurerecord/"


@pytest.fixture
def records() -> dict[str, FailureRecord]:
    """Four dead letters an hour apart, newest first: requeued, open, resolved, open."""
    owner = make_user("owen")
    now = timezone.now()
    made = {}
    for hours, (name, state) in enumerate(
        [
            ("requeued", "requeued"),
            ("open_new", "open"),
            ("resolved", "resolved"),
            ("open_old", "open"),
        ]
    ):
        job = make_job(owner, status="failed", feature=f"feature-{name}")
        made[name] = dead_letter(job, now - timedelta(hours=hours, minutes=1), "ERROR", state)
    return made


@pytest.fixture
def operator() -> Client:
    client = Client()
    client.force_login(make_user("olga", "view_failurerecord", is_staff=True))
    return client


def listed(client: Client, query: str = "") -> list[str]:
    """The features of the rows shown, top to bottom (each row's job has its own)."""
    page = client.get(CHANGELIST + query)
    assert page.status_code == 200
    html = page.content.decode()
    if 'id="result_list"' not in html:  # no rows: no table
        assert "0 failures (DLQ)" in html
        return []
    table = html.split('id="result_list"')[1].split("</table>")[0]
    return re.findall(r"feature-(\w+)", table)


def state_choices(client: Client, query: str = "") -> dict[str, tuple[str, bool]]:
    """The state filter's choices: label -> (link, chosen)."""
    html = client.get(CHANGELIST + query).content.decode()
    section = html.split("By state")[1].split("</ul>")[0]
    return {
        label: (href.replace("&amp;", "&"), 'class="selected"' in li)
        for li, href, label in re.findall(
            r'(<li[^>]*>)\s*<a href="([^"]*)"[^>]*>([^<]+)</a>', section
        )
    }


def test_it_lists_only_the_open_records_newest_first_by_default(records, operator):
    assert dedupe(listed(operator)) == ["open_new", "open_old"]
    choices = state_choices(operator)
    assert choices["Open"][1] and not choices["All"][1]
    assert "2 failures (DLQ)" in operator.get(CHANGELIST).content.decode()


def test_it_shows_another_state_or_all_of_them_open_first_when_asked(records, operator):
    assert dedupe(listed(operator, "?state__exact=requeued")) == ["requeued"]
    assert dedupe(listed(operator, "?state__exact=resolved")) == ["resolved"]
    assert dedupe(listed(operator, "?state__exact=all")) == [
        "open_new",
        "open_old",
        "requeued",
        "resolved",
    ]
    choices = state_choices(operator, "?state__exact=requeued")
    assert choices["Requeued"][1] and not choices["Open"][1]
    # Each choice is a link that names its state: Open too, so it survives other filters.
    assert choices["All"][0] == "?state__exact=all"
    assert choices["Open"][0] == "?state__exact=open"


def test_other_filters_keep_the_open_default_and_a_named_state(records, operator):
    assert dedupe(listed(operator, "?severity__exact=ERROR")) == ["open_new", "open_old"]
    assert dedupe(listed(operator, "?severity__exact=ERROR&state__exact=requeued")) == ["requeued"]
    # The ops dashboard's links name the state they mean.
    assert dedupe(listed(operator, "?state__exact=open&severity__exact=ERROR")) == [
        "open_new",
        "open_old",
    ]


def test_a_search_finds_a_record_in_any_state_unless_one_is_named(records, operator):
    job_id = records["requeued"].job_id
    assert dedupe(listed(operator, f"?q={job_id}")) == ["requeued"]
    assert dedupe(listed(operator, f"?q={job_id}&state__exact=open")) == []
    assert state_choices(operator, f"?q={job_id}")["All"][1]


def test_an_unknown_state_shows_nothing_rather_than_everything(records, operator):
    assert listed(operator, "?state__exact=bogus") == []


def dedupe(features: list[str]) -> list[str]:
    """A row names its feature more than once (the column and its tooltip): once, in order."""
    return list(dict.fromkeys(features))


def test_an_action_on_picked_rows_reaches_them_in_any_state_and_across_means_what_is_shown(
    records, operator
):
    rita = Client()
    rita.force_login(make_user("rita", "view_failurerecord", "ignore_failurerecord", is_staff=True))
    picked = [records["requeued"].pk, records["open_new"].pk]
    done = rita.post(
        CHANGELIST, {"action": "ignore", "_selected_action": picked, "apply": "1"}, follow=True
    ).content.decode()
    assert "Ignored 1 of 2 selected." in done and "already handled" in done
    # "Select all": the records the list shows (the open ones), not every record.
    across = rita.post(
        CHANGELIST,
        {
            "action": "ignore",
            "_selected_action": [records["open_old"].pk],
            "select_across": "1",
            "apply": "1",
        },
        follow=True,
    ).content.decode()
    assert "Ignored 1 of 1 selected." in across and "already handled" not in across
    states = dict(FailureRecord.objects.values_list("job__feature", "state"))
    assert states == {
        "feature-requeued": "requeued",
        "feature-open_new": "ignored",
        "feature-resolved": "resolved",
        "feature-open_old": "ignored",
    }
