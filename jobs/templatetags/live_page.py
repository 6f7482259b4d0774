"""Template tags of the live page and its sign-in page."""

from django import template
from django.conf import settings

register = template.Library()


@register.simple_tag
def demo_username() -> str:
    """The demo user ``make run`` creates (ensure_demo_user), named only in development."""
    return str(getattr(settings, "DEMO_USERNAME", "")) if settings.DEBUG else ""
