"""The delivery log in the admin: the list and a delivery's page render with its attempts,
status codes and next try, never the URL's secret parts; "deliver again" sends a finished
delivery once more (same LLM-Webhook-Id, a new attempt), only for staff holding its permission."""

from typing import Any

import pytest
from django.test import Client

from tests.conftest import Workers, make_user, submit
from tests.webhooks.helpers import receiver
from webhooks.models import WebhookDelivery

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


@pytest.fixture(autouse=True)
def quick_webhooks(settings: Any) -> None:
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    settings.WEBHOOK_RETRY_SCHEDULE = [0.01]


def staff(*perms: str) -> Client:
    client = Client()
    client.force_login(
        make_user("-".join(["sam", *perms]), "view_webhookdelivery", *perms, is_staff=True)
    )
    return client


def deliver_again(client: Client, delivery: WebhookDelivery) -> Any:
    return client.post(
        "/admin/webhooks/webhookdelivery/",
        {"action": "deliver_again", "_selected_action": [str(delivery.pk)], "index": "0"},
    )


def test_the_log_shows_attempts_and_codes_and_deliver_again_sends_it_once_more(
    alice_client, workers
):
    with receiver([500, 500]) as hook:
        job = submit(alice_client, callback_url=f"{hook.url}/hooks/s3cret?token=s3cret")
        workers.drain()
        Workers("alerts").drain()
        hook.wait_for(2)
        delivery = WebhookDelivery.objects.get()
        assert delivery.state == "failed" and delivery.attempts == 2

        viewer = staff()
        page = viewer.get("/admin/webhooks/webhookdelivery/").content.decode()
        assert "job.completed" in page and "127.0.0.1/…" in page and "failed" in page
        assert "s3cret" not in page
        page = viewer.get(f"/admin/webhooks/webhookdelivery/{delivery.pk}/change/").content.decode()
        assert f"/admin/jobs/llmjob/{job.id}/change/" in page
        assert '<table class="webhook-attempts">' in page and page.count("HTTP 500") == 3
        assert "s3cret" not in page

        # The job's own page counts its webhooks and links to them.
        job_page = staff("view_llmjob").get(f"/admin/jobs/llmjob/{job.id}/change/")
        assert "1 webhook(s): 1 failed" in job_page.content.decode()
        assert f"subject_kind__exact=job&amp;subject_id={job.id}" in job_page.content.decode()
        filtered = viewer.get(
            f"/admin/webhooks/webhookdelivery/?subject_kind__exact=job&subject_id={job.id}"
        )
        assert filtered.status_code == 200 and "1 webhook delivery" in filtered.content.decode()

        # Without the permission, the action is not offered and changes nothing.
        deliver_again(viewer, delivery)
        Workers("alerts").drain()
        assert len(hook.requests) == 2

        operator = staff("redeliver_webhookdelivery")
        assert "deliver_again" in operator.get("/admin/webhooks/webhookdelivery/").content.decode()
        deliver_again(operator, delivery)
        Workers("alerts").drain()
        requests = hook.wait_for(3)
    assert requests[2]["headers"]["LLM-Webhook-Id"] == requests[0]["headers"]["LLM-Webhook-Id"]
    assert requests[2]["headers"]["LLM-Webhook-Attempt"] == "3"
    delivery.refresh_from_db()
    assert delivery.state == "delivered" and delivery.attempts == 3
    assert [entry["status"] for entry in delivery.history] == [500, 500, 200]
