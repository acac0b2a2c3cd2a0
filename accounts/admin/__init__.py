"""The allocation managers' console: registrations and thin views over the services.

Every write that matters goes through a service with the acting user, and the
admin log (LogEntry) records who changed what and, where a reason is asked, why.
"""

# Each module registers its models with the console.
from accounts.admin import adoption, allocations, caps, identities, people, projects  # noqa: F401
