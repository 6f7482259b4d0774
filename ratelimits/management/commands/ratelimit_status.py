"""Print what every rate limiter knows: configured, learned and in-force limits, use, pause."""

from typing import Any

from django.core.management.base import BaseCommand

from ratelimits.selectors import rate_limit_statuses


class Command(BaseCommand):
    help = (
        "Show each provider/model limiter: configured limits (and where), the limits the "
        "provider reported, the limits in force, this minute's use, calls in flight, the pause."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        statuses = rate_limit_statuses()
        if not statuses:
            self.stdout.write("No limiter has run yet and nothing is configured.")
        for status in statuses:
            head = f"{status.provider}/{status.model}: in flight {status.in_flight}, "
            head += f"waiting {status.waiting}"
            if status.paused_until:
                head += f", PAUSED until {status.paused_until.isoformat()}"
            if status.learning:
                head += ", learning (no answer seen yet)"
            self.stdout.write(head)
            for row in status.rows:
                learned = row["learned"]
                learned_text = (
                    f"{learned.limit} (remaining {learned.remaining}, reset "  # type: ignore[attr-defined]
                    f"{learned.reset_at.isoformat() if learned.reset_at else '?'})"  # type: ignore[attr-defined]
                    if learned
                    else "-"
                )
                configured = row["configured"] or "-"
                if row["source"]:
                    configured = f"{configured} ({row['source']})"
                self.stdout.write(
                    f"  {row['label']:<20} configured {configured}; learned {learned_text}; "
                    f"in force {row['effective'] or 'none'}; used {row['used']}"
                )
            if status.used_by_feature:
                shares = ", ".join(
                    f"{feature} {used['requests']}"
                    for feature, used in sorted(status.used_by_feature.items())
                )
                self.stdout.write(f"  requests this minute by feature: {shares}")
