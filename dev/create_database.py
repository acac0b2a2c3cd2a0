"""Create the portal's PostgreSQL database if it does not exist yet.

Reads PORTAL_DATABASE_URL like the settings do (same default) and connects
to the server's ``postgres`` maintenance database to create it.
"""

import os
import sys
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/portal"


def main() -> int:
    url = os.environ.get("PORTAL_DATABASE_URL") or DEFAULT_URL
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True, connect_timeout=5) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
        if exists:
            print(f"database {name}: exists")
        else:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"database {name}: created")
    return 0


if __name__ == "__main__":
    sys.exit(main())
