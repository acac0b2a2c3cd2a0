"""What every sgp command shares: the stored login's API, made on first use, and output."""

import sys

import httpx

from client import config
from client.api import Api


class UsageError(Exception):
    """A command line that cannot work (exit 2), found after argparse."""


class Session:
    """What a command needs: the API of the stored login, made on first use."""

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        self.transport = transport
        self._api: Api | None = None

    def connect(self, url: str, token: str) -> Api:
        if self._api is not None:
            self._api.close()
        self._api = Api(url, token, transport=self.transport)
        return self._api

    @property
    def api(self) -> Api:
        if self._api is None:
            login = config.current_login()
            return self.connect(login.url, login.token)
        return self._api

    def close(self) -> None:
        if self._api is not None:
            self._api.close()


def out(line: str = "") -> None:
    print(line, file=sys.stdout)


def err(line: str) -> None:
    print(line, file=sys.stderr)
