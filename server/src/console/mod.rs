//! The web console (docs/console.md): server-rendered pages under `/console/` on every
//! replica's HTTP port, for the on-call journey: the overview, a key's page (holder, token, age
//! against the class's threshold, waiters, floor, pending requests; live from the lock log), the
//! judge-and-request form, the second person's approval page.
//!
//! Every page acts as the signed-in person through the client library against the cluster's own
//! gRPC services ([`picket_client::Client`] with that person's credentials), so every rule
//! (roles, the two-person rule, the fenced acknowledgement, the class kind at approval) is the
//! server's, answered with its `ErrorDetail` rule, never a second implementation here. The
//! templates (`server/templates/console/`) and assets are compiled into the binary.
//!
//! | route | what |
//! |---|---|
//! | `GET /console/` | overview: every hold over its class's max expected hold, the longest hold per namespace, pending requests, the replicas |
//! | `GET /console/signin`, `POST` | sign-in: to the issuer with `[oidc.console]` ([`oidc`]); `picketd dev`: the insecure dev sign-in |
//! | `GET /console/oidc/callback` | the issuer's answer: the code exchanged, the tokens verified, signed in |
//! | `POST /console/signout` | sign-out |
//! | `GET /console/keys/{ns}/{key}` | the key's page (`?part=state`: its live part alone) |
//! | `GET /console/live/{ns}/{key}` | server-sent events: `change` whenever the key's lock log moves |
//! | `POST /console/request/{ns}/{key}` | request a force-release |
//! | `GET /console/force-releases/{id}` | the approval page for the second person |
//! | `POST /console/force-releases/{id}/approve`, `/deny` | approve or deny |
//! | `GET /console/verify/{ns}/{key}` | verify a release ([`verify`]): the lock log, the queue draining, when the holder was told, the alert |
//! | `GET /console/classes?namespace=`, `POST` | a namespace's classes; create or edit one ([`classes`]) |
//! | `GET /console/classes/edit?namespace=&prefix=` | the class form (no `prefix`: a new class) |
//!
//! Every `POST` carries the sign-in's CSRF token (`csrf`); the cookie is HttpOnly,
//! `SameSite=Strict` and `Secure` over HTTPS.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use picket_client::{Client, ClientConfig, ClientError, Credentials, TlsConfig};
use picket_proto::proto;
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::api::stream::ChannelStream;
use force_release::*;
use key::*;
use overview::*;
use session::*;

mod alerts;
mod audit;
mod classes;
mod force_release;
mod key;
pub mod oidc;
mod overview;
mod session;
pub mod signin;
pub mod verify;
pub mod view;

use signin::{SignIns, SignedIn};
use view::{key_href, ClassView, KeyView, PendingView};

/// The roles the dev sign-in offers (docs/auth.md).
pub const DEV_ROLES: [(&str, &str); 3] = [
    (
        "picket-operator",
        "operator (on-call): request, approve and deny force-releases",
    ),
    (
        "picket-incident-commander",
        "incident commander: approve in place of a second on-call",
    ),
    ("picket-admin", "class admin: put and remove classes"),
];

/// Longest reason the form takes (the server's bound on `reason`).
const REASON_LEN_MAX: usize = 1_024;

/// How the console reaches the cluster and how it signs people in.
#[derive(Clone, Debug)]
pub struct ConsoleConfig {
    /// The replicas' gRPC client endpoints.
    pub endpoints: Vec<String>,
    /// TLS to them (the cluster's CA), when the client port is TLS.
    pub tls: Option<TlsConfig>,
    /// `[console] client_cert` / `client_key`: presented to the client ports (which ask for it
    /// with `[tls] require_client_cert`), and only on the clients of OIDC sign-ins, next to the
    /// person's access token, which the servers take over any certificate: never on a client
    /// without a token, so the certificate's principal and roles are nobody's in the console.
    pub client_identity: Option<ClientIdentity>,
    /// The client ports require client certificates and the console has none: every page says
    /// so (rule `console_client_cert_missing`) instead of calling the cluster.
    pub client_cert_missing: bool,
    /// The insecure dev sign-in: pick any principal and roles (the servers believe them, as
    /// `--insecure-dev-auth` does for metadata). Only when the cluster runs insecure dev auth.
    pub dev_sign_in: bool,
    /// Why the dev sign-in is off although the cluster runs insecure dev auth (shown on the
    /// sign-in page and in its refusal).
    pub dev_sign_in_off: Option<String>,
    /// Mark the cookie `Secure` (the HTTP port serves HTTPS).
    pub secure_cookie: bool,
    /// node id -> HTTP base URL of every replica (the overview's cluster strip reads their
    /// `/healthz`).
    pub http_endpoints: crate::api::http::HttpEndpoints,
    /// The OpenID Connect sign-in (`[oidc.console]`): people sign in at the `[oidc]` issuer and
    /// the console calls the cluster with their access token.
    pub oidc: Option<oidc::ConsoleOidc>,
    /// `[console] alertmanager_url`: where the overview and the verify page read Picket's
    /// firing alerts ([`alerts`]); `None`: they say that no Alertmanager is configured.
    pub alertmanager_url: Option<String>,
}

