from django.apps import AppConfig
from django.core.signals import request_finished


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        # Registering the system checks, and counting Celery's task outcomes.
        from portal import checks, metrics  # noqa: F401
        from portal.logs import request_context_clear

        request_finished.connect(request_context_clear, dispatch_uid="portal.logs")
