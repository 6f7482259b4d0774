"""Reads of the webhook log."""

from django.db.models import QuerySet
from django.urls import reverse

from webhooks.models import WebhookDelivery

__all__ = ["deliveries_admin_url", "deliveries_of"]


def deliveries_of(*, subject_kind: str, subject_id: object) -> QuerySet[WebhookDelivery]:
    """A subject's deliveries, newest first."""
    return WebhookDelivery.objects.filter(subject_kind=subject_kind, subject_id=str(subject_id))


def deliveries_admin_url(*, subject_kind: str, subject_id: object) -> str:
    """The admin's delivery log filtered to one subject."""
    changelist = reverse("admin:webhooks_webhookdelivery_changelist")
    return f"{changelist}?subject_kind__exact={subject_kind}&subject_id={subject_id}"
