from django.core.management.base import BaseCommand, CommandParser

from ops.ready_banner import banner_lines, demo_login, wait_until_ready


class Command(BaseCommand):
    help = (
        "Wait until every process of make run is ready, then print where everything is, the "
        "demo login and the API token (ops/ready_banner.py)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the web server")
        parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait")

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        base_url = options["url"].rstrip("/")
        missing = wait_until_ready(base_url=base_url, timeout=options["timeout"])
        lines = banner_lines(base_url=base_url, login=demo_login(), missing=missing)
        self.stdout.write("\n".join(["", *lines, ""]))
        self.stdout.flush()