/// The console's transport certificate (PEM), as `[console] client_cert` / `client_key`.
#[derive(Clone)]
pub struct ClientIdentity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key: configs end up in logs.
        f.debug_struct("ClientIdentity")
            .field("cert_pem", &self.cert_pem.len())
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Why a cluster with insecure dev auth and `[tls] require_client_cert` has no dev sign-in.
pub const DEV_SIGN_IN_OFF_MTLS: &str = "the dev sign-in is off: this cluster requires client certificates ([tls] require_client_cert = true), and there a verified certificate, never the dev sign-in's metadata, is the caller, so the console could not act as the person you pick (nor may its own certificate stand in for you). The console signs people in there only through OpenID Connect ([oidc] with [oidc.console], and [console] client_cert, docs/console.md); use picketctl with your own client certificate meanwhile";

/// What every page says instead of calling a cluster whose client ports require client
/// certificates the console does not have.
const CLIENT_CERT_MISSING: &str = "this cluster's client ports require client certificates ([tls] require_client_cert = true) and the console has none: set [console] client_cert and client_key in picketd's configuration on this replica (a certificate the client CA signed; your own token still decides who you are and what you may do, docs/console.md). Nothing was read or changed";

#[derive(Clone)]
pub(crate) struct Console {
    config: Arc<ConsoleConfig>,
    sign_ins: SignIns,
    http: reqwest::Client,
    oidc: Option<oidc::OidcSignIn>,
    /// Reads Alertmanager ([`alerts`]): its own client, with the system's roots.
    alerts_http: reqwest::Client,
}

/// The console's routes (nest them at the root of the HTTP router). `http` reads the replicas'
/// `/healthz`.
pub fn router(config: ConsoleConfig, http: reqwest::Client) -> Result<Router, String> {
    let oidc = config.oidc.clone().map(oidc::OidcSignIn::new).transpose()?;
    let console = Console {
        config: Arc::new(config),
        sign_ins: SignIns::default(),
        http,
        oidc,
        alerts_http: reqwest::Client::builder()
            .timeout(alerts::ALERTMANAGER_TIMEOUT)
            .build()
            .map_err(|e| format!("the console's Alertmanager client: {e}"))?,
    };
    Ok(Router::new()
        .route("/console", get(|| async { Redirect::to("/console/") }))
        .route("/console/", get(overview))
        .route("/console/signin", get(signin_page).post(signin))
        .route("/console/signout", post(signout))
        .route(oidc::CALLBACK_PATH, get(oidc_callback))
        .route("/console/keys", get(open_key))
        .route("/console/keys/{namespace}/{*key}", get(key_page))
        .route("/console/live/{namespace}/{*key}", get(key_live))
        .route("/console/request/{namespace}/{*key}", post(request))
        .route("/console/force-releases/{id}", get(approval_page))
        .route("/console/force-releases/{id}/approve", post(approve))
        .route("/console/force-releases/{id}/deny", post(deny))
        .route(
            "/console/verify/{namespace}/{*key}",
            get(verify::verify_page),
        )
        .route("/console/audit", get(audit::audit_page))
        .route(
            "/console/classes",
            get(classes::classes_page).post(classes::put_class),
        )
        .route("/console/classes/edit", get(classes::class_form_page))
        .route("/console/assets/console.css", get(css))
        .route("/console/assets/console.js", get(js))
        .with_state(console))
}

// --- pages -------------------------------------------------------------------------------

/// The person signed in, as every page header shows them.
struct Who {
    principal: String,
    roles: String,
    csrf: String,
}

impl Who {
    fn of(user: &SignedIn) -> Who {
        Who {
            principal: user.principal.clone(),
            roles: user.roles.join(", "),
            csrf: user.csrf.clone(),
        }
    }
}

