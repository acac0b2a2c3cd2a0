"""The Django group allocation managers belong to.

Its permissions are set by migrations (``0002_allocation_managers_group``
first), so every deployment has exactly the same group.
"""

ALLOCATION_MANAGERS = "Allocation managers"
