"""Tags: up to ten slugs a client puts on a job, a batch or an agent run to find and cost them.

Stored twice on purpose: as a JSON list on the row (what the API shows, no join) and as one
row per tag in a small table (``JobTag``, ``BatchTag``, ``AgentRunTag``) with an index on
(tag, owner), which ``?tag=`` and the cost report's ``group_by=tag`` read; MariaDB has no index
for a JSON contains. Tags never change after submit, so the two cannot drift. They stay out of
Prometheus labels (unbounded values).
"""

import re
from typing import Any

from api.errors import ValidationFailed
from jobs.models import JobTag, LlmJob

__all__ = [
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "TAG_RE",
    "job_tag_rows",
    "validate_tag_filter",
    "validate_tags",
]

MAX_TAGS = 10
MAX_TAG_LENGTH = 64
TAG_RE = re.compile(r"^[-a-zA-Z0-9_]+\Z")
"""Django's slug (``validate_slug``)."""


def validate_tags(value: Any, *, field: str = "tags") -> list[str]:
    """The tags of a submit body, lowercased (MariaDB compares them without case anyway),
    without duplicates, in the order given; ``400 invalid_tags`` otherwise."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_TAGS:
        raise ValidationFailed(
            f"tags must be a list of at most {MAX_TAGS} slugs.",
            code="invalid_tags",
            detail={"field": field},
        )
    tags: list[str] = []
    for i, tag in enumerate(value):
        if not isinstance(tag, str) or len(tag) > MAX_TAG_LENGTH or not TAG_RE.match(tag):
            raise ValidationFailed(
                f"{field}[{i}] must be a slug (letters, digits, '-', '_'), at most "
                f"{MAX_TAG_LENGTH} characters.",
                code="invalid_tags",
                detail={"field": f"{field}[{i}]"},
            )
        if tag.lower() not in tags:
            tags.append(tag.lower())
    return tags


def validate_tag_filter(value: str | None) -> str | None:
    """A list's ``?tag=``: one slug, lowercased, or ``400 invalid_filter``."""
    if not value:
        return None
    if len(value) > MAX_TAG_LENGTH or not TAG_RE.match(value):
        raise ValidationFailed(
            "tag must be a slug (letters, digits, '-', '_').",
            code="invalid_filter",
            detail={"field": "tag"},
        )
    return value.lower()


def job_tag_rows(jobs: list[LlmJob]) -> list[JobTag]:
    """The ``JobTag`` rows of new jobs, to insert with them."""
    return [JobTag(job_id=job.id, tag=tag) for job in jobs for tag in job.tags or []]
