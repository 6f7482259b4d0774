"""The cost calculator: tokens x rate / 1e6, in Decimal, per token kind; and the most an attempt
can cost when its outcome is unknown (a read timeout, a dropped connection) or before it runs
(a budget reservation)."""

import json
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Any

from ledger.models import ModelPrice

__all__ = [
    "BLOCK_FRAMING_TOKENS",
    "IMAGE_BLOCK_MAX_TOKENS",
    "MESSAGE_FRAMING_TOKENS",
    "PDF_BLOCK_MAX_TOKENS",
    "PDF_MAX_PAGES",
    "PDF_PAGE_MAX_TOKENS",
    "PDF_PAGE_TEXT_MAX_TOKENS",
    "REQUEST_FRAMING_TOKENS",
    "TOKEN_KINDS",
    "attempt_cost",
    "broken_stream_cost",
    "estimate_input_tokens",
    "upper_bound_cost",
]

MILLION = Decimal(1_000_000)
MICRO_USD = Decimal("0.000001")

TOKEN_KINDS: dict[str, str] = {
    "input_tokens": "input_per_mtok",
    "output_tokens": "output_per_mtok",
    "cache_write_5m_tokens": "cache_write_5m_per_mtok",
    "cache_write_1h_tokens": "cache_write_1h_per_mtok",
    "cache_read_tokens": "cache_read_per_mtok",
}
"""Usage field -> ModelPrice rate field."""

# --- The bound's constants -------------------------------------------------------------------
# Text is bounded by its UTF-8 length: Claude's tokenizer is a byte-level BPE, so every token
# covers at least one byte and a text of n bytes is at most n tokens, whatever the script (CJK
# is 3 bytes a character, most emoji 4). Images and PDFs are not text: the provider resizes each
# image to a fixed maximum and bills a PDF per page, so those blocks count a per-block maximum.

IMAGE_BLOCK_MAX_TOKENS = 5_000
"""The most one image block can bill, whatever its size in bytes.

The vision guide (platform.claude.com/docs/en/build-with-claude/vision) bills an image at about
width x height / 750 tokens (its newer text: one visual token per 28 x 28 px patch, the image
padded on the bottom and right to a multiple of 28 px), after resizing it to the model's maximal
native resolution. That cap is a 1568 px long edge, "~1,600 tokens", up to the Claude 4.6
models; Claude Opus 4.7 raised it to a 2576 px long edge, about 3.75 megapixels (4,784 visual
tokens at most, as its launch notes put it). Counting the padding as a whole extra row and
column of patches, (w/28 + 1) x (h/28 + 1) <= 3.75e6/784 + 2 x 2576/28 + 1 < 4,970 for any
aspect ratio; 5,000 bounds every model the price table may hold. On a model capped at 1568 px
this is about three times the real maximum: the bound errs on the side of the budget."""

PDF_MAX_PAGES = 100
"""The documented page limit of a request (PDF support guide: "Maximum pages per request:
100"); a document block can hold no more, so pages x per-page maximum bounds a PDF."""

PDF_PAGE_TEXT_MAX_TOKENS = 3_000
"""The text part of a PDF page: the PDF support guide prices the text extracted from each page
at "typically 1,500-3,000 tokens per page depending on content density". This is the top of
the documented range, not a hard limit the provider enforces (a page of tiny print could hold
more): it is the one figure of this bound that rests on a typical value, not on a maximum."""

PDF_PAGE_MAX_TOKENS = IMAGE_BLOCK_MAX_TOKENS + PDF_PAGE_TEXT_MAX_TOKENS
"""Each PDF page is sent as an image of the page plus its extracted text (PDF support guide,
"How PDF support works"), so a page costs at most an image plus a page of text."""

PDF_BLOCK_MAX_TOKENS = PDF_MAX_PAGES * PDF_PAGE_MAX_TOKENS
"""The most one base64 PDF document block can bill (800,000 tokens)."""

REQUEST_FRAMING_TOKENS = 64
"""Per request: start and end of the prompt, the system prompt's wrapper and the opening of
the assistant's turn. The provider does not publish its framing; a one-word request counts
under ten tokens with count_tokens, so 64 is a generous allowance, not a measured figure."""

MESSAGE_FRAMING_TOKENS = 16
"""Per message: the role marker and the turn separators around it (an allowance, as above)."""

TOOLS_SYSTEM_PROMPT_TOKENS = 1000
"""With tools, the API adds a system prompt of its own (a few hundred tokens per the provider's
pricing page, by model and tool_choice); 1,000 is an allowance above every published figure."""

BLOCK_FRAMING_TOKENS = 16
"""Per content block: the delimiters around an image, a document (its title and context are
counted as text besides), a tool call's name and id, a tool result (an allowance, as above)."""


def attempt_cost(price: ModelPrice, usage: dict[str, int], *, batch: bool = False) -> Decimal:
    """Tokens x rate / 1e6 per token kind, plus the server tools' per-use fees (a web search)."""
    total = sum(
        (Decimal(usage.get(kind, 0)) * getattr(price, rate) for kind, rate in TOKEN_KINDS.items()),
        Decimal(0),
    )
    if batch:
        total *= Decimal(1) - price.batch_discount
    total += _server_tool_fees(price, usage) * MILLION
    return (total / MILLION).quantize(MICRO_USD, rounding=ROUND_HALF_UP)


def _server_tool_fees(price: ModelPrice, usage: dict[str, int]) -> Decimal:
    return Decimal(usage.get("web_search_requests", 0)) * price.web_search_per_request


