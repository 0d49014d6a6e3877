//! The replica's HTTP endpoint (axum): Prometheus metrics, JSON inspection and health.
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | [`Metrics::encode`], Prometheus text format |
//! | `GET /v1/namespaces/{ns}/locks/{key}` | [`json::KeyInfoJson`]; linearizable, `?stale=true` for a local read |
//! | `GET /v1/namespaces/{ns}/holds` | [`json::HoldsJson`], oldest first; `?limit=` (default 1 000, at most 10 000), `?stale=true` |
//! | `GET /healthz` | [`Health`]: 200 when ready, 503 otherwise |
//!
//! With OIDC on, the inspection routes need `Authorization: Bearer <token>` like the gRPC admin
//! reads ([`router_with_auth`]); `/metrics` and `/healthz` are open.
//!
//! The data comes from an [`InspectSource`] (the server's node handle; tests use a fake). Errors
//! are JSON ([`json::ErrorJson`]) with an HTTP status from the gRPC code; a non-leader's answer
//! to a linearizable read is 503 with the `picket-leader` header. Shapes: docs/http.md.
//! Real sockets only: the module is absent from the simulator build.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use picket_core::locks::{HoldInfo, KeyInfo};
use serde::{Deserialize, Serialize};
use tonic::{Code, Status};

use crate::auth::Authenticator;
use crate::metrics::{self, Metrics};

pub mod json;

use json::{ErrorBody, ErrorJson, HoldJson, HoldsJson, KeyInfoJson};

/// A boxed future, so that [`InspectSource`] can be a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Default and largest `limit` of a holds listing (as `Admin.ListHolds`).
pub const HOLDS_LIMIT_DEFAULT: usize = 1_000;
pub const HOLDS_LIMIT_MAX: usize = 10_000;

/// What the HTTP endpoint reads. The server implements it on its node handle: `inspect` and
/// `list_holds` are `Admin.Inspect` / `Admin.ListHolds` (read-index on the leader unless
/// `allow_stale`), errors as the gRPC services would answer them (`picket_net::status`).
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
    pub storage: crate::durable::StorageCondition,
}

#[derive(Clone)]
struct AppState {
    source: Arc<dyn InspectSource>,
    metrics: Arc<Metrics>,
    auth: Authenticator,
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
    Router::new()
        .route("/metrics", get(get_metrics))
        .route("/healthz", get(get_health))
        .route("/v1/namespaces/{namespace}/locks/{*key}", get(get_lock))
        .route("/v1/namespaces/{namespace}/holds", get(get_holds))
        .with_state(AppState {
            source,
            metrics,
            auth,
        })
}

/// Admits an inspection request by its headers, or answers the refusal.
async fn admit(state: &AppState, headers: HeaderMap) -> Result<(), Response> {
    let metadata = tonic::metadata::MetadataMap::from_headers(headers);
    state
        .auth
        .admit_reader(&metadata)
        .await
        .map_err(|status| error_response(&status))
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
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
    Query(params): Query<ReadParams>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = admit(&state, headers).await {
        return refused;
    }
    match state.source.inspect(namespace, key, params.stale).await {
        Ok(info) => Json(KeyInfoJson::new(&info, params.stale)).into_response(),
        Err(status) => error_response(&status),
    }
}

async fn get_holds(
    State(state): State<AppState>,
    Path(namespace): Path<String>,
    Query(params): Query<ReadParams>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = admit(&state, headers).await {
        return refused;
    }
    let limit = match params.limit {
        None | Some(0) => HOLDS_LIMIT_DEFAULT,
        Some(n) if n <= HOLDS_LIMIT_MAX => n,
        Some(n) => {
            return error_response(&Status::invalid_argument(format!(
                "limit: {n} is above {HOLDS_LIMIT_MAX}"
            )))
        }
    };
    match state
        .source
        .list_holds(namespace.clone(), limit, params.stale)
        .await
    {
        Ok(holds) => Json(HoldsJson {
            namespace,
            holds: holds.iter().map(HoldJson::from).collect(),
            stale: params.stale,
        })
        .into_response(),
        Err(status) => error_response(&status),
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
/// leader hint (also as the `picket-leader` header).
pub fn error_response(status: &Status) -> Response {
    let detail = picket_net::status::error_detail(status);
    let hint = picket_net::status::leader_hint(status);
    let leader_endpoint = hint.as_ref().and_then(|h| h.endpoint.clone());
    let body = ErrorJson {
        error: ErrorBody {
            code: code_snake(status.code()),
            rule: detail.as_ref().map(|d| d.rule.clone()),
            message: status.message().to_owned(),
            leader_endpoint: leader_endpoint.clone(),
            retryable: detail.as_ref().is_some_and(|d| d.retryable),
        },
    };
    let mut response = (http_status(status.code()), Json(body)).into_response();
    if let Some(value) = leader_endpoint.and_then(|e| HeaderValue::from_str(&e).ok()) {
        response
            .headers_mut()
            .insert(picket_net::status::LEADER_METADATA, value);
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
