//! Every replica answers the inspection reads, so an alert link works whichever replica it names.
//!
//! A read is first tried locally (linearizable unless `?stale=true`). A follower's local read is
//! refused `not_leader`; the follower then forwards the request once to the leader's HTTP
//! address (marked with [`FORWARDED_BY`], so a replica that lost its leadership meanwhile answers
//! instead of forwarding again) and relays the leader's answer as it came. When no leader is
//! known, or the leader does not answer, the follower answers from its own applied state, marked
//! stale (`"stale": true` with a `stale_reason`, and the [`STALE`] header).

use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Uri};
use axum::response::Response;
use tonic::Status;

/// Request header of a forwarded read: the node id of the replica that forwarded it.
pub const FORWARDED_BY: &str = "picket-forwarded-by";
/// Answer header: the node id of the replica whose state answered.
pub const NODE: &str = "picket-node";
/// Answer header of a stale answer: why (`requested`, `no-leader`, `leader-unreachable`).
pub const STALE: &str = "picket-stale";

/// How long a forwarded read may take before the follower answers from its own state.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(3);

/// Answer headers relayed from the leader.
const RELAYED_HEADERS: [&str; 4] = [
    "content-type",
    NODE,
    STALE,
    picket_proto::status::LEADER_METADATA,
];

pub use crate::node::driver::HttpEndpoints;

/// The replica's place in the cluster, for forwarding and for HTTP leader hints.
#[derive(Clone, Debug, Default)]
pub struct HttpCluster {
    /// This replica's node id (0: unknown, as in tests of a lone endpoint).
    pub node_id: u64,
    pub endpoints: HttpEndpoints,
    /// PEM of the CA that signed the members' HTTPS certificates (`[tls] ca` with `[tls] http`):
    /// a forwarded read trusts it, and only it. `None`: plain HTTP (or the system's roots).
    pub forward_ca_pem: Option<Vec<u8>>,
}

impl HttpCluster {
    /// The client that forwards reads to the leader. It presents no client certificate of its
    /// own: the caller's `Authorization` is relayed, never this replica's identity.
    pub fn forward_client(&self) -> Result<reqwest::Client, reqwest::Error> {
        let mut builder = reqwest::Client::builder();
        if let Some(pem) = &self.forward_ca_pem {
            builder = builder.tls_built_in_root_certs(false);
            for certificate in reqwest::Certificate::from_pem_bundle(pem)? {
                builder = builder.add_root_certificate(certificate);
            }
        }
        builder.build()
    }

    /// The HTTP base URL of `node`, if it has one.
    pub fn endpoint_of(&self, node: u64) -> Option<String> {
        self.endpoints.get(node)
    }
}

/// Why an answer comes from a replica's own state rather than through the leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stale {
    /// [`STALE`] header value.
    pub code: &'static str,
    /// In words, for the JSON `stale_reason`.
    pub reason: String,
}

/// What a read came to.
pub enum Outcome<T> {
    /// This replica's answer; `stale` is `None` for a linearizable read.
    Local {
        value: T,
        stale: Option<Stale>,
    },
    /// The leader's answer, relayed as it came.
    Relayed(Response),
    Refused(Status),
}

/// Answers a read on any replica: `read(allow_stale)` is the local read.
pub async fn read_anywhere<T, F, Fut>(
    cluster: &HttpCluster,
    client: &reqwest::Client,
    uri: &Uri,
    headers: &HeaderMap,
    stale_requested: bool,
    relayable: bool,
    read: F,
) -> Outcome<T>
where
    F: Fn(bool) -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    if stale_requested {
        let stale = Stale {
            code: "requested",
            reason: "asked for with ?stale=true: this replica's own applied state".to_owned(),
        };
        return local_stale(read(true).await, stale);
    }
    let status = match read(false).await {
        Ok(value) => return Outcome::Local { value, stale: None },
        Err(status) => status,
    };
    let Some(hint) = picket_proto::status::leader_hint(&status) else {
        return Outcome::Refused(status);
    };
    if headers.contains_key(FORWARDED_BY) {
        // Forwarded here as to the leader, which this replica no longer is: say where the
        // leader is now rather than forwarding a second time.
        return Outcome::Refused(status);
    }
    let stale = match hint.node_id.filter(|&leader| leader != cluster.node_id) {
        None => Stale {
            code: "no-leader",
            reason: "no leader is known: this replica's own applied state, which may be behind"
                .to_owned(),
        },
        Some(leader) => match cluster.endpoint_of(leader) {
            None => Stale {
                code: "leader-unreachable",
                reason: format!(
                    "the leader (node {leader}) has no HTTP address in the configuration: this \
                     replica's own applied state, which may be behind"
                ),
            },
            Some(base) if !relayable => Stale {
                code: "caller-not-relayed",
                reason: format!(
                    "the caller authenticated with a client certificate, which cannot be relayed \
                     to the leader (node {leader}, {base}): this replica's own applied state, \
                     which may be behind; ask the leader for a linearizable answer"
                ),
            },
            Some(base) => match forward(client, &base, uri, headers, cluster.node_id).await {
                Ok(response) => return Outcome::Relayed(response),
                Err(error) => Stale {
                    code: "leader-unreachable",
                    reason: format!(
                        "the leader (node {leader}, {base}) did not answer ({error}): this \
                         replica's own applied state, which may be behind"
                    ),
                },
            },
        },
    };
    tracing::debug!(reason = %stale.reason, %uri, "inspection answered from local state");
    local_stale(read(true).await, stale)
}

fn local_stale<T>(result: Result<T, Status>, stale: Stale) -> Outcome<T> {
    match result {
        Ok(value) => Outcome::Local {
            value,
            stale: Some(stale),
        },
        Err(status) => Outcome::Refused(status),
    }
}

/// `GET` of the same path and query at `base`, with the caller's `Authorization`.
async fn forward(
    client: &reqwest::Client,
    base: &str,
    uri: &Uri,
    headers: &HeaderMap,
    me: u64,
) -> Result<Response, reqwest::Error> {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = client
        .get(format!("{base}{path}"))
        .timeout(FORWARD_TIMEOUT)
        .header(FORWARDED_BY, me.to_string());
    if let Some(auth) = headers.get(axum::http::header::AUTHORIZATION) {
        request = request.header(axum::http::header::AUTHORIZATION, auth.clone());
    }
    let answer = request.send().await?;
    let status = answer.status();
    let relayed: Vec<(&str, HeaderValue)> = RELAYED_HEADERS
        .iter()
        .filter_map(|name| Some((*name, answer.headers().get(*name)?.clone())))
        .collect();
    let body = answer.bytes().await?;
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    for (name, value) in relayed {
        response.headers_mut().insert(name, value);
    }
    Ok(response)
}
