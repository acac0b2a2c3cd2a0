"""Log-in with the site's directory: django-auth-ldap checks the password by binding as
the person; ``accounts.identity`` decides which portal user they are.

The backend is configured from the ``PORTAL_LDAP_*`` settings (not django-auth-ldap's
own ``AUTH_LDAP_*``). It only finds the person and checks the password: creating the
user, their Unix login and their groups are ``identity.sign_in``'s, as for the provider.
"""

from typing import Any

import ldap
from django.conf import settings
from django_auth_ldap.backend import LDAPBackend, _LDAPUser
from django_auth_ldap.config import LDAPSearch, LDAPSettings

from accounts import directory
from accounts.identity import Person, sign_in
from accounts.models import ExternalIdentity, User


class DirectoryBackend(LDAPBackend):
    _settings: LDAPSettings | None

    @property
    def settings(self) -> LDAPSettings:
        if self._settings is None:
            login = settings.LDAP_LOGIN_ATTRIBUTE
            self._settings = LDAPSettings(
                "PORTAL_LDAP_UNUSED_",  # nothing is read from django-auth-ldap's own names
                {
                    "SERVER_URI": settings.LDAP_URL,
                    "START_TLS": settings.LDAP_START_TLS,
                    "BIND_DN": settings.LDAP_BIND_DN,
                    "BIND_PASSWORD": settings.LDAP_BIND_PASSWORD,
                    "USER_SEARCH": LDAPSearch(
                        settings.LDAP_USER_BASE,
                        ldap.SCOPE_SUBTREE,
                        f"(&{settings.LDAP_USER_FILTER}({login}=%(user)s))",
                        list(directory.attributes_read()),
                    ),
                    "CONNECTION_OPTIONS": {
                        ldap.OPT_NETWORK_TIMEOUT: settings.LDAP_TIMEOUT_S,
                        ldap.OPT_TIMEOUT: settings.LDAP_TIMEOUT_S,
                        ldap.OPT_REFERRALS: 0,
                    },
                    "ALWAYS_UPDATE_USER": False,  # identity.sign_in keeps the user up to date
                },
            )
        return self._settings

    @settings.setter
    def settings(self, value: LDAPSettings) -> None:
        self._settings = value

    def get_or_build_user(self, username: str, ldap_user: _LDAPUser) -> tuple[User, bool]:
        """Called once the password is right: the portal user this entry is."""
        entry = directory.entry_of(ldap_user.dn, ldap_user.attrs)
        user = sign_in(
            Person(
                source=ExternalIdentity.Source.LDAP,
                issuer=settings.LDAP_URL,
                subject=entry.dn,
                login=entry.login,
                posix_username=entry.posix_username,
                email=entry.email,
                first_name=entry.first_name,
                last_name=entry.last_name,
                groups=directory.groups_of(entry),
                disabled=entry.disabled,
            )
        )
        return user, False  # saved already; django-auth-ldap then leaves it as it is

    def get_user(self, user_id: Any) -> User | None:
        """The session's user while they may still use the portal (switched-off: none)."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None
