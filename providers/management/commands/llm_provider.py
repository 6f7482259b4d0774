"""``manage.py llm_provider add NAME --kind openai --base-url URL [--api-key-env VAR]``,
``manage.py llm_provider list`` and ``manage.py llm_provider pause|resume NAME``: the providers
the job path may call."""

from typing import Any

from django.core.management.base import CommandError, CommandParser

from api.errors import ApplicationError
from llmops.commands import OperatorCommand
from providers.models import Provider
from providers.services import provider_pause, provider_save


class Command(OperatorCommand):
    help = "Add or change a model provider (add of an existing NAME changes it), or list them."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="Add a provider, or change the one named NAME.")
        add.add_argument("name", metavar="NAME", help="A slug: openai, ollama, vllm-east...")
        add.add_argument("--kind", required=True, choices=Provider.Kind.values)
        add.add_argument(
            "--base-url",
            default="",
            help="The API's base URL, e.g. https://api.openai.com/v1, http://127.0.0.1:11434/v1 "
            "(required for --kind openai).",
        )
        add.add_argument(
            "--api-key-env",
            default="",
            metavar="VAR",
            help="The NAME of the environment variable holding the key (never the key itself).",
        )
        add.add_argument("--disabled", action="store_true", help="Refuse submits for its models.")
        actions.add_parser("list", help="List the providers.")
        for verb, what in (
            ("pause", "Its models' jobs wait (accepted, nothing sent) until it is resumed."),
            ("resume", "Its waiting jobs run again, in the order they were submitted."),
        ):
            action = actions.add_parser(verb, help=what)
            action.add_argument("name", metavar="NAME")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list":
            return self._list()
        if options["action"] in ("pause", "resume"):
            try:
                provider = provider_pause(
                    name=options["name"], paused=options["action"] == "pause", by="llm_provider"
                )
            except ApplicationError as exc:
                raise CommandError(exc.message) from exc
            state = "paused: its jobs wait" if provider.paused else "resumed: its jobs run"
            self.stdout.write(f"provider {provider.name} {state}")
            return None
        try:
            provider, created = provider_save(
                name=options["name"],
                kind=options["kind"],
                base_url=options["base_url"],
                api_key_env=options["api_key_env"],
                enabled=not options["disabled"],
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"{'added' if created else 'updated'} provider {provider.name}")

    def _list(self) -> None:
        rows = [("NAME", "KIND", "BASE URL", "KEY FROM", "ENABLED", "PAUSED")]
        for p in Provider.objects.order_by("name"):
            rows.append(
                (
                    p.name,
                    p.kind,
                    p.base_url or "(ANTHROPIC_BASE_URL)",
                    p.api_key_env or "-",
                    "yes" if p.enabled else "no",
                    "yes" if p.paused else "no",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write(
                "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
            )
