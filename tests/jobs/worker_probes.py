"""RQ job functions a real worker process runs for tests/jobs/test_threaded_worker.py (it imports
them by name): they report what the job saw from inside the worker."""

import threading
import time
from typing import Any

from django.db import connection

from runtime import db_connections
from tests.db_sessions import session_id


def hold_a_database_connection(seconds: float) -> dict[str, Any]:
    """Opens this thread's database connection, keeps it ``seconds``, says which one it was."""
    with connection.cursor() as cursor:
        connection_id = session_id(cursor)
    in_use = db_connections.slots_in_use()
    time.sleep(seconds)
    return {
        "connection_id": int(connection_id),
        "thread": threading.current_thread().name,
        "slots_in_use": in_use,
    }
