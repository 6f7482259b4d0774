"""Make the ledger table append-only in the database itself (MariaDB/MySQL only).

``CostEntryQuerySet`` already refuses ``update()`` and ``delete()`` in the ORM; these triggers
also refuse raw SQL, a hand-typed fix in a database shell, or a future code path that bypasses
the model.

- ``UPDATE`` on ``ledger_costentry`` is always refused.
- ``DELETE`` is refused unless the session has turned foreign-key checks off
  (``SET FOREIGN_KEY_CHECKS = 0``). That is the one escape hatch, and it exists because Django's
  own whole-database wipe, ``flush`` (``manage.py flush`` and the teardown of every transactional
  test), runs ``SET FOREIGN_KEY_CHECKS = 0; DELETE FROM ...`` and offers no hook to set anything
  else first. A user-defined session variable (``SET @ledger_maintenance = 1``) would be a more
  explicit switch, but ``flush`` cannot set it, so every transactional test would fail. The
  application never turns foreign-key checks off (Django does so only in ``flush`` and
  ``loaddata``, and ``loaddata`` never deletes), so in practice the hatch opens only for a whole
  database wipe or for a person who deliberately typed it. Whoever uses it by hand also gives up
  the foreign-key check on rows that point at the deleted ones: wipe the whole table or nothing.

The triggers guard against accidents, not against an administrator: ``TRUNCATE``, ``DROP TABLE``
and ``DROP TRIGGER`` fire no trigger. To make the ledger tamper-proof, run the application with a
database user that holds no ``UPDATE``/``DELETE`` (and no ``DROP``/``TRIGGER``) privilege on it.

SQLite gets no triggers: it has no session variable a trigger could read, so it could not tell
Django's ``flush`` from any other ``DELETE``. The ORM guard still applies there.
"""

from typing import Any

from django.db import migrations

TABLE = "ledger_costentry"
MESSAGE = "ledger_costentry is append-only"

UPDATE_TRIGGER = "ledger_costentry_no_update"
DELETE_TRIGGER = "ledger_costentry_no_delete"

CREATE_TRIGGERS = [
    f"""
    CREATE TRIGGER {UPDATE_TRIGGER} BEFORE UPDATE ON {TABLE}
    FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{MESSAGE}'
    """,
    # @@foreign_key_checks reads the session's value: 0 only where the session turned it off.
    f"""
    CREATE TRIGGER {DELETE_TRIGGER} BEFORE DELETE ON {TABLE}
    FOR EACH ROW
    BEGIN
        IF @@foreign_key_checks <> 0 THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{MESSAGE}';
        END IF;
    END
    """,
]

DROP_TRIGGERS = [f"DROP TRIGGER IF EXISTS {name}" for name in (UPDATE_TRIGGER, DELETE_TRIGGER)]


def create_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "mysql":
        return
    for statement in DROP_TRIGGERS + CREATE_TRIGGERS:
        schema_editor.execute(statement, params=None)


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "mysql":
        return
    for statement in DROP_TRIGGERS:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0002_seed_claude_prices"),
    ]

    operations = [
        migrations.RunPython(create_triggers, drop_triggers, atomic=False, elidable=False),
    ]
