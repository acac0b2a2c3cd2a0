"""jobs/dispatch.py sends tasks by name: every name it knows is a task the workers run."""

from jobs import dispatch
from portal.celery import app


def test_every_task_name_dispatch_sends_is_a_registered_task():
    app.loader.import_default_modules()
    assert set(dispatch.TASK_NAMES) <= set(app.tasks)
