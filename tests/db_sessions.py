"""Database sessions as the tests see them on MariaDB/MySQL and PostgreSQL alike: which one is
this connection's, which others use a database, and killing one (as a database restart or an
administrator would)."""

from typing import Any

from django.db import connection

__all__ = ["kill_own_session", "kill_session", "other_sessions", "session_id"]


def session_id(cursor: Any) -> int:
    """The server's id of the cursor's connection (MySQL's CONNECTION_ID(), PostgreSQL's pid)."""
    if connection.vendor == "postgresql":
        cursor.execute("SELECT pg_backend_pid()")
    else:
        cursor.execute("SELECT CONNECTION_ID()")
    return int(cursor.fetchone()[0])


def other_sessions(cursor: Any, database: str) -> list[int]:
    """The sessions on ``database`` other than the cursor's own."""
    if connection.vendor == "postgresql":
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [database],
        )
    else:
        cursor.execute(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID()",
            [database],
        )
    return [int(row[0]) for row in cursor.fetchall()]


def kill_session(cursor: Any, session: int) -> None:
    if connection.vendor == "postgresql":
        cursor.execute("SELECT pg_terminate_backend(%s)", [session])
    else:
        cursor.execute(f"KILL CONNECTION {int(session)}")


def kill_own_session(cursor: Any) -> None:
    """The server drops the cursor's own connection under it (the statement itself may fail)."""
    if connection.vendor == "postgresql":
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    else:
        cursor.execute("KILL CONNECTION_ID()")
