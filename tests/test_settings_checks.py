"""Settings checked as system checks (llmops/checks.py): each app's values under its own ids, and
every process refuses to start on a bad one, the web server and the workers included."""

from tests.test_deploy_settings import run_python, settings_check_errors

BAD = {
    "ALERT_ROUTES": '{"SEVERE": []}',
    "LLM_RATE_LIMITS": '{"claude-sonnet-4-6": {"rpm": 0}}',
    "LLM_SUBMIT_THROTTLE_RATE": "600 per minute",
}


def test_each_app_checks_its_own_settings_under_stable_ids():
    errors = settings_check_errors(BAD)

    assert "(alerts.E001) ALERT_ROUTES: unknown severity 'SEVERE'" in errors
    assert (
        "(ratelimits.E001) LLM_RATE_LIMITS['claude-sonnet-4-6']['rpm'] must be a positive" in errors
    )
    assert "(jobs.E002) LLM_SUBMIT_THROTTLE_RATE: '600 per minute' is not a rate" in errors


def test_the_default_settings_pass_their_checks():
    result = run_python(["manage.py", "check", "--tag", "settings"], {})
    assert result.returncode == 0, result.stderr


def test_the_web_server_refuses_to_start_on_a_bad_value():
    result = run_python(["-m", "llmops.web", "--port", "1"], {"ALERT_QUEUE_CLEAR_RATIO": "2"})

    assert result.returncode == 1
    assert "(alerts.E004) ALERT_QUEUE_CLEAR_RATIO must be over 0 and at most 1" in result.stderr


def test_a_worker_and_a_loop_refuse_to_start_on_a_bad_value():
    for command in (["rqworker", "llm", "--burst"], ["reconcile_jobs"]):
        result = run_python(["manage.py", *command], {"LLM_PROVIDER_READ_TIMEOUT": "300"})

        assert result.returncode == 1, result.stderr
        assert "(jobs.E001) LLM_STREAM_IDLE_SECONDS must stay below LLM_JOB_TIMEOUT" in (
            result.stderr
        )


def test_the_web_server_refuses_to_start_on_a_bad_agent_tool_module():
    result = run_python(
        ["-m", "llmops.web", "--port", "1"], {"LLM_AGENT_TOOL_MODULES": "tools_that_do_not.exist"}
    )

    assert result.returncode == 1, result.stderr
    assert "(agents.E001)" in result.stderr and "tools_that_do_not.exist" in result.stderr
