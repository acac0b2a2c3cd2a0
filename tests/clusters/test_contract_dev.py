"""The Slurm contract (``tests/clusters/contract.py``) on portal-dev: the host's Slurm
22.05 (``dev/stack``), for the cli and the rest backend."""

import subprocess
import time

import pytest

from clusters.slurm import SlurmUnavailable
from portal.devstack import STACK
from tests.clusters.contract import *  # noqa: F403 - the contract's tests and fixtures
from tests.clusters.contract import dev_site

make_site = dev_site


@pytest.mark.exclusive  # it stops the controller every test process uses
@pytest.mark.parametrize("component", ["slurmctld"])
def test_a_stopped_controller_is_unavailable_within_the_timeout(client, site, component):
    subprocess.run([STACK, "stop", component], check=True, capture_output=True)
    try:
        started = time.monotonic()
        with pytest.raises(SlurmUnavailable):
            client.queue()
        with pytest.raises(SlurmUnavailable):
            client.ping()
        assert time.monotonic() - started < 2 * 12  # two calls, each bounded by its timeout
    finally:
        subprocess.run([STACK, "start", component], check=True, capture_output=True)
