"""The tool registry: definitions checked at registration, modules imported at start, a bad one
stopping every manage.py command through the system check; how a call's outcome is made."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from agents import tools
from agents.tools import ToolDefinitionError, agent_tool, tool_call, tools_load
from mcp_tools.models import SEPARATOR


def test_a_tool_with_a_wrong_schema_name_or_timeout_is_refused_at_registration():
    with pytest.raises(ToolDefinitionError, match="input_schema"):
        agent_tool("x", {"type": "array"}, name="t")(lambda: "")
    with pytest.raises(ToolDefinitionError, match="not valid"):
        agent_tool("x", {"type": "object", "required": "a"}, name="t")(lambda: "")
    with pytest.raises(ToolDefinitionError, match="tool name"):
        agent_tool("x", {"type": "object"}, name="has spaces")(lambda: "")
    with pytest.raises(ToolDefinitionError, match="timeout"):
        agent_tool("x", {"type": "object"}, name="t", timeout=0)(lambda: "")


def test_a_python_tool_may_not_take_a_name_of_the_mcp_form():
    # Python tools are looked up first: this one would hide the crm server's delete tool.
    with pytest.raises(ToolDefinitionError, match="kept for MCP tools"):
        agent_tool("x", {"type": "object"}, name="crm__delete")(lambda: "")
    assert "crm__delete" not in tools._registry
    assert tools.SOURCE_SEPARATOR == SEPARATOR  # the MCP registry's, one rule


@pytest.fixture
def restore_problems():
    yield
    tools._load_problems[:] = []


def test_a_bad_tool_module_is_a_system_check_error_that_stops_manage_py(restore_problems):
    problems = tools_load(
        modules=["tests.agents.no_such_module", "tests.agents.bad_tools"],
        app_modules=["agents.agent_tools"],  # an app without agent_tools.py is fine
    )
    assert len(problems) == 2
    assert "tests.agents.no_such_module" in problems[0] and "cannot be imported" in problems[0]
    assert "tests.agents.bad_tools" in problems[1] and "not valid" in problems[1]
    with pytest.raises(SystemCheckError, match="agents.E001"):
        call_command("check")


def test_the_demo_tools_are_registered_and_answer():
    assert (
        tool_call(name="calculator", tool_input={"expression": "6*7"}, call_id="c").output == "42"
    )
    bad = tool_call(name="calculator", tool_input={"expression": "__import__('os')"}, call_id="c")
    assert bad.is_error and "only numbers" in bad.output
    clock = tool_call(name="clock", tool_input={"timezone": "Asia/Tokyo"}, call_id="c")
    assert not clock.is_error and '"timezone": "Asia/Tokyo"' in clock.output
    assert tool_call(name="clock", tool_input={"timezone": "Mars/Base"}, call_id="c").is_error
    assert tools.registered_tool("send_email").requires_approval  # type: ignore[union-attr]


@pytest.mark.django_db(transaction=True)  # each call commits in its own process
def test_send_email_records_one_message_per_call_id_however_often_it_runs():
    from agents.models import DemoEmail

    mail = {"to": "a@example.com", "subject": "Hello", "body": "Hi"}
    first = tool_call(name="send_email", tool_input=mail, call_id="toolu_1")
    again = tool_call(name="send_email", tool_input=mail, call_id="toolu_1")
    assert first.output.startswith("Sent") and again.output.startswith("Already sent")
    # Four copies of one call at once (a run resumed while a copy still ran): one message.
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(
            pool.map(
                lambda _: tool_call(name="send_email", tool_input=mail, call_id="toolu_2"),
                range(4),
            )
        )
    assert sorted(o.output.split(":")[0] for o in outcomes) == ["Already sent"] * 3 + ["Sent"]
    assert not any(o.is_error for o in outcomes)
    assert sorted(DemoEmail.objects.values_list("call_id", flat=True)) == ["toolu_1", "toolu_2"]
