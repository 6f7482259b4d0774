"""Staff set limits in the admin; an edit applies at once in this process (every other worker
within LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS), wins over the settings, and the page shows what
each limiter knows (configured, learned, in force)."""

import pytest
from django.test import Client

from jobs.models import LlmJob
from ratelimits.configured_limits import configured_limits
from ratelimits.models import RateLimit
from ratelimits.services import rate_limit_acquire
from tests.conftest import make_user, submit
from tests.ratelimits.conftest import MODEL, PROVIDER, reserve, settle

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


@pytest.fixture
def staff_client() -> Client:
    staff = make_user("staff", "add_ratelimit", "change_ratelimit", "view_ratelimit", is_staff=True)
    client = Client()
    client.force_login(staff)
    return client


def form(**fields: object) -> dict[str, object]:
    data: dict[str, object] = {
        "provider": PROVIDER,
        "model": MODEL,
        "rpm": "",
        "input_tpm": "",
        "output_tpm": "",
        "enabled": "on",
        "note": "",
    }
    data.update(fields)
    return data


def acquired(job: LlmJob) -> bool:
    return not rate_limit_acquire(job=job, attempt=1).held


def test_an_admin_edit_takes_effect_at_once_and_wins_over_settings(
    staff_client, alice_client, settings
):
    settings.LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS = 60.0  # only the edit itself clears it
    settings.LLM_RATE_LIMIT_MAX_WAIT_SECONDS = 0.0
    settings.LLM_RATE_LIMITS = {MODEL: {"rpm": 100, "output_tpm": 50000}}
    jobs = [submit(alice_client) for _ in range(4)]
    assert configured_limits(provider=PROVIDER, model=MODEL).rpm == 100

    response = staff_client.post("/admin/ratelimits/ratelimit/add/", form(rpm=2))
    assert response.status_code == 302, response.content
    limits = configured_limits(provider=PROVIDER, model=MODEL)
    assert (limits.rpm, limits.output_tpm) == (2, 50000)  # the row's field, the setting's other
    assert limits.source_of("rpm") == f"admin {PROVIDER}/{MODEL}"
    assert acquired(jobs[0]) and acquired(jobs[1])
    assert not acquired(jobs[2])  # the admin's 2, not the settings' 100

    row = RateLimit.objects.get()
    response = staff_client.post(f"/admin/ratelimits/ratelimit/{row.id}/change/", form(rpm=3))
    assert response.status_code == 302
    assert acquired(jobs[2])
    assert not acquired(jobs[3])

    response = staff_client.post(
        f"/admin/ratelimits/ratelimit/{row.id}/change/", form(rpm=3, enabled="")
    )
    assert response.status_code == 302
    assert configured_limits(provider=PROVIDER, model=MODEL).rpm == 100  # row off: settings


def test_the_admin_refuses_a_limit_of_zero(staff_client):
    response = staff_client.post("/admin/ratelimits/ratelimit/add/", form(rpm=0))
    assert response.status_code == 200 and b"greater than or equal to 1" in response.content
    assert not RateLimit.objects.exists()


def test_the_list_shows_configured_learned_and_in_force(staff_client, settings):
    RateLimit.objects.create(provider=PROVIDER, model=MODEL, rpm=5000)
    _, reservation = reserve()
    settle(
        reservation,
        learned={"requests": (4000, 3999, 0), "output_tokens": (400000, 399000, 0)},
        pause_seconds=30,
    )
    page = staff_client.get("/admin/ratelimits/ratelimit/").content.decode()
    assert 'id="limit-status"' in page
    row = page.split('data-model="claude-sonnet-4-6" data-kind="requests"')[1].split("</tr>")[0]
    assert "5000" in row and "4000" in row  # configured, learned...
    assert '<td class="limit-effective">4000</td>' in row  # ...and the smaller one in force
    assert "paused until" in page
    assert "in flight: 0" in page
