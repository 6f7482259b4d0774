"""Tags on jobs (jobs/tags.py): validated at submit, shown, filtered by ``?tag=`` through the
JobTag rows, and in the admin's list filter."""

import pytest

from jobs.models import JobTag, LlmJob
from tests.conftest import job_body, make_user, submit

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]


def test_a_job_shows_its_tags_lowercased_once_each_in_the_order_given(alice_client):
    job = submit(alice_client, tags=["Nightly", "eu_west", "nightly", "team-7"])
    body = alice_client.get(f"/api/v1/jobs/{job.id}/").json()
    assert body["tags"] == ["nightly", "eu_west", "team-7"]
    assert sorted(JobTag.objects.filter(job=job).values_list("tag", flat=True)) == [
        "eu_west",
        "nightly",
        "team-7",
    ]
    untagged = submit(alice_client)
    assert alice_client.get(f"/api/v1/jobs/{untagged.id}/").json()["tags"] == []


@pytest.mark.parametrize(
    "tags,field",
    [
        ("nightly", "tags"),
        ([f"t{i}" for i in range(11)], "tags"),
        (["ok", "not a slug"], "tags[1]"),
        (["x" * 65], "tags[0]"),
        ([""], "tags[0]"),
        ([7], "tags[0]"),
        (["é"], "tags[0]"),
    ],
)
def test_invalid_tags_are_refused(alice_client, tags, field):
    response = alice_client.post("/api/v1/jobs/", job_body(tags=tags), format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_tags"
    assert response.json()["detail"]["field"] == field
    assert not LlmJob.objects.exists()


def test_ten_tags_of_64_characters_are_accepted(alice_client):
    tags = [f"{i}" + "x" * 63 for i in range(10)]
    job = submit(alice_client, tags=tags)
    assert job.tags == tags


def test_the_list_filters_by_tag(alice_client, bob_client):
    nightly = submit(alice_client, tags=["nightly", "eu"])
    submit(alice_client, tags=["adhoc"])
    submit(alice_client)
    eu_only = submit(alice_client, tags=["eu"])
    submit(bob_client, tags=["nightly"])  # another user's: never listed

    def listed(tag):
        response = alice_client.get("/api/v1/jobs/", {"tag": tag})
        assert response.status_code == 200
        return {row["id"] for row in response.json()["results"]}

    assert listed("nightly") == {str(nightly.id)}
    assert listed("EU") == {str(nightly.id), str(eu_only.id)}
    assert listed("none-such") == set()
    assert len(alice_client.get("/api/v1/jobs/").json()["results"]) == 4


def test_a_bad_tag_filter_is_refused(alice_client):
    response = alice_client.get("/api/v1/jobs/", {"tag": "not a slug"})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"
    assert response.json()["detail"]["field"] == "tag"


def test_tags_are_part_of_the_request_an_idempotency_key_names(alice_client):
    headers = {"HTTP_IDEMPOTENCY_KEY": "tagged-1"}
    first = alice_client.post("/api/v1/jobs/", job_body(tags=["a"]), format="json", **headers)
    assert first.status_code == 202
    other = alice_client.post("/api/v1/jobs/", job_body(tags=["b"]), format="json", **headers)
    assert other.status_code == 409


def test_the_admin_lists_jobs_by_tag(alice_client, client):
    tagged = submit(alice_client, tags=["nightly"])
    submit(alice_client, tags=["adhoc"])
    staff = make_user("sam", "view_llmjob", is_staff=True)
    client.force_login(staff)
    page = client.get("/admin/jobs/llmjob/", {"tag": "nightly"})
    assert page.status_code == 200
    assert list(page.context["cl"].queryset) == [tagged]
    assert "adhoc" in page.content.decode()  # offered in the sidebar
