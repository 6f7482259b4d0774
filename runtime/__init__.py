"""The worker runtime: how the project's processes run their work, below the apps.

- ``workers.py``: the worker class every ``manage.py rqworker`` builds (``RQ["WORKER_CLASS"]``):
  rq's forking worker, or on the ``llm`` queue the threaded one;
- ``threaded_worker.py`` (the pool, its main loop, warm shutdown) and ``job_monitor.py`` (the jobs
  in flight: heartbeats, RQ timeouts, who records a job's end in rq);
- ``db_connections.py``: a threaded worker's few database connections, taken in turn;
- ``redis_clients.py``: one Redis client and one rq ``Queue`` per process and queue;
- ``rq_jobs.py``: "is this RQ job still going to run?" for the sweeps, in batches;
- ``respawn.py``: ``python -m runtime.respawn -- <command>``, a process started again whenever it
  exits (the ``Procfile`` and the deploy examples).

Queue names, task paths and Redis keys stay in ``llmops/queues.py``: they are configuration.

NOTES: rq internals this package relies on (rq 3.0.0 and django-rq 4.2.0, pinned in
requirements.txt). rq documents its queues, jobs and worker command line, not a worker's
insides, so each of these may change in any release; re-read them, and run
tests/jobs/test_threaded_worker.py, test_dequeued_jobs.py and test_takeover.py,
before moving the pin.

- ``rq.worker.BaseWorker``'s job lifecycle, called or overridden by ``ThreadedWorker`` and
  ``JobMonitorWorker``: ``prepare_execution``, ``perform_job``, ``handle_job_failure``,
  ``heartbeat``, ``get_heartbeat_ttl``, ``bootstrap``, ``teardown``, ``check_for_suspension``,
  ``should_run_maintenance_tasks``/``run_maintenance_tasks``, ``reorder_queues``,
  ``get_redis_server_version``, ``set_state``, ``set_shutdown_requested_date``,
  ``stop_scheduler``, ``register_birth``, ``serialize``, ``handle_payload``,
  ``request_stop_execution``, ``kill_horse``, ``wait_for_horse``, and the attributes
  ``worker_ttl``, ``job_monitoring_interval``, ``exponential_backoff_factor``,
  ``max_connection_wait_time``, ``scheduler``, ``key``. ``work`` is rewritten whole (rq's loop
  runs one job at a time): a step rq adds to its own loop is missing here until copied. A
  changed signature or order of these breaks the registries the ops dashboard, ``/readyz`` and
  the reconciler read (StartedJobRegistry, the execution index, the worker's hash).
- Private ``BaseWorker`` members: ``_set_connection`` (overridden so that the worker keeps the
  short ``socket_timeout``; if renamed, rq sets its minutes-long one and a Redis outage stalls
  the main loop), ``_finalize_success``/``_finalize_failure`` (overridden so that a job whose RQ
  timeout the monitor already recorded is not recorded twice; if renamed, such a job is marked
  finished after failed), ``_shutdown`` (overridden to only set the flag: if renamed, SIGTERM
  raises ``StopRequested`` wherever the main thread is), ``_stop_requested``,
  ``_install_signal_handlers``, ``_start_scheduler``, ``_dequeue_strategy``, ``_ordered_queues``.
- ``Queue.dequeue_any`` (its ``death_penalty_class`` argument and ``DequeueTimeout``),
  ``Queue.push_job_id(at_front=True)``, ``Queue.intermediate_queue_key`` and
  ``Queue.DEFAULT_TIMEOUT``: the poll of one second and a job put back at warm shutdown.
- ``Execution.heartbeat(registry, ttl, pipeline=)``, ``Job.heartbeat(..., xx=True)``,
  ``Job.started_job_registry``, ``Job.redis_server_version``: the monitor's pipelined beats. If
  they change, long jobs are taken for abandoned by rq's maintenance.
- ``rq.worker_registration`` (``WORKERS_BY_QUEUE_KEY``, ``register``): the monitor lists the
  worker again after Redis lost it; ``rq.command.parse_payload``: the refused stop-job command;
  ``rq.timeouts.BaseDeathPenalty``: ``NoDeathPenalty``; ``rq.worker.base.DEFAULT_LOGGING_*``.
- ``rq_jobs.py``: ``rq.intermediate_queue.IntermediateQueue`` (its ``key`` and
  ``get_first_seen_key``: rq's own "first seen in the intermediate list" key, which rq's cleanup
  reads too), ``BaseWorker.redis_worker_namespace_prefix`` and the worker hash's
  ``last_heartbeat`` and ``death`` fields, ``Job.fetch_many``, ``Job.worker_name``,
  ``Job.get_status(refresh=False)``, ``rq.utils.as_text``/``now``/``utcparse``. If these change,
  the reconciler stops seeing jobs a dead worker took off the queue (rq's own cleanup still finds
  them, up to about eleven minutes later) or, worse, takes a live worker's job for abandoned
  (the claim then stops the second copy: no double call, a wasted enqueue).
- django-rq: ``workers.LlmWorker.__new__`` relies on ``django_rq.workers.get_worker`` calling
  ``WORKER_CLASS(queues, ...)`` with the queues first; ``redis_clients`` reads
  ``django_rq.settings.QUEUES`` (not a public module) to key its clients.
- Django and redis-py, likewise: ``db_connections`` wraps ``DatabaseWrapper.get_new_connection``
  and ``_close`` (every open and close of a connection passes there), and ``redis_clients`` and
  the threaded worker write ``connection_pool.connection_kwargs``.
"""
