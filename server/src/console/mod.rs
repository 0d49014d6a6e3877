//! The web console (docs/console.md): server-rendered pages under `/console/` on every
//! replica's HTTP port, for the on-call journey: the overview, a key's page (holder, token, age
//! against the class's threshold, waiters, floor, pending requests; live from the lock log), the
//! judge-and-request form, the second person's approval page.
//!
//! Every page acts as the signed-in person through the client library against the cluster's own
//! gRPC services ([`picket_net::client::Client`] with that person's credentials), so every rule
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
use picket_net::client::{Client, ClientConfig, ClientError, Credentials, TlsConfig};
use picket_net::proto;
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::api::stream::ChannelStream;

mod alerts;
mod audit;
mod classes;
pub mod oidc;
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
struct Console {
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
#[template(path = "console/signin.html")]
struct SigninPage {
    who: Option<Who>,
    dev: bool,
    /// The issuer people sign in at, with `[oidc.console]`.
    issuer: Option<String>,
    roles: Vec<(&'static str, &'static str)>,
    /// Why the dev sign-in is off ([`ConsoleConfig::dev_sign_in_off`]).
    dev_off: Option<String>,
    next: String,
    error: Option<Refused>,
}

struct ReplicaView {
    node_id: u64,
    url: String,
    role: String,
    ready: bool,
    detail: String,
}

struct NamespaceView {
    namespace: String,
    key: String,
    href: String,
    holder: String,
    held_for: String,
    threshold: String,
    over: String,
    queue_depth: u64,
    kind: &'static str,
}

#[derive(Template)]
#[template(path = "console/overview.html")]
struct OverviewPage {
    who: Option<Who>,
    revision: u64,
    /// Every hold over its class's max expected hold, furthest over first: the ones that page.
    overdue: Vec<NamespaceView>,
    namespaces: Vec<NamespaceView>,
    pending: Vec<PendingView>,
    replicas: Vec<ReplicaView>,
    leader: String,
    alerts: alerts::AlertsView,
    error: Option<Refused>,
}

#[derive(Template)]
#[template(path = "console/key.html")]
struct KeyPage {
    who: Option<Who>,
    k: KeyView,
    live_href: String,
    request_href: String,
    error: Option<Refused>,
    form: RequestForm,
}

#[derive(Template)]
#[template(path = "console/key_state.html")]
struct KeyState {
    k: KeyView,
}

#[derive(Template)]
#[template(path = "console/approve.html")]
struct ApprovalPage {
    who: Option<Who>,
    r: PendingView,
    now: Option<KeyView>,
    own_request: bool,
    error: Option<Refused>,
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

#[derive(Deserialize)]
struct NextQuery {
    next: Option<String>,
}

/// Only console paths: never an open redirect.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(next) if next.starts_with("/console/") && !next.starts_with("/console//") => {
            next.to_owned()
        }
        _ => "/console/".to_owned(),
    }
}

async fn signin_page(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(query): Query<NextQuery>,
) -> Response {
    let who = console.sign_ins.current(&headers).map(|u| Who::of(&u));
    let next = safe_next(query.next.as_deref());
    let mut error = None;
    if let (None, Some(oidc)) = (&who, &console.oidc) {
        match oidc.begin(&headers, next.clone()).await {
            Ok((url, binding)) => {
                return (
                    StatusCode::SEE_OTHER,
                    [
                        (
                            header::SET_COOKIE,
                            oidc::binding_cookie(&binding, console.config.secure_cookie),
                        ),
                        (header::LOCATION, url),
                        (header::CACHE_CONTROL, "no-store".to_owned()),
                    ],
                )
                    .into_response()
            }
            Err(refused) => error = Some(Refused::console(refused.rule, refused.message)),
        }
    }
    let status = if error.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    render(
        &SigninPage {
            who,
            dev: console.config.dev_sign_in,
            issuer: console.oidc.as_ref().map(oidc::OidcSignIn::issuer),
            roles: DEV_ROLES.to_vec(),
            dev_off: console.config.dev_sign_in_off.clone(),
            next,
            error,
        },
        status,
    )
}

#[derive(Template)]
#[template(path = "console/signed_in.html")]
struct SignedInPage {
    who: Option<Who>,
    next: String,
    error: Option<Refused>,
}

