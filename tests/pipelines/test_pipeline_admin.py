"""The admin: pipelines, their steps with links to the step jobs, and cancel."""

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import make_user
from tests.pipelines.helpers import create_pipeline, step, three_steps

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    return client


def test_the_change_page_shows_every_step_with_a_link_to_its_job(alice_client, staff_client):
    pipeline = create_pipeline(alice_client, three_steps(), name="refund flow")
    job = pipeline.steps.get(index=0).job
    response = staff_client.get(f"/admin/pipelines/pipeline/{pipeline.id}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert f'href="/admin/jobs/llmjob/{job.id}/change/"' in page
    assert "refund flow" in page and "summarize" in page
    assert page.count("pending") == 2
    assert 'name="_save"' not in page  # nothing on it can be changed


def test_the_change_page_reads_steps_and_jobs_in_constant_queries(alice_client, staff_client):
    small = create_pipeline(alice_client, [step("one")])
    large = create_pipeline(alice_client, [step("a"), *three_steps()[1:] * 5])

    def count(pipeline) -> int:
        # The first admin page of a process fills Django's content-type cache (one query);
        # emptied before each count, whichever test ran before in this worker.
        ContentType.objects.clear_cache()
        with CaptureQueriesContext(connection) as queries:
            response = staff_client.get(f"/admin/pipelines/pipeline/{pipeline.id}/change/")
            assert response.status_code == 200
        return len(queries)

    assert count(large) == count(small)


def test_the_list_and_its_cancel_action(alice_client, staff_client):
    pipeline = create_pipeline(alice_client, three_steps(), name="to cancel")
    response = staff_client.get("/admin/pipelines/pipeline/")
    assert response.status_code == 200 and "to cancel" in response.content.decode()
    response = staff_client.post(
        "/admin/pipelines/pipeline/",
        {"action": "cancel_pipelines", "_selected_action": [str(pipeline.id)]},
        follow=True,
    )
    assert "Cancelled 1 pipeline(s)" in response.content.decode()
    pipeline.refresh_from_db()
    assert pipeline.status == "cancelled"
    assert pipeline.steps.get(index=0).job.status == "cancelled"


def test_staff_without_the_cancel_permission_see_no_cancel_action(alice_client, client):
    create_pipeline(alice_client, [step("one")])
    viewer = make_user("viewer", "view_pipeline", is_staff=True)
    client.force_login(viewer)
    response = client.get("/admin/pipelines/pipeline/")
    assert response.status_code == 200
    assert "cancel_pipelines" not in response.content.decode()
