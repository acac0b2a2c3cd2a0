"""System checks for signing in (ids ``accounts.E…``/``accounts.W…``): a directory or
provider that is configured but cannot work is said at ``manage.py check``, not at the
first person's failed sign-in."""

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from accounts import directory
from accounts.oidc_provider import ProviderUnavailable, provider_metadata


@register()
def check_directory(app_configs, **kwargs) -> list[CheckMessage]:
    if not directory.configured():
        return []
    errors: list[CheckMessage] = []
    plain = settings.LDAP_URL.startswith("ldap://") and not settings.LDAP_START_TLS
    if settings.IS_PRODUCTION and plain:
        errors.append(
            Error(
                f"PORTAL_LDAP_URL={settings.LDAP_URL} sends passwords in clear text.",
                hint="Use ldaps://, or set PORTAL_LDAP_START_TLS=on.",
                id="accounts.E001",
            )
        )
    try:
        directory.check_bind()
    except directory.DirectoryUnavailable as error:
        errors.append(
            Warning(
                f"Directory log-in cannot work: {error}.",
                hint="Check PORTAL_LDAP_URL, PORTAL_LDAP_BIND_DN and PORTAL_LDAP_BIND_PASSWORD "
                "('dev/stack start slapd' on a dev machine), or set PORTAL_LDAP_URL=off.",
                id="accounts.W001",
            )
        )
    return errors


@register()
def check_provider(app_configs, **kwargs) -> list[CheckMessage]:
    if not settings.OIDC_ISSUER:
        return []
    errors: list[CheckMessage] = []
    if not settings.OIDC_RP_CLIENT_SECRET:
        errors.append(
            Error(
                "PORTAL_OIDC_CLIENT_SECRET is empty: the provider will refuse the portal.",
                hint="Set PORTAL_OIDC_CLIENT_SECRET_FILE to the client secret the provider "
                f"gave the client {settings.OIDC_RP_CLIENT_ID!r}.",
                id="accounts.E002",
            )
        )
    try:
        metadata = provider_metadata()
    except ProviderUnavailable as error:
        errors.append(
            Warning(
                f"Signing in with {settings.OIDC_NAME} cannot work: {error}.",
                hint="Check PORTAL_OIDC_ISSUER ('dev/stack start oidc' on a dev machine), or "
                "set it to off.",
                id="accounts.W002",
            )
        )
        return errors
    if "S256" not in metadata.get("code_challenge_methods_supported", []):
        errors.append(
            Warning(
                f"{settings.OIDC_ISSUER} does not say it supports PKCE with S256.",
                hint="The portal always sends a PKCE challenge; enable PKCE at the provider.",
                id="accounts.W003",
            )
        )
    return errors
