"""Seed the Claude prices in force (USD per million tokens)."""

from datetime import datetime, timezone
from decimal import Decimal

from django.db import migrations

EFFECTIVE_FROM = datetime(2025, 1, 1, tzinfo=timezone.utc)

# model: (input, 5-minute cache write, 1-hour cache write, cache read, output, max output tokens)
PRICES = {
    "claude-opus-4-6": ("5", "6.25", "10", "0.50", "25", 128_000),
    "claude-opus-4-5": ("5", "6.25", "10", "0.50", "25", 64_000),
    "claude-opus-4-1": ("15", "18.75", "30", "1.50", "75", 32_000),
    "claude-sonnet-4-6": ("3", "3.75", "6", "0.30", "15", 64_000),
    "claude-sonnet-4-5": ("3", "3.75", "6", "0.30", "15", 64_000),
    "claude-sonnet-4": ("3", "3.75", "6", "0.30", "15", 64_000),
    "claude-haiku-4-5": ("1", "1.25", "2", "0.10", "5", 64_000),
}


def seed(apps, schema_editor):
    ModelPrice = apps.get_model("ledger", "ModelPrice")
    for model, (inp, write_5m, write_1h, read, out, max_output) in PRICES.items():
        ModelPrice.objects.get_or_create(
            model=model,
            effective_from=EFFECTIVE_FROM,
            defaults={
                "input_per_mtok": Decimal(inp),
                "cache_write_5m_per_mtok": Decimal(write_5m),
                "cache_write_1h_per_mtok": Decimal(write_1h),
                "cache_read_per_mtok": Decimal(read),
                "output_per_mtok": Decimal(out),
                "batch_discount": Decimal("0.5"),
                "max_output_tokens": max_output,
            },
        )


def unseed(apps, schema_editor):
    ModelPrice = apps.get_model("ledger", "ModelPrice")
    ModelPrice.objects.filter(model__in=PRICES, effective_from=EFFECTIVE_FROM).delete()


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