/// The issuer's answer: signs the person in, or says which rule refused (nothing changes).
/// Signed in, it answers with a page that moves on by itself (`<meta http-equiv="refresh">`),
/// not with a redirect: a browser does not send the `SameSite=Strict` cookie on a redirect chain
/// that began at the issuer's site, so the next page would not know the person yet.
async fn oidc_callback(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(query): Query<oidc::CallbackQuery>,
) -> Response {
    let Some(sign_in) = &console.oidc else {
        return message(
            None,
            StatusCode::NOT_FOUND,
            "Not signed in",
            Some(Refused::console(
                "sign_in_not_available",
                "this cluster's console has no OpenID Connect sign-in ([oidc.console])",
            )),
            vec![],
        );
    };
    let signed = match sign_in.finish(&headers, &query).await {
        Ok(signed) => signed,
        Err(refused) => {
            return render(
                &MessagePage {
                    who: None,
                    title: "Not signed in".to_owned(),
                    lines: vec!["Nothing was changed: you are not signed in.".to_owned()],
                    links: vec![("/console/signin".to_owned(), "Sign in again".to_owned())],
                    error: Some(Refused::console(
                        refused.rule,
                        format!("{}: nothing was changed; sign in again", refused.message),
                    )),
                },
                StatusCode::FORBIDDEN,
            )
        }
    };
    let client = match console.client_with_token(&signed.access_token) {
        Ok(client) => client,
        Err(error) => {
            return message(
                None,
                StatusCode::INTERNAL_SERVER_ERROR,
                "Not signed in",
                Some(Refused::console("client_config", error.to_string())),
                vec![],
            )
        }
    };
    let id = console.sign_ins.sign_in_for(
        signed.principal.clone(),
        signed.roles.clone(),
        client,
        signed.ttl,
    );
    let user = console.sign_ins.by_id(&id);
    let page = SignedInPage {
        who: user.as_ref().map(Who::of),
        next: signed.next,
        error: None,
    };
    let mut response = render(&page, StatusCode::OK);
    let cookies = response.headers_mut();
    for cookie in [
        signin::set_cookie(&id, console.config.secure_cookie, signed.ttl),
        signin::clear_cookie_named(oidc::BINDING_COOKIE, console.config.secure_cookie),
    ] {
        if let Ok(value) = cookie.parse() {
            cookies.append(header::SET_COOKIE, value);
        }
    }
    response
}

#[derive(Deserialize)]
struct SigninForm {
    principal: String,
    #[serde(default)]
    next: String,
    #[serde(default, rename = "picket-operator")]
    operator: Option<String>,
    #[serde(default, rename = "picket-incident-commander")]
    incident_commander: Option<String>,
    #[serde(default, rename = "picket-admin")]
    admin: Option<String>,
}

