from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from keys.demo import demo_key_ensure
from ledger.price_table import model_price_set
from ledger.selectors import price_for_model
from providers.services import provider_save

DEMO_OPENAI_PROVIDER = "local-openai"
DEMO_OPENAI_MODEL = "gpt-4o-mini"
DEMO_EMBEDDING_MODEL = "text-embedding-3-small"


class Command(BaseCommand):
    help = (
        "Create (once) the demo staff user (DEMO_USERNAME, DEMO_PASSWORD) with an API key. "
        "make run prints the login once every process is ready (ready_banner)."
    )

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        User = get_user_model()
        user, created = User.objects.get_or_create(
            username=settings.DEMO_USERNAME,
            defaults={"is_staff": True, "is_superuser": True, "email": "demo@example.com"},
        )
        if created:
            user.set_password(settings.DEMO_PASSWORD)
            user.save()
        demo_key_ensure(user=user)
        if not settings.ANTHROPIC_API_KEY:
            self._demo_openai_provider()
        self.stdout.write(
            f"demo user {user.username} {'created' if created else 'ready'}; the login and API "
            "key follow once every process is up (again: make token)"
        )

    def _demo_openai_provider(self) -> None:
        """With the fake provider standing in (no ANTHROPIC_API_KEY), an OpenAI-compatible
        provider beside Claude: ``local-openai`` at the fake provider's OpenAI-compatible API and
        its ``gpt-4o-mini``, at OpenAI's prices. A model priced elsewhere is left alone."""
        provider_save(
            name=DEMO_OPENAI_PROVIDER,
            kind="openai",
            base_url=f"{settings.FAKE_PROVIDER_URL.rstrip('/')}/openai/v1",
        )
        price = price_for_model(model=DEMO_OPENAI_MODEL)
        if price is None or price.provider_name == DEMO_OPENAI_PROVIDER:
            model_price_set(
                model=DEMO_OPENAI_MODEL,
                provider=DEMO_OPENAI_PROVIDER,
                input_per_mtok=Decimal("0.15"),
                output_per_mtok=Decimal("0.60"),
                cache_read_per_mtok=Decimal("0.075"),
                max_output_tokens=16_384,
            )
        price = price_for_model(model=DEMO_EMBEDDING_MODEL)
        if price is None or price.provider_name == DEMO_OPENAI_PROVIDER:
            model_price_set(
                model=DEMO_EMBEDDING_MODEL,
                provider=DEMO_OPENAI_PROVIDER,
                input_per_mtok=Decimal("0.02"),
                output_per_mtok=Decimal("0"),
                kind="embedding",
            )
        self.stdout.write(
            f"OpenAI-compatible demo: models {DEMO_OPENAI_MODEL} and {DEMO_EMBEDDING_MODEL} "
            f"(embeddings) on provider {DEMO_OPENAI_PROVIDER} (the fake provider)"
        )
