// The dev stack's OpenID provider (component `oidc` of dev/stack), on npm's oidc-provider.
//
//   node server.js STATE_DIR
//
// STATE_DIR (dev/stack's $STACK_DIR/oidc) holds secrets.json, written by dev/stack from
// the stack's secrets (the portal client's secret, the cookie key, each account's
// password), and jwks.json, the signing key, made here on the first start and kept.
// The accounts themselves are accounts.json beside this file (OIDC_ACCOUNTS: another file,
// as tests that start a provider of their own give it). The issuer and port come from
// OIDC_ISSUER (default http://127.0.0.1:9080).
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import Provider from 'oidc-provider';

const ISSUER = process.env.OIDC_ISSUER ?? 'http://127.0.0.1:9080';
const CLIENT_ID = 'slurm-gpu-portal';
// The command-line client `sgp login --sso`: a public client of the device flow (RFC
// 8628), as a site would register it; the portal takes its ID token for a portal token.
const CLI_CLIENT_ID = 'sgp';
const STATE_DIR = process.argv[2];
if (!STATE_DIR) {
  console.error('usage: node server.js STATE_DIR');
  process.exit(2);
}

const secrets = JSON.parse(readFileSync(join(STATE_DIR, 'secrets.json'), 'utf8'));
const accounts = JSON.parse(
  readFileSync(
    process.env.OIDC_ACCOUNTS ?? join(dirname(fileURLToPath(import.meta.url)), 'accounts.json'),
    'utf8',
  ),
);

// One RS256 key, made once: the portal caches the JWKS, and restarts must not void it.
function signingKeys() {
  const file = join(STATE_DIR, 'jwks.json');
  if (!existsSync(file)) {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const key = { ...privateKey.export({ format: 'jwk' }), kid: `dev-${Date.now()}`, use: 'sig', alg: 'RS256' };
    writeFileSync(file, JSON.stringify({ keys: [key] }), { mode: 0o600, flag: 'wx' });
  }
  return JSON.parse(readFileSync(file, 'utf8'));
}

// The portal's redirect URIs: the callback on the loopback address or localhost, on any
// port (tests' live servers take a random one); after log-out, any path there.
function onLoopback(value) {
  let url;
  try {
    url = new URL(value);
  } catch {
    return undefined;
  }
  const loopback = url.protocol === 'http:' && ['127.0.0.1', 'localhost'].includes(url.hostname);
  return loopback && !url.username && !url.password && !url.hash ? url : undefined;
}

const claimsOf = (account) => ({
  sub: account.sub,
  name: `${account.given_name} ${account.family_name}`,
  given_name: account.given_name,
  family_name: account.family_name,
  preferred_username: account.login,
  email: account.email,
  // An account may say the provider has not verified its address (a site whose users
  // type their own); without a word, it has.
  email_verified: account.email_verified ?? true,
  uid: account.uid,
  groups: account.groups,
});
const bySub = new Map(accounts.map((account) => [account.sub, account]));
const byLogin = new Map(accounts.map((account) => [account.login, account]));

const provider = new Provider(ISSUER, {
  clients: [
    {
      client_id: CLIENT_ID,
      client_secret: secrets.client_secret,
      token_endpoint_auth_method: 'client_secret_post',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      id_token_signed_response_alg: 'RS256',
      redirect_uris: ['http://127.0.0.1/oidc/callback/', 'http://localhost/oidc/callback/'],
      post_logout_redirect_uris: ['http://127.0.0.1/', 'http://localhost/'],
    },
    {
      client_id: CLI_CLIENT_ID,
      client_name: 'sgp, the portal\'s command-line client',
      application_type: 'native',
      token_endpoint_auth_method: 'none',
      grant_types: ['urn:ietf:params:oauth:grant-type:device_code'],
      response_types: [],
      redirect_uris: [],
      id_token_signed_response_alg: 'RS256',
    },
  ],
  jwks: signingKeys(),
  cookies: { keys: [secrets.cookie_key] },
  pkce: { required: () => true },
  scopes: ['openid', 'offline_access', 'profile', 'email', 'posix', 'groups'],
  claims: {
    openid: ['sub'],
    profile: ['name', 'given_name', 'family_name', 'preferred_username'],
    email: ['email', 'email_verified'],
    posix: ['uid'],
    groups: ['groups'],
  },
  // Every claim of the granted scopes goes into the ID token too, not only to userinfo.
  conformIdTokenClaims: false,
  async findAccount(_ctx, sub) {
    const account = bySub.get(sub);
    return account && { accountId: sub, claims: async () => claimsOf(account) };
  },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: { enabled: true, logoutSource },
    deviceFlow: {
      enabled: true,
      charset: 'base-20',
      mask: '****-****',
      userCodeInputSource,
      userCodeConfirmSource,
      successSource,
    },
  },
  ttl: {
    AccessToken: 3600,
    AuthorizationCode: 600,
    IdToken: 3600,
    Interaction: 3600,
    Grant: 14 * 24 * 3600,
    Session: 14 * 24 * 3600,
    RefreshToken: 14 * 24 * 3600,
  },
});

