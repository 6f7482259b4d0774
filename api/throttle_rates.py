"""Request rates as settings spell them (``600/min``): pure, so that settings.py can check them.

DRF's spellings of the period are accepted (``s``, ``sec``, ``second``, ``m``, ``min``, ...);
``off`` or ``none`` turns the throttle off.
"""

__all__ = ["OFF", "PERIODS", "parse_rate"]

PERIODS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
}
"""Seconds per period a rate may name."""

OFF = ("off", "none")
"""Rate values that turn a throttle off."""


def parse_rate(rate: str | None) -> tuple[int, int] | None:
    """``"600/min"`` -> ``(600, 60)`` (requests, seconds); ``None``, ``off``, ``none`` -> None.
    Raises ValueError for anything else."""
    if rate is None or rate.strip().lower() in OFF:
        return None
    count, slash, period = rate.strip().partition("/")
    if not slash or not count.isdigit() or int(count) < 1 or period.lower() not in PERIODS:
        raise ValueError(
            f"{rate!r} is not a rate: use <requests>/<s|min|hour|day> (600/min) or off"
        )
    return int(count), PERIODS[period.lower()]
