from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        # Registering the system checks, and counting Celery's task outcomes.
        from portal import checks, metrics  # noqa: F401
