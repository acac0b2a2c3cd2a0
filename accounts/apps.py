from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and allocations"

    def ready(self) -> None:
        # Registering the system checks, and counting failed log-ins.
        from accounts import checks, metrics  # noqa: F401
