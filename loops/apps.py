from django.apps import AppConfig


class LoopsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "loops"
    verbose_name = "Loops"