async fn signin(State(console): State<Console>, Form(form): Form<SigninForm>) -> Response {
    let next = safe_next(Some(&form.next));
    let refuse = |rule: &str, text: &str| {
        render(
            &SigninPage {
                who: None,
                dev: console.config.dev_sign_in,
                issuer: console.oidc.as_ref().map(oidc::OidcSignIn::issuer),
                roles: DEV_ROLES.to_vec(),
                dev_off: console.config.dev_sign_in_off.clone(),
                next: next.clone(),
                error: Some(Refused::console(rule, text)),
            },
            StatusCode::BAD_REQUEST,
        )
    };
    if let Some(why) = &console.config.dev_sign_in_off {
        return refuse("sign_in_not_available", why);
    }
    if !console.config.dev_sign_in {
        return refuse(
            "sign_in_not_available",
            "the dev sign-in is only for clusters that run insecure dev auth (`picketd dev`): sign in through the issuer (GET /console/signin) if [oidc.console] is configured, else use picketctl with your token",
        );
    }
    let principal = form.principal.trim().to_owned();
    if principal.is_empty()
        || principal.len() > crate::auth::roles::PRINCIPAL_LEN_MAX
        || principal.chars().any(|c| c.is_control() || c == ',')
    {
        return refuse(
            "bad_principal",
            "the principal is required: 1 to 256 characters, no control characters or commas",
        );
    }
    let roles: Vec<String> = [
        ("picket-operator", &form.operator),
        ("picket-incident-commander", &form.incident_commander),
        ("picket-admin", &form.admin),
    ]
    .into_iter()
    .filter(|(_, on)| on.is_some())
    .map(|(role, _)| role.to_owned())
    .collect();
    let client = match console.client_for(&principal, &roles) {
        Ok(client) => client,
        Err(error) => return refuse("client_config", &error.to_string()),
    };
    let id = console.sign_ins.sign_in(principal, roles, client);
    (
        StatusCode::SEE_OTHER,
        [
            (
                header::SET_COOKIE,
                signin::set_cookie(&id, console.config.secure_cookie, signin::SIGN_IN_TTL),
            ),
            (header::LOCATION, next),
        ],
    )
        .into_response()
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn signout(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(refused) = signed_in_csrf(&console, &headers, &form.csrf) {
        return *refused;
    }
    console.sign_ins.sign_out(&headers);
    let clear = signin::clear_cookie(console.config.secure_cookie);
    if let Some(sign_in) = &console.oidc {
        // Not back to /console/signin: with the issuer's session still open, that would sign
        // the person straight in again.
        let mut links = vec![("/console/signin".to_owned(), "Sign in again".to_owned())];
        if let Some(url) = sign_in.end_session_url().await {
            links.push((url, "Also sign out at the issuer".to_owned()));
        }
        let mut page = render(
            &MessagePage {
                who: None,
                title: "Signed out".to_owned(),
                lines: vec!["Your console sign-in on this replica has ended.".to_owned()],
                links,
                error: None,
            },
            StatusCode::OK,
        );
        if let Ok(value) = clear.parse() {
            page.headers_mut().insert(header::SET_COOKIE, value);
        }
        return page;
    }
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, clear),
            (header::LOCATION, "/console/signin".to_owned()),
        ],
    )
        .into_response()
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

fn unreachable_replica(node_id: u64, base: &str, why: &str) -> ReplicaView {
    ReplicaView {
        node_id,
        url: base.to_owned(),
        role: "unreachable".to_owned(),
        ready: false,
        detail: why.to_owned(),
    }
}

async fn overview(State(console): State<Console>, headers: HeaderMap) -> Response {
    let user = match signed_in(&console, &headers, "/console/") {
        Ok(user) => user,
        Err(redirect) => return *redirect,
    };
    let alertmanager = console.config.alertmanager_url.as_deref();
    let ((replicas, leader), alerts) = tokio::join!(
        console.replicas(),
        alerts::AlertsView::read(&console.alerts_http, alertmanager)
    );
    let mut page = OverviewPage {
        who: Some(Who::of(&user)),
        revision: 0,
        overdue: Vec::new(),
        namespaces: Vec::new(),
        pending: Vec::new(),
        replicas,
        leader,
        alerts,
        error: None,
    };
    let longest = user
        .client
        .longest_holds(proto::LongestHoldsRequest { allow_stale: false })
        .await;
    match longest {
        Ok(answer) => {
            page.revision = answer.revision;
            for hold in &answer.overdue {
                page.overdue.push(hold_row(&user, hold).await);
            }
            for hold in &answer.holds {
                page.namespaces.push(hold_row(&user, hold).await);
            }
        }
        Err(error) => page.error = Some(Refused::of(&error)),
    }
    if let Ok(listed) = user
        .client
        .list_force_releases(proto::ListForceReleasesRequest { allow_stale: false })
        .await
    {
        page.pending = listed.requests.iter().map(PendingView::of).collect();
    }
    render(&page, StatusCode::OK)
}

/// One row of the overview's hold tables, with the key's class kind and queue from its
/// inspection.
async fn hold_row(user: &SignedIn, hold: &proto::HoldInfo) -> NamespaceView {
    let inspected = inspect(user, &hold.namespace, &hold.key).await.ok();
    let holder = view::HolderView::of(hold);
    NamespaceView {
        namespace: hold.namespace.clone(),
        key: hold.key.clone(),
        href: key_href(&hold.namespace, &hold.key),
        holder: format!("{} on {} (pid {})", holder.name, holder.host, holder.pid),
        held_for: holder.held_for,
        threshold: ClassView::threshold_words(hold.hold_ms_max_expected),
        over: holder.over,
        queue_depth: inspected.as_ref().map_or(0, |k| k.queue_depth),
        kind: view::kind_word(
            inspected
                .as_ref()
                .and_then(|k| k.class.as_ref())
                .is_some_and(|c| c.fenced),
        ),
    }
}

