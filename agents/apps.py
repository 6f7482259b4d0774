from django.apps import AppConfig, apps
from django.conf import settings


class AgentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "agents"
    verbose_name = "Agent runs"

    def ready(self) -> None:
        from agents import checks  # noqa: F401 (registers the tool modules' check)
        from agents.services import agent_run_job_transition
        from agents.tools import tools_load
        from agents.transcript import TURN_REF, turn_messages_resolve
        from jobs import message_refs
        from jobs.transitions import on_transition

        # Inside each job transition's transaction: a turn's answer, its tool calls and the
        # next turn's job commit with the job's own transition.
        on_transition(agent_run_job_transition, in_transaction=True)
        # A turn's job points at its transcript, rebuilt from the run's steps when it is sent.
        message_refs.register(TURN_REF, turn_messages_resolve)
        # Every process (web, workers, loops) knows the same tools from its start.
        tools_load(
            modules=list(settings.LLM_AGENT_TOOL_MODULES),
            app_modules=[f"{config.name}.agent_tools" for config in apps.get_app_configs()],
        )
