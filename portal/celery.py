"""The Celery application: configured from Django settings (``CELERY_*``)."""

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

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
