"""How a batch is shown: by the API, in its live events and in its callback."""

from rest_framework import serializers

from batches.models import Batch

__all__ = ["BatchOutputSerializer", "BatchRowSerializer"]

COUNTER_FIELDS = ["total", "pending", "completed", "failed", "cancelled"]


class BatchRowSerializer(serializers.ModelSerializer):
    """A batch in the list: everything but its cost (a sum over its jobs, on its own page)."""

    tags = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = Batch
        fields = [
            "id",
            "name",
            "kind",
            "status",
            *COUNTER_FIELDS,
            "tags",
            "deadline",
            "created_at",
            "finished_at",
        ]


class BatchOutputSerializer(BatchRowSerializer):
    """``GET /api/v1/batches/<id>/``, ``batch.finished`` and the callback. Counters count items;
    ``cost_usd`` is what its jobs cost so far (an annotation of ``batches.selectors``)."""

    cost_usd = serializers.DecimalField(
        max_digits=16, decimal_places=6, coerce_to_string=True, read_only=True
    )

    class Meta(BatchRowSerializer.Meta):
        fields = [
            "id",
            "name",
            "kind",
            "status",
            *COUNTER_FIELDS,
            "tags",
            "deadline",
            "cost_usd",
            "created_at",
            "finished_at",
        ]
