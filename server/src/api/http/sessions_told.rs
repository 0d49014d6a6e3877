//! `GET /v1/sessions/{id}/told`: what this replica told session `id`'s client about its losses
//! and when ([`crate::api::told`]), as JSON. Admitted as the inspection routes are (with OIDC or
//! client certificates on: a bearer token or a verified certificate). The console's verify page
//! reads it from every replica. Shape: docs/http.md.

use axum::extract::{ConnectInfo, State};
use axum::http::{Extensions, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::{error_response, extract::JsonPath, tls, HttpCluster};
use crate::api::told::{Told, ToldLog, TOLD_KEPT_MAX};
use crate::auth::Authenticator;

#[derive(Clone)]
struct ToldState {
    told: ToldLog,
    auth: Authenticator,
    node_id: u64,
}

/// The answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct ToldJson {
    /// The replica that answers: what it told, not what the others did.
    pub node_id: u64,
    /// Records the replica keeps at most (all sessions together; the oldest go first).
    pub kept_max: usize,
    /// Oldest first.
    pub told: Vec<Told>,
}

/// The route, for the replica `node_id` whose services note into `told`.
pub fn router(told: ToldLog, auth: Authenticator, node_id: u64) -> Router {
    Router::new()
        .route("/v1/sessions/{session_id}/told", get(get_told))
        .with_state(ToldState {
            told,
            auth,
            node_id,
        })
}

async fn get_told(
    State(state): State<ToldState>,
    JsonPath(session_id): JsonPath<u64>,
    headers: HeaderMap,
    extensions: Extensions,
) -> Response {
    let metadata = tonic::metadata::MetadataMap::from_headers(headers);
    let peer = extensions.get::<ConnectInfo<tls::HttpPeer>>();
    let none = HttpCluster::default();
    let certificate = match peer.and_then(|p| p.0.certificate.as_ref()) {
        Some(leaf) => match state.auth.certificate_caller_der(leaf) {
            Ok(caller) => caller,
            Err(status) => return error_response(&status, &none),
        },
        None => None,
    };
    if let Err(status) = state.auth.admit_reader_with(&metadata, certificate).await {
        return error_response(&status, &none);
    }
    Json(ToldJson {
        node_id: state.node_id,
        kept_max: TOLD_KEPT_MAX,
        told: state.told.of_session(session_id),
    })
    .into_response()
}
