"""The embeddings API's bodies as the OpenAPI schema describes them (embeddings/validation.py
enforces them)."""

from drf_spectacular.utils import OpenApiExample
from rest_framework import serializers

from embeddings.validation import MAX_DIMENSIONS, MAX_INPUTS
from jobs.validation import FEATURE_RE, MAX_FEATURE_LENGTH

__all__ = ["SUBMIT_EXAMPLE", "EmbeddingOutputSerializer", "EmbeddingSubmitSerializer"]


class EmbeddingSubmitSerializer(serializers.Serializer):
    """``POST /api/v1/embeddings/``: no other field is accepted (``unknown_field``)."""

    feature = serializers.RegexField(FEATURE_RE.pattern, max_length=MAX_FEATURE_LENGTH)
    model = serializers.CharField(
        max_length=100,
        help_text="A priced embedding model (`llm_model add ... --embedding`); a chat model "
        "answers `invalid_model`.",
    )
    input = serializers.ListField(
        child=serializers.CharField(),
        min_length=1,
        max_length=MAX_INPUTS,
        help_text=f"1 to {MAX_INPUTS} non-empty texts (a single string is accepted too).",
    )
    dimensions = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_DIMENSIONS,
        help_text="Shorter vectors, where the model supports it (text-embedding-3-*).",
    )
    metadata = serializers.DictField(required=False, allow_null=True)


class EmbeddingOutputSerializer(serializers.Serializer):
    embeddings = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField()),
        allow_null=True,
        help_text="The vectors, in input order (kept as float32); null in lists.",
    )
    dimensions = serializers.IntegerField(allow_null=True)
    count = serializers.IntegerField()


SUBMIT_EXAMPLE = OpenApiExample(
    "Two texts",
    value={
        "feature": "search-index",
        "model": "text-embedding-3-small",
        "input": ["How do I reset my password?", "Refund policy"],
    },
    request_only=True,
)
