"""The fake provider's options as they are given (the command line, the control endpoint, a
script): its fault codes, latency, rates and windows, each parsed and checked here, with a
``ValueError`` that says what is wrong."""

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "FAULT_CODES",
    "parse_batch_seconds",
    "parse_fault",
    "parse_faults",
    "parse_latency",
    "parse_rate_window",
    "parse_rpm",
    "parse_share",
    "parse_short_interval",
    "parse_stream_pace",
]

FAULT_CODES = (
    "400", "401", "403", "404", "409", "413", "429", "500", "502", "503", "504", "529",
    "spendcap", "credit", "context", "usagelimit", "timeout", "drop", "garbage", "trickle",
    "overloaded_midstream", "stall", "insufficient_quota", "repeat_index", "skip_index",
)  # fmt: skip


def parse_latency(value: Any) -> tuple[int, int]:
    """50 or "50" -> (50, 50); "20-400" or (20, 400) -> (20, 400) milliseconds; or ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"latency must be MS or MIN-MAX milliseconds, not {value!r}")
    if isinstance(value, int):
        low = high = value
    elif (
        isinstance(value, (tuple, list)) and len(value) == 2 and all(type(v) is int for v in value)
    ):
        low, high = value
    else:
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(value))
        if not match:
            raise ValueError(f"latency must be MS or MIN-MAX milliseconds, not {value!r}")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
    if low < 0 or high < low:
        raise ValueError(f"latency range must satisfy 0 <= MIN <= MAX, not {value!r}")
    if high > 600_000:
        raise ValueError(f"latency must be at most 600000 ms, not {value!r}")
    return low, high


def parse_rpm(value: Any) -> int | None:
    """A positive integer, or None / 0 for no limit. Raises ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"rpm must be a positive integer, not {value!r}")
    try:
        rpm = int(value)
    except ValueError:
        raise ValueError(f"rpm must be a positive integer, not {value!r}") from None
    if rpm < 0:
        raise ValueError(f"rpm must be a positive integer, not {value!r}")
    return rpm or None


def parse_rate_window(value: Any) -> float:
    """Seconds of the rate-limit window: a number in (0, 3600]. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"rate_window_seconds must be a number of seconds, not {value!r}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"rate_window_seconds must be a number of seconds, not {value!r}"
        ) from None
    if not 0 < seconds <= 3600:
        raise ValueError(f"rate_window_seconds must be in (0, 3600], not {value!r}")
    return seconds


def parse_short_interval(value: Any) -> float | None:
    """Seconds over which the requests limit is also enforced: None / 0 for none, or a number
    in (0, 3600]. Raises ValueError."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"short_interval_seconds must be a number of seconds, not {value!r}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"short_interval_seconds must be a number of seconds, not {value!r}"
        ) from None
    if seconds == 0:
        return None
    if not 0 < seconds <= 3600:
        raise ValueError(f"short_interval_seconds must be in (0, 3600], not {value!r}")
    return seconds


def _rate(code: str, rate: Any) -> float:
    if code not in FAULT_CODES:
        raise ValueError(f"unknown fault code {code!r}; known: {', '.join(FAULT_CODES)}")
    if isinstance(rate, bool):
        raise ValueError(f"fault rate for {code} must be a number in 0..1, not {rate!r}")
    try:
        value = float(rate)
    except (TypeError, ValueError):
        raise ValueError(f"fault rate for {code} must be a number in 0..1, not {rate!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"fault rate for {code} must be a number in 0..1, not {rate!r}")
    return value


def parse_fault(spec: str) -> tuple[str, float]:
    """ "529:0.2" -> ("529", 0.2). Raises ValueError."""
    code, sep, rate = spec.strip().partition(":")
    if not sep:
        raise ValueError(f"fault must be CODE:RATE (e.g. 529:0.2), not {spec!r}")
    code = code.strip().lower()
    return code, _rate(code, rate.strip())


def parse_stream_pace(value: Any) -> float | None:
    """Output tokens a second of a streamed answer: a positive number, or None / 0 for no pace."""
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"stream_tokens_per_second must be a positive number, not {value!r}")
    return float(value)


def parse_batch_seconds(value: Any) -> float:
    """How long a message batch takes: a number of seconds in [0, 86400] (its 24 hours)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86_400:
        raise ValueError(f"batch_processing_seconds must be a number in [0, 86400], not {value!r}")
    return float(value)


def parse_share(name: str, value: Any) -> float:
    """A share of a batch's items: a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number in [0, 1], not {value!r}")
    return float(value)


def parse_faults(
    faults: Mapping[str, Any] | Iterable[tuple[str, Any]],
) -> tuple[tuple[str, float], ...]:
    """Ordered, validated (code, rate) pairs; a repeated code keeps its last rate."""
    items = faults.items() if isinstance(faults, Mapping) else faults
    merged: dict[str, float] = {}
    for code, rate in items:
        code = str(code).strip().lower()
        merged.pop(code, None)
        merged[code] = _rate(code, rate)
    return tuple((code, rate) for code, rate in merged.items() if rate > 0)
