from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Create (once) a demo staff user with an API token, and print both."

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        User = get_user_model()
        user, created = User.objects.get_or_create(
            username=settings.DEMO_USERNAME,
            defaults={"is_staff": True, "is_superuser": True, "email": "demo@example.com"},
        )
        if created:
            user.set_password(settings.DEMO_PASSWORD)
            user.save()
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(f"demo user:     {user.username}")
        if created:
            self.stdout.write(f"password:      {settings.DEMO_PASSWORD}   (admin at /admin/)")
        else:
            self.stdout.write("password:      as set when it was created (DEMO_PASSWORD)")
        self.stdout.write(f"API token:     {token.key}")
        self.stdout.write(
            f'try:  curl -H "Authorization: Token {token.key}" http://127.0.0.1:8000/api/v1/jobs/'
        )
