"""A tool module with a wrong definition, for the system check test (never imported otherwise)."""

from agents.tools import agent_tool


@agent_tool(
    description="A schema that is not one.", input_schema={"type": "object", "properties": 5}
)
def broken() -> str:
    return "never"