#[derive(Deserialize)]
struct OpenKeyQuery {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    key: String,
}

/// The overview's "open a key" form.
async fn open_key(Query(query): Query<OpenKeyQuery>) -> Response {
    Redirect::to(&key_href(query.namespace.trim(), query.key.trim())).into_response()
}

/// The key as it is now (a linearizable `Admin.Inspect`), read as the signed-in person.
async fn inspect(
    user: &SignedIn,
    namespace: &str,
    key: &str,
) -> Result<proto::KeyInfo, ClientError> {
    user.client
        .inspect(proto::InspectRequest {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            allow_stale: false,
        })
        .await
}

/// The key page of `k`, with the request form as given and an optional refusal.
fn key_page_of(user: &SignedIn, k: KeyView, form: RequestForm, error: Option<Refused>) -> KeyPage {
    let (ns, key) = (k.namespace.clone(), view::encode_path(&k.key));
    KeyPage {
        who: Some(Who::of(user)),
        live_href: format!("/console/live/{ns}/{key}"),
        request_href: format!("/console/request/{ns}/{key}"),
        k,
        error,
        form,
    }
}

#[derive(Deserialize)]
struct PartQuery {
    part: Option<String>,
}

/// What the request form holds (kept when a refusal sends it back).
#[derive(Default)]
struct RequestForm {
    token: String,
    session: String,
    reason: String,
    incident: String,
    revoke: bool,
    stopped: String,
    double_run: String,
    statement: String,
}

async fn key_page(
    State(console): State<Console>,
    headers: HeaderMap,
    Path((namespace, key)): Path<(String, String)>,
    Query(query): Query<PartQuery>,
) -> Response {
    let user = match signed_in(&console, &headers, &key_href(&namespace, &key)) {
        Ok(user) => user,
        Err(redirect) => return *redirect,
    };
    let info = match inspect(&user, &namespace, &key).await {
        Ok(info) => info,
        Err(error) => {
            return message(
                Some(Who::of(&user)),
                Refused::status(&error),
                &format!("{namespace} / {key}"),
                Some(Refused::of(&error)),
                vec![],
            )
        }
    };
    let k = KeyView::of(&info);
    if query.part.as_deref() == Some("state") {
        return render(&KeyState { k }, StatusCode::OK);
    }
    let form = RequestForm {
        token: if k.held {
            k.default_token.to_string()
        } else {
            String::new()
        },
        revoke: true,
        ..RequestForm::default()
    };
    render(&key_page_of(&user, k, form, None), StatusCode::OK)
}

/// Server-sent events for one key: a `change` event (data: the revision) whenever the key's lock
/// log moves, so the page fetches its live part again. Ends when the browser goes away.
async fn key_live(
    State(console): State<Console>,
    headers: HeaderMap,
    Path((namespace, key)): Path<(String, String)>,
) -> Response {
    let Some(user) = console.sign_ins.current(&headers) else {
        return (StatusCode::UNAUTHORIZED, "not signed in").into_response();
    };
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(16);
    let mut watcher = user.client.watch_from_now(Some(&namespace), &key);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                page = watcher.next_page() => match page {
                    Ok(events) => {
                        let Some(last) = events.iter().filter(|e| e.key == key).map(|e| e.revision).max() else {
                            continue;
                        };
                        let event = Event::default().event("change").data(last.to_string());
                        if tx.send(Ok(event)).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        let event = Event::default().event("broken").data(error.to_string());
                        let _ = tx.send(Ok(event)).await;
                        return;
                    }
                },
                () = tx.closed() => return,
            }
        }
    });
    Sse::new(ChannelStream::new(rx))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

#[derive(Deserialize)]
struct RequestFields {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    token: String,
    #[serde(default)]
    session: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    incident: String,
    /// A checkbox: present when on.
    revoke: Option<String>,
    /// Advisory checklist: `yes`, `no` or `unknown`.
    #[serde(default)]
    stopped: String,
    /// Why the release is still right when the answers say a double run is unsafe.
    #[serde(default)]
    statement: String,
    #[serde(default)]
    double_run: String,
}

