from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from keys.demo import demo_key_ensure


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
        self.stdout.write(
            f"demo user {user.username} {'created' if created else 'ready'}; the login and API "
            "key follow once every process is up (again: make token)"
        )
