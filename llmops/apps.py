"""The project's admin as an app: Django's admin on ``llmops.admin.LlmopsAdminSite``."""

from django.contrib.admin.apps import AdminConfig


class LlmopsAdminConfig(AdminConfig):
    default_site = "llmops.admin.LlmopsAdminSite"