/// The reason as recorded: the operator's words, the incident id and, for an advisory lock, the
/// checklist's answers, so the audit keeps what the requester knew.
/// The reason as recorded: as typed, and the incident id. The checklist travels as its own
/// fields (`proto::ForceReleaseChecklist`), not in the reason.
fn recorded_reason(fields: &RequestFields) -> String {
    let mut reason = fields.reason.trim().to_owned();
    if !fields.incident.trim().is_empty() {
        reason.push_str(&format!(" [incident {}]", fields.incident.trim()));
    }
    reason
}

/// The form's checklist answer (`yes`, `no`, `unknown`; anything else: not answered).
fn answer_of(text: &str) -> i32 {
    (match text {
        "yes" => proto::ChecklistAnswer::Yes,
        "no" => proto::ChecklistAnswer::No,
        "unknown" => proto::ChecklistAnswer::Unknown,
        _ => proto::ChecklistAnswer::Unspecified,
    }) as i32
}

async fn request(
    State(console): State<Console>,
    headers: HeaderMap,
    Path((namespace, key)): Path<(String, String)>,
    Form(fields): Form<RequestFields>,
) -> Response {
    let user = match signed_in_post(&console, &headers, &fields.csrf) {
        Ok(user) => user,
        Err(refused) => return *refused,
    };
    let info = match inspect(&user, &namespace, &key).await {
        Ok(info) => info,
        Err(error) => {
            return message(
                Some(Who::of(&user)),
                Refused::status(&error),
                "Not requested",
                Some(Refused::of(&error)),
                vec![],
            )
        }
    };
    let k = KeyView::of(&info);
    let form = RequestForm {
        token: fields.token.clone(),
        session: fields.session.clone(),
        reason: fields.reason.clone(),
        incident: fields.incident.clone(),
        revoke: fields.revoke.is_some(),
        stopped: fields.stopped.clone(),
        double_run: fields.double_run.clone(),
        statement: fields.statement.clone(),
    };
    let page = |k: KeyView, form: RequestForm, error: Refused, status: StatusCode| {
        render(&key_page_of(&user, k, form, Some(error)), status)
    };
    let Ok(token) = fields.token.trim().parse::<u64>() else {
        let refusal = Refused::console(
            "bad_token",
            "the token is the number the holder card shows (the hold you mean): nothing was requested",
        );
        return page(k, form, refusal, StatusCode::BAD_REQUEST);
    };
    let session = match fields.session.trim() {
        "" => 0,
        text => match text.parse::<u64>() {
            Ok(session) => session,
            Err(_) => {
                let refusal = Refused::console(
                    "bad_session",
                    "the session is the holder's session id, a number: nothing was requested",
                );
                return page(k, form, refusal, StatusCode::BAD_REQUEST);
            }
        },
    };
    let fenced = k.class.fenced;
    let answered = |a: &str| matches!(a, "yes" | "no" | "unknown");
    let checklist_answered = answered(&fields.stopped) && answered(&fields.double_run);
    if !fenced && !checklist_answered {
        let refusal = Refused::console(
            "checklist_unanswered",
            "this lock is advisory: answer both questions of the checklist (they are recorded with the request): nothing was requested",
        );
        return page(k, form, refusal, StatusCode::BAD_REQUEST);
    }
    let reason = recorded_reason(&fields);
    if fields.reason.trim().is_empty() || reason.len() > REASON_LEN_MAX {
        let refusal = Refused::console(
            "bad_reason",
            format!("a reason is required, and with the incident and checklist at most {REASON_LEN_MAX} bytes: nothing was requested"),
        );
        return page(k, form, refusal, StatusCode::BAD_REQUEST);
    }
    let requested = user
        .client
        .request_force_release(proto::RequestForceReleaseRequest {
            namespace: namespace.clone(),
            key: key.clone(),
            expected_token: token,
            reason,
            revoke_session: fields.revoke.is_some(),
            holder_session_id: session,
            checklist: Some(proto::ForceReleaseChecklist {
                holder_stopped: answer_of(&fields.stopped),
                double_run_acceptable: answer_of(&fields.double_run),
                statement: fields.statement.trim().to_owned(),
            })
            .filter(|c| {
                c.holder_stopped != 0 || c.double_run_acceptable != 0 || !c.statement.is_empty()
            }),
        })
        .await;
    match requested {
        Ok(answer) => Redirect::to(&format!(
            "/console/force-releases/{}",
            answer.force_release_id
        ))
        .into_response(),
        Err(error) => page(k, form, Refused::of(&error), Refused::status(&error)),
    }
}

