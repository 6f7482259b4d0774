"""What a job's dead-lettering tells the subscribers of its transition.

``_dead_letter`` (jobs/services/) attaches a ``DeadLetter`` to the job before its
``dead_lettered`` (or ``recovered`` into ``failed``) transition; the DLQ (dlq/), subscribed inside
the transition, writes its record from it. So jobs/ never imports the DLQ, and the record still
commits with the job's ``failed`` state.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobs.models import LlmJob

__all__ = ["DeadLetter", "dead_letter_attach", "dead_letter_of"]

_ATTRIBUTE = "_llmops_dead_letter"


@dataclass(frozen=True)
class DeadLetter:
    """Why the job failed for good, as its DLQ record keeps it (the job's own error fields are
    shorter and lack the error type, the request id and whether retries ran out)."""

    severity: str
    reason_code: str
    retries_exhausted: bool = False
    http_status: int | None = None
    error_type: str = ""
    message: str = ""
    request_id: str = ""


def dead_letter_attach(job: "LlmJob", dead_letter: DeadLetter) -> None:
    setattr(job, _ATTRIBUTE, dead_letter)


def dead_letter_of(job: "LlmJob") -> DeadLetter | None:
    """The dead letter attached by the transition being committed, or None."""
    return getattr(job, _ATTRIBUTE, None)
