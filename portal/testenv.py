"""Loaded by pytest (``-p portal.testenv``) before Django reads its settings.

Tests run in dev mode, on the local stack (the portal's defaults are production's).
They get Redis databases of their own, so a worker started by ``make up`` never
takes a test's task (and runs it against the dev database) and test heartbeats
never show up in the dev portal's health report.
"""

import os

os.environ.setdefault("PORTAL_ENV", "dev")
os.environ.setdefault("PORTAL_BROKER_URL", "redis://127.0.0.1:6379/2")
os.environ.setdefault("PORTAL_CACHE_URL", "redis://127.0.0.1:6379/3")
