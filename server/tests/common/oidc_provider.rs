//! The test OpenID Provider: panva's `oidc-provider` on Node (`tests/oidc_provider/`, installed
//! from its lock file by `scripts/test`), issuing Keycloak-shaped tokens (`provider.js` says
//! which clients and users), and a cluster that trusts it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use picket_server::dev::free_port;
use reqwest::header::AUTHORIZATION;
use reqwest::StatusCode;

use super::{eventually, OidcCluster, Options};

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
        let port = free_port().unwrap();
        let child = Command::new("node")
            .arg(dir.join("provider.js"))
            .arg(port.to_string())
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs");
        let provider = Provider {
            child,
            issuer: format!("http://127.0.0.1:{port}"),
        };
        let discovery = format!("{}/.well-known/openid-configuration", provider.issuer);
        eventually(Duration::from_secs(20), "the provider answers", || async {
            match super::get(&discovery).await {
                Ok((200, body)) => Some(body),
                _ => None,
            }
        })
        .await;
        provider
    }

    /// A lock client's access token (client credentials of `picket-worker`: `picket-client`).
    pub async fn worker_token(&self) -> String {
        let answer = reqwest::Client::new()
            .post(format!("{}/token", self.issuer))
            .header(AUTHORIZATION, "Basic cGlja2V0LXdvcmtlcjp3b3JrZXItc2VjcmV0")
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        let body: serde_json::Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
        body["access_token"].as_str().unwrap().to_owned()
    }
}

/// Three replicas with `[oidc]` at the provider (keys through its discovery document) and
/// `[oidc.console]` (a confidential client; the secret in a file, in the returned directory).
pub async fn cluster_for(provider: &Provider) -> (OidcCluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("console-secret");
    std::fs::write(&secret, "console-secret\n").unwrap();
    let extra = format!(
        "[oidc]\nissuer = {:?}\naudiences = [\"picket\"]\n\
         [oidc.console]\nclient_id = \"picket-console\"\nclient_secret_file = {secret:?}\n",
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
