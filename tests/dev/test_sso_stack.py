"""The stack's directory (slapd) and OpenID provider (dev/oidc), as the portal meets them.

They read the running stack (``make test`` starts it) and stop nothing, so they run beside
the other tests. Passwords come from the stack's secrets folder, which needs root.
"""

import base64
import hashlib
import pwd
import re
import secrets
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx
import jwt
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slurm
STOPS_NOTHING = True  # tests/conftest.py: these need not run alone

SUFFIX = "dc=portal,dc=test"
PORTAL_BIND = f"cn=portal,ou=services,{SUFFIX}"
ADMIN_BIND = f"cn=admin,{SUFFIX}"
CLIENT_ID = "slurm-gpu-portal"
EXPECTED_CLAIMS = {
    "sub": "u-alice",
    "uid": "alice",
    "preferred_username": "alice.anders",
    "email": "alice@portal.test",
    "groups": ["vision-members"],
    "name": "Alice Anders",
}


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    result = subprocess.run(
        [str(REPO / "dev" / "stack"), "env"], capture_output=True, text=True, check=True
    )
    return dict(line.split("=", 1) for line in result.stdout.splitlines())


@pytest.fixture(scope="module")
def secret_file(env):
    return lambda name: Path(env["PORTAL_STACK_DIR"]) / "secrets" / name


