from django.apps import AppConfig


class FakeProviderConfig(AppConfig):
    """A development tool: the fake Anthropic Messages API and its ``fake_anthropic`` command.

    No models. Nothing in the job path imports it; jobs reach it only over HTTP, through
    ANTHROPIC_BASE_URL.
    """

    name = "fake_provider"
    verbose_name = "Fake Anthropic provider"
