"""The ledger is append-only at every level: the model, its QuerySet, and (on MariaDB/MySQL and
PostgreSQL) the database itself. And the admin's list never loads the large columns it does not
show."""

from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from jobs.models import LlmJob
from ledger.models import CostEntry, LedgerIsAppendOnly

on_a_server = pytest.mark.skipif(
    connection.vendor not in ("mysql", "postgresql"),
    reason="the append-only triggers exist on MariaDB/MySQL (migration ledger 0003) and "
    "PostgreSQL (0015) only",
)
on_mysql = pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB/MySQL's escape hatch")
on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL's escape hatch"
)

CHANGELIST = "/admin/ledger/costentry/"


def make_job(user: Any) -> LlmJob:
    return LlmJob.objects.create(
        user=user,
        feature="email-classify",
        model="claude-haiku-4-5",
        messages=[{"role": "user", "content": "a long prompt " * 50}],
        max_tokens=5,
        request_fingerprint="fp",
    )


def make_entry(job: LlmJob, *, attempt: int = 1, **fields: Any) -> CostEntry:
    return CostEntry.objects.create(
        job=job,
        attempt=attempt,
        feature=job.feature,
        model=job.model,
        outcome=CostEntry.Outcome.SUCCESS,
        cost_usd=Decimal("0.001250"),
        **fields,
    )


@pytest.fixture
def entry(alice: Any) -> CostEntry:
    return make_entry(make_job(alice))


def raw(sql: str) -> None:
    # A savepoint, so the refused statement leaves the test's transaction usable.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)


def stored_cost(entry: CostEntry) -> Decimal:
    return CostEntry.objects.values_list("cost_usd", flat=True).get(id=entry.id)


# The ORM


def test_it_refuses_queryset_update(entry):
    with pytest.raises(LedgerIsAppendOnly, match="append-only"):
        CostEntry.objects.filter(id=entry.id).update(cost_usd=0)
    with pytest.raises(LedgerIsAppendOnly):
        CostEntry.objects.update(cost_usd=0)
    assert stored_cost(entry) == Decimal("0.001250")


def test_it_refuses_bulk_update(entry):
    entry.cost_usd = Decimal("0")
    with pytest.raises(LedgerIsAppendOnly):
        CostEntry.objects.bulk_update([entry], ["cost_usd"])
    assert stored_cost(entry) == Decimal("0.001250")


def test_it_refuses_queryset_delete(entry):
    with pytest.raises(LedgerIsAppendOnly):
        CostEntry.objects.filter(id=entry.id).delete()
    with pytest.raises(LedgerIsAppendOnly):
        CostEntry.objects.all().delete()
    assert CostEntry.objects.filter(id=entry.id).exists()


def test_it_refuses_instance_delete_and_save(entry):
    with pytest.raises(LedgerIsAppendOnly):
        entry.delete()
    entry.cost_usd = Decimal("9")
    with pytest.raises(LedgerIsAppendOnly):
        entry.save()
    assert stored_cost(entry) == Decimal("0.001250")


def test_the_error_is_a_programming_error_not_an_application_error():
    from api.errors import ApplicationError

    assert not issubclass(LedgerIsAppendOnly, ApplicationError)


def test_it_still_appends_rows(alice):
    job = make_job(alice)
    make_entry(job, attempt=1)
    CostEntry.objects.bulk_create(
        [
            CostEntry(job=job, attempt=2, feature=job.feature, model=job.model, outcome="success"),
            CostEntry(job=job, attempt=3, feature=job.feature, model=job.model, outcome="success"),
        ]
    )
    assert CostEntry.objects.filter(job=job).count() == 3


# The database


@on_a_server
def test_the_database_refuses_a_raw_update(entry):
    with pytest.raises(DatabaseError, match="ledger_costentry is append-only"):
        raw("UPDATE ledger_costentry SET cost_usd = 0")
    assert stored_cost(entry) == Decimal("0.001250")


@on_a_server
def test_the_database_refuses_a_raw_delete(entry):
    with pytest.raises(DatabaseError, match="ledger_costentry is append-only"):
        raw("DELETE FROM ledger_costentry")
    assert CostEntry.objects.filter(id=entry.id).exists()


