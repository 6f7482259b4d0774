"""The providers the job path may call, as rows staff edit (the admin, ``manage.py llm_provider``).

A row names where a provider's API is and which environment variable holds its key: keys never
enter the database. Each priced model belongs to one provider (``ledger.ModelPrice.provider``);
the breaker, the limiter, the metrics and the ledger keep each provider apart by its ``name``.
"""

from django.core.validators import RegexValidator
from django.db import models

__all__ = ["DEFAULT_PROVIDER", "Provider"]

DEFAULT_PROVIDER = "anthropic"
"""The provider of the Anthropic Messages API, configured by ``ANTHROPIC_API_KEY`` and
``ANTHROPIC_BASE_URL``; the provider of every model priced before providers were rows."""

_ENV_NAME = RegexValidator(
    r"^[A-Za-z_][A-Za-z0-9_]*$", "An environment variable's name: letters, digits and _."
)


class Provider(models.Model):
    class Kind(models.TextChoices):
        ANTHROPIC = "anthropic", "Anthropic Messages API"
        OPENAI = "openai", "OpenAI-compatible (Chat Completions: OpenAI, Ollama, vLLM...)"

    name = models.SlugField(
        max_length=40,
        unique=True,
        help_text="How jobs, breakers, rate limits, metrics and the ledger name it, e.g. openai.",
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    base_url = models.CharField(
        max_length=300,
        blank=True,
        help_text=(
            "The API's base URL, e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1 "
            "(Ollama). Empty for anthropic: ANTHROPIC_BASE_URL (the fake provider without "
            "ANTHROPIC_API_KEY)."
        ),
    )
    api_key_env = models.CharField(
        "API key environment variable",
        max_length=100,
        blank=True,
        validators=[_ENV_NAME],
        help_text=(
            "The NAME of the environment variable that holds the key (never the key itself), "
            "e.g. OPENAI_API_KEY: it ends in _API_KEY (or is listed in LLM_PROVIDER_KEY_ENVS) "
            "and is never one of llmops's own settings. Empty: no key (a local Ollama or vLLM)."
        ),
    )
    enabled = models.BooleanField(
        default=True,
        help_text="Off: submits for its models are refused; jobs already queued still run.",
    )
    paused = models.BooleanField(
        default=False,
        help_text="Its models' jobs are accepted and wait (queued, held_reason provider_paused): "
        "nothing is sent to it until it is resumed; then they run in their order.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        permissions = [
            (
                "change_provider_endpoint",
                "Can change where a provider's calls go (its base URL and key variable)",
            )
        ]

    def __str__(self) -> str:
        return self.name
