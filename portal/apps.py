from django.apps import AppConfig
from django.core.signals import request_finished


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        from portal import checks  # noqa: F401 - registers the system checks
        from portal.logs import request_context_clear

        request_finished.connect(request_context_clear, dispatch_uid="portal.logs")
