"""The MySQL/MariaDB backend (``DATABASE_URL=mysql://``): django-prometheus's, with the server's
facts read once per process instead of once per thread.

Django reads the server's version, ``sql_mode``, default engine and the like
(``mysql_server_data``) once per connection object, and it opens a second, temporary connection
to do so when the object has none open yet. A connection object belongs to one thread, and the
threaded workers run every job on a thread of its own (runtime/threaded_worker.py), with a
heartbeat thread beside it, as the ASGI web process runs a request's database work: each of
them paid a connection and a query for facts that stay the same while the process runs (the
first UUID lookup asks whether the server is MariaDB). Here they are read once per server and
shared. A server upgraded under a running process keeps its old facts until the process restarts,
as Django's own version check does.

django-prometheus also builds a new cursor class for every cursor; the class of each alias is
built once here.
"""

import threading
from typing import Any

from django.utils.functional import cached_property
from django_prometheus.db.backends.mysql import base as prometheus_base
from django_prometheus.db.common import ExportingCursorWrapper

__all__ = ["DatabaseFeatures", "DatabaseWrapper", "server_data_reads"]

_server_data: dict[tuple[str, str], dict[str, Any]] = {}
_cursor_classes: dict[tuple[type, str, str], type] = {}
_lock = threading.Lock()
server_data_reads = 0
"""How many times this process read the server's facts (one per server; tests read it)."""


class DatabaseFeatures(prometheus_base.DatabaseFeatures):
    """The same features as Django's."""


class DatabaseWrapper(prometheus_base.DatabaseWrapper):
    @cached_property
    def mysql_server_data(self) -> dict[str, Any]:
        global server_data_reads
        server = (str(self.settings_dict["HOST"]), str(self.settings_dict["PORT"]))
        data = _server_data.get(server)
        if data is None:
            data = super().mysql_server_data
            with _lock:
                server_data_reads += 1
                _server_data.setdefault(server, data)
        return data

    def create_cursor(self, name: Any = None) -> Any:
        key = (self.CURSOR_CLASS, self.alias, self.vendor)
        cursor_class = _cursor_classes.get(key)
        if cursor_class is None:
            cursor_class = _cursor_classes.setdefault(
                key, ExportingCursorWrapper(self.CURSOR_CLASS, self.alias, self.vendor)
            )
        return cursor_class(self.connection.cursor())
