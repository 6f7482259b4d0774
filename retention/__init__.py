"""Retention: what an old job or run keeps once its content is no longer needed.

``llm_prune --before`` (and the monitor once a day with ``LLM_RETENTION_DAYS``) empties the
prompts, outputs, stored vectors and tool inputs/results of final jobs, agent runs and pipelines
finished before then, keeps their rows (status, model, tokens, cost, times), marks them
``pruned_at``, and never touches the ledger, the budgets or the cost report.
"""
