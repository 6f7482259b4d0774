"""How a job is shown: ``JobOutputSerializer``, the body of the job API's answers and the
payload of its live events (jobs/events.py), one shape for both."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs.api_schema import JobErrorSerializer, JobOutputTextSerializer, JobUsageSerializer
from jobs.models import LlmJob
from jobs.selectors import job_output

__all__ = ["JobOutputSerializer"]


class JobOutputSerializer(serializers.ModelSerializer):
    output = serializers.SerializerMethodField()
    usage = serializers.SerializerMethodField()
    cost_usd = serializers.DecimalField(max_digits=16, decimal_places=6, coerce_to_string=True)
    error = serializers.SerializerMethodField()
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)
    deadline = serializers.DateTimeField(read_only=True, allow_null=True)
    duration_ms = serializers.IntegerField(read_only=True, allow_null=True)
    provider_batch = serializers.SerializerMethodField(
        help_text="The provider's id of the message batch its last deferred attempt went in."
    )
    served_by = serializers.SerializerMethodField(
        help_text="The model that answered: ``model``, or a fallback of the feature's policy "
        "(null until the job completes)."
    )
    held_reason = serializers.SerializerMethodField(
        help_text="Why a waiting job waits with nothing sent: feature_paused or provider_paused "
        "(null otherwise)."
    )

    class Meta:
        model = LlmJob
        fields = [
            "id",
            "status",
            "feature",
            "model",
            "served_by",
            "kind",
            "mode",
            "priority",
            "provider_batch",
            "concurrency_key",
            "tags",
            "deadline",
            "attempts",
            "created_at",
            "started_at",
            "completed_at",
            "duration_ms",
            "next_attempt_at",
            "output",
            "usage",
            "cost_usd",
            "error",
            "held_reason",
            "pruned_at",
        ]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_provider_batch(self, job: LlmJob) -> str | None:
        if job.provider_batch_id is None:
            return None
        return job.provider_batch.provider_batch_id if job.provider_batch else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_held_reason(self, job: LlmJob) -> str | None:
        """Why a waiting job is parked (feature_paused, provider_paused); null otherwise."""
        return job.held_reason or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_served_by(self, job: LlmJob) -> str | None:
        return job.served_by or None

    @extend_schema_field(JobOutputTextSerializer(allow_null=True))
    def get_output(self, job: LlmJob) -> dict | None:
        return job_output(job, partial=self.context.get("partial", False))

    @extend_schema_field(JobUsageSerializer(allow_null=True))
    def get_usage(self, job: LlmJob) -> dict | None:
        if job.input_tokens is None:
            return None
        return {
            "input_tokens": job.input_tokens,
            "output_tokens": job.output_tokens,
            "cache_creation_input_tokens": job.cache_creation_input_tokens,
            "cache_read_input_tokens": job.cache_read_input_tokens,
        }

    @extend_schema_field(JobErrorSerializer(allow_null=True))
    def get_error(self, job: LlmJob) -> dict | None:
        if not job.error_code:
            return None
        error = {
            "code": job.error_code,
            "http_status": job.error_http_status,
            "message": job.error_message,
            "severity": job.error_severity,
        }
        if job.deadline_stopped:
            error["deadline_stopped"] = True
        return error
