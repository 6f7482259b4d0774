"""Every transition of an LlmJob, one ``job_<verb>`` service each, and nowhere else: this
package, one module per family of transitions, its face re-exporting them (callers import
from ``jobs.services``).

    submit           -> queued                       job_submit
    queued|retrying  -> running                      job_claim
    running          -> completed                    job_complete
    running          -> retrying | failed            job_attempt_failed (retry service decides)
    running (lost)   -> retrying | failed            job_recover (the reconciler)
    queued|retrying  -> failed                       job_deadline_exceeded (not started in time)
    queued|retrying  -> cancelled                    job_cancel
    running          -> cancelled                    job_cancel(running=True) asks the worker,
                                                     whose job_cancel_running ends it
    failed           -> queued                       job_requeue (the DLQ)
    queued|retrying  -> (put on the queue again)     job_enqueue / job_enqueue_again
    queued|retrying  -> (on the feature's next model) job_fall_back (jobs/fallbacks.py decides;
                                                     job_attempt_failed moves a failed attempt)
    queued|retrying  -> running in a provider batch  job_batch_claim (deferred/ decides)
    running (batch)  -> retrying in real time        job_run_in_real_time (expired, deadline)
    running (batch)  -> cancelled                    job_cancel (at once: no stream to close)
    (moved on)       -> a superseded batch row       job_batch_superseded (ledger only)
    queued|retrying  -> (deferred to real time)      job_undefer (its deadline is too near)
    queued|retrying  -> (parked, no RQ job)          job_park (its feature or provider paused)
    (parked)         -> (put on the queue again)     jobs_unpark (resumed; in submit order)

Each transition is one transaction that writes only the fields it changes, books the attempt in
the ledger (``ledger/services.py``) when it ends one, and ends in ``transition_committed``: the
one after-commit hook that WebSocket events, metrics and budgets subscribe to. ``jobs/runner.py``
only holds the lock, beats the heartbeat and makes the call.

The modules, by family: ``submit`` (submit, enqueue), ``attempts`` (claim and the end of an
attempt), ``holds`` (retry, hold, fall back, dead-letter, requeue), ``cancel``, ``deferred``
(provider batches), ``parking`` (paused features and providers), ``recovery`` (a lost worker,
a lost RQ job) and ``outcomes`` (what an
attempt's end carries).
"""

from jobs.services.attempts import job_attempt_failed, job_claim, job_complete
from jobs.services.cancel import CANCELLABLE_AT_ONCE, job_cancel, job_cancel_running
from jobs.services.deferred import (
    job_batch_claim,
    job_batch_superseded,
    job_run_in_real_time,
    job_undefer,
)
from jobs.services.holds import (
    job_budget_refused,
    job_deadline_exceeded,
    job_fall_back,
    job_hold,
    job_requeue,
)
from jobs.services.outcomes import AttemptFailure, CancelledResult, SuccessResult
from jobs.services.parking import job_park, jobs_unpark
from jobs.services.recovery import job_enqueue_again, job_recover
from jobs.services.submit import job_build, job_enqueue, job_rq_options, job_submit

__all__ = [
    "CANCELLABLE_AT_ONCE",
    "AttemptFailure",
    "CancelledResult",
    "SuccessResult",
    "job_attempt_failed",
    "job_batch_claim",
    "job_batch_superseded",
    "job_budget_refused",
    "job_build",
    "job_cancel",
    "job_cancel_running",
    "job_claim",
    "job_complete",
    "job_deadline_exceeded",
    "job_enqueue",
    "job_enqueue_again",
    "job_fall_back",
    "job_hold",
    "job_park",
    "job_recover",
    "job_requeue",
    "job_rq_options",
    "job_run_in_real_time",
    "job_undefer",
    "job_submit",
    "jobs_unpark",
]
