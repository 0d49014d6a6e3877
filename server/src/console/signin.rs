//! Who is signed in to the console: a bounded table of browser sessions, each named by a random
//! id in an HttpOnly cookie and holding the person's principal and roles, a CSRF token and the
//! client through which every page calls the gRPC services as that person.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use picket_client::Client;
use ring::rand::{SecureRandom, SystemRandom};

/// The console's cookie.
pub const COOKIE: &str = "picket_console";
/// How long a sign-in lasts.
pub const SIGN_IN_TTL: Duration = Duration::from_secs(12 * 3600);
/// Most people signed in at once on one replica; signing in past it ends the oldest sign-in.
pub const SIGN_INS_MAX: usize = 1_000;

/// One signed-in person.
#[derive(Clone)]
pub struct SignedIn {
    pub principal: String,
    /// Role names as given to the server (`picket-operator`, ...).
    pub roles: Vec<String>,
    /// Every form that changes something carries it (`csrf` field); a request without it, or
    /// with another, is refused before anything is called.
    pub csrf: String,
    /// Calls the cluster as this person.
    pub client: Client,
    since: Instant,
    /// How long it lasts: [`SIGN_IN_TTL`], or an OIDC sign-in's access token lifetime.
    ttl: Duration,
}

impl SignedIn {
    /// Whether `presented` is this sign-in's CSRF token (in time independent of where they
    /// differ).
    pub fn csrf_ok(&self, presented: &str) -> bool {
        let (want, got) = (self.csrf.as_bytes(), presented.as_bytes());
        want.len() == got.len() && want.iter().zip(got).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    }
}

/// The sign-ins of one replica's console (in memory: a restart signs everybody out).
#[derive(Clone, Default)]
pub struct SignIns {
    inner: Arc<Mutex<BTreeMap<String, SignedIn>>>,
}

/// A random 32-byte value, URL-safe base64.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    SystemRandom::new()
        .fill(&mut bytes)
        .expect("the OS random source works");
    URL_SAFE_NO_PAD.encode(bytes)
}

impl SignIns {
    /// Signs a person in for [`SIGN_IN_TTL`]; returns the cookie's value.
    pub fn sign_in(&self, principal: String, roles: Vec<String>, client: Client) -> String {
        self.sign_in_for(principal, roles, client, SIGN_IN_TTL)
    }

    /// Signs a person in for `ttl` (at most [`SIGN_IN_TTL`]); returns the cookie's value.
    pub fn sign_in_for(
        &self,
        principal: String,
        roles: Vec<String>,
        client: Client,
        ttl: Duration,
    ) -> String {
        let ttl = ttl.min(SIGN_IN_TTL);
        let id = random_token();
        let mut table = self.inner.lock().expect("sign-in table poisoned");
        table.retain(|_, s| s.since.elapsed() < s.ttl);
        while table.len() >= SIGN_INS_MAX {
            let oldest = table
                .iter()
                .min_by_key(|(_, s)| s.since)
                .map(|(id, _)| id.clone())
                .expect("the table is not empty");
            table.remove(&oldest);
        }
        table.insert(
            id.clone(),
            SignedIn {
                principal,
                roles,
                csrf: random_token(),
                client,
                since: Instant::now(),
                ttl,
            },
        );
        id
    }

    /// The person whose cookie the request carries, if the sign-in is still valid.
    pub fn current(&self, headers: &HeaderMap) -> Option<SignedIn> {
        self.by_id(&cookie_value(headers, COOKIE)?)
    }

    /// The sign-in whose cookie value is `id`, if it is still valid.
    pub fn by_id(&self, id: &str) -> Option<SignedIn> {
        let table = self.inner.lock().expect("sign-in table poisoned");
        table.get(id).filter(|s| s.since.elapsed() < s.ttl).cloned()
    }

    pub fn sign_out(&self, headers: &HeaderMap) {
        if let Some(id) = cookie_value(headers, COOKIE) {
            self.inner
                .lock()
                .expect("sign-in table poisoned")
                .remove(&id);
        }
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// The `Set-Cookie` value that signs the browser in (`Secure` when the console is served over
/// HTTPS), for `ttl`. `SameSite=Strict`: no other site's page can make the browser send it.
pub fn set_cookie(id: &str, secure: bool, ttl: Duration) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        ttl.as_secs()
    )
}

/// The `Set-Cookie` value that removes it.
pub fn clear_cookie(secure: bool) -> String {
    clear_cookie_named(COOKIE, secure)
}

/// The `Set-Cookie` value that removes the console's cookie `name` (path `/console`).
pub fn clear_cookie_named(name: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; picket_console=abc; b=2"),
        );
        assert_eq!(cookie_value(&headers, COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie_value(&headers, "c"), None);
    }

    #[test]
    fn the_cookie_is_http_only_and_strict() {
        let cookie = set_cookie("x", true, SIGN_IN_TTL);
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        assert!(cookie.ends_with("; Secure"));
        assert!(!set_cookie("x", false, SIGN_IN_TTL).contains("Secure"));
    }
}
