//! The replica's HTTP endpoint (axum): Prometheus metrics, JSON inspection and health.
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | [`Metrics::encode`], Prometheus text format |
//! | `GET /v1/namespaces/{ns}/locks/{key}` | [`json::KeyInfoJson`]; linearizable, `?stale=true` for a local read |
//! | `GET /v1/namespaces/{ns}/holds` | [`json::HoldsJson`], oldest first; `?limit=` (default 1 000, at most 10 000), `?stale=true` |
//! | `GET /healthz` | [`Health`]: 200 when ready, 503 otherwise |
//! | `GET /runbooks/{name}` | the runbooks of docs/runbooks, the alerts' `runbook_url`: HTML with `$namespace`, `$key`, `$class`, `$fenced`, `$owner` filled in from the query string; Markdown as written with `?format=markdown` or `Accept: text/markdown` |
//! | `GET /v1/sessions/{id}/told` | [`told::ToldJson`]: when this replica told the session's client of a loss ([`told`]) |
//!
//! With OIDC or client certificates on, the inspection routes need `Authorization: Bearer
//! <token>` or a verified client certificate (over HTTPS) like the gRPC admin reads
//! ([`router_with_auth`]); `/metrics` and `/healthz` are open. With `[tls]` the port serves
//! HTTPS ([`serve_tls`], [`tls`]).
//!
//! The data comes from an [`InspectSource`] (the server's node handle; tests use a fake). Errors
//! are JSON ([`json::ErrorJson`]) with an HTTP status from the gRPC code. Every replica answers
//! the inspection reads ([`forward`]: a follower forwards to the leader, or answers from its own
//! state marked stale when there is none); `not_leader` hints name HTTP addresses
//! ([`HttpCluster`]). Shapes: docs/http.md.
//! Real sockets only: the module is absent from the simulator build.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, Extensions, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use picket_core::locks::{HoldInfo, KeyInfo};
use serde::{Deserialize, Serialize};
use tonic::{Code, Status};

use crate::auth::Authenticator;
use crate::metrics::{self, Metrics};

pub mod extract;
pub mod forward;
pub mod json;
pub mod sessions_told;
pub mod tls;

use extract::{invalid_parameter, JsonQuery};
pub use forward::{HttpCluster, HttpEndpoints};
use forward::{Outcome, Stale};
use json::{ErrorBody, ErrorJson, HoldJson, HoldsJson, KeyInfoJson};

/// A boxed future, so that [`InspectSource`] can be a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Default and largest `limit` of a holds listing (as `Admin.ListHolds`).
pub const HOLDS_LIMIT_DEFAULT: usize = 1_000;
pub const HOLDS_LIMIT_MAX: usize = 10_000;

/// What the HTTP endpoint reads. The server implements it on its node handle: `inspect` and
/// `list_holds` are `Admin.Inspect` / `Admin.ListHolds` (read-index on the leader unless
/// `allow_stale`), errors as the gRPC services would answer them (`picket_proto::status`).
pub trait InspectSource: Send + Sync + 'static {
    fn inspect(
        &self,
        namespace: String,
        key: String,
        allow_stale: bool,
    ) -> BoxFuture<'_, Result<KeyInfo, Status>>;

    /// Holds of `namespace`, oldest first, at most `limit`.
    fn list_holds(
        &self,
        namespace: String,
        limit: usize,
        allow_stale: bool,
    ) -> BoxFuture<'_, Result<Vec<HoldInfo>, Status>>;

    fn health(&self) -> BoxFuture<'_, Health>;
}

/// `GET /healthz`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Health {
    /// Serving: durable state recovered, not amnesic, peers configured.
    pub ready: bool,
    pub node_id: u64,
    /// `leader`, `follower`, ... (as `picket_paxos_role`).
    pub role: String,
    pub leader_node_id: Option<u64>,
    pub slot_applied: u64,
    /// Why not ready, in words (empty when ready).
    pub detail: String,
    /// How this start's storage recovery ended and whether the durable state is lost now.
    pub storage: crate::node::durable::StorageCondition,
    /// The members of the newest membership the log scheduled, by node id (this replica
    /// included if it is one).
    pub members: Vec<HealthMember>,
    /// The first slot that membership governs: the configuration's revision (0: the replica
    /// did not answer).
    pub membership_from_slot: u64,
}

/// A member in `GET /healthz` (as `Member` of `Admin.GetReplicaStatus`).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct HealthMember {
    pub node_id: u64,
    pub client_endpoint: String,
    /// Its HTTP base URL (where a follower forwards inspection when it leads, and the console's
    /// cluster strip reads it); absent when it has none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub http_endpoint: String,
    /// Votes; false: a learner, which follows the log until it is promoted.
    pub voter: bool,
    /// On the leader: the last slot the member said it applied (how far a learner is
    /// behind); absent elsewhere, and for a member not heard from this term.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot_applied: Option<u64>,
}

