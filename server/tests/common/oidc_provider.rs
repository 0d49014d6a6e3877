//! The test OpenID Provider: panva's `oidc-provider` on Node (`tests/oidc_provider/`, installed
//! from its lock file by `scripts/test`), issuing Keycloak-shaped tokens (`provider.js` says
//! which clients and users), and a cluster that trusts it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use picket_server::dev::free_port;
use reqwest::StatusCode;

use super::{OidcCluster, Options};

/// The provider's Node process, killed (by its PID) when dropped, also when a test panics.
pub struct Provider {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub issuer: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    pub async fn start() -> Provider {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oidc_provider");
        assert!(
            dir.join("node_modules/oidc-provider").is_dir(),
            "the test provider's packages are not installed: run `npm ci` in {} (scripts/test does)",
            dir.display()
        );
        // A port freed for us may be taken by another test process before node binds it: the
        // provider then exits at once; on a loaded machine it may also take long to answer.
        // Either way it is stopped and started again on another port (a few times at most);
        // what it printed is in the panic of the last attempt.
        for attempt in 1..=3 {
            let port = free_port().unwrap();
            let log = std::env::temp_dir().join(format!("picket-oidc-provider-{port}.log"));
            let output = std::fs::File::create(&log).expect("provider log file");
            let child = Command::new("node")
                .arg(dir.join("provider.js"))
                .arg(port.to_string())
                .current_dir(&dir)
                .stdout(Stdio::null())
                .stderr(output)
                .spawn()
                .expect("node runs");
            let mut provider = Provider {
                child,
                issuer: format!("http://127.0.0.1:{port}"),
            };
            let discovery = format!("{}/.well-known/openid-configuration", provider.issuer);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            let printed = || std::fs::read_to_string(&log).unwrap_or_default();
            loop {
                if let Ok((200, _)) = super::get(&discovery).await {
                    return provider;
                }
                if let Ok(Some(status)) = provider.child.try_wait() {
                    assert!(
                        attempt < 3,
                        "the test provider exited ({status}) three times; it printed:\n{}",
                        printed()
                    );
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    assert!(
                        attempt < 3,
                        "the test provider did not answer within 60 s, three times; it printed:\n{}",
                        printed()
                    );
                    // Dropping the provider stops it (by its PID).
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        unreachable!("the third attempt returns or panics")
    }

    /// A lock client's access token (client credentials of `picket-worker`: `picket-client`).
    pub async fn worker_token(&self) -> String {
        self.client_token("picket-worker", "worker-secret").await
    }

    /// A class admin's access token (client credentials of `picket-setup`, principal `setup`:
    /// `picket-admin`), for a test's own set-up calls.
    pub async fn setup_token(&self) -> String {
        self.client_token("picket-setup", "setup-secret").await
    }

    async fn client_token(&self, client: &str, secret: &str) -> String {
        let answer = reqwest::Client::new()
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some(secret))
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        let body: serde_json::Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
        body["access_token"].as_str().unwrap().to_owned()
    }

    /// Rotates the signing keys: from now on the provider publishes exactly the keys `kids` and
    /// signs with the first (its test-only `POST /test/keys`, provider.js).
    pub async fn publish_keys(&self, kids: &[&str]) {
        let answer = reqwest::Client::new()
            .post(format!("{}/test/keys", self.issuer))
            .query(&[("kids", kids.join(","))])
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::NO_CONTENT);
    }

    /// How often the discovery document and the JWKS were read since the provider started.
    pub async fn fetches(&self) -> Fetches {
        let (status, body) = super::get(&format!("{}/test/fetches", self.issuer))
            .await
            .unwrap();
        assert_eq!(status, 200, "{body}");
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        Fetches {
            discovery: body["discovery"].as_u64().unwrap(),
            jwks: body["jwks"].as_u64().unwrap(),
        }
    }
}

/// Reads of the provider's discovery document and JWKS ([`Provider::fetches`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fetches {
    pub discovery: u64,
    pub jwks: u64,
}

/// Three replicas with `[oidc]` at the provider (keys through its discovery document) and
/// `[oidc.console]` (a confidential client; the secret in a file, in the returned directory;
/// each replica's redirect URL on its own HTTP address, so that a person signs in at any one).
pub async fn cluster_for(provider: &Provider) -> (OidcCluster, tempfile::TempDir) {
    cluster_with(provider, "").await
}

/// [`cluster_for`] with more `[oidc]` settings (lines such as `refresh_interval_min_s = 1`).
pub async fn cluster_with(provider: &Provider, oidc: &str) -> (OidcCluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("console-secret");
    std::fs::write(&secret, "console-secret\n").unwrap();
    let extra = format!(
        "[oidc]\nissuer = {:?}\naudiences = [\"picket\"]\n{oidc}\n\
         [oidc.console]\nclient_id = \"picket-console\"\nclient_secret_file = {secret:?}\n\
         redirect_url_base = \"http://{{http_address}}\"\n",
        provider.issuer
    );
    let cluster = OidcCluster::start_with(Options {
        oidc: false,
        extra,
        ..Options::default()
    });
    cluster.leader(Duration::from_secs(20)).await;
    (cluster, dir)
}
