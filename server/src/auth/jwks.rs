//! The issuer's public keys: where they come from ([`JwksSource`]) and the cache that verifies
//! tokens with them ([`KeyCache`]), refreshed when a token names an unknown `kid` (at most once
//! per `refresh_interval_min`, so a flood of forged `kid`s cannot make us hammer the issuer) and
//! when the keys are older than `max_age` (so a rotated-out key stops being trusted).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey};

use super::error::AuthError;

/// A boxed future, so that [`JwksSource`] can be a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// At most this many keys of a key set are kept (the rest are ignored, with a warning).
pub const JWKS_KEYS_MAX: usize = 64;
/// Largest key-set document read, in bytes.
pub const JWKS_BYTES_MAX: usize = 1 << 20;

/// Where a key set comes from.
pub trait JwksSource: Send + Sync + 'static {
    /// The current key set (or why it could not be had).
    fn fetch(&self) -> BoxFuture<'_, Result<JwkSet, String>>;
    /// For logs and error messages: the file or URL.
    fn describe(&self) -> String;
}

/// A key set in a JSON file, re-read on every refresh (so a rotated file is picked up).
#[derive(Clone, Debug)]
pub struct FileJwks {
    pub path: PathBuf,
}

impl JwksSource for FileJwks {
    fn fetch(&self) -> BoxFuture<'_, Result<JwkSet, String>> {
        Box::pin(async move {
            let bytes = std::fs::read(&self.path)
                .map_err(|e| format!("reading {}: {e}", self.path.display()))?;
            parse_jwks(&bytes).map_err(|e| format!("{}: {e}", self.path.display()))
        })
    }

    fn describe(&self) -> String {
        format!("file {}", self.path.display())
    }
}

/// A fixed key set (tests, and a dev issuer in the same process).
#[derive(Clone, Debug)]
pub struct StaticJwks(pub JwkSet);

impl JwksSource for StaticJwks {
    fn fetch(&self) -> BoxFuture<'_, Result<JwkSet, String>> {
        let set = self.0.clone();
        Box::pin(async move { Ok(set) })
    }

    fn describe(&self) -> String {
        "a static key set".to_owned()
    }
}

/// Parses a JWKS document (`{"keys": [...]}`), bounded in size.
pub fn parse_jwks(bytes: &[u8]) -> Result<JwkSet, String> {
    if bytes.len() > JWKS_BYTES_MAX {
        return Err(format!(
            "key set is {} bytes, above {JWKS_BYTES_MAX}",
            bytes.len()
        ));
    }
    // Unknown key types (e.g. an encryption key the crate cannot parse) must not hide the others:
    // parse each key on its own.
    let doc: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let keys = doc
        .get("keys")
        .and_then(serde_json::Value::as_array)
        .ok_or("no `keys` array")?;
    let keys = keys
        .iter()
        .filter_map(|k| serde_json::from_value::<Jwk>(k.clone()).ok())
        .collect();
    Ok(JwkSet { keys })
}

/// The key set of an OIDC issuer, found through its discovery document
/// (`<issuer>/.well-known/openid-configuration` -> `jwks_uri`). Real network only.
#[cfg(not(madsim))]
#[derive(Clone, Debug)]
pub struct DiscoveryJwks {
    issuer: String,
    client: reqwest::Client,
}

#[cfg(not(madsim))]
impl DiscoveryJwks {
    /// `issuer` exactly as in the tokens' `iss` (e.g. `https://sso.example/realms/ops`).
    pub fn new(issuer: &str, timeout: Duration) -> Result<DiscoveryJwks, String> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        Ok(DiscoveryJwks {
            issuer: issuer.trim_end_matches('/').to_owned(),
            client,
        })
    }
}

/// `<issuer>/.well-known/openid-configuration`.
#[cfg(not(madsim))]
pub fn discovery_url(issuer: &str) -> String {
    format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    )
}