def ldap(env, tool: str, bind_dn: str, password_file: Path, *args: str, stdin: str = ""):
    return subprocess.run(
        [tool, "-x", *(["-LLL"] if tool == "ldapsearch" else []), "-o", "nettimeout=5",
         "-H", env["PORTAL_LDAP_URL"], "-D", bind_dn, "-y", str(password_file), *args],
        input=stdin, capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip


def attributes(ldif: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in ldif.splitlines():
        name, _, value = line.partition(": ")
        if value:
            found.setdefault(name.rstrip(":"), []).append(value)
    return found


def test_env_names_the_directory_and_the_provider(env):
    assert env["PORTAL_LDAP_URL"] == "ldap://127.0.0.1:3389"
    assert env["PORTAL_LDAP_BASE_DN"] == SUFFIX
    assert env["PORTAL_OIDC_ISSUER"] == "http://127.0.0.1:9080"


def test_the_portal_reads_alice_as_a_posix_account_of_this_host(env, secret_file):
    found = ldap(env, "ldapsearch", PORTAL_BIND, secret_file("ldap-portal"),
                 "-b", f"ou=people,{SUFFIX}", "(uid=alice)")  # fmt: skip
    assert found.returncode == 0, found.stderr
    alice, host = attributes(found.stdout), pwd.getpwnam("alice")
    assert set(alice["objectClass"]) == {"inetOrgPerson", "posixAccount", "shadowAccount"}
    assert alice["cn"] == ["Alice Anders"] and alice["mail"] == ["alice@portal.test"]
    assert alice["uidNumber"] == [str(host.pw_uid)] and alice["gidNumber"] == [str(host.pw_gid)]
    assert alice["homeDirectory"] == [host.pw_dir] and alice["loginShell"] == ["/bin/bash"]
    assert "userPassword" not in alice


def test_the_portal_reads_dora_and_the_groups(env, secret_file):
    wanted = "(|(uid=dora)(objectClass=posixGroup))"
    found = ldap(env, "ldapsearch", PORTAL_BIND, secret_file("ldap-portal"), "-b", SUFFIX,
                 wanted, "uidNumber", "memberUid", "cn")  # fmt: skip
    assert found.returncode == 0, found.stderr
    entries = {
        entry.splitlines()[0]: attributes(entry) for entry in found.stdout.strip().split("\n\n")
    }
    assert entries[f"dn: uid=dora,ou=people,{SUFFIX}"]["uidNumber"] == ["5999"]
    members = {dn: entry.get("memberUid", []) for dn, entry in entries.items() if "cn=" in dn}
    assert members == {
        f"dn: cn=vision-members,ou=groups,{SUFFIX}": ["alice", "bob"],
        f"dn: cn=vision-pis,ou=groups,{SUFFIX}": ["pat"],
        f"dn: cn=genomics-pis,ou=groups,{SUFFIX}": ["olga"],
    }


def test_the_portal_reads_no_password_and_writes_nothing(env, secret_file):
    asked = ("-b", f"uid=alice,ou=people,{SUFFIX}", "-s", "base", "userPassword")
    as_admin = ldap(env, "ldapsearch", ADMIN_BIND, secret_file("ldap-admin"), *asked)
    assert attributes(as_admin.stdout)["userPassword"][0], "alice has a password"
    as_portal = ldap(env, "ldapsearch", PORTAL_BIND, secret_file("ldap-portal"), *asked)
    assert as_portal.returncode == 0 and "userPassword" not in as_portal.stdout

    change = (
        f"dn: uid=alice,ou=people,{SUFFIX}\n"
        "changetype: modify\nreplace: displayName\ndisplayName: Mallory\n"
    )
    written = ldap(env, "ldapmodify", PORTAL_BIND, secret_file("ldap-portal"), stdin=change)
    assert "Insufficient access (50)" in written.stderr


def test_alice_binds_with_her_password_and_not_with_another(env, secret_file, tmp_path):
    alice = f"uid=alice,ou=people,{SUFFIX}"
    bound = ldap(env, "ldapwhoami", alice, secret_file("ldap-user-alice"))
    assert bound.returncode == 0 and bound.stdout.strip() == f"dn:{alice}", bound.stderr
    wrong = tmp_path / "wrong"
    wrong.write_text("not-her-password")
    refused = ldap(env, "ldapwhoami", alice, wrong)
    assert "Invalid credentials (49)" in refused.stderr


# --- the OpenID provider -----------------------------------------------------------------


@pytest.fixture(scope="module")
def discovery(env) -> dict:
    response = httpx.get(
        env["PORTAL_OIDC_ISSUER"] + "/.well-known/openid-configuration", timeout=10
    )
    assert response.status_code == 200
    return response.json()


def test_discovery_names_the_issuer_and_requires_s256_pkce(env, discovery):
    assert discovery["issuer"] == env["PORTAL_OIDC_ISSUER"] == "http://127.0.0.1:9080"
    assert discovery["code_challenge_methods_supported"] == ["S256"]
    assert "RS256" in discovery["id_token_signing_alg_values_supported"]
    assert {"openid", "profile", "email", "posix", "groups"} <= set(discovery["scopes_supported"])
    assert discovery["end_session_endpoint"].startswith(env["PORTAL_OIDC_ISSUER"])


class SignIn:
    """One browser's way through the provider: authorize, its log-in page, the code."""

    def __init__(
        self,
        discovery: dict,
        redirect_uri: str,
        *,
        pkce: bool = True,
        browser: httpx.Client | None = None,
    ):
        self.discovery = discovery
        self.redirect_uri = redirect_uri
        self.verifier = secrets.token_urlsafe(48)
        self.state = secrets.token_urlsafe(16)
        self.nonce = secrets.token_urlsafe(16)
        self.browser = browser or httpx.Client(follow_redirects=False, timeout=10)
        params = {
            "client_id": CLIENT_ID,
            "response_type": "code",
            "redirect_uri": redirect_uri,
            "scope": "openid profile email posix groups",
            "state": self.state,
            "nonce": self.nonce,
        }
        if pkce:
            challenge = hashlib.sha256(self.verifier.encode()).digest()
            params |= {"code_challenge": base64.urlsafe_b64encode(challenge).rstrip(b"=").decode(),
                       "code_challenge_method": "S256"}  # fmt: skip
        self.response = self.follow(
            self.browser.get(f"{discovery['authorization_endpoint']}?{urlencode(params)}")
        )

    def follow(self, response: httpx.Response) -> httpx.Response:
        """Follow the provider's redirects; stop at the client's redirect URI."""
        while response.is_redirect:
            location = urljoin(str(response.url), response.headers["location"])
            if location.startswith(self.redirect_uri):
                return response
            response = self.browser.get(location)
        return response

    def submit(self, username: str, password: str) -> httpx.Response:
        action = re.search(r'<form method="post" action="([^"]+)"', self.response.text)
        assert action, self.response.text
        posted = self.browser.post(
            urljoin(str(self.response.url), action[1]),
            data={"username": username, "password": password},
        )
        self.response = self.follow(posted)
        return self.response

    def callback(self) -> dict[str, str]:
        assert self.response.is_redirect, self.response.text
        query = parse_qs(urlsplit(self.response.headers["location"]).query)
        return {name: values[0] for name, values in query.items()}


def loopback_callback() -> str:
    return f"http://127.0.0.1:{secrets.randbelow(20000) + 40000}/oidc/callback/"


def test_a_sign_in_with_pkce_gives_an_id_token_with_alice_s_claims(discovery, secret_file):
    sign_in = SignIn(discovery, loopback_callback())
    page = sign_in.response.text
    assert sign_in.response.status_code == 200
    assert (
        'for="username">Username<' in page
        and 'for="password">Password<' in page
        and "Sign in</button>" in page
    )

    sign_in.submit("alice.anders", secret_file("oidc-user-alice.anders").read_text())
    callback = sign_in.callback()
    assert callback["state"] == sign_in.state and callback["iss"] == discovery["issuer"]

    token = {
        "grant_type": "authorization_code",
        "code": callback["code"],
        "redirect_uri": sign_in.redirect_uri,
        "client_id": CLIENT_ID,
        "client_secret": secret_file("oidc-client").read_text(),
    }
    wrong_verifier = token | {"code_verifier": secrets.token_urlsafe(48)}
    assert (
        httpx.post(discovery["token_endpoint"], data=wrong_verifier, timeout=10).status_code == 400
    )
    tokens = httpx.post(
        discovery["token_endpoint"], data=token | {"code_verifier": sign_in.verifier}, timeout=10
    )
    assert tokens.status_code == 200, tokens.text

    id_token = tokens.json()["id_token"]
    signing_key = jwt.PyJWKClient(discovery["jwks_uri"]).get_signing_key_from_jwt(id_token)
    claims = jwt.decode(
        id_token,
        signing_key.key,
        algorithms=["RS256"],
        audience=CLIENT_ID,
        issuer=discovery["issuer"],
    )
    assert claims["nonce"] == sign_in.nonce
    assert {name: claims[name] for name in EXPECTED_CLAIMS} == EXPECTED_CLAIMS

    # RP-initiated log-out: back at the portal, and the provider asks for a password again.
    bye = f"http://127.0.0.1:{urlsplit(sign_in.redirect_uri).port}/bye"
    query = urlencode({"id_token_hint": id_token, "post_logout_redirect_uri": bye})
    confirm = sign_in.browser.get(f"{discovery['end_session_endpoint']}?{query}")
    form = dict(re.findall(r'name="(\w+)" value="([^"]*)"', confirm.text))
    assert form.get("logout") == "yes", confirm.text
    action = re.search(r'action="([^"]+)"', confirm.text)
    assert action, confirm.text
    ended = sign_in.browser.post(urljoin(str(confirm.url), action[1]), data=form)
    assert ended.is_redirect and ended.headers["location"] == bye
    again = SignIn(discovery, sign_in.redirect_uri, browser=sign_in.browser)
    assert "Sign in</button>" in again.response.text


def test_a_wrong_password_is_refused_on_the_log_in_page(discovery, secret_file):
    sign_in = SignIn(
        discovery, f"http://localhost:{secrets.randbelow(20000) + 40000}/oidc/callback/"
    )
    refused = sign_in.submit("alice.anders", secret_file("oidc-user-bob.brandt").read_text())
    assert refused.status_code == 200 and "Wrong user name or password." in refused.text
    assert 'value="alice.anders"' in refused.text
    assert "Wrong user name" in sign_in.submit("nobody", "x").text


def test_an_authorization_without_pkce_is_refused(discovery):
    callback = SignIn(discovery, loopback_callback(), pkce=False).callback()
    assert callback["error"] == "invalid_request" and "PKCE" in callback["error_description"]


@pytest.mark.parametrize(
    "redirect_uri",
    ["http://127.0.0.1:8000/elsewhere/", "http://portal.example:8000/oidc/callback/"],
)
def test_only_the_loopback_callback_is_a_redirect_uri(discovery, redirect_uri):
    refused = SignIn(discovery, redirect_uri).response
    assert refused.status_code == 400 and "redirect_uri did not match" in refused.text
