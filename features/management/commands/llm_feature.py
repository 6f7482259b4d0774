"""``manage.py llm_feature pause|resume FEATURE``: a feature's jobs wait (accepted, nothing sent,
no budget reserved) until it is resumed; then they run in the order they were submitted.
``manage.py llm_feature priority FEATURE high|normal|low|none``: the priority of its jobs that
ask for none. And ``manage.py llm_feature show FEATURE``."""

from typing import Any

from django.core.management.base import CommandError, CommandParser

from api.errors import ApplicationError
from features.selectors import feature_policy_for, parked_count
from features.services import feature_policy_update, validate_feature
from llmops.commands import OperatorCommand


class Command(OperatorCommand):
    help = "Pause or resume a feature's jobs, or show its policy."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        for verb, what in (
            ("pause", "Its jobs wait (accepted, nothing sent, no budget reserved)."),
            ("resume", "Its waiting jobs run again, in the order they were submitted."),
            ("show", "Its policy, and how many jobs wait while it is paused."),
        ):
            action = actions.add_parser(verb, help=what)
            action.add_argument("feature", metavar="FEATURE")
        priority = actions.add_parser(
            "priority", help="The priority of its jobs that ask for none (none: the default)."
        )
        priority.add_argument("feature", metavar="FEATURE")
        priority.add_argument("priority", choices=["high", "normal", "low", "none"])

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            feature = validate_feature(options["feature"])
            if options["action"] == "show":
                policy = feature_policy_for(feature=feature)
            elif options["action"] == "priority":
                chosen = "" if options["priority"] == "none" else options["priority"]
                policy = feature_policy_update(feature=feature, default_priority=chosen)
            else:
                policy = feature_policy_update(feature=feature, paused=options["action"] == "pause")
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        paused = policy is not None and policy.paused
        waiting = parked_count(feature=feature) if paused else 0
        default = (policy.default_priority if policy else "") or "none"
        if options["action"] == "priority":
            self.stdout.write(f"feature {feature}: default priority {default}")
        elif options["action"] == "resume":
            self.stdout.write(f"feature {feature} resumed: its waiting jobs run in their order")
        elif paused:
            self.stdout.write(f"feature {feature} paused: {waiting} jobs wait")
        else:
            self.stdout.write(f"feature {feature}: running")
        if options["action"] == "show":
            self.stdout.write(f"default priority: {default}")
