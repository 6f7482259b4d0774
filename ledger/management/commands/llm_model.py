"""``manage.py llm_model add MODEL --provider NAME --input-price USD --output-price USD
[--max-output-tokens N] [--embedding]`` and ``manage.py llm_model list``: the price table."""

from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from api.errors import ApplicationError
from ledger.models import ModelPrice
from ledger.price_table import model_price_set
from llmops.commands import OperatorCommand


def usd(value: str) -> Decimal:
    try:
        return Decimal(value)
    except InvalidOperation:
        raise ValueError(value) from None


class Command(OperatorCommand):
    help = (
        "Price a model on a provider (add of an existing MODEL changes it from now on, as a new "
        "price row), or list the models priced now."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="Price a model; its jobs run on --provider.")
        add.add_argument("model", metavar="MODEL", help="The model id, as jobs name it.")
        add.add_argument("--provider", required=True, metavar="NAME")
        price_help = "USD per million tokens (0 for a self-hosted model)"
        add.add_argument("--input-price", required=True, type=usd, metavar="USD", help=price_help)
        add.add_argument("--output-price", required=True, type=usd, metavar="USD", help=price_help)
        add.add_argument(
            "--cache-read-price",
            type=usd,
            metavar="USD",
            help="USD per million cached prompt tokens (default: the input price).",
        )
        add.add_argument(
            "--max-output-tokens",
            type=int,
            metavar="N",
            help="The largest max_tokens its jobs may ask (default: kept, or 4096 when new).",
        )
        add.add_argument("--embedding", action="store_true", help="An embedding model.")
        actions.add_parser("list", help="List the models priced now, with their provider.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list":
            return self._list()
        try:
            change = model_price_set(
                model=options["model"],
                provider=options["provider"],
                input_per_mtok=options["input_price"],
                output_per_mtok=options["output_price"],
                cache_read_per_mtok=options["cache_read_price"],
                max_output_tokens=options["max_output_tokens"],
                kind=ModelPrice.Kind.EMBEDDING if options["embedding"] else ModelPrice.Kind.CHAT,
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        price = change.price
        verb = "added" if change.created else "updated" if change.changed else "unchanged"
        self.stdout.write(
            f"{verb} model {price.model} on {price.provider_name} ({price.kind}): "
            f"${price.input_per_mtok} in, ${price.output_per_mtok} out per million tokens, "
            f"max_output_tokens {price.max_output_tokens}"
        )

    def _list(self) -> None:
        now = timezone.now()
        current: dict[str, ModelPrice] = {}
        for price in ModelPrice.objects.filter(effective_from__lte=now).order_by(
            "model", "-effective_from"
        ):
            current.setdefault(price.model, price)
        rows = [("MODEL", "PROVIDER", "KIND", "INPUT", "OUTPUT", "CACHE READ", "MAX OUTPUT")]
        for model, p in sorted(current.items()):
            rows.append(
                (
                    model,
                    p.provider_name,
                    p.kind,
                    str(p.input_per_mtok),
                    str(p.output_per_mtok),
                    str(p.cache_read_per_mtok),
                    str(p.max_output_tokens),
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write(
                "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
            )
