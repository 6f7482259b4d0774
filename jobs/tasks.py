"""RQ entry points: load by id, call a service. No business rule lives here."""

from jobs.reconciler import reconcile_jobs
from jobs.runner import job_run


def run_llm_job(job_id: str) -> str:
    return job_run(job_id=job_id)


def reconcile() -> str:
    return str(reconcile_jobs())