@on_a_server
def test_the_database_still_accepts_an_insert(entry):
    # A copy of the row as the next attempt, every column spelled from the model so a column
    # added later is copied too.
    copied = [
        f.column for f in CostEntry._meta.concrete_fields if f.column not in ("id", "attempt")
    ]
    new_id = (
        "gen_random_uuid()" if connection.vendor == "postgresql" else "REPLACE(UUID(), '-', '')"
    )
    raw(
        f"INSERT INTO ledger_costentry (id, attempt, {', '.join(copied)})"
        f" SELECT {new_id}, attempt + 1, {', '.join(copied)}"
        f" FROM ledger_costentry WHERE id = '{entry.id.hex}'"
    )
    assert CostEntry.objects.filter(job_id=entry.job_id).count() == 2


@on_mysql
def test_a_delete_goes_through_only_with_foreign_key_checks_off(entry):
    # The documented escape hatch, the one Django's flush uses.
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
        raw("DELETE FROM ledger_costentry")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET FOREIGN_KEY_CHECKS = 1")
    assert not CostEntry.objects.filter(id=entry.id).exists()


@on_mysql
def test_an_update_is_refused_even_with_foreign_key_checks_off(entry):
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
        with pytest.raises(DatabaseError, match="ledger_costentry is append-only"):
            raw("UPDATE ledger_costentry SET cost_usd = 0")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET FOREIGN_KEY_CHECKS = 1")
    assert stored_cost(entry) == Decimal("0.001250")


@on_postgresql
def test_the_database_refuses_a_raw_delete_by_a_joined_statement(entry):
    # PostgreSQL's DELETE ... USING: every form of DELETE fires the row trigger.
    with pytest.raises(DatabaseError, match="ledger_costentry is append-only"):
        raw(
            "DELETE FROM ledger_costentry USING jobs_llmjob"
            " WHERE jobs_llmjob.id = ledger_costentry.job_id"
        )
    assert CostEntry.objects.filter(id=entry.id).exists()


@on_postgresql
def test_a_delete_goes_through_only_with_replication_role_replica(entry):
    # PostgreSQL's escape hatch (a superuser's session setting, pg_restore --disable-triggers').
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET session_replication_role = replica")
        raw("DELETE FROM ledger_costentry")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET session_replication_role = DEFAULT")
    assert not CostEntry.objects.filter(id=entry.id).exists()
    make_entry(entry.job, attempt=2)
    with pytest.raises(DatabaseError, match="ledger_costentry is append-only"):
        raw("DELETE FROM ledger_costentry")  # the role back to normal, the trigger fires again


@pytest.mark.django_db(transaction=True)
def test_djangos_flush_still_empties_the_ledger(alice):
    # Transactional tests end with this flush: the triggers must let it through.
    make_entry(make_job(alice))
    call_command("flush", interactive=False, verbosity=0)
    assert not CostEntry.objects.exists()


# The admin


def columns_selected(queries: list[dict[str, str]]) -> str:
    return " ".join(q["sql"] for q in queries).replace("`", "").replace('"', "")


@pytest.fixture
def admin_client(django_user_model: Any) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_changelist_does_not_load_large_columns(admin_client, alice):
    make_entry(make_job(alice), error_message="Traceback ... " * 500)
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(CHANGELIST)
    assert page.status_code == 200
    sql = columns_selected(queries.captured_queries)
    assert "ledger_costentry.cost_usd" in sql  # the list query was captured
    assert "ledger_costentry.error_message" not in sql
    for column in ["messages", "system", "metadata", "output_text", "error_message"]:
        assert f"jobs_llmjob.{column}" not in sql, column


def test_the_changelist_makes_no_query_per_row(admin_client, alice):
    make_entry(make_job(alice))
    with CaptureQueriesContext(connection) as few:
        assert admin_client.get(CHANGELIST).status_code == 200
    for _ in range(4):
        make_entry(make_job(alice))
    with CaptureQueriesContext(connection) as many:
        assert admin_client.get(CHANGELIST).status_code == 200
    assert len(many.captured_queries) == len(few.captured_queries)


def test_the_detail_page_still_shows_the_error_message(admin_client, alice):
    entry = make_entry(make_job(alice), error_message="upstream said no")
    page = admin_client.get(f"{CHANGELIST}{entry.pk}/change/")
    assert page.status_code == 200
    assert "upstream said no" in page.content.decode()