provider.Client.prototype.redirectUriAllowed = function redirectUriAllowed(value) {
  const url = onLoopback(value);
  return this.clientId === CLIENT_ID && url !== undefined && url.pathname === '/oidc/callback/' && !url.search;
};
provider.Client.prototype.postLogoutRedirectUriAllowed = function postLogoutRedirectUriAllowed(value) {
  return this.clientId === CLIENT_ID && onLoopback(value) !== undefined;
};

const escape = (text) =>
  String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function page(title, body) {
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>${escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><main><h1>${escape(title)}</h1>${body}</main></body></html>`;
}

function loginPage(uid, { login = '', error = '' } = {}) {
  return page(
    'Sign in to the dev identity provider',
    `${error ? `<p role="alert">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}">
  <p><label for="username">Username</label>
     <input id="username" name="username" autocomplete="username" required autofocus value="${escape(login)}"></p>
  <p><label for="password">Password</label>
     <input id="password" name="password" type="password" autocomplete="current-password" required></p>
  <p><button type="submit">Sign in</button></p>
</form>`,
  );
}

// The device flow's pages: the code the command line printed, then a confirmation.
async function userCodeInputSource(ctx, form, _out, err) {
  const message = err
    ? 'That code is not known or has expired; check it and try again.'
    : 'Enter the code your command line shows.';
  ctx.body = page(
    'Sign in a device',
    `<p ${err ? 'role="alert"' : ''}>${escape(message)}</p>${form}
<p><button type="submit" form="op.deviceInputForm">Continue</button></p>`,
  );
}

async function userCodeConfirmSource(ctx, form, client, _deviceInfo, userCode) {
  ctx.body = page(
    'Confirm the device',
    `<p>${escape(client.clientName ?? client.clientId)} asks to sign in as you.
Check that it shows the code <code>${escape(userCode)}</code>.</p>${form}
<p><button type="submit" form="op.deviceConfirmForm">Confirm</button>
<button type="submit" form="op.deviceConfirmForm" name="abort" value="yes">Abort</button></p>`,
  );
}

async function successSource(ctx) {
  ctx.body = page('Device signed in', '<p>You may close this page and go back to your command line.</p>');
}

// RP-initiated log-out ends the provider's session too, without asking.
async function logoutSource(ctx, form) {
  ctx.body = page(
    'Signing out',
    `${form}<input type="hidden" form="op.logoutForm" name="logout" value="yes">
<button type="submit" form="op.logoutForm">Sign out</button>
<script>document.getElementById('op.logoutForm').submit()</script>`,
  );
}

function send(res, status, html) {
  res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  res.end(html);
}

async function formOf(req) {
  let body = '';
  for await (const chunk of req) {
    body += chunk;
    if (body.length > 10000) throw new Error('form too large');
  }
  return new URLSearchParams(body);
}

function passwordMatches(account, password) {
  const expected = secrets.passwords[account.login];
  return typeof expected === 'string' && expected.length > 0 && password === expected;
}

// Consent for the portal, a first-party client: every scope and claim it asked for.
async function grantFor(details, accountId) {
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId, clientId: details.params.client_id });
  grant.addOIDCScope(details.params.scope);
  const missing = details.prompt.details;
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  return grant.save();
}

async function interaction(req, res, uid) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) return send(res, 400, page('Bad request', '<p>This sign-in has expired.</p>'));
  if (details.prompt.name === 'consent') {
    const grantId = await grantFor(details, details.session.accountId);
    return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  }
  if (req.method === 'GET') return send(res, 200, loginPage(uid));
  const form = await formOf(req);
  const login = form.get('username') ?? '';
  const account = byLogin.get(login);
  if (!account || !passwordMatches(account, form.get('password') ?? '')) {
    return send(res, 200, loginPage(uid, { login, error: 'Wrong user name or password.' }));
  }
  const grantId = await grantFor(details, account.sub);
  return provider.interactionFinished(
    req,
    res,
    { login: { accountId: account.sub }, consent: { grantId } },
    { mergeWithLastSubmission: false },
  );
}

const handle = provider.callback();
const server = createServer(async (req, res) => {
  const match = /^\/interaction\/([\w-]+)$/.exec(new URL(req.url, ISSUER).pathname);
  if (!match) return handle(req, res);
  if (req.method !== 'GET' && req.method !== 'POST') return send(res, 405, page('Method not allowed', ''));
  try {
    await interaction(req, res, match[1]);
  } catch (error) {
    // An expired or unknown interaction (a stale tab, a restarted provider).
    console.error(`interaction ${match[1]}: ${error}`);
    if (!res.headersSent) send(res, 400, page('Bad request', `<p>${escape(error.message)}</p>`));
  }
});

const { hostname, port } = new URL(ISSUER);
server.listen(Number(port), hostname, () => console.log(`oidc: ${ISSUER} ready`));
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
