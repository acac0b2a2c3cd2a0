"""The client keeps its own copy of the portal's terminal states (it imports nothing of
the portal, tests/client/test_no_django.py); this ties the copy to jobs/states.py."""

from client.jobs import TERMINAL_STATES as CLIENT_TERMINAL_STATES
from jobs.states import TERMINAL_STATES as PORTAL_TERMINAL_STATES


def test_the_clients_terminal_states_are_the_portals():
    assert {str(state) for state in PORTAL_TERMINAL_STATES} == CLIENT_TERMINAL_STATES
