"""Per-feature settings, one home: a feature's policy (its fallback models now; later defaults
beside them). A feature without a row has the defaults: no fallback."""

from django.conf import settings
from django.db import models

from jobs.priorities import PRIORITY_CHOICES


class FeaturePolicy(models.Model):
    """What a feature's jobs may do beyond their own request: the models they move to, in order,
    when their model's provider is out (jobs/fallbacks.py)."""

    feature = models.SlugField(max_length=64, unique=True)
    fallback_models = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            "Priced models tried in order after the job's own model: when its provider's "
            "breaker is open, after LLM_FALLBACK_AFTER_ATTEMPTS transient failures on it, or "
            "when the limiter cannot admit it within LLM_FALLBACK_AFTER_WAIT_SECONDS."
        ),
    )
    mode = models.CharField(
        max_length=10,
        choices=[("realtime", "Real time"), ("deferred", "Deferred (batch price)")],
        default="realtime",
        help_text="The mode of the feature's jobs that do not ask for one.",
    )
    deadline_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The deadline of the feature's jobs that give none, in seconds from submit.",
    )
    default_priority = models.CharField(
        max_length=6,
        blank=True,
        choices=PRIORITY_CHOICES,
        help_text="The priority of the feature's jobs that do not ask for one (empty: normal, "
        "or high for a feature in LLM_PRIORITY_FEATURES).",
    )
    paused = models.BooleanField(
        default=False,
        help_text="Its jobs are accepted and wait (queued, held_reason feature_paused): nothing "
        "is sent and no budget reserved until it is resumed; then they run in their order.",
    )
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        ordering = ["feature"]
        verbose_name = "feature policy"
        verbose_name_plural = "feature policies"

    def __str__(self) -> str:
        return self.feature
