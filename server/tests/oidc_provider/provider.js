// A real OpenID Provider (panva's certified oidc-provider) for server/tests/console_oidc.rs,
// console_browser.rs and auth_discovery.rs, issuing Keycloak-shaped tokens: `preferred_username`
// and `realm_access.roles` in JWT access tokens whose audience is Picket's (`picket`), as
// docs/auth.md expects of Keycloak.
//
//   node provider.js <port>
//
// Listens on 127.0.0.1:<port> only; the issuer is http://127.0.0.1:<port>. Prints `ready` on
// stdout once it listens. Clients:
// - `picket-console` (secret `console-secret`, client_secret_basic): authorization code with
//   PKCE (S256) required; redirect URI http://127.0.0.1/console/oidc/callback on any port (a
//   loopback redirect, RFC 8252 7.3: the test's replicas get free ports);
// - `picket-worker` (secret `worker-secret`): client credentials, a lock client
//   (`picket-client`) named `worker`;
// - `picket-setup` (secret `setup-secret`): client credentials, a class admin (`picket-admin`)
//   named `setup`, for a test's own set-up calls.
// Users (login form at /interaction/<uid>, fixed passwords; consent is implied for the console):
// `alice` / `alice-pw` (picket-operator), `bob` / `bob-pw` (picket-admin only), `carol` /
// `carol-pw` (no Picket role), `dana` / `dana-pw` (picket-incident-commander).
//
// Signing keys (RSA, generated at start, by key id): at first `test-key-1` alone. Test-only
// routes, for picketd's key rotation check:
// - `POST /test/keys?kids=test-key-2,test-key-1`: the provider is built again (as a restart with
//   a new `jwks` would: its sessions and grants stay, in the shared memory adapter) publishing
//   exactly these keys, the first one signing (oidc-provider signs with the first key of an
//   algorithm); a new key id gets a new key, a known one keeps its key;
// - `GET /test/fetches`: how often the discovery document and the JWKS were read, as JSON
//   `{"discovery": n, "jwks": m}`.

import * as crypto from 'node:crypto';
import * as http from 'node:http';

import Provider from 'oidc-provider';

