"""``POST /v1/messages/count_tokens``: the Messages API's token count of a request, free and
without a call, by the same estimate the fake bills input with (responses.py: a quarter of each
block's characters). The body is checked as a Messages body is, ``max_tokens`` aside (the API's
count takes none)."""

from __future__ import annotations

import json
from typing import Any

from .message_requests import ApiError, parse_request

__all__ = ["COUNT_TOKENS_PATH", "count_tokens"]

COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


def count_tokens(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body or b"null")
    except ValueError:
        raise ApiError(400, "There was an error parsing the body of your request.") from None
    if isinstance(payload, dict):
        payload = {**payload, "max_tokens": 1}
    request = parse_request(payload)
    return {"input_tokens": sum(segment.tokens for segment in request.segments)}
