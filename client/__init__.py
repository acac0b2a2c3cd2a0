"""The portal's command-line client.

It talks to the REST API only and imports nothing of Django, so it can be
installed on a laptop without the portal. Its commands arrive with the API.
"""
