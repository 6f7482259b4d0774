"""A job's priority: ``high``, ``normal`` or ``low`` (issue 43), and where it puts the job on
the llm queue.

The llm queue is one RQ list that every llm worker takes from the front. Its order is kept as
three lanes, ``[high..., normal..., low...]``, by the push itself (``runtime/queue_order.py``,
a Lua script for every push to the llm queue, the scheduler's included): a high job goes
behind the high jobs already waiting (ahead of every normal one), a normal job ahead of the
waiting low ones, a low job at the back. The lane is read from the RQ job id, which the row
already keeps (``rq_job_id``): ``h-<hex>`` high, ``l-<hex>`` low, ``<hex>`` normal, so a push
needs no lookup.

The rate limiter admits by the same order: a high job waits in a line of its own with
``LLM_PRIORITY_WEIGHT_FACTOR`` times its feature's weight, a low one with that much less
(ratelimits/services.py). Starvation bound: the reconciler moves a low job that has waited
``LLM_PRIORITY_MAX_WAIT_SECONDS`` (600) to the front of the queue (``promote_starved_low_jobs``).

A job that does not say takes its feature policy's ``default_priority``; a feature in
``LLM_PRIORITY_FEATURES`` (the setting from before priorities) defaults to ``high``.
"""

import uuid

__all__ = [
    "HIGH",
    "LOW",
    "NORMAL",
    "PRIORITIES",
    "PRIORITY_CHOICES",
    "rq_job_id_for",
    "priority_of_rq_job_id",
]

HIGH, NORMAL, LOW = "high", "normal", "low"
PRIORITIES = (HIGH, NORMAL, LOW)
"""In the order jobs leave the queue."""
PRIORITY_CHOICES = [(HIGH, "High"), (NORMAL, "Normal"), (LOW, "Low")]
"""Of every priority field: the models' and the API's (one enum in the OpenAPI schema)."""

_PREFIX = {HIGH: "h-", NORMAL: "", LOW: "l-"}


def rq_job_id_for(priority: str) -> str:
    """A fresh RQ job id in the priority's lane (``h-``/``l-`` prefix; none for normal)."""
    return _PREFIX.get(priority, "") + uuid.uuid4().hex


def priority_of_rq_job_id(rq_job_id: str) -> str:
    if rq_job_id.startswith("h-"):
        return HIGH
    if rq_job_id.startswith("l-"):
        return LOW
    return NORMAL
