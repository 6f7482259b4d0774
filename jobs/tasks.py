"""RQ entry points: load by id, call a service. No business rule lives here."""

from rq import get_current_job

from jobs.reconciler import reconcile_jobs
from jobs.runner import job_run


def run_llm_job(job_id: str) -> str:
    # The RQ job id lets the claim refuse a stray copy of an older RQ job of the same LlmJob.
    current = get_current_job()
    return job_run(job_id=job_id, rq_job_id=current.id if current else None)


def reconcile() -> str:
    return str(reconcile_jobs())
