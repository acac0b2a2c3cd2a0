"""The Slurm contract (``tests/clusters/contract.py``) on portal-next: Slurm 24.11 in a
root of its own (``dev/cluster-next``), for the cli and the rest backend. (Its whole
root stopping is tests/faults/test_cluster_down.py.)"""

from tests.clusters.contract import *  # noqa: F403 - the contract's tests and fixtures
from tests.clusters.contract import next_site

make_site = next_site
