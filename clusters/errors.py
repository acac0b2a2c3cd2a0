"""Domain errors of the clusters app; the API and pages turn them into messages."""


class NoSuchCluster(Exception):
    """No enabled cluster by that name, or a cluster left out where the portal has several."""
