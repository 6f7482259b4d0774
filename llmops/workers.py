"""The RQ worker class every `manage.py rqworker` uses (settings.RQ["WORKER_CLASS"])."""

import importlib
from typing import Any

from rq import Worker

# Task modules imported once in the worker's main process, so that each forked work horse
# inherits them: importing the anthropic SDK alone takes about a second, which a fresh import
# in every fork would add to every job.
PRELOADED_TASK_MODULES = ("jobs.tasks", "alerts.tasks")


class PreloadingWorker(Worker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for module in PRELOADED_TASK_MODULES:
            importlib.import_module(module)
        from jobs.provider import warm_up

        warm_up()
        super().__init__(*args, **kwargs)
