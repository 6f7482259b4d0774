"""The long-running loops and what watches them.

Each loop is a management command built on ``LoopCommand`` (``command.py``: back-off, fresh
connections, a heartbeat row per pass): ``reconcile_jobs`` (the reconciler; its pass is
``jobs/reconciler.py``) and ``monitor_queues`` (the monitor). Beside them, the checks they run
every pass: ``loop_health.py`` (every loop watches the others: the loop-stalled alert),
``queue_health.py`` (the queue-wait alert) and ``retry_health.py`` (the overdue-retry alert).
The alerts themselves go out through ``alerts/``; the heartbeat rows are ``alerts.LoopHeartbeat``.
"""
