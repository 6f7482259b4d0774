"""The HTTP contract of /api/v1/batches/: submit, validation (one bad item refuses all and writes
nothing), shared jobs for identical items, isolation, listing, the jobs of a batch, cancel."""

import django_rq
import pytest
from django.db.models import Sum

from alerts.targets import callback_address_problem
from batches.models import Batch, BatchItem
from jobs.models import LlmJob
from llmops.queues import LLM_QUEUE
from metrics.models import JobCounter
from tests.batches.helpers import batch_body, item, submit_batch
from tests.conftest import Workers, make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"code", "message", "detail"}
    assert body["code"] == code, body
    return body


def post(client, body, **headers):
    return client.post("/api/v1/batches/", body, format="json", **headers)


# --- Submit -------------------------------------------------------------------------------------


def test_it_accepts_a_batch_and_points_at_its_status(alice_client):
    response = post(alice_client, batch_body([item("a"), item("b")]))
    assert response.status_code == 202
    body = response.json()
    assert body == {"id": body["id"], "status": "running", "status_url": body["status_url"]}
    assert body["status_url"] == f"/api/v1/batches/{body['id']}/"
    assert response["Location"].endswith(body["status_url"])

    shown = alice_client.get(body["status_url"]).json()
    assert shown == {
        "id": body["id"],
        "name": "summaries",
        "kind": "chat",
        "status": "running",
        "total": 2,
        "pending": 2,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "tags": [],
        "deadline": None,
        "cost_usd": "0.000000",
        "created_at": shown["created_at"],
        "finished_at": None,
    }


def test_identical_items_share_one_job(alice_client, alice):
    items = [item("a"), item("b"), item("a"), item("a", metadata={"n": 1}), item("b")]
    batch = submit_batch(alice_client, items)
    assert (batch.total, batch.jobs_total, batch.pending) == (5, 3, 5)
    rows = list(BatchItem.objects.filter(batch=batch).order_by("index"))
    assert [r.index for r in rows] == [0, 1, 2, 3, 4]
    assert rows[0].job_id == rows[2].job_id and rows[1].job_id == rows[4].job_id
    assert len({r.job_id for r in rows}) == 3
    assert [r.runs_job for r in rows] == [True, True, False, True, False]
    jobs = LlmJob.objects.filter(batch_items__batch=batch).distinct()
    assert jobs.count() == 3
    for job in jobs:
        assert job.user == alice and job.feature == "ticket-summary"
        assert job.model == "claude-haiku-4-5" and job.status == "queued"
        assert job.metadata["llmops_batch"] == {"id": str(batch.id)}
    marked = LlmJob.objects.get(id=rows[3].job_id)
    assert marked.metadata["n"] == 1


def test_one_bad_item_refuses_the_batch_naming_every_bad_index_and_writes_nothing(alice_client):
    counters = list(JobCounter.objects.values_list("feature", "status", "jobs"))
    items = [
        item("fine"),
        item("bad", messages=[{"role": "assistant", "content": "hi"}]),
        item("fine too"),
        item("too long", max_tokens=10_000_000),
        item("not mine", feature="other"),
        item("reserved", metadata={"llmops_batch": "x"}),
    ]
    body = assert_error(post(alice_client, batch_body(items)), 400, "invalid_items")
    detail = body["detail"]
    assert detail["indexes"] == [1, 3, 4, 5]
    assert [(e["index"], e["code"]) for e in detail["errors"]] == [
        (1, "invalid_messages"),
        (3, "invalid_max_tokens"),
        (4, "unknown_field"),
        (5, "invalid_metadata"),
    ]
    assert detail["errors_truncated"] is False
    assert "4 of 6 items" in body["message"]
    assert not Batch.objects.exists() and not BatchItem.objects.exists()
    assert not LlmJob.objects.exists()
    assert list(JobCounter.objects.values_list("feature", "status", "jobs")) == counters


def test_every_bad_index_is_named_however_many(alice_client):
    items = [item(f"n{i}", max_tokens=0) for i in range(150)] + [item("fine")]
    detail = assert_error(post(alice_client, batch_body(items)), 400, "invalid_items")["detail"]
    assert detail["indexes"] == list(range(150))
    assert len(detail["errors"]) == 100 and detail["errors_truncated"] is True


