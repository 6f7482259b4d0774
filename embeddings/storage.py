"""Writing and reading an embedding job's vectors (embeddings/models.py).

Vectors travel as float32 little-endian bytes from the provider's answer (asked as base64,
providers/openai_sdk.py) to the database, and become JSON numbers only when read.
"""

import array
import sys
from collections.abc import Iterable, Sequence
from uuid import UUID

from embeddings.models import EmbeddingChunk

__all__ = ["CHUNK_BYTES", "vectors_load", "vectors_shape", "vectors_store"]

CHUNK_BYTES = 1 << 20
"""The most vector bytes one row holds (1 MiB; MariaDB's max_allowed_packet is 16 MiB)."""


def vectors_store(*, job_id: UUID, vectors: Sequence[bytes]) -> int:
    """Keep a job's vectors (float32 little-endian each, all of one length), in chunks.
    Returns their dimensions. Inside the transaction that completes the job."""
    if not vectors:
        return 0
    size = len(vectors[0])
    dimensions = size // 4
    per_chunk = max(1, CHUNK_BYTES // max(size, 1))
    EmbeddingChunk.objects.bulk_create(
        [
            EmbeddingChunk(
                job_id=job_id,
                start=start,
                count=len(vectors[start : start + per_chunk]),
                dimensions=dimensions,
                vectors=b"".join(vectors[start : start + per_chunk]),
            )
            for start in range(0, len(vectors), per_chunk)
        ]
    )
    return dimensions


def _floats(data: bytes) -> list[float]:
    values = array.array("f")
    values.frombytes(data)
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def vectors_load(*, job_id: UUID, positions: Iterable[int] | None = None) -> list[list[float]]:
    """A job's vectors in input order (``positions``: only those, in that order), as floats."""
    chunks = list(
        EmbeddingChunk.objects.filter(job_id=job_id)
        .order_by("start")
        .values_list("start", "count", "dimensions", "vectors")
    )
    if positions is None:
        out: list[list[float]] = []
        for _start, count, dimensions, data in chunks:
            floats = _floats(bytes(data))
            out.extend(floats[i * dimensions : (i + 1) * dimensions] for i in range(count))
        return out
    wanted = list(positions)
    by_position: dict[int, list[float]] = {}
    needed = set(wanted)
    for start, count, dimensions, data in chunks:
        inside = [p for p in needed if start <= p < start + count]
        if not inside:
            continue
        floats = _floats(bytes(data))
        for p in inside:
            offset = (p - start) * dimensions
            by_position[p] = floats[offset : offset + dimensions]
    return [by_position[p] for p in wanted if p in by_position]


def vectors_shape(*, job_id: UUID) -> tuple[int | None, int]:
    """The dimensions and the number of a job's vectors, without reading them."""
    rows = list(EmbeddingChunk.objects.filter(job_id=job_id).values_list("dimensions", "count"))
    return (rows[0][0] if rows else None), sum(count for _, count in rows)