#[derive(Clone)]
struct AppState {
    source: Arc<dyn InspectSource>,
    metrics: Arc<Metrics>,
    auth: Authenticator,
    cluster: Arc<HttpCluster>,
    /// Forwards reads to the leader.
    client: reqwest::Client,
}

/// The routes, ready for [`serve`] (or `axum::serve`), with inspection open to anyone (as
/// reads are without OIDC).
pub fn router(source: Arc<dyn InspectSource>, metrics: Arc<Metrics>) -> Router {
    router_with_auth(source, metrics, Authenticator::disabled())
}

/// The routes, with the inspection routes admitted as gRPC admin reads are
/// ([`Authenticator::admit_reader`]: with OIDC on, `Authorization: Bearer <token>` is
/// required). `/metrics` and `/healthz` stay open for scrapers and load balancers.
pub fn router_with_auth(
    source: Arc<dyn InspectSource>,
    metrics: Arc<Metrics>,
    auth: Authenticator,
) -> Router {
    replica_router(source, metrics, auth, HttpCluster::default())
}

/// The routes of a replica of `cluster`: as [`router_with_auth`], and a read this replica cannot
/// answer linearizably is forwarded to the leader's HTTP address (or answered stale) instead of
/// refused; `not_leader` hints name HTTP addresses.
pub fn replica_router(
    source: Arc<dyn InspectSource>,
    metrics: Arc<Metrics>,
    auth: Authenticator,
    cluster: HttpCluster,
) -> Router {
    let client = cluster
        .forward_client()
        .expect("the forwarding client is built once at start (server.rs) before the routes");
    Router::new()
        .route("/metrics", get(get_metrics))
        .route("/healthz", get(get_health))
        .route("/v1/namespaces/{namespace}/locks/{*key}", get(get_lock))
        .route("/v1/namespaces/{namespace}/holds", get(get_holds))
        .route("/runbooks/{name}", get(get_runbook))
        .with_state(AppState {
            source,
            metrics,
            auth,
            cluster: Arc::new(cluster),
            client,
        })
}

/// Admits an inspection request by its headers and the connection's client certificate (HTTPS
/// with `require_client_cert`), or answers the refusal.
async fn admit(
    state: &AppState,
    headers: HeaderMap,
    extensions: &Extensions,
) -> Result<(), Response> {
    let metadata = tonic::metadata::MetadataMap::from_headers(headers);
    let peer = extensions.get::<ConnectInfo<tls::HttpPeer>>();
    let certificate = match peer.and_then(|p| p.0.certificate.as_ref()) {
        Some(leaf) => state
            .auth
            .certificate_caller_der(leaf)
            .map_err(|status| error_response(&status, &state.cluster))?,
        None => None,
    };
    state
        .auth
        .admit_reader_with(&metadata, certificate)
        .await
        .map_err(|status| error_response(&status, &state.cluster))
}

/// Whether the caller's credential can be relayed to the leader: a bearer token can, a client
/// certificate cannot (the forwarding replica has no way to present it, and must not present its
/// own identity in the caller's place).
fn relayable(headers: &HeaderMap, extensions: &Extensions) -> bool {
    let by_certificate = extensions
        .get::<ConnectInfo<tls::HttpPeer>>()
        .is_some_and(|p| p.0.certificate.is_some());
    headers.contains_key(header::AUTHORIZATION) || !by_certificate
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    // TCP_NODELAY on every connection, as the TLS listener and the gRPC ports set it: a small
    // answer is not held back for Nagle's 40 ms.
    let listener = listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "http: cannot set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves `router` over TLS (`config`) on `listener` until `shutdown` completes; handlers see
/// the client's certificate, if any, as [`tls::HttpPeer`] connect info.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: Arc<tokio_rustls::rustls::ServerConfig>,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tls::TlsListener::new(listener, config)?;
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<tls::HttpPeer>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

#[derive(Debug, Default, Deserialize)]
struct ReadParams {
    #[serde(default)]
    stale: bool,
    limit: Option<usize>,
}

async fn get_metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        state.metrics.encode(),
    )
        .into_response()
}

async fn get_health(State(state): State<AppState>) -> Response {
    let health = state.source.health().await;
    let code = if health.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(health)).into_response()
}

