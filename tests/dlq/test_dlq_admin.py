"""The Django admin as the DLQ console: list, detail, and each action behind its own permission."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from dlq.models import BulkRequeue, FailureRecord
from jobs.models import LlmJob
from llmops.queues import DEFAULT_QUEUE
from tests.conftest import Workers, make_user, submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]

CHANGELIST = "/admin/dlq/failurerecord/"
MATCHING = "/admin/dlq/failurerecord/requeue-matching/"


def staff(username: str, *perms: str) -> Client:
    user = make_user(username, "view_failurerecord", *perms, is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def dead_jobs(client, workers, fake_provider, fault: str, count: int = 1, **overrides):
    fake_provider.faults({fault: 1.0})
    jobs = [submit(client, **overrides) for _ in range(count)]
    workers.drain()
    fake_provider.reset()
    return [LlmJob.objects.get(id=j.id) for j in jobs]


@pytest.fixture
def dead_job(alice_client, workers, fake_provider):
    (job,) = dead_jobs(alice_client, workers, fake_provider, "403")
    return job


def test_the_list_shows_what_an_operator_needs(dead_job):
    page = staff("olga").get(CHANGELIST)
    assert page.status_code == 200
    html = page.content.decode()
    for text in ["CRITICAL", "permission_denied", "email-classify", "claude-sonnet-4-6", "403"]:
        assert text in html
    assert "cost so far" in html and "age" in html


def test_the_list_makes_no_n_plus_one_queries(alice_client, workers, fake_provider):
    client = staff("olga")
    dead_jobs(alice_client, workers, fake_provider, "400", count=2)
    # The first admin page of a process fills Django's content-type cache (one query): emptied
    # before each count, whichever test ran before in this worker.
    ContentType.objects.clear_cache()
    with CaptureQueriesContext(connection) as few:
        assert client.get(CHANGELIST).status_code == 200
    dead_jobs(alice_client, workers, fake_provider, "400", count=6)
    ContentType.objects.clear_cache()
    with CaptureQueriesContext(connection) as many:
        assert client.get(CHANGELIST).status_code == 200
    assert len(many.captured_queries) == len(few.captured_queries)


def test_the_list_never_loads_snapshots_messages_or_outputs(alice_client, workers, fake_provider):
    dead_jobs(alice_client, workers, fake_provider, "400", count=2)
    with CaptureQueriesContext(connection) as queries:
        assert staff("olga").get(CHANGELIST).status_code == 200
    selects = [q["sql"] for q in queries.captured_queries if "alerts_failurerecord" in q["sql"]]
    assert selects
    for sql in selects:
        for column in ["request_snapshot", "`message`", "`messages`", "output_text"]:
            assert column not in sql, sql


@pytest.mark.parametrize(
    "query",
    [
        "severity__exact=CRITICAL",
        "reason_code__exact=permission_denied",
        "job__feature=email-classify",
        "job__model=claude-sonnet-4-6",
        "http_status__exact=403",
        "attempts=1",
        "cost=zero",
        "age=1h",
        "state__exact=open",
    ],
)
def test_each_filter_finds_the_record(dead_job, query):
    page = staff("olga").get(f"{CHANGELIST}?{query}")
    assert page.status_code == 200
    assert str(dead_job.id) in page.content.decode(), query


def test_search_by_job_id_and_request_id(dead_job):
    client = staff("olga")
    record = FailureRecord.objects.get(job=dead_job)
    assert str(dead_job.id) in client.get(f"{CHANGELIST}?q={dead_job.id}").content.decode()
    assert str(dead_job.id) in client.get(f"{CHANGELIST}?q={record.request_id}").content.decode()
    assert str(dead_job.id) not in client.get(f"{CHANGELIST}?q=req_nothing").content.decode()
    words = record.message.split()[:3]
    assert words
    assert str(dead_job.id) in client.get(f"{CHANGELIST}?q={' '.join(words)}").content.decode()


def test_the_detail_shows_snapshot_error_timeline_and_total(alice_client, workers, fake_provider):
    fake_provider.faults({"529": 1.0})
    job = submit(alice_client)
    workers.drain()
    record = FailureRecord.objects.get(job=job)
    html = staff("olga").get(f"{CHANGELIST}{record.pk}/change/").content.decode()
    assert "Classify: please refund my order" in html  # the request snapshot
    assert "overloaded_error" in html and record.request_id in html  # the provider error
    assert html.count("<tr><td>") == 4  # one timeline row per attempt
    assert "error_response" in html and "retry delay" in html
    assert f"${job.cost_usd}" in html


def test_requeue_twice_runs_once_and_records_who(dead_job, workers, fake_provider):
    operator = staff("olga", "requeue_failurerecord")
    record = FailureRecord.objects.get(job=dead_job)
    payload = {"action": "requeue", "_selected_action": [record.pk]}
    assert b"Requeued 1 of 1" in operator.post(CHANGELIST, payload, follow=True).content
    assert b"Requeued 0 of 1" in operator.post(CHANGELIST, payload, follow=True).content
    workers.drain()
    dead_job.refresh_from_db()
    assert dead_job.status == "completed" and dead_job.attempts == 2
    assert fake_provider.stats()["requests"] == 1
    record.refresh_from_db()
    assert record.state == "requeued" and record.handled_by.username == "olga"
    detail = operator.get(f"{CHANGELIST}{record.pk}/change/").content.decode()
    assert "completed after 2 attempt(s)" in detail  # the record links to the outcome


def test_requeue_with_another_model(dead_job, workers):
    operator = staff("olga", "requeue_failurerecord", "requeue_other_model_failurerecord")
    record = FailureRecord.objects.get(job=dead_job)
    form = operator.post(
        CHANGELIST, {"action": "requeue_with_model", "_selected_action": [record.pk]}
    )
    assert form.status_code == 200 and b"claude-haiku-4-5" in form.content
    done = operator.post(
        CHANGELIST,
        {
            "action": "requeue_with_model",
            "_selected_action": [record.pk],
            "apply": "1",
            "model": "claude-haiku-4-5",
        },
        follow=True,
    )
    assert b"Requeued on claude-haiku-4-5 1 of 1" in done.content
    workers.drain()
    dead_job.refresh_from_db()
    assert dead_job.model == "claude-haiku-4-5" and dead_job.status == "completed"
    record.refresh_from_db()
    assert record.requeued_model == "claude-haiku-4-5"


def test_requeue_all_matching_requeues_exactly_the_filtered_set(
    alice_client, workers, fake_provider
):
    matching = dead_jobs(alice_client, workers, fake_provider, "400", count=3, feature="alpha")
    others = dead_jobs(alice_client, workers, fake_provider, "400", count=2, feature="beta")
    operator = staff("olga", "requeue_matching_failurerecord")
    assert b"requeue-matching" in operator.get(f"{CHANGELIST}?job__feature=alpha").content
    confirm = operator.get(f"{MATCHING}?job__feature=alpha")
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert '<strong id="matching-count">3</strong>' in html
    assert 'id="matching-estimate">$0.0' in html
    done = operator.post(f"{MATCHING}?job__feature=alpha", {"confirm": "yes"})
    bulk = BulkRequeue.objects.get()
    assert done.status_code == 302
    assert done["Location"] == f"/admin/dlq/bulkrequeue/{bulk.pk}/change/"
    # The request only recorded the selection: nothing is requeued until the default worker runs.
    assert (bulk.state, bulk.total, bulk.processed) == ("pending", 3, 0)
    assert not LlmJob.objects.filter(status="queued").exists()
    progress = operator.get(done["Location"]).content.decode()
    assert "Requeuing 3 job(s)" in progress and 'http-equiv="refresh"' in progress
    assert "follow its progress" in operator.get(CHANGELIST).content.decode()

    Workers(queue_name=DEFAULT_QUEUE).work_once()
    assert {j.id for j in LlmJob.objects.filter(status="queued")} == {j.id for j in matching}
    assert all(LlmJob.objects.get(id=j.id).status == "failed" for j in others)
    progress = operator.get(done["Location"]).content.decode()
    assert 'data-state="finished"' in progress and 'http-equiv="refresh"' not in progress
    assert 'value="3" max="3"' in progress
    assert "follow its progress" not in operator.get(CHANGELIST).content.decode()
    workers.drain()
    assert LlmJob.objects.filter(status="completed").count() == 3


def test_resolve_and_ignore_record_a_comment(alice_client, workers, fake_provider):
    first, second = dead_jobs(alice_client, workers, fake_provider, "400", count=2)
    operator = staff("rita", "resolve_failurerecord", "ignore_failurerecord")
    r1 = FailureRecord.objects.get(job=first)
    r2 = FailureRecord.objects.get(job=second)
    form = operator.post(CHANGELIST, {"action": "resolve", "_selected_action": [r1.pk]})
    assert b"Comment" in form.content
    operator.post(
        CHANGELIST,
        {"action": "resolve", "_selected_action": [r1.pk], "apply": "1", "comment": "bad prompt"},
    )
    operator.post(CHANGELIST, {"action": "ignore", "_selected_action": [r2.pk], "apply": "1"})
    r1.refresh_from_db()
    r2.refresh_from_db()
    assert (r1.state, r1.comment, r1.handled_by.username) == ("resolved", "bad prompt", "rita")
    assert r2.state == "ignored" and r2.handled_at is not None


@pytest.mark.parametrize(
    "action,perm",
    [
        ("requeue", "requeue_failurerecord"),
        ("requeue_with_model", "requeue_other_model_failurerecord"),
        ("resolve", "resolve_failurerecord"),
        ("ignore", "ignore_failurerecord"),
    ],
)
def test_each_action_is_refused_without_its_permission(dead_job, action, perm):
    others = [
        p
        for p in [
            "requeue_failurerecord",
            "requeue_other_model_failurerecord",
            "resolve_failurerecord",
            "ignore_failurerecord",
            "requeue_matching_failurerecord",
        ]
        if p != perm
    ]
    client = staff("vic", *others)
    record = FailureRecord.objects.get(job=dead_job)
    page = client.get(CHANGELIST).content.decode()
    assert f'value="{action}"' not in page
    client.post(
        CHANGELIST,
        {
            "action": action,
            "_selected_action": [record.pk],
            "apply": "1",
            "model": "claude-haiku-4-5",
        },
    )
    record.refresh_from_db()
    dead_job.refresh_from_db()
    assert record.state == "open" and dead_job.status == "failed"


def test_requeue_matching_is_refused_without_its_permission(dead_job):
    client = staff("vic", "requeue_failurerecord")
    assert b"requeue-matching" not in client.get(CHANGELIST).content
    assert client.get(MATCHING).status_code == 403
    client.post(MATCHING, {"confirm": "yes"})
    dead_job.refresh_from_db()
    assert dead_job.status == "failed"
    assert not BulkRequeue.objects.exists()


def test_other_admin_pages_open(dead_job):
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)
    for url in [
        "/admin/",
        "/admin/jobs/llmjob/",
        f"/admin/jobs/llmjob/{dead_job.pk}/change/",
        f"/admin/jobs/llmjob/?q={dead_job.pk}",
        "/admin/jobs/llmjob/?q=not-a-uuid",
        "/admin/ledger/costentry/",
        "/admin/ledger/modelprice/",
    ]:
        assert client.get(url).status_code == 200, url
