"""Reads of embedding jobs: their output as the API shows it."""

from typing import Any

from embeddings.storage import vectors_load, vectors_shape
from jobs.models import LlmJob

__all__ = ["embedding_output"]


def embedding_output(job: LlmJob, *, vectors: bool) -> dict[str, Any]:
    """``{"embeddings", "dimensions", "count"}`` of a completed embedding job: the vectors in
    input order as JSON numbers (``vectors``), else ``embeddings`` null (a list of jobs shows
    only their shape: 2,048 vectors are megabytes)."""
    if vectors:
        loaded = vectors_load(job_id=job.id)
        dimensions = len(loaded[0]) if loaded else None
        return {"embeddings": loaded, "dimensions": dimensions, "count": len(loaded)}
    dimensions, count = vectors_shape(job_id=job.id)
    return {"embeddings": None, "dimensions": dimensions, "count": count}
