"""Signing the command line in through the site's provider: ``sgp login --sso``.

``GET sign-in/`` tells ``sgp`` where the provider's device flow is (RFC 8628: the
person confirms a code in any browser); ``POST tokens/sign-in/`` trades the flow's
fresh ID token (and its access token) for a portal token, after the same checks as a
browser sign-in (``accounts.identity``). No password ever passes through the command
line, and the portal keeps only the new token's hash.
"""

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import tokens
from accounts.api import NewTokenSerializer, TokenCreateSerializer
from accounts.identity import SignInRefused, sign_in
from accounts.oidc import person_from_claims
from accounts.oidc_provider import ProviderUnavailable, TokenInvalid, cli_claims, provider_metadata


class SignInInvalid(exceptions.APIException):
    """401, as for a dead token: what was sent proves no one (not AuthenticationFailed,
    which DRF turns into a 403 on a view without authentication)."""

    status_code = status.HTTP_401_UNAUTHORIZED
    default_code = "sign_in_invalid"


class ProviderDown(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "provider_unavailable"
    default_detail = "The sign-in provider does not answer; try again soon."


def _metadata(*, refresh: bool = False) -> dict:
    if not (settings.OIDC_ISSUER and settings.OIDC_CLI_CLIENT_ID):
        raise exceptions.NotFound(
            "The portal signs the command line in with tokens made in the browser only."
        )
    try:
        return provider_metadata(refresh=refresh)
    except ProviderUnavailable:
        raise ProviderDown() from None


class SignInSerializer(serializers.Serializer):
    provider = serializers.CharField(help_text="The provider's name, for people.")
    issuer = serializers.CharField()
    client_id = serializers.CharField(help_text="The command line's client at the provider.")
    device_authorization_endpoint = serializers.CharField()
    token_endpoint = serializers.CharField()
    scope = serializers.CharField()


class SignInFlowSerializer(TokenCreateSerializer):
    id_token = serializers.CharField(max_length=20_000, help_text="The device flow's ID token.")
    access_token = serializers.CharField(max_length=20_000, help_text="Its access token.")


class SignIn(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    api_errors = {"get": {404: "not_found: no provider, or no command-line client, configured."}}

    @extend_schema(
        tags=["tokens"],
        summary="Where the command line signs in through the site's provider (device flow)",
        responses=SignInSerializer,
    )
    def get(self, request: Request) -> Response:
        metadata = _metadata()
        if not metadata.get("device_authorization_endpoint"):
            metadata = _metadata(refresh=True)  # the provider may have turned it on since
        if not metadata.get("device_authorization_endpoint"):
            raise exceptions.NotFound("The site's provider offers no device flow.")
        return Response(
            SignInSerializer(
                {
                    "provider": settings.OIDC_NAME,
                    "issuer": settings.OIDC_ISSUER,
                    "client_id": settings.OIDC_CLI_CLIENT_ID,
                    "device_authorization_endpoint": metadata["device_authorization_endpoint"],
                    "token_endpoint": metadata["token_endpoint"],
                    "scope": settings.OIDC_RP_SCOPES,
                }
            ).data
        )


class TokenFromSignIn(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    api_errors = {
        "post": {
            401: "sign_in_invalid: the ID token is not the provider's for the command line, "
            "has expired or was used already; sign in again.",
            403: "permission_denied: the sign-in is refused (the message says why: a Unix "
            "login that cannot run jobs, an account disabled in the directory, no verified "
            "e-mail address to find the person in the directory by, a portal account the "
            "sign-in does not take by itself…).",
            409: "too_many_tokens: you have as many live tokens as allowed; revoke one first.",
        }
    }

    @extend_schema(
        tags=["tokens"],
        summary="Trade the device flow's ID token for a personal access token (shown once)",
        request=SignInFlowSerializer,
        responses={201: NewTokenSerializer},
    )
    def post(self, request: Request) -> Response:
        _metadata()
        serializer = SignInFlowSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            claims = cli_claims(id_token=data["id_token"], access_token=data["access_token"])
            user = sign_in(person_from_claims(claims))
        except TokenInvalid as error:
            raise SignInInvalid(f"This sign-in cannot be used: {error}.") from None
        except SignInRefused as refusal:
            raise exceptions.PermissionDenied(refusal.message) from None
        except ProviderUnavailable:
            raise ProviderDown() from None
        token, plain = tokens.token_create(
            user=user, name=data["name"], expires_in_days=data.get("expires_in_days")
        )
        data = NewTokenSerializer(token, context={"plain": plain}).data
        return Response(data, status=status.HTTP_201_CREATED)