const [port] = process.argv.slice(2);
if (!port) {
  console.error('usage: node provider.js <port>');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
const AUDIENCE = 'picket';
const RESOURCE = 'urn:picket';

const USERS = {
  alice: { password: 'alice-pw', roles: ['picket-operator', 'offline_access'] },
  bob: { password: 'bob-pw', roles: ['picket-admin'] },
  carol: { password: 'carol-pw', roles: ['offline_access'] },
  dana: { password: 'dana-pw', roles: ['picket-incident-commander'] },
};
// The client credentials clients: who their tokens say they are.
const SERVICES = {
  'picket-worker': { secret: 'worker-secret', principal: 'worker', roles: ['picket-client'] },
  'picket-setup': { secret: 'setup-secret', principal: 'setup', roles: ['picket-admin'] },
};

const signingKeys = new Map();
function signingKey(kid) {
  if (!signingKeys.has(kid)) {
    const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
    signingKeys.set(kid, { ...privateKey.export({ format: 'jwk' }), kid, use: 'sig', alg: 'RS256' });
  }
  return signingKeys.get(kid);
}

const cookieKeys = [crypto.randomBytes(32).toString('hex')];
const build = (kids) => new Provider(issuer, {
  clients: [
    {
      client_id: 'picket-console',
      client_secret: 'console-secret',
      token_endpoint_auth_method: 'client_secret_basic',
      grant_types: ['authorization_code'],
      response_types: ['code'],
      application_type: 'native',
      redirect_uris: ['http://127.0.0.1/console/oidc/callback'],
    },
    ...Object.entries(SERVICES).map(([client_id, { secret }]) => ({
      client_id,
      client_secret: secret,
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
    })),
  ],
  jwks: { keys: kids.map(signingKey) },
  cookies: { keys: cookieKeys },
  pkce: { required: () => true },
  scopes: ['openid', 'profile', 'picket'],
  claims: { openid: ['sub'], profile: ['preferred_username'] },
  async findAccount(_ctx, id) {
    if (!USERS[id]) return undefined;
    return { accountId: id, async claims() { return { sub: id, preferred_username: id }; } };
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    rpInitiatedLogout: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => RESOURCE,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, indicator) => {
        if (indicator !== RESOURCE) throw new Error(`unknown resource ${indicator}`);
        return {
          scope: 'picket',
          audience: AUDIENCE,
          accessTokenTTL: 600,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
  async extraTokenClaims(_ctx, token) {
    if (token.kind === 'AccessToken' && USERS[token.accountId]) {
      return { preferred_username: token.accountId, realm_access: { roles: USERS[token.accountId].roles } };
    }
    const service = token.kind === 'ClientCredentials' && SERVICES[token.clientId];
    if (service) {
      return { preferred_username: service.principal, realm_access: { roles: service.roles } };
    }
    return undefined;
  },
  ttl: { AccessToken: 600, ClientCredentials: 600, IdToken: 600, AuthorizationCode: 60, Interaction: 600, Session: 3600, Grant: 3600 },
});

let provider = build(['test-key-1']);
let callback = provider.callback();
const fetches = { discovery: 0, jwks: 0 };

// The test-only routes (above); false for any other request.
function testRoute(req, res) {
  const url = new URL(req.url, issuer);
  if (req.method === 'POST' && url.pathname === '/test/keys') {
    const kids = (url.searchParams.get('kids') || '').split(',').filter(Boolean);
    if (kids.length === 0) {
      res.writeHead(400, { 'content-type': 'text/plain' });
      res.end('kids: at least one key id');
      return true;
    }
    provider = build(kids);
    callback = provider.callback();
    res.writeHead(204);
    res.end();
    return true;
  }
  if (req.method === 'GET' && url.pathname === '/test/fetches') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(fetches));
    return true;
  }
  if (url.pathname === '/.well-known/openid-configuration') fetches.discovery += 1;
  if (url.pathname === '/jwks') fetches.jwks += 1;
  return false;
}

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function loginPage(uid, error) {
  return `<!doctype html><title>Test provider: sign in</title>
<h1>Sign in</h1>${error ? `<p class="error">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
<label>User <input name="login"></label> <label>Password <input name="password" type="password"></label>
<button type="submit">Sign in</button></form>`;
}

function readForm(req) {
  return new Promise((resolve, reject) => {
    let body = '';
    req.on('data', (chunk) => { body += chunk; if (body.length > 10000) req.destroy(); });
    req.on('end', () => resolve(new URLSearchParams(body)));
    req.on('error', reject);
  });
}

// The login (and implied consent: the console is first-party) interaction.
async function interaction(req, res) {
  const match = /^\/interaction\/([^/]+)(\/login)?$/.exec(new URL(req.url, issuer).pathname);
  if (!match) return false;
  const details = await provider.interactionDetails(req, res);
  if (match[1] !== details.uid) throw new Error('interaction uid mismatch');
  if (req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(loginPage(details.uid));
    return true;
  }
  const form = await readForm(req);
  const login = form.get('login');
  const user = USERS[login];
  if (!user || user.password !== form.get('password')) {
    res.writeHead(401, { 'content-type': 'text/html; charset=utf-8' });
    res.end(loginPage(details.uid, 'wrong user or password'));
    return true;
  }
  const grant = new provider.Grant({ accountId: login, clientId: details.params.client_id });
  grant.addOIDCScope('openid profile');
  grant.addResourceScope(RESOURCE, 'picket');
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { login: { accountId: login }, consent: { grantId } }, { mergeWithLastSubmission: false });
  return true;
}

const server = http.createServer(async (req, res) => {
  if (testRoute(req, res)) return;
  try {
    if (await interaction(req, res)) return;
  } catch (error) {
    res.writeHead(400, { 'content-type': 'text/plain' });
    res.end(`interaction failed: ${error.message}`);
    return;
  }
  callback(req, res);
});
server.listen(Number(port), '127.0.0.1', () => console.log('ready'));