/// The pending request `id`, if it is still pending.
async fn pending(user: &SignedIn, id: u64) -> Result<Option<proto::ForceReleaseInfo>, ClientError> {
    let listed = user
        .client
        .list_force_releases(proto::ListForceReleasesRequest { allow_stale: false })
        .await?;
    Ok(listed.requests.into_iter().find(|r| r.id == id))
}

/// Audit records read after a request when the console says what became of it.
const OUTCOME_RECORDS_MAX: u32 = 1_000;

/// What became of request `id`, which is no longer pending, from the audit (read as the person):
/// approved or denied (by whom, when), or expired. A request leaves the pending list only so; the
/// expiry's own record is written at the cluster's next change after it, so a request with
/// neither record has expired.
async fn closed_words(user: &SignedIn, id: u64) -> String {
    use proto::AuditAction as A;
    let generic = format!(
        "Request {id} is not pending: it was approved, denied or has expired. The key's page and its audit show what happened."
    );
    let Ok(answer) = user
        .client
        .query_audit(proto::QueryAuditRequest {
            namespace: None,
            key: None,
            revision_min: id,
            revision_max: None,
            limit: OUTCOME_RECORDS_MAX,
            allow_stale: false,
        })
        .await
    else {
        return generic;
    };
    let records: Vec<&proto::AuditRecord> = answer
        .records
        .iter()
        .filter(|r| r.force_release_id == Some(id))
        .collect();
    let Some(asked) = records
        .iter()
        .find(|r| r.action == A::ForceReleaseRequested as i32)
    else {
        return generic;
    };
    let what = format!(
        "Request {id} ({} / {}, token {}, by {} at {})",
        asked.namespace,
        asked.key,
        asked.token.unwrap_or_default(),
        if asked.requester.is_empty() {
            &asked.actor
        } else {
            &asked.requester
        },
        crate::wall_clock::utc(asked.time_ms)
    );
    let outcome = records.iter().find(|r| {
        [
            A::ForceReleaseApproved as i32,
            A::ForceReleaseDenied as i32,
            A::ForceReleaseExpired as i32,
        ]
        .contains(&r.action)
    });
    let at = |r: &proto::AuditRecord| crate::wall_clock::utc(r.time_ms);
    match outcome {
        Some(r) if r.action == A::ForceReleaseApproved as i32 => format!(
            "{what} is no longer pending: it was approved by {} at {}.",
            crate::audit_report::actor_words(r),
            at(r)
        ),
        Some(r) if r.action == A::ForceReleaseDenied as i32 => format!(
            "{what} is no longer pending: it was denied by {} at {} ({}).",
            crate::audit_report::actor_words(r),
            at(r),
            r.reason
        ),
        Some(r) => format!(
            "{what} has expired (recorded at {}): nobody approved it in time, and nothing was released. Request again from the key's page if it is still needed.",
            at(r)
        ),
        None => format!(
            "{what} has expired: nobody approved it in time, and nothing was released (the audit records the expiry at the cluster's next change). Request again from the key's page if it is still needed."
        ),
    }
}