BATCH_MISTAKES = [
    ({"model": "gpt-nope"}, "unknown_model", "model"),
    ({"feature": "Not A Slug"}, "invalid_feature", "feature"),
    ({"items": []}, "invalid_items", "items"),
    ({"items": "many"}, "invalid_items", "items"),
    ({"allow_failures": "yes"}, "invalid_allow_failures", "allow_failures"),
    ({"name": 7}, "invalid_name", "name"),
    ({"callback_url": "ftp://example.com/hook?token=s3cret"}, "invalid_callback_url", None),
    ({"callback_url": "http://10.1.2.3/hook?token=s3cret"}, "invalid_callback_url", None),
    ({"callback_url": "http://localhost:9/hook?token=s3cret"}, "invalid_callback_url", None),
    ({"callback_url": "http://[::1/hook?token=s3cret"}, "invalid_callback_url", None),
    ({"callback_url": "http://exa mple.com/?token=s3cret"}, "invalid_callback_url", None),
]


def test_a_mistake_in_the_batch_itself_is_one_error(alice_client, settings):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = False
    for change, code, field in BATCH_MISTAKES:
        body = assert_error(post(alice_client, {**batch_body([item("a")]), **change}), 400, code)
        assert body["detail"]["field"] == (field or "callback_url")
        # The URL may hold a secret: no message repeats it.
        assert "s3cret" not in str(body)
    assert not LlmJob.objects.exists() and not Batch.objects.exists()


def test_unknown_fields_and_too_many_items_are_refused(alice_client, settings):
    assert_error(post(alice_client, batch_body([item()], colour="red")), 400, "unknown_field")
    settings.LLM_BATCH_MAX_ITEMS = 3
    body = assert_error(post(alice_client, batch_body([item()] * 4)), 400, "too_many_items")
    assert body["detail"]["maximum"] == 3
    assert post(alice_client, batch_body([item()] * 3)).status_code == 202


def test_a_public_callback_url_is_kept(alice_client, settings):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = False
    url = "https://hooks.example.com/batches?token=s3cret"
    batch = submit_batch(alice_client, [item()], callback_url=url)
    assert batch.callback_url == url
    assert batch.callback_redacted == "hooks.example.com/…"


def test_its_body_limit_is_its_own_setting(alice_client, settings):
    settings.LLM_MAX_REQUEST_BYTES = 4096
    settings.LLM_BATCH_MAX_REQUEST_BYTES = 64 * 1024
    items = [item(f"ticket {i}: " + "x" * 200) for i in range(100)]  # ~30 KB: over the job limit
    assert post(alice_client, batch_body(items)).status_code == 202
    settings.LLM_BATCH_MAX_REQUEST_BYTES = 8192
    body = assert_error(post(alice_client, batch_body(items)), 413, "request_too_large")
    assert body["detail"] == {"limit_bytes": 8192}


