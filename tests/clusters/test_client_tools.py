"""A cluster's own client tools: the command prefix before the operator's tools, the
run-as prefix before a job owner's, checked where they are set and used by the worker."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.test import override_settings

from accounts.services import user_create
from clusters.models import Cluster
from clusters.prefixes import PrefixInvalid
from clusters.services import cluster_register
from clusters.slurm import client_for
from clusters.slurm.cli import CliClient

NEXT_SLURM = "/var/lib/slurm-gpu-portal/next/bin/next-slurm"
NEXT_RUNAS = "/var/lib/slurm-gpu-portal/next/bin/next-runas {user}"


def cli(**tools) -> CliClient:
    return CliClient(
        cluster_name="b", timeout_s=1, **{"run_as_prefix": "sudo -n -u {user}", **tools}
    )


def test_the_operators_tools_run_after_the_command_prefix_and_a_users_after_the_run_as_one():
    client = cli(command_prefix=f"{NEXT_SLURM} --flag 'two words'", run_as_prefix=NEXT_RUNAS)
    assert client.command(["squeue", "--noheader"]) == [
        NEXT_SLURM, "--flag", "two words", "squeue", "--noheader"
    ]  # fmt: skip
    assert client.command(["sbatch", "--parsable"], as_user="alice") == [
        NEXT_RUNAS.split()[0], "alice", "sbatch", "--parsable"
    ]  # fmt: skip


def test_without_prefixes_the_tools_come_from_the_bin_dir_or_path():
    client = cli(run_as_prefix="runuser -u {user} --", bin_dir="/opt/slurm/bin")
    assert client.command(["sinfo"]) == ["/opt/slurm/bin/sinfo"]
    assert client.command(["scancel", "7"], as_user="bob") == [
        "runuser", "-u", "bob", "--", "/opt/slurm/bin/scancel", "7"
    ]  # fmt: skip
    assert cli().command(["sinfo"]) == ["sinfo"]


def test_a_login_fills_its_placeholder_inside_one_argument():
    client = cli(run_as_prefix="ssh -l {user} login2 --")
    assert client.command(["sbatch"], as_user="a b;c") == [
        "ssh", "-l", "a b;c", "login2", "--", "sbatch"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ({"command_prefix": "next-slurm 'open"}, "cannot be split into arguments"),
        ({"command_prefix": "sudo -u {user}"}, "the run-as prefix is the one with {user}"),
        ({"run_as_prefix": "sudo -n"}, "has no {user}"),
        ({"run_as_prefix": ""}, "has no {user}"),
    ],
)
def test_a_client_refuses_prefixes_that_cannot_work(tools, says):
    with pytest.raises(PrefixInvalid, match=says.replace("{", r"\{").replace("}", r"\}")):
        cli(**tools)


def test_the_cluster_row_gives_the_client_its_tools():
    cluster = Cluster(name="b", command_prefix=NEXT_SLURM, run_as_prefix=NEXT_RUNAS)
    client = client_for(cluster)
    assert isinstance(client, CliClient)
    assert client.command(["sacct"]) == [NEXT_SLURM, "sacct"]
    assert client.command(["sbatch"], as_user="alice")[:2] == [NEXT_RUNAS.split()[0], "alice"]


@override_settings(SLURM_RUN_AS_PREFIX="runuser -u {user} --", SLURM_BIN_DIR="/opt/slurm/bin")
def test_empty_tools_are_the_settings_and_a_prefixed_cluster_ignores_the_workers_bin_dir():
    own = client_for(Cluster(name="a"))
    assert own.command(["sbatch"], as_user="alice") == [
        "runuser", "-u", "alice", "--", "/opt/slurm/bin/sbatch"
    ]  # fmt: skip
    behind = client_for(Cluster(name="b", command_prefix=NEXT_SLURM, run_as_prefix=NEXT_RUNAS))
    assert behind.command(["squeue"]) == [NEXT_SLURM, "squeue"]
    assert behind.command(["sbatch"], as_user="alice")[-1] == "sbatch"


def errors_of(cluster: Cluster) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as invalid:
        cluster.full_clean(validate_unique=False)
    return invalid.value.message_dict


@pytest.mark.django_db
def test_each_field_says_what_is_wrong_with_its_prefix():
    errors = errors_of(
        Cluster(name="b", command_prefix="x 'open", run_as_prefix="sudo -n -u someone")
    )
    assert "cannot be split into arguments" in errors["command_prefix"][0]
    assert "has no {user}" in errors["run_as_prefix"][0]
    errors = errors_of(Cluster(name="b", command_prefix="sudo -u {user}", run_as_prefix=NEXT_RUNAS))
    assert "the run-as prefix is the one with {user}" in errors["command_prefix"][0]


@pytest.mark.django_db
def test_a_command_prefix_without_a_run_as_prefix_is_refused_in_the_form_and_the_database():
    errors = errors_of(Cluster(name="b", command_prefix=NEXT_SLURM))
    assert "needs its own run-as prefix too" in errors["__all__"][0]
    with pytest.raises(IntegrityError), transaction.atomic():
        Cluster.objects.create(name="b", command_prefix=NEXT_SLURM)
    assert Cluster.objects.create(name="c", command_prefix=NEXT_SLURM, run_as_prefix=NEXT_RUNAS)


@pytest.mark.django_db
def test_registering_checks_the_tools_and_a_repeat_changes_nothing():
    with pytest.raises(ValidationError, match="has no"):
        cluster_register(name="b", command_prefix=NEXT_SLURM, run_as_prefix="sudo -n")
    assert not Cluster.objects.exists()
    cluster = cluster_register(name="b", command_prefix=NEXT_SLURM, run_as_prefix=NEXT_RUNAS)
    again = cluster_register(name="b")
    assert again == cluster and again.command_prefix == NEXT_SLURM
    assert again.run_as_prefix == NEXT_RUNAS


def change_url(cluster: Cluster) -> str:
    return f"/admin/clusters/cluster/{cluster.pk}/change/"


def form_data(cluster: Cluster, **changes: str) -> dict[str, str]:
    return {
        "name": cluster.name,
        "backend": cluster.backend,
        "is_enabled": "on",
        "admin_user": cluster.admin_user,
        "parent_account": cluster.parent_account,
        "rest_url": "",
        "rest_api_version": "",
        "jwt_key_file": "",
        "command_prefix": cluster.command_prefix,
        "run_as_prefix": cluster.run_as_prefix,
        "partitions-TOTAL_FORMS": "0",
        "partitions-INITIAL_FORMS": "0",
        "partitions-MIN_NUM_FORMS": "0",
        "partitions-MAX_NUM_FORMS": "1000",
        **changes,
    }


@pytest.fixture
def root(db):
    user = user_create(username="root", password="pw-root-12345", is_staff=True)
    user.is_superuser = True
    user.save()
    return user


def test_a_superuser_sets_a_clusters_tools_in_the_console(client, root):
    cluster = cluster_register(name="b")
    client.force_login(root)
    page = client.get(change_url(cluster)).content
    assert b'name="command_prefix"' in page and b'name="run_as_prefix"' in page
    data = form_data(cluster, command_prefix=NEXT_SLURM, run_as_prefix=NEXT_RUNAS)
    assert client.post(change_url(cluster), data).status_code == 302
    cluster.refresh_from_db()
    assert (cluster.command_prefix, cluster.run_as_prefix) == (NEXT_SLURM, NEXT_RUNAS)


def test_a_superuser_sets_the_parent_of_the_portals_accounts_a_slurm_name_only(client, root):
    cluster = cluster_register(name="b")
    assert cluster.parent_account == "root"
    client.force_login(root)
    assert b'name="parent_account"' in client.get(change_url(cluster)).content
    response = client.post(change_url(cluster), form_data(cluster, parent_account="Bad Name"))
    assert response.status_code == 200 and b"lower-case letters" in response.content
    response = client.post(change_url(cluster), form_data(cluster, parent_account="gpu-portal"))
    assert response.status_code == 302
    cluster.refresh_from_db()
    assert cluster.parent_account == "gpu-portal"


def test_the_console_refuses_a_command_prefix_alone_and_says_why(client, root):
    cluster = cluster_register(name="b")
    client.force_login(root)
    response = client.post(change_url(cluster), form_data(cluster, command_prefix=NEXT_SLURM))
    assert response.status_code == 200
    assert b"needs its own run-as prefix too" in response.content
    response = client.post(
        change_url(cluster), form_data(cluster, command_prefix="x", run_as_prefix="sudo -n")
    )
    assert response.status_code == 200 and b"has no {user}" in response.content
    cluster.refresh_from_db()
    assert (cluster.command_prefix, cluster.run_as_prefix) == ("", "")


def test_an_allocation_manager_sees_the_tools_but_cannot_change_them(client, manny):
    cluster = cluster_register(name="b", command_prefix=NEXT_SLURM, run_as_prefix=NEXT_RUNAS)
    client.force_login(manny)
    page = client.get(change_url(cluster))
    assert page.status_code == 200
    assert NEXT_SLURM.encode() in page.content
    assert b'name="command_prefix"' not in page.content
    data = form_data(cluster, command_prefix="/bin/sh -c", run_as_prefix="sudo -u {user} sh")
    assert client.post(change_url(cluster), data).status_code == 403
    cluster.refresh_from_db()
    assert (cluster.command_prefix, cluster.run_as_prefix) == (NEXT_SLURM, NEXT_RUNAS)
