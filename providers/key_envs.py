"""Which environment variables a provider row may name as its key's variable.

The row's variable is read from the process environment and sent, as the key, to the row's
``base_url``: a row that named ``DJANGO_SECRET_KEY`` or ``DATABASE_URL`` would hand that secret
to whatever host the URL names. So a key variable must end in ``_API_KEY`` or be listed in
``LLM_PROVIDER_KEY_ENVS``, and may never be one of the variables the project's own settings
read (``ANTHROPIC_API_KEY`` apart: it is the default provider's key). The rule is checked when
a row is saved and again each time a key is read, so a row written before the rule still
cannot send a secret.
"""

from django.conf import settings

from llmops.env import env

__all__ = ["PROVIDER_KEYS_OF_SETTINGS", "key_env_problem", "project_env_names"]

PROVIDER_KEYS_OF_SETTINGS = frozenset({"ANTHROPIC_API_KEY"})
"""Variables the settings read that are provider keys themselves."""

KEY_SUFFIX = "_API_KEY"


def project_env_names() -> frozenset[str]:
    """The variables the project's settings read (each one the settings file asked for)."""
    return frozenset(env.read_names | {"DJANGO_SETTINGS_MODULE"}) - PROVIDER_KEYS_OF_SETTINGS


def key_env_problem(name: str) -> str | None:
    """Why ``name`` may not hold a provider's key, or None when it may ('' is no key)."""
    if not name:
        return None
    if name in project_env_names():
        return (
            f"{name} is one of llmops's own settings, never a provider's key: name the "
            "variable that holds the provider's API key (e.g. OPENAI_API_KEY)"
        )
    if not name.endswith(KEY_SUFFIX) and name not in settings.LLM_PROVIDER_KEY_ENVS:
        return (
            f"a provider's key variable must end in {KEY_SUFFIX} (e.g. OPENAI_API_KEY) or be "
            f"listed in LLM_PROVIDER_KEY_ENVS; {name} is neither"
        )
    return None