/// The issuer's discovery document, refused unless it names `issuer` itself (a document that
/// names another issuer would hand us that issuer's endpoints and keys). Real network only.
#[cfg(not(madsim))]
pub async fn discovery_document(
    client: &reqwest::Client,
    issuer: &str,
) -> Result<serde_json::Value, String> {
    let issuer = issuer.trim_end_matches('/');
    let url = discovery_url(issuer);
    let doc: serde_json::Value = serde_json::from_slice(&get_bounded(client, &url).await?)
        .map_err(|e| format!("{url}: not JSON: {e}"))?;
    let named = doc.get("issuer").and_then(serde_json::Value::as_str);
    if named.map(|i| i.trim_end_matches('/')) != Some(issuer) {
        return Err(format!(
            "{url}: discovery document names issuer {named:?}, not `{issuer}`"
        ));
    }
    Ok(doc)
}

#[cfg(not(madsim))]
async fn get_bounded(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("GET {url}: HTTP {}", response.status()));
    }
    let bytes = response
        .bytes()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    if bytes.len() > JWKS_BYTES_MAX {
        return Err(format!("GET {url}: {} bytes, too large", bytes.len()));
    }
    Ok(bytes.to_vec())
}

#[cfg(not(madsim))]
impl JwksSource for DiscoveryJwks {
    fn fetch(&self) -> BoxFuture<'_, Result<JwkSet, String>> {
        Box::pin(async move {
            let doc = discovery_document(&self.client, &self.issuer).await?;
            let jwks_uri = doc
                .get("jwks_uri")
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| format!("{}: no `jwks_uri`", discovery_url(&self.issuer)))?;
            parse_jwks(&get_bounded(&self.client, jwks_uri).await?)
                .map_err(|e| format!("{jwks_uri}: {e}"))
        })
    }

    fn describe(&self) -> String {
        format!("the discovery document of {}", self.issuer)
    }
}

/// One usable verification key: the algorithm is fixed by the key, never by the token.
#[derive(Clone)]
pub struct VerifyKey {
    pub kid: String,
    pub algorithm: Algorithm,
    pub key: DecodingKey,
}

/// The algorithm a JWK verifies, or `None` for keys that must not verify tokens (symmetric
/// `oct` keys, encryption keys, unsupported curves).
fn key_algorithm(jwk: &Jwk) -> Option<Algorithm> {
    if jwk.common.public_key_use == Some(PublicKeyUse::Encryption) {
        return None;
    }
    let by_type = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Algorithm::ES256,
            EllipticCurve::P384 => Algorithm::ES384,
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(_) => Algorithm::EdDSA,
        AlgorithmParameters::OctetKey(_) => return None,
    };
    let Some(declared) = jwk.common.key_algorithm else {
        return Some(by_type);
    };
    let algorithm = match declared {
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    };
    let family_matches = matches!(
        (&jwk.algorithm, algorithm),
        (
            AlgorithmParameters::RSA(_),
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
        ) | (
            AlgorithmParameters::EllipticCurve(_),
            Algorithm::ES256 | Algorithm::ES384
        ) | (AlgorithmParameters::OctetKeyPair(_), Algorithm::EdDSA)
    );
    family_matches.then_some(algorithm)
}

/// The usable keys of a set, by `kid` (keys without a `kid` cannot be picked and are skipped).
pub fn usable_keys(set: &JwkSet) -> BTreeMap<String, Arc<VerifyKey>> {
    let mut keys = BTreeMap::new();
    for jwk in &set.keys {
        if keys.len() == JWKS_KEYS_MAX {
            tracing::warn!(
                "key set has more than {JWKS_KEYS_MAX} usable keys: the rest are ignored"
            );
            break;
        }
        let (Some(kid), Some(algorithm)) = (jwk.common.key_id.clone(), key_algorithm(jwk)) else {
            continue;
        };
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            tracing::warn!(%kid, "key set entry is not a valid public key: skipped");
            continue;
        };
        keys.insert(
            kid.clone(),
            Arc::new(VerifyKey {
                kid,
                algorithm,
                key,
            }),
        );
    }
    keys
}

/// How often the cache goes back to the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefreshPolicy {
    /// An unknown `kid` refreshes the keys at most this often.
    pub refresh_interval_min: Duration,
    /// Keys older than this are refreshed at the next verification (failures keep the old keys).
    pub max_age: Duration,
}

