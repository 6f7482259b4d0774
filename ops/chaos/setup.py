"""What a drill sets up in the database before it starts, and takes away after its checks:
the user who owns its jobs and a budget over them (so that every attempt reserves and settles,
and the check that no budget goes negative has something to look at)."""

from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction

from ledger.models import Budget
from ops.chaos.safety import DRILL_USERNAME

__all__ = ["BUDGET_LIMIT_USD", "drill_budget_create", "drill_budget_remove", "drill_user_ensure"]

BUDGET_LIMIT_USD = Decimal("10000")
"""Far above what a drill spends (about $0.002 a job): the budget is reserved and settled on
every attempt, never refused."""


def drill_user_ensure() -> User:
    user, created = get_user_model().objects.get_or_create(username=DRILL_USERNAME)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user  # type: ignore[return-value]


@transaction.atomic
def drill_budget_create(*, user: User) -> Budget:
    return Budget.objects.create(
        scope=Budget.Scope.USER,
        user=user,
        period=Budget.Period.DAY,
        limit_usd=BUDGET_LIMIT_USD,
        soft_alert_percent=100,
        on_exceed=Budget.OnExceed.REJECT,
    )


def drill_budget_remove(*, budget_id: int) -> None:
    """Its windows and reservations go with it; the ledger rows stay (they never reference a
    budget)."""
    Budget.objects.filter(id=budget_id).delete()
