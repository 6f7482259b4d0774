"""The batches API's bodies as the OpenAPI schema describes them (/api/schema/).

Only a description: batches/validation.py and the job rules (jobs/bulk.py) enforce the body.
An item is a job body without ``feature``, ``model`` and ``concurrency_key`` (the batch's), so
its schema is the job's with those fields removed.
"""

from drf_spectacular.utils import OpenApiExample
from rest_framework import serializers

from batches.models import Batch
from batches.validation import MAX_CALLBACK_URL_LENGTH, MAX_NAME_LENGTH
from jobs.api_schema import JobSubmitSerializer
from jobs.priorities import PRIORITY_CHOICES
from jobs.validation import FEATURE_RE, MAX_FEATURE_LENGTH

__all__ = [
    "SUBMIT_EXAMPLE",
    "BatchItemSerializer",
    "BatchSubmitSerializer",
    "BatchSubmittedSerializer",
]


class BatchItemSerializer(JobSubmitSerializer):
    """One item: a job body whose feature and model are the batch's."""

    feature = None  # type: ignore[assignment]
    model = None  # type: ignore[assignment]
    concurrency_key = None  # type: ignore[assignment]
    priority = None  # type: ignore[assignment]


class BatchSubmitSerializer(serializers.Serializer):
    """``POST /api/v1/batches/``: no other field is accepted (``unknown_field``)."""

    name = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=MAX_NAME_LENGTH
    )
    feature = serializers.RegexField(
        FEATURE_RE.pattern,
        max_length=MAX_FEATURE_LENGTH,
        help_text="Every item's feature: budgets, reports and metrics group by it.",
    )
    kind = serializers.ChoiceField(
        choices=["chat", "embedding"],
        required=False,
        default="chat",
        help_text="embedding: each item is `{input, metadata}` (one text); identical texts are "
        "embedded once, in jobs of LLM_EMBEDDING_GROUP_SIZE texts; the vectors are read from "
        "GET .../embeddings/.",
    )
    model = serializers.CharField(
        max_length=100,
        help_text="Every item's model (priced; an embedding model for kind embedding).",
    )
    dimensions = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, help_text="kind embedding only."
    )
    items = serializers.ListField(
        child=BatchItemSerializer(),
        min_length=1,
        help_text=(
            "At most LLM_BATCH_MAX_ITEMS (10,000). Identical items run once and share the "
            "result. One bad item refuses the batch: `invalid_items` lists every bad index."
        ),
    )
    deadline = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="ISO 8601: every job's deadline (see the jobs API); in the past: "
        "`invalid_deadline`.",
    )
    deadline_seconds = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=0,
        help_text="The deadline as seconds after the submit, for every job; not with `deadline`.",
    )
    tags = serializers.ListField(
        child=serializers.SlugField(max_length=64),
        required=False,
        allow_null=True,
        max_length=10,
        help_text="Slugs (lowercased), on the batch and every job (`?tag=`, `group_by=tag`).",
    )
    priority = serializers.ChoiceField(
        choices=PRIORITY_CHOICES,
        required=False,
        allow_null=True,
        help_text="Every job's priority (absent: the feature policy's default, else normal).",
    )
    allow_failures = serializers.BooleanField(
        required=False,
        default=True,
        help_text="false: the first failed item cancels the rest and the batch ends `failed`.",
    )
    callback_url = serializers.URLField(
        required=False,
        allow_null=True,
        max_length=MAX_CALLBACK_URL_LENGTH,
        help_text="http(s); receives one POST when the batch finishes.",
    )


SUBMIT_EXAMPLE = OpenApiExample(
    "Three summaries, two of them identical",
    value={
        "name": "ticket summaries",
        "feature": "ticket-summary",
        "model": "claude-haiku-4-5",
        "items": [
            {"messages": [{"role": "user", "content": text}], "max_tokens": 128}
            for text in ("Summarise: my order is late", "Summarise: refund please")
            + ("Summarise: my order is late",)
        ],
        "allow_failures": True,
        "callback_url": "https://example.com/hooks/batches",
    },
    request_only=True,
)


class BatchSubmittedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=Batch.Status.choices)
    status_url = serializers.CharField(help_text="Poll here; also in the Location header.")
