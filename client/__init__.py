"""The portal's command-line client, ``sgp``.

It talks to the REST API only and imports nothing of Django, so it can be
installed on a laptop without the portal: the standard library, httpx and
PyYAML. ``client.cli`` holds the commands, ``client.api`` the calls and the
mapping of the API's refusals to exit codes (``client.exits``).
"""

__version__ = "0.1.0"
