"""The data migration that turns DRF ``authtoken`` tokens into keys: on a database from before
keys (its ``authtoken_token`` table, with rows), each token becomes a key of every scope,
hashed, the plaintext row is deleted, and the client's ``Token <key>`` (and ``Bearer``) keeps
working. A new database has no such table and the migration does nothing."""

import importlib
import secrets
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone
from rest_framework.test import APIClient

from keys.hashing import secret_hash
from keys.models import ApiKey, ApiKeySecret
from tests.conftest import job_body

pytestmark = pytest.mark.django_db(transaction=True)

MIGRATION = importlib.import_module("keys.migrations.0002_import_drf_tokens")
# As rest_framework.authtoken's migrations 0001-0004 left it.
# The column named key is quoted for the database at hand (MariaDB's backticks, PostgreSQL's
# double quotes); PostgreSQL names datetime(6) timestamp with time zone.
CREATE_TABLE = """
CREATE TABLE authtoken_token (
    {key} varchar(40) NOT NULL PRIMARY KEY,
    created {datetime} NOT NULL,
    user_id integer NOT NULL UNIQUE,
    CONSTRAINT authtoken_token_user_id_fk FOREIGN KEY (user_id) REFERENCES auth_user (id)
)
"""


def _run_migration() -> None:
    apps = MigrationLoader(connection).project_state(("keys", "0002_import_drf_tokens")).apps
    with connection.schema_editor() as editor:
        MIGRATION.import_drf_tokens(apps, editor)


@pytest.fixture
def drf_tokens_table() -> Any:
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS authtoken_token")
        cursor.execute(
            CREATE_TABLE.format(
                key=connection.ops.quote_name("key"),
                datetime="timestamp with time zone"
                if connection.vendor == "postgresql"
                else "datetime(6)",
            )
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS authtoken_token")


def test_migrated_tokens_keep_working_hashed_with_every_scope(
    alice: Any, bob: Any, drf_tokens_table: None, prices: None
) -> None:
    tokens = {alice.id: secrets.token_hex(20), bob.id: secrets.token_hex(20)}
    with connection.cursor() as cursor:
        for user_id, token in tokens.items():
            cursor.execute(
                f"INSERT INTO authtoken_token ({connection.ops.quote_name('key')}, created,"
                " user_id) VALUES (%s, %s, %s)",
                [token, timezone.now(), user_id],
            )
    _run_migration()

    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0  # the plaintext is gone
    for user_id, token in tokens.items():
        key = ApiKey.objects.get(user_id=user_id)
        assert key.name == "migrated token" and key.prefix == token[:8]
        assert key.scopes == ["jobs:read", "jobs:write", "costs:read", "admin"]
        assert ApiKeySecret.objects.get(key=key).secret_hash == secret_hash(token) != token
    legacy = APIClient(HTTP_AUTHORIZATION=f"Token {tokens[alice.id]}")
    assert legacy.get("/api/v1/me/").json()["username"] == "alice"
    submitted = legacy.post("/api/v1/jobs/", job_body(), format="json")
    assert submitted.status_code == 202, submitted.content
    bearer = APIClient(HTTP_AUTHORIZATION=f"Bearer {tokens[bob.id]}")
    assert bearer.get("/api/v1/me/").json()["username"] == "bob"


def test_a_database_without_drf_tokens_is_left_as_it_is(alice: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS authtoken_token")
    _run_migration()
    assert not ApiKey.objects.exists()
