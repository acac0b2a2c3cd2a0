"""deploy/portal.env.example: what systemd reads is what the shell reads, it names every
secret as a file, and each of its variables is one the README documents."""

import re
import subprocess

from tests.conftest import REPO
from tests.deploy.installed import ENV_TEMPLATE, environment_file

# An assignment left commented out for the site to switch on: "# NAME=value".
COMMENTED = re.compile(r"^# (PORTAL_[A-Z0-9_]+=.*)$", re.M)


def test_every_line_reads_the_same_for_systemd_and_the_shell():
    text = ENV_TEMPLATE.read_text()
    values = environment_file(text)  # raises on a line outside the common subset
    assert values, "the template sets nothing"
    # The shell's reading (deploy/portal-manage sources the file).
    shell = subprocess.run(
        ["env", "-i", "bash", "-c", f"set -a; . {ENV_TEMPLATE}; env -0"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    read = dict(item.split("=", 1) for item in shell.stdout.split("\0") if item)
    assert {name: read[name] for name in values} == values
    # What a site switches on reads alike too.
    environment_file("\n".join(COMMENTED.findall(text)))


def test_secrets_are_files_and_production_is_the_default():
    text = ENV_TEMPLATE.read_text()
    names = set(environment_file(text)) | set(environment_file("\n".join(COMMENTED.findall(text))))
    assert "PORTAL_ENV" not in names and "PORTAL_DEBUG" not in names
    for secret in ("SECRET_KEY", "DATABASE_PASSWORD", "REDIS_PASSWORD", "HEALTH_TOKEN",
                   "EMAIL_HOST_PASSWORD", "LDAP_BIND_PASSWORD", "OIDC_CLIENT_SECRET"):  # fmt: skip
        assert f"PORTAL_{secret}" not in names, f"PORTAL_{secret} written in the file itself"
        assert f"PORTAL_{secret}_FILE" in names
    assert environment_file(text)["PORTAL_SLURM_RUN_AS_PREFIX"] == "sudo -n -u {user}"


def test_the_readme_documents_every_variable_the_template_names():
    readme = (REPO / "README.md").read_text()
    text = ENV_TEMPLATE.read_text()
    names = set(environment_file(text)) | set(environment_file("\n".join(COMMENTED.findall(text))))
    undocumented = {name for name in names if f"`{name.removesuffix('_FILE')}`" not in readme}
    assert not undocumented