/// A refusal shown next to the form it answers: the server's rule and message.
struct Refused {
    rule: String,
    message: String,
}

impl Refused {
    fn of(error: &ClientError) -> Refused {
        match error {
            ClientError::Refused { refusal, .. } => Refused {
                rule: if refusal.rule.is_empty() {
                    format!("{:?}", refusal.code)
                } else {
                    refusal.rule.clone()
                },
                message: refusal.message.clone(),
            },
            other => Refused {
                rule: "unavailable".to_owned(),
                message: other.to_string(),
            },
        }
    }

    fn console(rule: &str, message: impl Into<String>) -> Refused {
        Refused {
            rule: rule.to_owned(),
            message: message.into(),
        }
    }

    /// The HTTP status for a refusal (the gRPC code's usual mapping).
    fn status(error: &ClientError) -> StatusCode {
        match error {
            ClientError::Refused { refusal, .. } => crate::api::http::http_status(refusal.code),
            _ => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

#[derive(Template)]
#[template(path = "console/message.html")]
struct MessagePage {
    who: Option<Who>,
    title: String,
    lines: Vec<String>,
    links: Vec<(String, String)>,
    error: Option<Refused>,
}

fn render(template: &impl Template, status: StatusCode) -> Response {
    match template.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the console could not render this page: {error}"),
        )
            .into_response(),
    }
}

fn message(
    who: Option<Who>,
    status: StatusCode,
    title: &str,
    error: Option<Refused>,
    lines: Vec<String>,
) -> Response {
    render(
        &MessagePage {
            who,
            title: title.to_owned(),
            lines,
            links: vec![("/console/".to_owned(), "Overview".to_owned())],
            error,
        },
        status,
    )
}

/// The signed-in person, or the redirect to the sign-in page (back to `uri` afterwards), or the
/// page that says why the console cannot call the cluster.
fn signed_in(
    console: &Console,
    headers: &HeaderMap,
    back: &str,
) -> Result<SignedIn, Box<Response>> {
    let user = console.sign_ins.current(headers).ok_or_else(|| {
        let next = view::encode_path(back);
        Box::new(Redirect::to(&format!("/console/signin?next={next}")).into_response())
    })?;
    can_call(console, &user)?;
    Ok(user)
}

/// The signed-in person of a page (a `GET`), as an extractor: without a sign-in, a redirect to
/// the sign-in page that comes back to the page asked for; when the console cannot call the
/// cluster, the page that says why. Pages whose way back is not their own URI (a key page's live
/// part) call [`signed_in`] themselves.
pub(crate) struct Viewer(pub SignedIn);

impl axum::extract::FromRequestParts<Console> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        console: &Console,
    ) -> Result<Self, Response> {
        let back = parts
            .uri
            .path_and_query()
            .map_or("/console/", |p| p.as_str());
        signed_in(console, &parts.headers, back)
            .map(Viewer)
            .map_err(|refusal| *refusal)
    }
}

/// Refuses, naming the missing setting, when the console cannot call the cluster.
fn can_call(console: &Console, user: &SignedIn) -> Result<(), Box<Response>> {
    if !console.config.client_cert_missing {
        return Ok(());
    }
    Err(Box::new(message(
        Some(Who::of(user)),
        StatusCode::SERVICE_UNAVAILABLE,
        "The console cannot reach the cluster",
        Some(Refused::console(
            "console_client_cert_missing",
            CLIENT_CERT_MISSING,
        )),
        vec!["Meanwhile use picketctl with your own client certificate (docs/auth.md).".to_owned()],
    )))
}

