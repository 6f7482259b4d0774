"""The retry table of DESIGN.md, row by row, plus jitter, retry-after, scale and the global cap."""

import random

import pytest

from jobs.retry_policy import DEFAULT_SCHEDULES, classify, decide

ROWS = [
    # (observation, reason, transient, severity)
    ({"kind": "error_response", "http_status": 429, "error_type": "rate_limit_error"},
     "rate_limited", True, "ERROR"),
    ({"kind": "error_response", "http_status": 429, "error_type": "rate_limit_error",
      "error_code": "enforced_spend_limit_reached"}, "spend_cap", False, "CRITICAL"),
    ({"kind": "error_response", "http_status": 529, "error_type": "overloaded_error"},
     "overloaded", True, "ERROR"),
    ({"kind": "error_response", "http_status": 500}, "server_error", True, "ERROR"),
    ({"kind": "error_response", "http_status": 502}, "server_error", True, "ERROR"),
    ({"kind": "error_response", "http_status": 503}, "server_error", True, "ERROR"),
    ({"kind": "error_response", "http_status": 504}, "server_error", True, "ERROR"),
    ({"kind": "connection_error"}, "connection_error", True, "ERROR"),
    ({"kind": "read_timeout"}, "read_timeout", True, "ERROR"),
    ({"kind": "unexpected_error"}, "unexpected_error", True, "ERROR"),
    ({"kind": "error_response", "http_status": 400,
      "message": "Your credit balance is too low to access the Anthropic API."},
     "credit_balance", False, "CRITICAL"),
    ({"kind": "connection_dropped"}, "connection_dropped", True, "ERROR"),
    ({"kind": "error_response", "http_status": 409}, "conflict", True, "ERROR"),
    ({"kind": "error_response", "http_status": 400,
      "message": "prompt is too long: 210000 tokens > 200000 maximum"},
     "context_too_long", False, "WARNING"),
    ({"kind": "error_response", "http_status": 413, "error_type": "request_too_large"},
     "request_too_large", False, "WARNING"),
    ({"kind": "error_response", "http_status": 400,
      "message": "You have reached your specified API usage limits. You will regain access on ..."},
     "usage_limit", False, "WARNING"),
    ({"kind": "error_response", "http_status": 400, "message": "messages: field required"},
     "invalid_request", False, "ERROR"),
    ({"kind": "error_response", "http_status": 404}, "not_found", False, "ERROR"),
    ({"kind": "error_response", "http_status": 422}, "invalid_request", False, "ERROR"),
    ({"kind": "error_response", "http_status": 401}, "authentication_failed", False, "CRITICAL"),
    ({"kind": "error_response", "http_status": 402}, "payment_required", False, "CRITICAL"),
    ({"kind": "error_response", "http_status": 403}, "permission_denied", False, "CRITICAL"),
    ({"kind": "budget_exceeded"}, "budget_exceeded", False, "WARNING"),
]  # fmt: skip


@pytest.mark.parametrize("observation,reason,transient,severity", ROWS)
def test_it_classifies_every_row_of_the_table(observation, reason, transient, severity):
    classification = classify(**observation)
    assert (classification.reason_code, classification.transient, classification.severity) == (
        reason,
        transient,
        severity,
    )


def test_it_follows_each_schedule_then_dead_letters(settings):
    settings.LLM_RETRY_DELAY_SCALE = 1.0
    settings.LLM_RETRY_JITTER = 0.0
    expected = {
        "rate_limited": [2, 5, 12, 30, 75],
        "overloaded": [15, 60, 180],
        "server_error": [3, 10, 30],
        "connection_error": [3, 10, 30],
        # Unknown outcome, maybe billed: retried at most once.
        "read_timeout": [3],
        "conflict": [3, 10, 30],
    }
    for reason, delays in expected.items():
        classification = classify(
            **next(o for o, r, _t, _s in ROWS if r == reason)  # type: ignore[arg-type]
        )
        got = [
            decide(classification, retries_used=n, attempts_in_budget=1).delay_seconds
            for n in range(len(delays))
        ]
        assert got == delays, reason
        final = decide(classification, retries_used=len(delays), attempts_in_budget=1)
        assert not final.retry and final.retries_exhausted
    assert set(expected) <= set(DEFAULT_SCHEDULES)


def test_jitter_stays_within_zero_to_thirty_percent(settings):
    settings.LLM_RETRY_DELAY_SCALE = 1.0
    rng = random.Random(1)
    overloaded = classify(kind="error_response", http_status=529)
    delays = [
        decide(overloaded, retries_used=1, attempts_in_budget=2, rng=rng).delay_seconds
        for _ in range(2000)
    ]
    assert min(delays) >= 60 and max(delays) <= 78
    # Spread over the whole band, not stuck at one end.
    assert min(delays) < 61 and max(delays) > 77


def test_retry_after_is_a_floor_even_when_compressed(settings):
    settings.LLM_RETRY_DELAY_SCALE = 0.001
    rate_limited = classify(kind="error_response", http_status=429)
    decision = decide(rate_limited, retries_used=0, attempts_in_budget=1, retry_after=7)
    assert decision.delay_seconds == 7
    scaled = decide(rate_limited, retries_used=0, attempts_in_budget=1)
    assert scaled.delay_seconds is not None and scaled.delay_seconds <= 2 * 1.3 * 0.001


def test_the_global_attempt_cap_bounds_every_class(settings):
    settings.LLM_MAX_ATTEMPTS = 3
    rate_limited = classify(kind="error_response", http_status=429)
    assert decide(rate_limited, retries_used=1, attempts_in_budget=2).retry
    capped = decide(rate_limited, retries_used=2, attempts_in_budget=3)
    assert not capped.retry and capped.retries_exhausted


def test_schedules_can_be_overridden_in_settings(settings):
    settings.LLM_RETRY_SCHEDULES = {"overloaded": [1, 2]}
    settings.LLM_RETRY_DELAY_SCALE = 1.0
    settings.LLM_RETRY_JITTER = 0.0
    overloaded = classify(kind="error_response", http_status=529)
    assert decide(overloaded, retries_used=1, attempts_in_budget=2).delay_seconds == 2
    assert not decide(overloaded, retries_used=2, attempts_in_budget=3).retry
