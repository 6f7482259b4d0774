"""The fake provider's OpenAI-compatible Embeddings API: ``POST /openai/v1/embeddings`` (base URL
``http://127.0.0.1:8787/openai/v1``), as OpenAI, Ollama and vLLM answer it.

Vectors are deterministic: the same model and text give the same unit vector (from SHAKE-256 of
both), of the model's native dimensions (``NATIVE_DIMENSIONS``; 768 for a model it does not
list) or of the ``dimensions`` asked. ``encoding_format`` ``base64`` (the SDK's default: float32
little-endian) and ``float`` are both served. Each text costs ``ceil(len / 4)`` prompt tokens,
billed at the input price (state.py ``OPENAI_PRICES``; a model it does not list is free).

The chat endpoint's faults and scripts apply (``/_fake/faults``): ``429`` as
``rate_limit_exceeded`` with its headers, ``insufficient_quota``, the status faults, and
``stall``/``timeout`` as a request that hangs until the client leaves (nothing streams here).
``/_fake/stats`` counts the texts embedded (``embedded_inputs``), so that a test can see that
identical inputs were embedded once.

Two faults of this endpoint alone answer a 200 whose ``index`` fields are wrong, with as many
vectors as inputs (billed like a success): ``repeat_index`` gives the last vector the first's
index (0), ``skip_index`` gives it one past the end (n), so an index is missing. A client that
checks only the count stores vectors against the wrong inputs. With one input, ``repeat_index``
answers correctly (there is no other index to repeat).
"""

from __future__ import annotations

import array
import asyncio
import base64
import hashlib
import json
import math
import sys
from typing import Any

from .openai_compat import _Error, _send, _until_gone, admit, failer, has_bearer
from .responses import FAULT_ERRORS, new_request_id
from .state import FakeProviderState, openai_price_for

__all__ = ["EMBEDDINGS_PATH", "NATIVE_DIMENSIONS", "embeddings", "fake_vector"]

EMBEDDINGS_PATH = "/openai/v1/embeddings"
NATIVE_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
DEFAULT_DIMENSIONS = 768
MAX_INPUTS = 2048

Scope = dict[str, Any]


def fake_vector(model: str, text: str, dimensions: int) -> array.array:
    """The unit vector the fake gives ``text`` on ``model`` (float32), the same every time."""
    raw = hashlib.shake_256(f"{model}\x00{text}".encode()).digest(dimensions * 2)
    values = array.array("h")
    values.frombytes(raw)
    norm = math.hypot(*values) or 1.0
    return array.array("f", [v / norm for v in values])


def _tokens(text: str) -> int:
    return max(1, -(-len(text) // 4))


def _read(payload: Any) -> tuple[str, list[str], int, str]:
    if not isinstance(payload, dict):
        raise _Error(400, "The request body must be a JSON object.")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise _Error(400, "you must provide a model parameter", kind="invalid_request_error")
    texts = payload.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or len(texts) > MAX_INPUTS:
        raise _Error(400, f"'input' must be a string or an array of 1 to {MAX_INPUTS} strings")
    for index, text in enumerate(texts):
        if not isinstance(text, str) or not text:
            raise _Error(400, f"'input'[{index}] must be a non-empty string")
    native = NATIVE_DIMENSIONS.get(model, DEFAULT_DIMENSIONS)
    dimensions = payload.get("dimensions")
    if dimensions is None:
        dimensions = native
    elif isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
        raise _Error(400, "'dimensions' must be a positive integer")
    elif dimensions > native:
        raise _Error(400, f"This model has {native} dimensions; 'dimensions' cannot exceed it.")
    encoding = payload.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise _Error(400, "'encoding_format' must be 'float' or 'base64'")
    return model, texts, dimensions, encoding


def _encoded(vector: array.array, encoding: str) -> Any:
    if encoding == "float":
        return vector.tolist()
    if sys.byteorder == "big":
        vector = array.array("f", vector)
        vector.byteswap()
    return base64.b64encode(vector.tobytes()).decode()


async def embeddings(
    state: FakeProviderState,
    closing: asyncio.Event,
    scope: Scope,
    receive: Any,
    send: Any,
    body: bytes,
) -> None:
    """Answer one ``POST /openai/v1/embeddings`` (its body already read)."""
    epoch = state.count_request()
    request_id = new_request_id()
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    key = headers.get("idempotency-key", "")

    fail = failer(state, send, epoch, request_id)
    if not has_bearer(headers):
        return await fail(
            _Error(401, "You didn't provide an API key.", kind="invalid_request_error")
        )
    try:
        model, texts, dimensions, encoding = _read(json.loads(body))
    except ValueError:
        return await fail(_Error(400, "We could not parse the JSON body of your request."))
    except _Error as error:
        return await fail(error)
    tokens = [_tokens(text) for text in texts]
    drawn = await admit(state, fail, key=key, input_tokens=sum(tokens), max_tokens=0)
    if drawn is None:
        return None
    decision, rate_headers, fault = drawn
    if fault == "overloaded_midstream":
        fault = "503"
    if fault in FAULT_ERRORS:
        status, message, _details = FAULT_ERRORS[fault]
        return await fail(_Error(status, message), rate_headers)
    usage = {
        "input_tokens": sum(tokens),
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
    }
    state.settle_tokens(decision, usage)
    # Billed once computed, whether or not the client stays for the answer.
    state.bill(openai_price_for(model), usage, epoch, request_id=request_id,
               idempotency_key=key, how="answered")  # fmt: skip
    state.count_embedded(len(texts), epoch)
    if fault in ("stall", "timeout", "drop"):
        state.count_timed_out(epoch)
        await _until_gone(receive, closing)
        return
    data = [
        {
            "object": "embedding",
            "index": index,
            "embedding": _encoded(fake_vector(model, text, dimensions), encoding),
        }
        for index, text in enumerate(texts)
    ]
    if fault == "repeat_index":
        data[-1]["index"] = 0
    elif fault == "skip_index":
        data[-1]["index"] = len(texts)
    answer = {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)},
    }
    state.count_status(200, epoch)
    await _send(
        send, 200, json.dumps(answer).encode(), [("x-request-id", request_id), *rate_headers]
    )
