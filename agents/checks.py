"""The agent tools' system check: a tool module that cannot be imported, or a tool whose
definition is wrong (agents/tools.py), stops every manage.py command, ``rqworker`` and the loop
commands included, with the module and the reason."""

from typing import Any

from django.core.checks import CheckMessage, Error, register

from agents.tools import tool_load_problems

__all__ = ["agent_tool_problems"]


@register("agents")
def agent_tool_problems(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    return [Error(problem, id="agents.E001") for problem in tool_load_problems()]
