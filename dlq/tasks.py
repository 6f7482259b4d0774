"""RQ entry points of the DLQ: load by id, call a service. No rule lives here.

``requeue_matching``, a staff bulk action, runs on the default queue.
"""

from dlq.services import bulk_requeue_run


def requeue_matching(bulk_id: int) -> str:
    return bulk_requeue_run(bulk_id=bulk_id)
