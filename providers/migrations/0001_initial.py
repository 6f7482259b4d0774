"""Providers as rows, and the row of the provider the job path has always called."""

import django.core.validators
from django.db import migrations, models


def seed(apps, schema_editor):
    Provider = apps.get_model("providers", "Provider")
    Provider.objects.get_or_create(
        name="anthropic",
        defaults={"kind": "anthropic", "base_url": "", "api_key_env": "ANTHROPIC_API_KEY"},
    )


class Migration(migrations.Migration):
    initial = True

    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="Provider",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.SlugField(help_text="How jobs, breakers, rate limits, metrics and the ledger name it, e.g. openai.", max_length=40, unique=True)),
                ("kind", models.CharField(choices=[("anthropic", "Anthropic Messages API"), ("openai", "OpenAI-compatible (Chat Completions: OpenAI, Ollama, vLLM...)")], max_length=20)),
                ("base_url", models.CharField(blank=True, help_text="The API's base URL, e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1 (Ollama). Empty for anthropic: ANTHROPIC_BASE_URL (the fake provider without ANTHROPIC_API_KEY).", max_length=300)),
                ("api_key_env", models.CharField(blank=True, help_text="The NAME of the environment variable that holds the key (never the key itself), e.g. OPENAI_API_KEY. Empty: no key (a local Ollama or vLLM).", max_length=100, validators=[django.core.validators.RegexValidator("^[A-Za-z_][A-Za-z0-9_]*$", "An environment variable's name: letters, digits and _.")], verbose_name="API key environment variable")),
                ("enabled", models.BooleanField(default=True, help_text="Off: submits for its models are refused; jobs already queued still run.")),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={"ordering": ["name"]},
        ),
        migrations.RunPython(seed, migrations.RunPython.noop),
    ]