impl Default for RefreshPolicy {
    fn default() -> RefreshPolicy {
        RefreshPolicy {
            refresh_interval_min: Duration::from_secs(30),
            max_age: Duration::from_secs(15 * 60),
        }
    }
}

/// The issuer's keys, cached.
pub struct KeyCache {
    source: Box<dyn JwksSource>,
    policy: RefreshPolicy,
    keys: RwLock<Arc<BTreeMap<String, Arc<VerifyKey>>>>,
    /// When the source was last asked (successfully or not): the rate limit.
    fetched_at: Mutex<Option<Instant>>,
    /// When the keys were last replaced.
    loaded_at: Mutex<Option<Instant>>,
    /// Why the last fetch failed (cleared by a successful one).
    last_error: Mutex<Option<String>>,
    /// One fetch at a time.
    fetching: tokio::sync::Mutex<()>,
}

impl KeyCache {
    /// An empty cache: the first verification loads the keys.
    pub fn new(source: Box<dyn JwksSource>, policy: RefreshPolicy) -> KeyCache {
        KeyCache {
            source,
            policy,
            keys: RwLock::new(Arc::new(BTreeMap::new())),
            fetched_at: Mutex::new(None),
            loaded_at: Mutex::new(None),
            last_error: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// Fetches the keys now (at start-up, to fail early on a bad file). Not rate limited.
    pub async fn refresh(&self) -> Result<usize, AuthError> {
        let _one = self.fetching.lock().await;
        self.fetch_locked().await
    }

    async fn fetch_locked(&self) -> Result<usize, AuthError> {
        *self.fetched_at.lock().expect("fetched_at lock") = Some(Instant::now());
        let set = match self.source.fetch().await {
            Ok(set) => set,
            Err(e) => {
                tracing::warn!(source = %self.source.describe(), error = %e, "JWKS fetch failed");
                *self.last_error.lock().expect("last_error lock") = Some(e.clone());
                return Err(AuthError::KeySetUnavailable(e));
            }
        };
        *self.last_error.lock().expect("last_error lock") = None;
        let keys = usable_keys(&set);
        let count = keys.len();
        *self.keys.write().expect("keys lock") = Arc::new(keys);
        *self.loaded_at.lock().expect("loaded_at lock") = Some(Instant::now());
        tracing::info!(source = %self.source.describe(), keys = count, "JWKS loaded");
        Ok(count)
    }

    /// The cached key `kid`, without going to the source (for a synchronous interceptor).
    pub fn cached(&self, kid: &str) -> Option<Arc<VerifyKey>> {
        self.keys.read().expect("keys lock").get(kid).cloned()
    }

    /// The key `kid`, refreshing the cache if the keys are stale, or if `kid` is unknown and the
    /// source was not asked within `refresh_interval_min`.
    pub async fn get(&self, kid: &str) -> Result<Arc<VerifyKey>, AuthError> {
        let stale = self
            .loaded_at
            .lock()
            .expect("loaded_at lock")
            .is_none_or(|at| at.elapsed() >= self.policy.max_age);
        if let (false, Some(key)) = (stale, self.cached(kid)) {
            return Ok(key);
        }
        let _one = self.fetching.lock().await;
        // Someone else may have refreshed while we waited.
        let recently = self
            .fetched_at
            .lock()
            .expect("fetched_at lock")
            .is_some_and(|at| at.elapsed() < self.policy.refresh_interval_min);
        if !recently {
            // A failed refresh keeps the old keys; it only matters if there are none.
            let _ = self.fetch_locked().await;
        }
        if let Some(key) = self.cached(kid) {
            return Ok(key);
        }
        if self.is_empty() {
            // Never loaded (the issuer is down or the file unreadable): say so, rather than
            // blaming the token's `kid`.
            let why = self.last_error.lock().expect("last_error lock").clone();
            return Err(AuthError::KeySetUnavailable(why.unwrap_or_else(|| {
                format!("no usable key in {}", self.source.describe())
            })));
        }
        Err(AuthError::UnknownKid {
            kid: kid.to_owned(),
        })
    }

    fn is_empty(&self) -> bool {
        self.keys.read().expect("keys lock").is_empty()
    }
}
