"""``manage.py webhook_secret --key 12`` (or ``--feature summarize``): a new webhook signing
secret for an API key's deliveries (or, for what was submitted without a key, a feature's),
printed alone on standard output (``SECRET=$(...)``), once: nothing stores it. The previous
secret goes on signing beside it for ``WEBHOOK_SECRET_ROLL_GRACE_SECONDS``."""

from typing import Any

from django.core.management.base import CommandError, CommandParser

from keys.models import ApiKey
from llmops.commands import OperatorCommand
from webhooks.signing import feature_owner, key_owner
from webhooks.signing_secrets import signing_secret_roll


class Command(OperatorCommand):
    help = "Roll the webhook signing secret of an API key or a feature and print it once."

    def add_arguments(self, parser: CommandParser) -> None:
        owner = parser.add_mutually_exclusive_group(required=True)
        owner.add_argument("--key", type=int, help="The API key's id (llm_key list).")
        owner.add_argument("--feature", help="A feature slug: its jobs submitted without a key.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["key"] is not None:
            key = ApiKey.objects.filter(id=options["key"]).first()
            if key is None:
                raise CommandError(f"No API key {options['key']}.")
            owner, what = key_owner(key.id), f"API key {key.id} ({key.prefix}...)"
        else:
            owner, what = feature_owner(options["feature"]), f"feature {options['feature']}"
        rolled = signing_secret_roll(owner=owner)
        until = rolled.previous_valid_until
        grace = f"; the previous one signs beside it until {until.isoformat()}" if until else ""
        self.stderr.write(f"New webhook signing secret of {what}, shown once{grace}.")
        self.stdout.write(rolled.secret)
