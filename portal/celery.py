"""The Celery application: configured from Django settings (``CELERY_*``)."""

import os

from celery import Celery
from celery.signals import (
    before_task_publish,
    celeryd_init,
    setup_logging,
    task_postrun,
    task_prerun,
)

from portal import logs
from portal.metric_files import metric_files_reset

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(**kwargs) -> None:
    # Connections are reused across tasks (CELERY_DB_REUSE_MAX); as for web requests,
    # drop one past CONN_MAX_AGE or left broken (e.g. after PostgreSQL restarted).
    from django.db import close_old_connections

    close_old_connections()


# The log format, and the request id carried from the web request into its tasks.
setup_logging.connect(logs.celery_logging_setup)
before_task_publish.connect(logs.request_id_to_task)
task_prerun.connect(logs.task_context_bind)
task_postrun.connect(logs.task_context_reset)


@celeryd_init.connect
def _fresh_metric_files(**kwargs) -> None:
    # A worker starts with its metrics folder empty, before its pool processes count
    # anything (portal/metric_files.py); its task outcomes are counted by portal.metrics.
    metric_files_reset()
