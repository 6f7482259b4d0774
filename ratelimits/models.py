from django.core.validators import MinValueValidator
from django.db import models

PROVIDER_HELP = "The provider whose limit this is. The job path calls only anthropic today."


class RateLimit(models.Model):
    """Limits staff set for one provider and model, shared by every worker on every host.

    Each field is optional: an empty one falls back to the LLM_RATE_LIMITS setting, and the
    limiter never goes above what the provider itself reports in its anthropic-ratelimit-*
    headers (the smaller of a configured and a learned limit applies). See
    ratelimits/configured_limits.py.
    """

    provider = models.CharField(max_length=40, default="anthropic", help_text=PROVIDER_HELP)
    model = models.CharField(
        max_length=100,
        help_text=(
            "The model id as jobs name it, e.g. claude-sonnet-4-6; or * for every model of the "
            "provider that has no row of its own. Each model has its own window: the provider "
            "pools some model families (all Opus 4 models share one limit), so give models that "
            "share a pool limits that add up to it."
        ),
    )
    rpm = models.PositiveIntegerField(
        "requests per minute",
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Calls started in any 60 seconds, at most. Empty: LLM_RATE_LIMITS, else learned.",
    )
    input_tpm = models.PositiveIntegerField(
        "input tokens per minute",
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=(
            "Input tokens (not counting prompt-cache reads) in any 60 seconds. A call reserves "
            "its input upper bound until its answer gives the real count. Empty: "
            "LLM_RATE_LIMITS, else learned."
        ),
    )
    output_tpm = models.PositiveIntegerField(
        "output tokens per minute",
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=(
            "Output tokens in any 60 seconds. A call reserves its max_tokens until its answer "
            "gives the real count. Empty: LLM_RATE_LIMITS, else learned."
        ),
    )
    enabled = models.BooleanField(
        default=True,
        help_text="Off: this row is ignored (LLM_RATE_LIMITS and the learned limits apply).",
    )
    note = models.CharField(
        max_length=200, blank=True, help_text="Why these numbers (tier, shared key...)."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["provider", "model"]
        constraints = [
            models.UniqueConstraint(fields=["provider", "model"], name="unique_rate_limit_model")
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"
