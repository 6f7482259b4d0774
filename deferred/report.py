"""What a pass of the deferred loop did, and the statuses it treats as open."""

from dataclasses import dataclass

from django.conf import settings

from deferred.models import ProviderBatch

__all__ = ["OPEN_STATUSES", "DeferredReport", "unsent_after_seconds"]

OPEN_STATUSES = (
    ProviderBatch.Status.IN_PROGRESS,
    ProviderBatch.Status.CANCELING,
    ProviderBatch.Status.ENDED,
)
UNSENT_MARGIN_SECONDS = 20.0


def unsent_after_seconds() -> float:
    """A batch claimed but not confirmed sent this long ago: its loop died between the claim and
    the provider's answer. Its jobs are recovered as attempts of unknown outcome (it may have been
    sent). A live loop's create lasts at most its connect (``LLM_PROVIDER_CONNECT_TIMEOUT``, 10 s)
    and read (``LLM_DEFERRED_READ_TIMEOUT_SECONDS``, 60 s) timeouts: 20 s past those (90 s with
    the defaults) no create is still in flight, and with the next pass
    (``LLM_DEFERRED_POLL_SECONDS``, 10 s) a dead loop's jobs run again within two minutes, as a
    dead worker's do."""
    return (
        settings.LLM_PROVIDER_CONNECT_TIMEOUT
        + settings.LLM_DEFERRED_READ_TIMEOUT_SECONDS
        + UNSENT_MARGIN_SECONDS
    )


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
