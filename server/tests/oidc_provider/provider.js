// A real OpenID Provider (panva's certified oidc-provider) for server/tests/console_oidc.rs,
// issuing Keycloak-shaped tokens: `preferred_username` and `realm_access.roles` in JWT access
// tokens whose audience is Picket's (`picket`), as docs/auth.md expects of Keycloak.
//
//   node provider.js <port>
//
// Listens on 127.0.0.1:<port> only; the issuer is http://127.0.0.1:<port>. Prints `ready` on
// stdout once it listens. Clients:
// - `picket-console` (secret `console-secret`, client_secret_basic): authorization code with
//   PKCE (S256) required; redirect URI http://127.0.0.1/console/oidc/callback on any port (a
//   loopback redirect, RFC 8252 7.3: the test's replicas get free ports);
// - `picket-worker` (secret `worker-secret`): client credentials, a lock client
//   (`picket-client`) named `worker`.
// Users (login form at /interaction/<uid>, fixed passwords; consent is implied for the console):
// `alice` / `alice-pw` (picket-operator), `bob` / `bob-pw` (picket-admin only), `carol` /
// `carol-pw` (no Picket role), `dana` / `dana-pw` (picket-incident-commander).

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
const WORKER = { principal: 'worker', roles: ['picket-client'] };

const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'test-key-1', use: 'sig', alg: 'RS256' };

const provider = new Provider(issuer, {
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
    {
      client_id: 'picket-worker',
      client_secret: 'worker-secret',
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
    },
  ],
  jwks: { keys: [signingKey] },
  cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
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
    if (token.kind === 'ClientCredentials') {
      return { preferred_username: WORKER.principal, realm_access: { roles: WORKER.roles } };
    }
    return undefined;
  },
  ttl: { AccessToken: 600, ClientCredentials: 600, IdToken: 600, AuthorizationCode: 60, Interaction: 600, Session: 3600, Grant: 3600 },
});

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

const callback = provider.callback();
const server = http.createServer(async (req, res) => {
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
