from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ops.ready_banner import demo_login


class Command(BaseCommand):
    help = "Print the demo user's API key alone on its line (make token; TOKEN=$(make -s token))"

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        login = demo_login()
        if login is None:
            raise CommandError(
                f"no demo user {settings.DEMO_USERNAME!r} yet: make run creates it "
                "(or: python manage.py ensure_demo_user)"
            )
        self.stdout.write(login.token)
