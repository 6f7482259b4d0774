"""``manage.py llm_key create --user alice --name nightly --scopes jobs:write``: API keys from the
shell. ``create`` and ``rotate`` print the secret alone on standard output (``KEY=$(...)``),
once; what the key is goes to standard error. ``list`` and ``revoke`` as their names say."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser

from api.errors import ApplicationError
from keys.models import ApiKey
from keys.scopes import ALL_SCOPES
from keys.selectors import api_key_budget
from keys.services import api_key_create, api_key_revoke, api_key_rotate
from keys.validation import validate_key_request, validate_rotate_request
from llmops.commands import OperatorCommand


def _describe(key: ApiKey) -> str:
    budget = api_key_budget(key)
    limits = [f"${budget.limit_usd} a {budget.period}"] if budget else []
    if key.rpm:
        limits.append(f"{key.rpm} submissions a minute")
    expires = key.expires_at.isoformat() if key.expires_at else "never"
    return (
        f"key {key.id} {key.name!r} of {key.user.get_username()} ({key.prefix}...): "
        f"{', '.join(key.scopes)}; expires {expires}" + (f"; {', '.join(limits)}" if limits else "")
    )


class Command(OperatorCommand):
    help = (
        "Create, list, revoke or rotate API keys. The secret is printed once, at create or rotate."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="Create a key and print its secret once.")
        create.add_argument("--user", required=True, help="Username (or id) of the owner.")
        create.add_argument("--name", required=True, help="What the key is for.")
        create.add_argument(
            "--scopes",
            required=True,
            help=f"Comma-separated, of: {', '.join(ALL_SCOPES)}.",
        )
        create.add_argument("--expires-at", help="ISO 8601 datetime (UTC unless it says).")
        create.add_argument("--max-budget-usd", help="The key's spend cap per period.")
        create.add_argument("--budget-period", choices=["day", "month"], default="month")
        create.add_argument("--rpm", type=int, help="Submissions per minute.")
        listing = actions.add_parser("list", help="A user's keys (or every key).")
        listing.add_argument("--user", help="Username (or id).")
        revoke = actions.add_parser("revoke", help="Revoke a key: 401 at once.")
        revoke.add_argument("key_id", type=int)
        rotate = actions.add_parser("rotate", help="A new secret; the old one works a while.")
        rotate.add_argument("key_id", type=int)
        rotate.add_argument("--grace-seconds", type=int, help="Default: 86400 (24 hours).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, f"_{options['action']}")(options)
        except ApplicationError as exc:
            field = (exc.detail or {}).get("field") if isinstance(exc.detail, dict) else None
            flag = f"--{field.replace('_', '-')}: " if field else ""
            raise CommandError(f"{flag}{exc.message}") from exc

    def _user(self, value: str) -> Any:
        users = get_user_model().objects
        found = users.filter(username=value).first()
        if found is None and value.isascii() and value.isdigit():
            found = users.filter(id=int(value)).first()
        if found is None:
            raise CommandError(f"--user: no user {value!r}.")
        return found

    def _key(self, key_id: int) -> ApiKey:
        key = ApiKey.objects.select_related("user").filter(id=key_id).first()
        if key is None:
            raise CommandError(f"No API key {key_id}.")
        return key

    def _create(self, options: dict[str, Any]) -> None:
        user = self._user(options["user"])
        request = validate_key_request(
            {
                "name": options["name"],
                "scopes": [s.strip() for s in options["scopes"].split(",") if s.strip()],
                "expires_at": options["expires_at"],
                "max_budget_usd": options["max_budget_usd"],
                "budget_period": options["budget_period"],
                "rpm": options["rpm"],
            }
        )
        key, secret = api_key_create(user=user, request=request)
        self.stderr.write(f"Created {_describe(key)}. Its secret, shown this once:")
        self.stdout.write(secret)

    def _list(self, options: dict[str, Any]) -> None:
        keys = ApiKey.objects.select_related("user").prefetch_related("budgets").order_by("id")
        if options["user"]:
            keys = keys.filter(user=self._user(options["user"]))
        for key in keys:
            state = "revoked" if key.revoked_at else ("active" if key.is_active else "expired")
            used = key.last_used_at.isoformat() if key.last_used_at else "never"
            self.stdout.write(f"{_describe(key)}; {state}; last used {used}")

    def _revoke(self, options: dict[str, Any]) -> None:
        key = api_key_revoke(key=self._key(options["key_id"]))
        self.stdout.write(f"Revoked {_describe(key)} at {key.revoked_at:%Y-%m-%d %H:%M:%S} UTC.")

    def _rotate(self, options: dict[str, Any]) -> None:
        grace = options["grace_seconds"]
        rotation = api_key_rotate(
            key=self._key(options["key_id"]),
            grace_seconds=validate_rotate_request(
                {} if grace is None else {"grace_seconds": grace}
            ),
        )
        self.stderr.write(
            f"Rotated {_describe(rotation.key)}; the old secret works until "
            f"{rotation.previous_expires_at.isoformat()}. The new secret, shown this once:"
        )
        self.stdout.write(rotation.secret)