async fn approval_page(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Response {
    let user = match signed_in(&console, &headers, &format!("/console/force-releases/{id}")) {
        Ok(user) => user,
        Err(redirect) => return *redirect,
    };
    approval(&user, id, None, StatusCode::OK).await
}

async fn approval(
    user: &SignedIn,
    id: u64,
    error: Option<Refused>,
    status: StatusCode,
) -> Response {
    let request = match pending(user, id).await {
        Ok(Some(request)) => request,
        Ok(None) => {
            return message(
                Some(Who::of(user)),
                StatusCode::NOT_FOUND,
                &format!("Force-release request {id}"),
                error,
                vec![closed_words(user, id).await],
            )
        }
        Err(error) => {
            return message(
                Some(Who::of(user)),
                Refused::status(&error),
                &format!("Force-release request {id}"),
                Some(Refused::of(&error)),
                vec![],
            )
        }
    };
    let now = inspect(user, &request.namespace, &request.key)
        .await
        .ok()
        .map(|info| KeyView::of(&info));
    let own_request = request.requester == user.principal;
    render(
        &ApprovalPage {
            who: Some(Who::of(user)),
            r: PendingView::of(&request),
            now,
            own_request,
            error,
        },
        status,
    )
}

#[derive(Deserialize)]
struct ApproveFields {
    #[serde(default)]
    csrf: String,
    /// The class kind, typed by the approver: `fenced` or `advisory`.
    #[serde(default)]
    kind: String,
}

async fn approve(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(fields): Form<ApproveFields>,
) -> Response {
    let user = match signed_in_post(&console, &headers, &fields.csrf) {
        Ok(user) => user,
        Err(refused) => return *refused,
    };
    let acknowledged_fenced = match fields.kind.trim().to_ascii_lowercase().as_str() {
        "fenced" => true,
        "advisory" => false,
        _ => {
            let refusal = Refused::console(
                "class_kind_not_typed",
                "type the class's kind as the request shows it, `fenced` or `advisory`: nothing was approved",
            );
            return approval(&user, id, Some(refusal), StatusCode::BAD_REQUEST).await;
        }
    };
    // The key, for the outcome's link to the verify page (the request is gone once approved).
    let key = pending(&user, id)
        .await
        .ok()
        .flatten()
        .map(|r| (r.namespace, r.key));
    let approved = user
        .client
        .approve_force_release(proto::ApproveForceReleaseRequest {
            force_release_id: id,
            acknowledged_fenced,
        })
        .await;
    match approved {
        Ok(answer) => {
            let mut lines = vec![if answer.fenced {
                format!(
                    "Released token {} of this fenced lock; the key's floor is now {}: every token below it is refused by the fencing resource.",
                    answer.released_token, answer.floor
                )
            } else {
                // An advisory lock's resource checks no token: claim no fencing.
                format!(
                    "Released token {} of this ADVISORY lock (the key's floor is now {}). Nothing refuses the old holder's writes: if it is still running, two writers may act at once. Confirm with the class owner that the old process is gone, and check the resource for a double write.",
                    answer.released_token, answer.floor
                )
            }];
            match answer.next {
                Some(next) => lines.push(format!(
                    "The next waiter, session {}, holds it now with token {}.",
                    next.session_id, next.token
                )),
                None => lines.push("Nobody was waiting: the key is free.".to_owned()),
            }
            match answer.session_revoked {
                Some(session) => lines.push(format!(
                    "Session {session} was revoked in the same revision: its client learns it at once on its session stream (else at its next keepalive) and stops."
                )),
                None => lines.push("The holder's session was not revoked: a Picket client learns that this lock is gone, at once on its session stream (else at its next keepalive); a process that does not use one learns nothing.".to_owned()),
            }
            render(
                &MessagePage {
                    who: Some(Who::of(&user)),
                    title: format!("Force-release {id} approved"),
                    lines,
                    links: key
                        .iter()
                        .map(|(ns, key)| {
                            (
                                verify::verify_href(ns, key, Some(id)),
                                "Verify: the key's lock log, the queue draining, when the old holder learned it, the alert".to_owned(),
                            )
                        })
                        .chain([("/console/".to_owned(), "Overview".to_owned())])
                        .collect(),
                    error: None,
                },
                StatusCode::OK,
            )
        }
        Err(error) => {
            approval(
                &user,
                id,
                Some(Refused::of(&error)),
                Refused::status(&error),
            )
            .await
        }
    }
}

#[derive(Deserialize)]
struct DenyFields {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
}

async fn deny(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(fields): Form<DenyFields>,
) -> Response {
    let user = match signed_in_post(&console, &headers, &fields.csrf) {
        Ok(user) => user,
        Err(refused) => return *refused,
    };
    let denied = user
        .client
        .deny_force_release(proto::DenyForceReleaseRequest {
            force_release_id: id,
            reason: fields.reason.trim().to_owned(),
        })
        .await;
    match denied {
        Ok(_) => message(
            Some(Who::of(&user)),
            StatusCode::OK,
            &format!("Force-release {id} denied"),
            None,
            vec!["The request is closed; nothing was released. The audit records the denial and its reason.".to_owned()],
        ),
        Err(error) => approval(&user, id, Some(Refused::of(&error)), Refused::status(&error)).await,
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
