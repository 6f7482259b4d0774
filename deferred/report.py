"""What a pass of the deferred loop did, and the statuses it treats as open."""

from dataclasses import dataclass

from deferred.models import ProviderBatch

__all__ = ["OPEN_STATUSES", "UNSENT_AFTER_SECONDS", "DeferredReport"]

OPEN_STATUSES = (
    ProviderBatch.Status.IN_PROGRESS,
    ProviderBatch.Status.CANCELING,
    ProviderBatch.Status.ENDED,
)
UNSENT_AFTER_SECONDS = 300
"""A batch claimed but not confirmed sent this long ago: its loop died between the claim and the
provider's answer. Its jobs are recovered as attempts of unknown outcome (it may have been sent)."""


@dataclass
class DeferredReport:
    batches_sent: int = 0
    jobs_sent: int = 0
    batches_ended: int = 0
    results_booked: int = 0
    superseded: int = 0
    to_real_time: int = 0
    batches_cancelled: int = 0
    unsent_recovered: int = 0

    @property
    def changed(self) -> bool:
        return any(vars(self).values())

    def __str__(self) -> str:
        return (
            f"sent {self.jobs_sent} jobs in {self.batches_sent} provider batches, "
            f"{self.batches_ended} ended, {self.results_booked} results booked "
            f"({self.superseded} superseded), {self.to_real_time} jobs to real time, "
            f"{self.batches_cancelled} batches cancelled, {self.unsent_recovered} unsent recovered"
        )
