"""deploy/nginx/slurm-gpu-portal.conf: `nginx -t` accepts it, and what it adds to static
files is what the portal sends on its own answers. tests/browser/test_behind_nginx.py
serves the portal through it."""

import re
import shutil
import subprocess

import pytest

from portal.security import PORTAL_CSP
from tests.deploy.installed import (
    NGINX_SITE,
    installed_site,
    nginx_command,
    nginx_main_config,
    self_signed_certificate,
)


def test_nginx_accepts_the_site(tmp_path):
    if not shutil.which("nginx"):
        pytest.fail("nginx is missing; `dev/stack install` installs it", pytrace=False)
    cert, key = self_signed_certificate(tmp_path)
    site = installed_site(cert=cert, key=key, static_root=tmp_path / "static")
    tested = subprocess.run(
        nginx_command(nginx_main_config(tmp_path, site), "-t"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert tested.returncode == 0, tested.stderr
    assert "test is successful" in tested.stderr
    assert "[warn]" not in tested.stderr and "[emerg]" not in tested.stderr, tested.stderr


def test_static_files_carry_the_portals_own_security_headers():
    """Static files come from nginx, not through Django: the site repeats the portal's
    Content-Security-Policy (portal/security.py) on them, unchanged."""
    site = NGINX_SITE.read_text()
    policies = re.findall(r'add_header Content-Security-Policy "([^"]*)" always;', site)
    assert policies and set(policies) == {PORTAL_CSP}
    for header in ("Strict-Transport-Security", "X-Content-Type-Options",
                   "Cross-Origin-Resource-Policy"):  # fmt: skip
        # Once in /static/ and once in its hashed names' location, which repeats them all
        # (a location with an add_header of its own inherits none).
        assert site.count(f"add_header {header} ") == 2, header
