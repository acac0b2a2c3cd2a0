"""Log-in with a password the portal keeps: development, and the break-glass administrator.

With ``PORTAL_LOCAL_LOGIN=superusers`` only a superuser may log in this way; everyone
else signs in through the site's directory or provider. A switched-off user is refused
here, and their open sessions end (``get_user``), as with every backend of the portal.
"""

from django.conf import settings
from django.contrib.auth.backends import ModelBackend


class LocalBackend(ModelBackend):
    def user_can_authenticate(self, user) -> bool:
        if not super().user_can_authenticate(user):
            return False
        return settings.LOCAL_LOGIN == "on" or bool(getattr(user, "is_superuser", False))