def test_a_repeated_idempotency_key_returns_the_first_batch(alice_client):
    body = batch_body([item("a"), item("b")])
    first = post(alice_client, body, HTTP_IDEMPOTENCY_KEY="k-1")
    again = post(alice_client, body, HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    assert Batch.objects.count() == 1 and LlmJob.objects.count() == 2
    other = batch_body([item("a"), item("c")])
    conflict = assert_error(
        post(alice_client, other, HTTP_IDEMPOTENCY_KEY="k-1"), 409, "idempotency_conflict"
    )
    assert conflict["detail"] == {"batch_id": first.json()["id"]}


@pytest.mark.django_db(transaction=True)
def test_every_job_is_on_the_llm_queue_after_commit(prices, alice_client):
    batch = submit_batch(alice_client, [item(f"n{i}") for i in range(30)] + [item("n0")])
    jobs = list(LlmJob.objects.filter(batch_items__batch=batch, batch_items__runs_job=True))
    assert len(jobs) == 30
    queue = django_rq.get_queue(LLM_QUEUE)
    assert sorted(queue.job_ids) == sorted(j.rq_job_id for j in jobs)
    rq_job = queue.fetch_job(jobs[0].rq_job_id)
    assert rq_job.args == (str(jobs[0].id),)
    assert rq_job.func_name == "jobs.tasks.run_llm_job"
    assert rq_job.description == f"llm job {jobs[0].id}"
    assert all(j.enqueued_at is not None for j in jobs)
    counted = JobCounter.objects.filter(feature="ticket-summary", status="queued")
    assert counted.aggregate(n=Sum("jobs"))["n"] == 30


# --- Reading ------------------------------------------------------------------------------------


def test_only_the_owner_and_staff_see_a_batch(alice_client, bob_client, client):
    batch = submit_batch(alice_client, [item()])
    for path in (f"/api/v1/batches/{batch.id}/", f"/api/v1/batches/{batch.id}/jobs/"):
        assert_error(bob_client.get(path), 404, "batch_not_found")
    assert_error(bob_client.post(f"/api/v1/batches/{batch.id}/cancel/"), 404, "batch_not_found")
    assert_error(bob_client.get("/api/v1/batches/not-a-uuid/"), 404, "batch_not_found")
    assert bob_client.get("/api/v1/batches/").json()["count"] == 0
    # Staff status alone opens nothing of another user's: the model permissions do.
    client.force_login(make_user("sid", is_staff=True))
    assert_error(client.get(f"/api/v1/batches/{batch.id}/"), 404, "batch_not_found")
    client.force_login(make_user("sam", "view_batch", is_staff=True))
    assert client.get(f"/api/v1/batches/{batch.id}/").status_code == 200
    assert client.get(f"/api/v1/batches/{batch.id}/jobs/").status_code == 200
    assert_error(client.post(f"/api/v1/batches/{batch.id}/cancel/"), 404, "batch_not_found")
    assert Batch.objects.get(id=batch.id).status == "running"


def test_it_lists_the_callers_batches_newest_first(alice_client, bob_client):
    first = submit_batch(alice_client, [item("a")], name="first")
    second = submit_batch(alice_client, [item("b")], name="second")
    submit_batch(bob_client, [item("c")])
    body = alice_client.get("/api/v1/batches/?page_size=1").json()
    assert body["count"] == 2 and body["next"]
    assert [b["id"] for b in body["results"]] == [str(second.id)]
    row = body["results"][0]
    assert set(row) == {
        "id", "name", "kind", "status", "total", "pending", "completed", "failed", "cancelled",
        "created_at", "finished_at", "tags", "deadline",
    }  # fmt: skip
    rest = alice_client.get("/api/v1/batches/?page=2&page_size=1").json()["results"]
    assert [b["id"] for b in rest] == [str(first.id)]
    assert alice_client.get("/api/v1/batches/?status=completed").json()["count"] == 0
    assert_error(alice_client.get("/api/v1/batches/?status=nope"), 400, "invalid_filter")


def test_its_jobs_page_in_item_order_with_the_items_they_run(alice_client):
    batch = submit_batch(alice_client, [item("a"), item("b"), item("a"), item("c")])
    body = alice_client.get(f"/api/v1/batches/{batch.id}/jobs/?page_size=2").json()
    assert body["count"] == 3 and body["next"]
    first, second = body["results"]
    assert first["items"] == [0, 2] and second["items"] == [1]
    assert {"id", "status", "output", "usage", "cost_usd", "error", "items"} <= set(first)
    third = alice_client.get(f"/api/v1/batches/{batch.id}/jobs/?page=2&page_size=2").json()
    assert [j["items"] for j in third["results"]] == [[3]]
    queued = alice_client.get(f"/api/v1/batches/{batch.id}/jobs/?status=queued").json()
    assert queued["count"] == 3
    assert alice_client.get(f"/api/v1/batches/{batch.id}/jobs/?status=failed").json()["count"] == 0


# --- Cancel -------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_every_waiting_job_in_the_background(prices, alice_client):
    batch = submit_batch(alice_client, [item(f"n{i}") for i in range(12)] + [item("n1")])
    response = alice_client.post(f"/api/v1/batches/{batch.id}/cancel/")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert response.json()["finished_at"] is None  # its jobs are cancelled in the background
    Workers("default").drain()
    batch.refresh_from_db()
    assert (batch.status, batch.pending, batch.cancelled, batch.total) == ("cancelled", 0, 13, 13)
    assert batch.finished_at is not None and batch.jobs_cancelled_at is not None
    assert set(LlmJob.objects.values_list("status", flat=True)) == {"cancelled"}
    # Cancelling again changes nothing; a finished batch cannot be cancelled.
    again = alice_client.post(f"/api/v1/batches/{batch.id}/cancel/")
    assert_error(again, 409, "not_cancellable")
    # The llm worker then finds nothing to run.
    Workers().drain()
    assert set(LlmJob.objects.values_list("attempts", flat=True)) == {0}


def test_cancel_twice_is_harmless(alice_client):
    batch = submit_batch(alice_client, [item()])
    assert alice_client.post(f"/api/v1/batches/{batch.id}/cancel/").status_code == 200
    again = alice_client.post(f"/api/v1/batches/{batch.id}/cancel/")
    assert again.status_code == 200 and again.json()["status"] == "cancelled"


CALLBACK_ADDRESSES = [
    ("http://10.0.0.7/hook", True),
    ("http://169.254.169.254/latest/meta-data", True),
    ("http://[::1]:8000/", True),
    ("http://localhost/", True),
    ("http://printer.localhost/", True),
    ("https://93.184.216.34/hook", False),
    ("https://hooks.example.com/hook", False),  # a name: looked up when it goes out
]


def test_callback_addresses_on_our_own_networks_are_refused():
    for url, refused in CALLBACK_ADDRESSES:
        assert bool(callback_address_problem(url, resolve=False)) is refused, url
