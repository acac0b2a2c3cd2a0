"""sgp login --sso: the site's provider signs the command line in (OAuth 2.0 device flow,
RFC 8628), and the portal trades the result for a personal access token.

The portal says where the provider is (GET sign-in/); sgp asks the provider for a code,
the person opens the address it prints in any browser (this machine's or their
phone's) and signs in there as they do on the web; sgp then collects the provider's
tokens and hands them to the portal (POST tokens/sign-in/), which checks them as it
checks a browser sign-in and answers with a portal token, shown once and kept 0600.
"""

import socket
import time
from typing import Any

import httpx

from client.api import Api, ApiError
from client.exits import Exit

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


class SignInFailed(ApiError):
    """The provider refused, or the person did not confirm in time."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=Exit.NOT_LOGGED_IN)


def _provider_call(
    http: httpx.Client, url: str, form: dict[str, str]
) -> tuple[int, dict[str, Any]]:
    try:
        response = http.post(url, data=form, headers={"Accept": "application/json"})
    except httpx.HTTPError as error:
        raise ApiError(
            f"The sign-in provider at {url} does not answer ({error}).",
            exit_code=Exit.UNAVAILABLE,
        ) from None
    try:
        body = response.json()
    except ValueError:
        body = {}
    return response.status_code, body if isinstance(body, dict) else {}


def sso_token(
    api: Api,
    *,
    say: Any,
    transport: httpx.BaseTransport | None = None,
    token_name: str | None = None,
) -> str:
    """A new portal token for whoever confirms the code ``say`` prints; SignInFailed or
    ApiError when that does not happen."""
    where = api.get("sign-in/")
    with httpx.Client(timeout=30, transport=transport) as http:
        status, device = _provider_call(
            http,
            where["device_authorization_endpoint"],
            {"client_id": where["client_id"], "scope": where["scope"]},
        )
        if status != 200 or "device_code" not in device:
            raise SignInFailed(
                f"{where['provider']} refused to start a sign-in: "
                f"{device.get('error_description') or device.get('error') or status}."
            )
        link = device.get("verification_uri_complete") or device["verification_uri"]
        say(f"To sign in with {where['provider']}, open {link}")
        say(f"and check that it shows the code {device['user_code']}. Waiting…")
        interval = float(device.get("interval") or 5)
        deadline = time.monotonic() + float(device.get("expires_in") or 600)
        while time.monotonic() < deadline:
            time.sleep(interval)
            status, answer = _provider_call(
                http,
                where["token_endpoint"],
                {
                    "grant_type": DEVICE_GRANT,
                    "device_code": device["device_code"],
                    "client_id": where["client_id"],
                },
            )
            if status == 200 and answer.get("id_token"):
                break
            error = answer.get("error")
            if error == "slow_down":
                interval += 5
            elif error != "authorization_pending":
                raise SignInFailed(
                    f"{where['provider']} ended the sign-in: "
                    f"{answer.get('error_description') or error or status}."
                )
        else:
            raise SignInFailed("The code was not confirmed in time; run `sgp login --sso` again.")
    response = api.post(
        "tokens/sign-in/",
        {
            "id_token": answer["id_token"],
            "access_token": answer.get("access_token", ""),
            "name": token_name or f"sgp on {socket.gethostname()}"[:100],
        },
    )
    return response.json()["token"]