def _utf8_bytes(value: Any) -> int:
    """Bytes of a string; anything else (a tool's input, an unknown block) as escaped JSON.

    ``ensure_ascii=True`` writes each non-ASCII character as 6 or 12 bytes, at least its UTF-8
    length (2 to 4 bytes), so the count bounds the value whether the provider renders it
    escaped or not."""
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if value is None:
        return 0
    return len(json.dumps(value, ensure_ascii=True).encode("utf-8"))


def _document_tokens(block: dict[str, Any]) -> int:
    source = block.get("source")
    source = source if isinstance(source, dict) else {}
    tokens = _utf8_bytes(block.get("title")) + _utf8_bytes(block.get("context"))
    kind = source.get("type")
    if kind == "text":
        return tokens + _utf8_bytes(source.get("data"))
    if kind == "content":
        return tokens + _content_tokens(source.get("content"))
    # A base64 PDF; and, for rows stored before URL and file sources were refused, a source the
    # bound cannot read, bounded as the largest document the provider accepts.
    return tokens + PDF_BLOCK_MAX_TOKENS


def _block_tokens(block: Any) -> int:
    if not isinstance(block, dict):
        return BLOCK_FRAMING_TOKENS + _utf8_bytes(block)
    kind = block.get("type")
    if kind == "text":
        tokens = _utf8_bytes(block.get("text"))
    elif kind == "image":
        tokens = IMAGE_BLOCK_MAX_TOKENS
    elif kind == "document":
        tokens = _document_tokens(block)
    elif kind == "tool_use":
        tokens = (
            _utf8_bytes(block.get("id"))
            + _utf8_bytes(block.get("name"))
            + _utf8_bytes(block.get("input"))
        )
    elif kind == "tool_result":
        tokens = _utf8_bytes(block.get("tool_use_id")) + _content_tokens(block.get("content"))
    elif kind == "thinking":
        # The signature carries the full reasoning, encrypted, that models returning a summary
        # read back: its length is counted so that the bound covers more than the summary.
        tokens = _utf8_bytes(block.get("thinking")) + _utf8_bytes(block.get("signature"))
    else:
        tokens = _utf8_bytes({k: v for k, v in block.items() if k != "cache_control"})
    return BLOCK_FRAMING_TOKENS + tokens


def _content_tokens(content: Any) -> int:
    if isinstance(content, list):
        return sum(_block_tokens(block) for block in content)
    return _utf8_bytes(content)


def estimate_input_tokens(*, messages: list[dict[str, Any]], system: Any = None) -> int:
    """The most input tokens the provider can bill for these messages and system prompt.

    Text counts its UTF-8 bytes (a byte-level BPE token covers at least one byte), an image
    ``IMAGE_BLOCK_MAX_TOKENS``, a PDF ``PDF_BLOCK_MAX_TOKENS``, plus the framing allowances."""
    tokens = REQUEST_FRAMING_TOKENS + _content_tokens(system)
    for message in messages:
        tokens += MESSAGE_FRAMING_TOKENS + _content_tokens(message.get("content"))
    return tokens


def tools_tokens(tools: Any) -> int:
    """The most input tokens a job's ``tools`` add: their definitions' UTF-8 bytes and the
    system prompt the API adds when tools are given (``TOOLS_SYSTEM_PROMPT_TOKENS``). A server
    tool's own per-use fee (a web search) is not a token and is not bounded here."""
    if not tools:
        return 0
    definitions = json.dumps(tools, separators=(",", ":"), ensure_ascii=False)
    return TOOLS_SYSTEM_PROMPT_TOKENS + len(definitions.encode())


def upper_bound_cost(
    price: ModelPrice,
    *,
    messages: list[dict[str, Any]],
    system: Any,
    max_tokens: int,
    tools: Any = None,
) -> Decimal:
    """The most an attempt can cost: every input token (tools included) at the dearest input
    rate (a cache write costs more than plain input) and the whole ``max_tokens`` at the output
    rate (extended thinking is output, within ``max_tokens``)."""
    input_rate = max(
        price.input_per_mtok, price.cache_write_5m_per_mtok, price.cache_write_1h_per_mtok
    )
    tokens_in = Decimal(
        estimate_input_tokens(messages=messages, system=system) + tools_tokens(tools)
    )
    total = tokens_in * input_rate + Decimal(max_tokens) * price.output_per_mtok
    # Round up: a bound rounded half-up to the micro-dollar could fall below a cost that is.
    return (total / MILLION).quantize(MICRO_USD, rounding=ROUND_CEILING)


def broken_stream_cost(
    price: ModelPrice,
    *,
    usage: dict[str, int],
    output_tokens: int,
    messages: list[dict[str, Any]],
    system: Any,
    tools: Any = None,
) -> tuple[Decimal, dict[str, int]]:
    """The most a stream that ended early can cost, and the usage it is booked with.

    ``usage``: what its ``message_start`` reported (the input, exactly, by kind), empty when it
    never got that far; the input is then bounded as in ``upper_bound_cost``. ``output_tokens``:
    the bound on its output (``max_tokens`` when nothing bounds it better). The cost is the
    usage's at the attempt's rates, rounded up."""
    booked = {kind: int(usage.get(kind, 0)) for kind in (*TOKEN_KINDS, "web_search_requests")}
    booked["output_tokens"] = max(booked["output_tokens"], output_tokens)
    total = sum(
        (Decimal(booked[kind]) * getattr(price, rate) for kind, rate in TOKEN_KINDS.items()),
        Decimal(0),
    )
    total += _server_tool_fees(price, booked) * MILLION
    if not usage:
        input_rate = max(
            price.input_per_mtok, price.cache_write_5m_per_mtok, price.cache_write_1h_per_mtok
        )
        total += input_rate * Decimal(
            estimate_input_tokens(messages=messages, system=system) + tools_tokens(tools)
        )
    return (total / MILLION).quantize(MICRO_USD, rounding=ROUND_CEILING), booked