/// The signed-in person for a form post whose CSRF token matches, or the refusal (also when
/// the console cannot call the cluster).
fn signed_in_post(
    console: &Console,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<SignedIn, Box<Response>> {
    let user = signed_in_csrf(console, headers, csrf)?;
    can_call(console, &user)?;
    Ok(user)
}

/// The signed-in person for a form post whose CSRF token matches, or the refusal.
fn signed_in_csrf(
    console: &Console,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<SignedIn, Box<Response>> {
    let Some(user) = console.sign_ins.current(headers) else {
        return Err(Box::new(message(
            None,
            StatusCode::UNAUTHORIZED,
            "Not signed in",
            Some(Refused::console(
                "not_signed_in",
                "sign in first: nothing was changed",
            )),
            vec![],
        )));
    };
    if !user.csrf_ok(csrf) {
        return Err(Box::new(message(
            Some(Who::of(&user)),
            StatusCode::FORBIDDEN,
            "Refused",
            Some(Refused::console(
                "csrf_token_invalid",
                "this form did not carry the console's CSRF token for your sign-in (an old tab, or another site's page): nothing was changed; reload the page and try again",
            )),
            vec![],
        )));
    }
    Ok(user)
}

impl Console {
    /// A client of the cluster acting as `principal` with `roles` (dev metadata).
    fn client_for(&self, principal: &str, roles: &[String]) -> Result<Client, ClientError> {
        self.client_with(Credentials {
            principal: Some(principal.to_owned()),
            roles: Some(roles.join(",")),
            bearer: None,
        })
    }

    /// A client of the cluster presenting `access_token` (an OIDC sign-in): the servers verify
    /// it and take the principal and roles from it, as for any gRPC caller.
    fn client_with_token(&self, access_token: &str) -> Result<Client, ClientError> {
        self.client_with(Credentials {
            principal: None,
            roles: None,
            bearer: Some(access_token.to_owned()),
        })
    }

    fn client_with(&self, credentials: Credentials) -> Result<Client, ClientError> {
        let mut config = ClientConfig::new(self.config.endpoints.clone(), "picket-console");
        config.tls = self.config.tls.clone();
        // The certificate travels only with a person's token, which wins over it on the server
        // (docs/auth.md): without a token the certificate itself would be the caller.
        if let (Some(tls), Some(identity), Some(_)) = (
            config.tls.as_mut(),
            &self.config.client_identity,
            &credentials.bearer,
        ) {
            tls.cert_pem = Some(identity.cert_pem.clone());
            tls.key_pem = Some(identity.key_pem.clone());
        }
        config.rpc_timeout = Duration::from_secs(3);
        config.retry_budget = Duration::from_secs(5);
        config.credentials = credentials;
        Client::new(config)
    }

    async fn replicas(&self) -> (Vec<ReplicaView>, String) {
        let mut replicas = Vec::new();
        let mut leader = String::new();
        for (node_id, base) in &self.config.http_endpoints.all() {
            let url = format!("{base}/healthz");
            let health = self
                .http
                .get(&url)
                .timeout(Duration::from_secs(1))
                .send()
                .await;
            let view = match health {
                Ok(answer) => match answer
                    .text()
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|t| {
                        serde_json::from_str::<serde_json::Value>(&t).map_err(|e| e.to_string())
                    }) {
                    Ok(json) => {
                        if let Some(id) = json["leader_node_id"].as_u64() {
                            leader = format!("replica {id}");
                        }
                        ReplicaView {
                            node_id: *node_id,
                            url: base.clone(),
                            role: json["role"].as_str().unwrap_or("unknown").to_owned(),
                            ready: json["ready"].as_bool().unwrap_or(false),
                            detail: json["detail"].as_str().unwrap_or("").to_owned(),
                        }
                    }
                    Err(error) => unreachable_replica(*node_id, base, &error),
                },
                Err(error) => unreachable_replica(*node_id, base, &error.to_string()),
            };
            replicas.push(view);
        }
        (replicas, leader)
    }
}

async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/console.css"),
    )
        .into_response()
}

async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/console.js"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_is_only_a_console_path() {
        assert_eq!(safe_next(Some("/console/keys/a/b")), "/console/keys/a/b");
        assert_eq!(safe_next(Some("https://evil.example/")), "/console/");
        assert_eq!(safe_next(Some("//evil.example/")), "/console/");
        assert_eq!(safe_next(Some("/console//evil.example")), "/console/");
        assert_eq!(safe_next(None), "/console/");
    }

    #[test]
    fn the_reason_keeps_the_incident_and_the_checklist_is_its_own_fields() {
        let fields = RequestFields {
            csrf: String::new(),
            token: "7".into(),
            session: String::new(),
            reason: " worker wedged ".into(),
            incident: "INC-42".into(),
            revoke: Some("on".into()),
            stopped: "yes".into(),
            double_run: "no".into(),
            statement: String::new(),
        };
        // The checklist travels as its own fields, not in the reason.
        assert_eq!(recorded_reason(&fields), "worker wedged [incident INC-42]");
        assert_eq!(answer_of("unknown"), proto::ChecklistAnswer::Unknown as i32);
        assert_eq!(
            answer_of("maybe"),
            proto::ChecklistAnswer::Unspecified as i32
        );
    }
}
