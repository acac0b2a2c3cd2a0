"""Calls to the portal's REST API (/api/v1/), and its refusals as exceptions with exit codes.

Every refusal of the API has one shape, ``{"error": {"code", "message",
"fields"}}`` (a quota refusal adds ``requested_gpu_hours`` and
``available_gpu_hours``); ApiError carries it with the exit code of its status.
A request that is safe to repeat (a GET, a POST with an Idempotency-Key) is
retried a few times when the portal does not answer, answers 502/503/504, or
says 429 with a short Retry-After.
"""

import contextlib
import time
from collections.abc import Mapping
from typing import Any

import httpx

from client import __version__
from client.exits import Exit, exit_for_status

RETRY_STATUSES = frozenset({502, 503, 504})
MAX_RETRY_AFTER_S = 30.0
# Errors after which the request may be sent again: nothing, or nothing complete,
# came back. (UnsupportedProtocol, a bad proxy and the like would fail again.)
TRANSIENT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class ApiError(Exception):
    """The portal refused or did not answer; ``exit_code`` is what sgp exits with."""

    def __init__(
        self,
        message: str,
        *,
        exit_code: Exit,
        status: int | None = None,
        code: str = "",
        fields: Mapping[str, list[str]] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.status = status
        self.code = code
        self.fields = dict(fields or {})
        self.extra = dict(extra or {})
        self.hints: list[str] = []  # what to do next, printed under the message

    @classmethod
    def from_response(cls, response: httpx.Response) -> "ApiError":
        status = response.status_code
        error: Any = None
        with contextlib.suppress(ValueError, AttributeError):  # not JSON, or not an object
            error = response.json().get("error")
        if not isinstance(error, dict):
            # Not the portal's answer: a proxy's error page, another web server.
            if 300 <= status < 400:
                where = response.headers.get("Location", "elsewhere")
                message = f"The portal's address answers with a redirect to {where}; log in again "
                message += "with that URL (sgp login --url …)."
            else:
                message = f"HTTP {status} {response.reason_phrase} from {response.request.url}"
                if status == 404:
                    message += "; is this the portal's address?"
            return cls(message, exit_code=exit_for_status(status), status=status)
        fields = error.get("fields")
        extra = {k: v for k, v in error.items() if k not in ("code", "message", "fields")}
        if "Retry-After" in response.headers:
            extra["retry_after"] = response.headers["Retry-After"]
        return cls(
            str(error.get("message") or f"HTTP {status}"),
            exit_code=exit_for_status(status),
            status=status,
            code=str(error.get("code", "")),
            fields=fields if isinstance(fields, dict) else {},
            extra=extra,
        )


def _retry_after(response: httpx.Response) -> float | None:
    try:
        seconds = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return seconds if 0 <= seconds <= MAX_RETRY_AFTER_S else None


class Api:
    """The REST API of one portal, as one user (their bearer token) or as nobody yet."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 30.0,
        retries: int = 2,
    ) -> None:
        self.url = url
        self.retries = retries
        self._http = httpx.Client(
            base_url=f"{url}/api/v1/",
            headers={
                # None: the few calls made before there is a token (sgp login --sso).
                **({"Authorization": f"Bearer {token}"} if token is not None else {}),
                "Accept": "application/json",
                "User-Agent": f"sgp/{__version__}",
            },
            timeout=timeout_s,
            transport=transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params).json()

    def post(
        self,
        path: str,
        body: Any = None,
        *,
        idempotency_key: str | None = None,
        repeatable: bool = False,
    ) -> httpx.Response:
        """A POST; retried only with an Idempotency-Key, or when it changes nothing."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self.request(
            "POST", path, json=body, headers=headers, repeatable=repeatable or bool(idempotency_key)
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        repeatable: bool | None = None,
    ) -> httpx.Response:
        """The answer to a request, or ApiError; a repeatable one is retried as above."""
        if repeatable is None:
            repeatable = method == "GET"
        attempts = 1 + (self.retries if repeatable else 0)
        for attempt in range(1, attempts + 1):
            last = attempt == attempts
            try:
                response = self._http.request(
                    method, path, params=params, json=json, headers=headers
                )
            except TRANSIENT_ERRORS as error:
                if last:
                    raise ApiError(
                        f"The portal at {self.url} does not answer ({_describe(error)}).",
                        exit_code=Exit.UNAVAILABLE,
                    ) from None
                time.sleep(attempt)
                continue
            except httpx.HTTPError as error:
                raise ApiError(
                    f"Cannot call the portal at {self.url} ({_describe(error)}).",
                    exit_code=Exit.UNAVAILABLE,
                ) from None
            if response.is_success:
                if response.status_code != 204 and not _is_json(response):
                    raise ApiError(
                        f"The answer from {response.request.url} is not the portal API's "
                        "(not JSON); is this the portal's address?",
                        exit_code=Exit.UNAVAILABLE,
                        status=response.status_code,
                    )
                return response
            if not last:
                if response.status_code in RETRY_STATUSES:
                    time.sleep(attempt)
                    continue
                wait = _retry_after(response) if response.status_code == 429 else None
                if wait is not None:
                    time.sleep(wait)
                    continue
            raise ApiError.from_response(response)
        raise AssertionError("unreachable")  # the last attempt returns or raises


def _is_json(response: httpx.Response) -> bool:
    return response.headers.get("Content-Type", "").split(";")[0].strip() == "application/json"


def _describe(error: httpx.HTTPError) -> str:
    return str(error) or type(error).__name__
