"""Traces: every job, attempt, wait, agent run and tool as OpenTelemetry spans (the GenAI
semantic conventions), exported over OTLP/HTTP when the standard ``OTEL_*`` variables name a
collector, and the same story as a timeline in the admin, read from the project's own rows.

- ``context``: the W3C ``traceparent`` a request brings, and the trace ids a job or a run keeps
  on its row (its own span's, fixed at submit, so that its children can name it before it ends).
- ``setup``: the SDK, configured only by the standard variables, off when none names a collector;
  a batch processor that never blocks the job path and counts what it drops.
- ``timeline``: a job's or a run's story from its rows (attempts, ledger rows, waits, tools).
- ``export``: that story as spans, once the job or the run has ended.
"""
