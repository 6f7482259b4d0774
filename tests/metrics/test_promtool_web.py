"""The /metrics of the real web process (uvicorn, several workers, the Prometheus multiprocess
directory) passes ``promtool check metrics``, after django-rq's modules, whose own collector
times itself with a Summary named like a counter, were imported and used in it."""

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import web_server

TOKEN = "metrics-web-test-token-41c9"


@pytest.mark.django_db(transaction=True)
def test_it_serves_what_promtool_accepts_after_django_rq_collected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: make test installs it (scripts/prometheus-deps.sh)"
    monkeypatch.setenv("METRICS_TOKEN", TOKEN)
    monkeypatch.setenv("METRICS_ALLOWED_NETWORKS", "")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with web_server(workers=2, log=tmp_path / "web.log") as url, httpx.Client(timeout=30) as http:
        # django-rq's collector, run in the web workers: its Summary
        # (rq_request_processing_seconds_total) now holds a sample in every process's files.
        for _ in range(6):
            answer = http.get(f"{url}/django-rq/metrics/", headers=auth)
            assert answer.status_code == 200, answer.text[:500]
            assert "rq_workers" in answer.text
        for _ in range(4):  # whichever worker answers
            answer = http.get(f"{url}/metrics", headers=auth)
            assert answer.status_code == 200, answer.text[:500]
            text = answer.text
            assert "# TYPE llm_jobs_total counter" in text
            assert "django_http_requests_total_by_method" in text
            assert "rq_request_processing_seconds" not in text
            result = subprocess.run(
                [promtool, "check", "metrics"],
                input=text,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0, result.stdout + result.stderr
