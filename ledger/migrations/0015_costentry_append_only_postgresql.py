"""The ledger's append-only rule on PostgreSQL: the same refusal as migration 0003's MariaDB/MySQL
triggers, with the same message and trigger names.

- ``UPDATE`` and ``DELETE`` on ``ledger_costentry`` are always refused (SQLSTATE 42501,
  insufficient_privilege, which psycopg raises as a ``DatabaseError``).
- Django's whole-database wipe (``flush``, the teardown of every transactional test) needs no
  escape hatch here: on PostgreSQL it runs ``TRUNCATE``, which fires no row trigger.
- The one escape hatch is PostgreSQL's own: ``SET session_replication_role = replica`` (a
  superuser's setting, the one ``pg_restore --disable-triggers`` uses) fires no ordinary
  trigger for the session. Whoever types it gives up the foreign-key checks too (they are
  triggers as well): wipe the whole table or nothing.

As on MariaDB, the triggers guard against accidents, not against an administrator: ``TRUNCATE``,
``DROP TABLE`` and ``DROP TRIGGER`` pass. A database user without ``UPDATE``/``DELETE``/
``TRUNCATE`` on the table (and not its owner) makes the ledger tamper-proof
(docs/databases.md).

A new migration rather than a branch of 0003: migration 0005's backfill ``UPDATE``s the ledger,
which these triggers would refuse; created after it, they need no dropping around it.
"""

from typing import Any

from django.db import migrations

TABLE = "ledger_costentry"
MESSAGE = "ledger_costentry is append-only"
FUNCTION = "ledger_costentry_append_only"
UPDATE_TRIGGER = "ledger_costentry_no_update"
DELETE_TRIGGER = "ledger_costentry_no_delete"

CREATE_TRIGGERS = [
    f"""
    CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '{MESSAGE}' USING ERRCODE = 'insufficient_privilege';
    END
    $$
    """,
    f"""
    CREATE TRIGGER {UPDATE_TRIGGER} BEFORE UPDATE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()
    """,
    f"""
    CREATE TRIGGER {DELETE_TRIGGER} BEFORE DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()
    """,
]

DROP_TRIGGERS = [
    f"DROP TRIGGER IF EXISTS {UPDATE_TRIGGER} ON {TABLE}",
    f"DROP TRIGGER IF EXISTS {DELETE_TRIGGER} ON {TABLE}",
    f"DROP FUNCTION IF EXISTS {FUNCTION}()",
]


def create_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in DROP_TRIGGERS + CREATE_TRIGGERS:
        schema_editor.execute(statement, params=None)


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in DROP_TRIGGERS:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0014_tool_call_rows"),
    ]

    operations = [
        migrations.RunPython(create_triggers, drop_triggers, elidable=False),
    ]