async fn get_lock(
    State(state): State<AppState>,
    Path((namespace, key)): Path<(String, String)>,
    JsonQuery(params): JsonQuery<ReadParams>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
) -> Response {
    if let Err(refused) = admit(&state, headers.clone(), &extensions).await {
        return refused;
    }
    let outcome = forward::read_anywhere(
        &state.cluster,
        &state.client,
        &uri,
        &headers,
        params.stale,
        relayable(&headers, &extensions),
        |stale| state.source.inspect(namespace.clone(), key.clone(), stale),
    )
    .await;
    answer(&state, outcome, |info, stale| {
        let mut json = KeyInfoJson::new(&info, stale.is_some());
        json.stale_reason = stale.map(|s| s.reason.clone());
        json
    })
}

async fn get_holds(
    State(state): State<AppState>,
    Path(namespace): Path<String>,
    JsonQuery(params): JsonQuery<ReadParams>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
) -> Response {
    if let Err(refused) = admit(&state, headers.clone(), &extensions).await {
        return refused;
    }
    let limit = match params.limit {
        None | Some(0) => HOLDS_LIMIT_DEFAULT,
        Some(n) if n <= HOLDS_LIMIT_MAX => n,
        Some(n) => {
            return error_response(
                &invalid_parameter(
                    "limit",
                    format!(
                    "limit: {n} is above {HOLDS_LIMIT_MAX} (0 or absent: {HOLDS_LIMIT_DEFAULT})"
                ),
                ),
                &state.cluster,
            )
        }
    };
    let outcome = forward::read_anywhere(
        &state.cluster,
        &state.client,
        &uri,
        &headers,
        params.stale,
        relayable(&headers, &extensions),
        |stale| state.source.list_holds(namespace.clone(), limit, stale),
    )
    .await;
    answer(&state, outcome, |holds, stale| HoldsJson {
        namespace: namespace.clone(),
        holds: holds.iter().map(HoldJson::from).collect(),
        stale: stale.is_some(),
        stale_reason: stale.map(|s| s.reason.clone()),
    })
}

/// The HTTP answer of a read: this replica's JSON (with the [`forward::NODE`] header, and
/// [`forward::STALE`] when stale), the leader's relayed answer, or the error.
fn answer<T, J: Serialize>(
    state: &AppState,
    outcome: Outcome<T>,
    to_json: impl FnOnce(T, Option<&Stale>) -> J,
) -> Response {
    match outcome {
        Outcome::Local { value, stale } => {
            let mut response = Json(to_json(value, stale.as_ref())).into_response();
            let headers = response.headers_mut();
            headers.insert(forward::NODE, HeaderValue::from(state.cluster.node_id));
            if let Some(stale) = stale {
                headers.insert(forward::STALE, HeaderValue::from_static(stale.code));
            }
            response
        }
        Outcome::Relayed(response) => response,
        Outcome::Refused(status) => error_response(&status, &state.cluster),
    }
}

/// The runbooks the shipped alert rules link to (`<external_url>/runbooks/<name>`), from
/// docs/runbooks, as Markdown.
const RUNBOOKS: [(&str, &str); 5] = [
    (
        "stuck-lock.md",
        include_str!("../../../../docs/runbooks/stuck-lock.md"),
    ),
    (
        "cluster-down.md",
        include_str!("../../../../docs/runbooks/cluster-down.md"),
    ),
    (
        "replace-disk.md",
        include_str!("../../../../docs/runbooks/replace-disk.md"),
    ),
    (
        "replace-machine.md",
        include_str!("../../../../docs/runbooks/replace-machine.md"),
    ),
    (
        "restore-from-backup.md",
        include_str!("../../../../docs/runbooks/restore-from-backup.md"),
    ),
];

/// The values a runbook link may fill in (`$namespace` ... in the page).
#[derive(Debug, Default, Deserialize)]
pub struct RunbookQuery {
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub fenced: Option<String>,
    #[serde(default)]
    pub owner: Option<String>,
    /// `markdown` for the runbook as written.
    #[serde(default)]
    pub format: Option<String>,
}

