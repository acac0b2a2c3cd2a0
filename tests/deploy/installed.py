"""The files of deploy/, filled in for this machine, as the tests check and run them.

The units, the environment file and the nginx site name the README's layout
(/opt/slurm-gpu-portal/app and …/venv, /etc/slurm-gpu-portal/portal.env, a certificate
under /etc/ssl, portal.example.org). Here those become the checkout, its virtualenv and
files in a test's folder; the rest of each file is used as written.
"""

import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import REPO, process_stop

DEPLOY = REPO / "deploy"
UNITS = {
    component: DEPLOY / "systemd" / f"slurm-gpu-portal-{component}.service"
    for component in ("web", "worker", "beat")
}
ENV_TEMPLATE = DEPLOY / "portal.env.example"
NGINX_SITE = DEPLOY / "nginx" / "slurm-gpu-portal.conf"
SUDOERS = DEPLOY / "sudoers" / "slurm-gpu-portal"

APP_DIR = "/opt/slurm-gpu-portal/app"
VENV_DIR = "/opt/slurm-gpu-portal/venv"
ENV_FILE = "/etc/slurm-gpu-portal/portal.env"
SITE_NAME = "portal.example.org"


def installed_unit(component: str, *, env_file: Path | str = ENV_FILE) -> str:
    """The component's unit with this checkout, its virtualenv and ``env_file`` in place
    of the README's paths."""
    text = UNITS[component].read_text()
    for path in (APP_DIR, VENV_DIR, ENV_FILE):
        assert path in text, f"{UNITS[component].name} no longer names {path}"
    return (
        text.replace(VENV_DIR, sys.prefix)
        .replace(APP_DIR, str(REPO))
        .replace(ENV_FILE, str(env_file))
    )


def unit_settings(text: str, section: str = "Service") -> dict[str, list[str]]:
    """The ``section``'s settings, each name with its values in order (a name may repeat)."""
    settings: dict[str, list[str]] = {}
    current = None
    for raw in text.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = line.strip("[]")
            continue
        if current == section:
            name, _, value = line.partition("=")
            settings.setdefault(name.strip(), []).append(value.strip())
    return settings


def exec_start(text: str) -> list[str]:
    """The unit's ExecStart as an argument list (the units use no specifier there but %H)."""
    (command,) = unit_settings(text)["ExecStart"]
    return shlex.split(command.replace("%H", socket.gethostname()))


# A line of the environment file: KEY=value, the value plain or in double quotes, in the
# subset of both syntaxes where systemd's EnvironmentFile= and the shell read it alike.
ENV_LINE = re.compile(r'([A-Z][A-Z0-9_]*)=("[^"$`\\]*"|[^\s"\'$`\\;&|<>()]*)')


def environment_file(text: str) -> dict[str, str]:
    """The variables an environment file sets (systemd's reading, for the lines ENV_LINE
    allows; any other line is an error)."""
    values = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        found = ENV_LINE.fullmatch(line)
        if not found:
            raise ValueError(f"line {number} is not KEY=value as systemd and sh read alike: {raw}")
        values[found[1]] = found[2].removeprefix('"').removesuffix('"')
    return values


def environment_file_with(overrides: dict[str, str], *, extra: dict[str, str]) -> str:
    """The template with ``overrides`` in place of its values (each must be one the
    template sets) and ``extra`` variables after it."""
    text = ENV_TEMPLATE.read_text()
    for name, value in overrides.items():
        line = f'{name}="{value}"'
        text, count = re.subn(rf"^{name}=.*$", lambda _: line, text, flags=re.M)  # noqa: B023
        assert count == 1, f"the environment file template does not set {name}"
    return text + "".join(f'{name}="{value}"\n' for name, value in extra.items())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def self_signed_certificate(folder: Path, host: str = "localhost") -> tuple[Path, Path]:
    """A certificate for ``host`` (its own issuer) and its key, made with openssl."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", f"/CN={host}", "-addext",
         f"subjectAltName=DNS:{host}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def installed_site(
    *,
    cert: Path,
    key: Path,
    static_root: Path,
    upstream: str = "127.0.0.1:8000",
    http_port: int = 80,
    https_port: int = 443,
    server_name: str = "localhost",
) -> str:
    """The nginx site with a test's certificate, static folder, ports and web server."""
    text = NGINX_SITE.read_text()
    replacements = {
        "/etc/ssl/slurm-gpu-portal/fullchain.pem": str(cert),
        "/etc/ssl/slurm-gpu-portal/privkey.pem": str(key),
        "alias /opt/slurm-gpu-portal/static/;": f"alias {static_root}/;",
        "server 127.0.0.1:8000 ": f"server {upstream} ",
        "listen 80;": f"listen 127.0.0.1:{http_port};",
        "listen 443 ssl;": f"listen 127.0.0.1:{https_port} ssl;",
        "listen [::]:80;": "",
        "listen [::]:443 ssl;": "",
        f"server_name {SITE_NAME};": f"server_name {server_name};",
    }
    for old, new in replacements.items():
        assert old in text, f"{NGINX_SITE.name} no longer has {old!r}"
        text = text.replace(old, new)
    return text


def nginx_main_config(folder: Path, site: str) -> Path:
    """A main configuration for a test's nginx: ``site`` its only server, every file it
    writes in ``folder``, its worker as Debian's www-data (the master runs as root)."""
    (folder / "site.conf").write_text(site)
    main = folder / "nginx.conf"
    main.write_text(
        f"""user www-data;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 256; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    client_body_temp_path {folder}/client_body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    log_format upstream '$request_uri $status upstream=$upstream_addr';
    access_log {folder}/access.log upstream;
    include {folder}/site.conf;
}}
"""
    )
    return main


def nginx_command(main: Path, *extra: str) -> list[str]:
    folder = str(main.parent)
    return ["nginx", "-p", folder, "-e", f"{folder}/error.log", "-c", str(main), *extra]


@contextmanager
def running(command: list[str], *, log: Path, **popen) -> Iterator[subprocess.Popen]:
    """``command`` running in the background, its output in ``log``; stopped afterwards."""
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, **popen)
    try:
        yield process
    finally:
        process_stop(process)


def wait_for_port(port: int, *, process: subprocess.Popen, log: Path, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                output = log.read_text()
                raise AssertionError(f"nothing answers on port {port}:\n{output}") from None
            time.sleep(0.1)