/// A runbook as an HTML page: the Markdown rendered, then every `$name` the query gives
/// replaced by its value (HTML-escaped), so the paged engineer reads the alert's own
/// namespace and key.
pub fn render_runbook(markdown: &str, query: &RunbookQuery) -> String {
    let mut body = String::new();
    pulldown_cmark::html::push_html(
        &mut body,
        pulldown_cmark::Parser::new_ext(markdown, pulldown_cmark::Options::ENABLE_TABLES),
    );
    let mut filled = Vec::new();
    for (name, value) in [
        ("$namespace", &query.namespace),
        ("$key", &query.key),
        ("$class", &query.class),
        ("$fenced", &query.fenced),
        ("$owner", &query.owner),
    ] {
        if let Some(value) = value {
            let value = html_escape(value);
            body = body.replace(name, &format!("<mark>{value}</mark>"));
            filled.push(format!("{}: <code>{value}</code>", &name[1..]));
        }
    }
    let title = markdown
        .lines()
        .next()
        .unwrap_or("Runbook")
        .trim_start_matches('#')
        .trim();
    let banner = if filled.is_empty() {
        String::new()
    } else {
        format!(
            "<p class=\"filled\">Filled in from the alert's link: {}</p>\n",
            filled.join(", ")
        )
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{RUNBOOK_CSS}</style></head>\n<body><main>\n{banner}{body}</main></body></html>\n",
        html_escape(title)
    )
}

const RUNBOOK_CSS: &str = "body{font-family:system-ui,sans-serif;line-height:1.5;margin:0;\
background:#fafafa;color:#111}main{max-width:52rem;margin:0 auto;padding:1rem 1.5rem}\
pre{background:#f0f0f0;padding:.75rem;overflow-x:auto}code{font-size:.95em}\
mark{background:#ffe58a}.filled{background:#fff4cc;border:1px solid #e0c050;padding:.5rem}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25rem .5rem}";

fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

async fn get_runbook(
    Path(name): Path<String>,
    JsonQuery(query): JsonQuery<RunbookQuery>,
    headers: HeaderMap,
) -> Response {
    let wants_markdown = query.format.as_deref() == Some("markdown")
        || headers
            .get(header::ACCEPT)
            .and_then(|accept| accept.to_str().ok())
            .is_some_and(|accept| {
                accept.contains("text/markdown") && !accept.contains("text/html")
            });
    match RUNBOOKS.iter().find(|(file, _)| *file == name) {
        Some((_, text)) if wants_markdown => (
            [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
            *text,
        )
            .into_response(),
        Some((_, text)) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            render_runbook(text, &query),
        )
            .into_response(),
        None => {
            let names: Vec<&str> = RUNBOOKS.iter().map(|(file, _)| *file).collect();
            error_response(
                &Status::not_found(format!("no runbook {name:?}; there are {names:?}")),
                &HttpCluster::default(),
            )
        }
    }
}

/// The HTTP status of a gRPC code.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Cancelled => StatusCode::REQUEST_TIMEOUT,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A JSON error answer for `status`, with its `ErrorDetail` rule and, for `not_leader`, the
/// leader's node id and its HTTP address in `cluster` (also as the `picket-leader` header): the
/// gRPC hint names the client port, which does not speak HTTP/1.
pub fn error_response(status: &Status, cluster: &HttpCluster) -> Response {
    let detail = picket_proto::status::error_detail(status);
    let hint = picket_proto::status::leader_hint(status);
    let leader_node_id = hint.as_ref().and_then(|h| h.node_id);
    let leader_endpoint = leader_node_id.and_then(|node| cluster.endpoint_of(node));
    let mut message = status.message().to_owned();
    if hint.is_some() {
        message = match (&leader_endpoint, leader_node_id) {
            (Some(endpoint), _) => format!("not the leader: retry at {endpoint}"),
            (None, Some(node)) => format!("not the leader: the leader is node {node}"),
            (None, None) => "not the leader, and no leader is known: retry later".to_owned(),
        };
    }
    let body = ErrorJson {
        error: ErrorBody {
            code: code_snake(status.code()),
            rule: detail.as_ref().map(|d| d.rule.clone()),
            field: detail
                .as_ref()
                .map(|d| d.field.clone())
                .filter(|field| !field.is_empty()),
            message,
            leader_endpoint: leader_endpoint.clone(),
            leader_node_id,
            retryable: detail.as_ref().is_some_and(|d| d.retryable),
        },
    };
    let mut response = (http_status(status.code()), Json(body)).into_response();
    if let Some(value) = leader_endpoint.and_then(|e| HeaderValue::from_str(&e).ok()) {
        response
            .headers_mut()
            .insert(picket_proto::status::LEADER_METADATA, value);
    }
    response
}

fn code_snake(code: Code) -> String {
    let name = metrics::code_name(code);
    let mut out = String::new();
    for (i, ch) in name.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 && name != "OK" {
            out.push('_');
        }
        out.push(ch.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_http() {
        assert_eq!(
            http_status(Code::Unavailable),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(http_status(Code::InvalidArgument), StatusCode::BAD_REQUEST);
        assert_eq!(code_snake(Code::InvalidArgument), "invalid_argument");
        assert_eq!(code_snake(Code::Ok), "ok");
        assert_eq!(code_snake(Code::NotFound), "not_found");
    }
}
