//! The replica list, leader following and the retry loop every RPC goes through.
//!
//! Every call goes to the replica believed to be the leader. A `not_leader` answer with a hint
//! moves there at once (the request unchanged: same session, same request id); a failure
//! without a hint (unreachable, no leader known, timed out) rotates to the next replica after a
//! backoff; `busy` retries the same replica after a backoff. Each attempt has a timeout, and a
//! call gives up after the retry budget with [`ClientError::Unavailable`].

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

use super::error::{classify, ClientError, Retry};
use super::stream::{SessionStreams, Transport};
#[cfg(not(madsim))]
use super::tls::error_text;
use super::tls::{endpoint_uri_for, status_text, TlsConfig, TlsMismatch};

/// Most replicas a client remembers (the configured ones plus leaders learned from hints).
pub const ENDPOINTS_MAX: usize = 16;
/// Most redirects followed in a row without a backoff (guards against a hint loop).
const REDIRECTS_IN_A_ROW_MAX: u32 = 3;

/// Metadata carrying the principal in dev mode (`picketd --insecure-dev-auth`).
pub const PRINCIPAL_METADATA: &str = "x-picket-principal";
/// Metadata carrying comma-separated roles in dev mode (`picketd --insecure-dev-auth`).
pub const ROLES_METADATA: &str = "x-picket-roles";

/// Who the client says it is to the server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// Dev mode only: sent as `x-picket-principal`.
    pub principal: Option<String>,
    /// Dev mode only: sent as `x-picket-roles` (comma-separated, e.g. `on-call,class-admin`).
    pub roles: Option<String>,
    /// An OIDC access token, sent as `authorization: Bearer <token>`.
    pub bearer: Option<String>,
}

/// Default of [`ClientConfig::clock_drift_ppm`]: 1 %.
pub const CLOCK_DRIFT_PPM_DEFAULT: u32 = 10_000;
/// Largest [`ClientConfig::clock_drift_ppm`]: 10 %.
pub const CLOCK_DRIFT_PPM_MAX: u32 = 100_000;

/// How a [`super::Client`] talks to the cluster.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Replica client endpoints: `https://host:port` (TLS), `http://host:port` (plaintext), or
    /// `host:port` (TLS if `tls` is set, else plaintext).
    pub endpoints: Vec<String>,
    /// TLS to the replicas: the CA bundle and, for clusters that require client certificates,
    /// this client's certificate and key (`None`: plaintext unless an endpoint says `https://`,
    /// which then trusts the public web roots). Ignored under `--cfg madsim`.
    pub tls: Option<TlsConfig>,
    /// Timeout of one attempt of a unary RPC (a waiting acquire adds its wait to it).
    pub rpc_timeout: Duration,
    /// Timeout to open a connection.
    pub connect_timeout: Duration,
    /// How long one call keeps retrying across replicas before giving up.
    pub retry_budget: Duration,
    /// First backoff between attempts; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// The longest a waiting `Acquire` is held by the server per attempt (at most 600 s); the
    /// client re-issues it, with the same request id, until it is granted.
    pub wait_slice: Duration,
    /// The session identity sent with `CreateSession` (`name` is required by the server).
    pub identity_name: String,
    pub identity_host: String,
    pub identity_pid: u32,
    /// Session TTL asked for (`None`: the cluster's default).
    pub session_ttl: Option<Duration>,
    /// How much faster the leader's clock may run than this client's, in parts per million.
    /// The session's deadline is `send time of the last acknowledged keepalive + ttl`, less
    /// this share of the TTL, so the client gives up its locks first even if the two clocks'
    /// rates differ by that much. Default 10,000 (1 %: 100 ms of a 10 s TTL); at most 100,000.
    pub clock_drift_ppm: u32,
    pub credentials: Credentials,
    /// How keepalives, acquires, releases, cancels and closes travel: one `Session` stream for
    /// the whole client (the default), or the unary calls and a `KeepAlive` stream per session
    /// (the same rules and retries either way; see docs/client.md).
    pub transport: Transport,
}

impl ClientConfig {
    /// Defaults for `endpoints`: 5 s per attempt, 15 s retry budget, 30 s wait slices, the
    /// process id and `identity_name` as the identity.
    pub fn new(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        identity_name: &str,
    ) -> ClientConfig {
        ClientConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            tls: None,
            rpc_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            retry_budget: Duration::from_secs(15),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
            wait_slice: Duration::from_secs(30),
            identity_name: identity_name.to_owned(),
            identity_host: String::new(),
            identity_pid: std::process::id(),
            session_ttl: None,
            clock_drift_ppm: CLOCK_DRIFT_PPM_DEFAULT,
            credentials: Credentials::default(),
            transport: Transport::default(),
        }
    }

    fn check(&self) -> Result<(), ClientError> {
        if self.endpoints.is_empty() {
            return Err(ClientError::NoEndpoints);
        }
        if self.endpoints.len() > ENDPOINTS_MAX {
            return Err(ClientError::BadConfig(format!(
                "{} endpoints given, at most {ENDPOINTS_MAX}",
                self.endpoints.len()
            )));
        }
        let positive = [
            ("rpc_timeout", self.rpc_timeout),
            ("connect_timeout", self.connect_timeout),
            ("backoff_min", self.backoff_min),
            ("wait_slice", self.wait_slice),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, d)| d.is_zero()) {
            return Err(ClientError::BadConfig(format!("{name} must be above zero")));
        }
        if self.clock_drift_ppm > CLOCK_DRIFT_PPM_MAX {
            return Err(ClientError::BadConfig(format!(
                "clock_drift_ppm {} is above {CLOCK_DRIFT_PPM_MAX} (10 %)",
                self.clock_drift_ppm
            )));
        }
        if let Some(tls) = &self.tls {
            tls.check()?;
        }
        if self.wait_slice > Duration::from_secs(600) {
            return Err(ClientError::BadConfig(
                "wait_slice is at most 600 s (the server's bound)".into(),
            ));
        }
        Ok(())
    }
}

/// `host:port` -> `http://host:port`; a URI with a scheme is kept. (A client with a
/// [`TlsConfig`] reads a bare `host:port` as `https://`: [`endpoint_uri_for`].)
pub fn endpoint_uri(endpoint: &str) -> String {
    endpoint_uri_for(endpoint, false)
}

struct Replica {
    uri: String,
    /// Opened lazily on first use; tonic reconnects it by itself.
    channel: Option<Channel>,
}

struct Route {
    replicas: Vec<Replica>,
    /// The replica believed to be the leader.
    current: usize,
}

/// Opens the channel of an endpoint URI (tests swap in an in-memory transport).
pub(crate) type ChannelFactory = Box<dyn Fn(&str) -> Channel + Send + Sync>;

/// The cluster as one client sees it. Shared by the client, its sessions and their tasks.
pub(crate) struct Cluster {
    pub(crate) config: ClientConfig,
    metadata: MetadataMap,
    /// The TLS of `https://` channels (`config.tls`, else the public web roots).
    #[cfg(not(madsim))]
    tls: tonic::transport::ClientTlsConfig,
    route: Mutex<Route>,
    channel_factory: Option<ChannelFactory>,
    /// The `Session` stream of this client ([`Transport::Stream`]).
    pub(crate) streams: SessionStreams,
}

impl Cluster {
    pub(crate) fn new(
        config: ClientConfig,
        channel_factory: Option<ChannelFactory>,
    ) -> Result<Cluster, ClientError> {
        config.check()?;
        #[cfg(not(madsim))]
        let tls = config.tls.clone().unwrap_or_default().tonic();
        // Bad certificates or keys are refused here, not at the first call.
        #[cfg(not(madsim))]
        if config.tls.is_some() {
            Endpoint::from_static("https://localhost")
                .tls_config(tls.clone())
                .map_err(|e| ClientError::BadTls {
                    what: "ca, cert or key",
                    reason: error_text(&e),
                })?;
        }
        let mut replicas = Vec::with_capacity(config.endpoints.len());
        for endpoint in &config.endpoints {
            let uri = endpoint_uri_for(endpoint, config.tls.is_some());
            let parsed =
                Endpoint::from_shared(uri.clone()).map_err(|e| ClientError::BadEndpoint {
                    endpoint: endpoint.clone(),
                    reason: e.to_string(),
                })?;
            #[cfg(not(madsim))]
            if uri.starts_with("https://") {
                parsed
                    .tls_config(tls.clone())
                    .map_err(|e| ClientError::BadEndpoint {
                        endpoint: endpoint.clone(),
                        reason: error_text(&e),
                    })?;
            }
            #[cfg(madsim)]
            let _ = parsed;
            if !replicas.iter().any(|r: &Replica| r.uri == uri) {
                replicas.push(Replica { uri, channel: None });
            }
        }
        let metadata = credential_metadata(&config.credentials)?;
        Ok(Cluster {
            config,
            metadata,
            #[cfg(not(madsim))]
            tls,
            route: Mutex::new(Route {
                replicas,
                current: 0,
            }),
            channel_factory,
            streams: SessionStreams::default(),
        })
    }

    fn route(&self) -> std::sync::MutexGuard<'_, Route> {
        // A panic while holding the lock leaves a consistent Route (every write is one step).
        self.route.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The replica to talk to now and its channel.
    pub(crate) fn current(&self) -> (usize, String, Channel) {
        let mut route = self.route();
        let index = route.current;
        let replica = &mut route.replicas[index];
        let factory = self.channel_factory.as_ref();
        let channel = replica
            .channel
            .get_or_insert_with(|| match factory {
                Some(factory) => factory(&replica.uri),
                None => self.open(&replica.uri),
            })
            .clone();
        (index, replica.uri.clone(), channel)
    }

    /// A lazily connecting channel to `uri` (checked when added), with TLS for `https://`.
    fn open(&self, uri: &str) -> Channel {
        let endpoint = Endpoint::from_shared(uri.to_owned())
            .expect("endpoints are checked when added")
            .connect_timeout(self.config.connect_timeout);
        #[cfg(not(madsim))]
        let endpoint = if uri.starts_with("https://") {
            // The settings were checked in `Cluster::new`; what is left to fail is the host
            // name of a hint, and then the call fails visibly (https without TLS).
            endpoint
                .clone()
                .tls_config(self.tls.clone())
                .unwrap_or(endpoint)
        } else {
            endpoint
        };
        endpoint.connect_lazy()
    }

    /// The endpoint the client currently believes is the leader.
    pub(crate) fn leader_guess(&self) -> String {
        let route = self.route();
        route.replicas[route.current].uri.clone()
    }

    /// Moves to the next replica, unless someone already moved away from `from`.
    pub(crate) fn rotate(&self, from: usize) {
        let mut route = self.route();
        if route.current == from {
            route.current = (from + 1) % route.replicas.len();
        }
    }

    /// Follows a leader hint: to a known replica, or a new one if there is room (else rotate).
    pub(crate) fn follow(&self, from: usize, hint: &str) {
        // A hint without a scheme (`host:port`) is reached the way the configured endpoints are.
        let uri = endpoint_uri_for(hint, self.config.tls.is_some());
        let mut route = self.route();
        if let Some(index) = route.replicas.iter().position(|r| r.uri == uri) {
            route.current = index;
            return;
        }
        let valid = Endpoint::from_shared(uri.clone()).is_ok();
        if valid && route.replicas.len() < ENDPOINTS_MAX {
            route.replicas.push(Replica { uri, channel: None });
            route.current = route.replicas.len() - 1;
        } else if route.current == from {
            route.current = (from + 1) % route.replicas.len();
        }
    }

    /// A request carrying the credentials and the gRPC deadline.
    pub(crate) fn request<T>(&self, message: T, timeout: Duration) -> Request<T> {
        let mut request = Request::new(message);
        for entry in self.metadata.iter() {
            if let tonic::metadata::KeyAndValueRef::Ascii(key, value) = entry {
                request.metadata_mut().insert(key.clone(), value.clone());
            }
        }
        request.set_timeout(timeout);
        request
    }

    /// Sends `message` through `send` to the leader, following hints and retrying per the
    /// module docs. Answers the response and the time its successful attempt was sent.
    pub(crate) async fn call<Req, Resp, F, Fut>(
        &self,
        what: &'static str,
        message: Req,
        attempt_timeout: Duration,
        send: F,
    ) -> Result<(Resp, Instant), ClientError>
    where
        Req: Clone,
        F: Fn(Channel, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        self.call_at(what, message, attempt_timeout, |_, channel, request| {
            send(channel, request)
        })
        .await
    }

    /// [`Cluster::call`] whose `send` is also given the URI of the replica it goes to.
    pub(crate) async fn call_at<Req, Resp, F, Fut>(
        &self,
        what: &'static str,
        message: Req,
        attempt_timeout: Duration,
        send: F,
    ) -> Result<(Resp, Instant), ClientError>
    where
        Req: Clone,
        F: Fn(String, Channel, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let started = Instant::now();
        let give_up_at = started + self.config.retry_budget;
        let mut backoff = self.config.backoff_min;
        let mut attempts = 0u32;
        let mut redirects_in_a_row = 0u32;
        loop {
            attempts += 1;
            let (index, uri, channel) = self.current();
            let sent_at = Instant::now();
            let request = self.request(message.clone(), attempt_timeout);
            let attempt = send(uri.clone(), channel, request);
            let status = match tokio::time::timeout(attempt_timeout, attempt).await {
                Ok(Ok(response)) => return Ok((response.into_inner(), sent_at)),
                Ok(Err(status)) => status,
                Err(_) => Status::deadline_exceeded(format!(
                    "{uri}: no answer within {} ms",
                    attempt_timeout.as_millis()
                )),
            };
            // A transport failure that is a TLS disagreement (no Picket detail): another
            // replica may be set up differently, so rotate; the final error says which.
            let tls_mismatch = match picket_proto::status::error_detail(&status) {
                Some(_) => None,
                None => TlsMismatch::for_call(&status_text(&status), uri.starts_with("https://")),
            };
            let retry = match tls_mismatch {
                Some(_) => Retry::Rotate,
                None => classify(&status),
            };
            match &retry {
                Retry::No => return Err(ClientError::refused(what, &status)),
                Retry::Redirect(hint) => self.follow(index, hint),
                Retry::Rotate => self.rotate(index),
                Retry::Later => {}
            }
            let now = Instant::now();
            if now >= give_up_at {
                return Err(ClientError::Unavailable {
                    what,
                    attempts,
                    elapsed_ms: millis(now - started),
                    last: format!("{uri}: {:?}: {}", status.code(), status_text(&status)),
                    tls_mismatch,
                });
            }
            if matches!(retry, Retry::Redirect(_)) && redirects_in_a_row < REDIRECTS_IN_A_ROW_MAX {
                redirects_in_a_row += 1;
                continue;
            }
            redirects_in_a_row = 0;
            tokio::time::sleep(backoff.min(give_up_at - now)).await;
            backoff = (backoff * 2).min(self.config.backoff_max.max(self.config.backoff_min));
        }
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn credential_metadata(credentials: &Credentials) -> Result<MetadataMap, ClientError> {
    fn value(name: &'static str, text: &str) -> Result<AsciiMetadataValue, ClientError> {
        text.parse().map_err(|_| ClientError::BadCredential {
            name,
            reason: "must be visible ASCII (no control characters or non-ASCII text)".into(),
        })
    }
    let mut metadata = MetadataMap::new();
    if let Some(principal) = &credentials.principal {
        metadata.insert(PRINCIPAL_METADATA, value("principal", principal)?);
    }
    if let Some(roles) = &credentials.roles {
        metadata.insert(ROLES_METADATA, value("roles", roles)?);
    }
    if let Some(token) = &credentials.bearer {
        metadata.insert(
            "authorization",
            value("bearer token", &format!("Bearer {token}"))?,
        );
    }
    Ok(metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_get_a_scheme() {
        assert_eq!(endpoint_uri("127.0.0.1:7401"), "http://127.0.0.1:7401");
        assert_eq!(endpoint_uri("https://a:1/"), "https://a:1");
    }

    #[test]
    fn a_bad_config_is_refused_by_name() {
        let none: [&str; 0] = [];
        assert_eq!(
            Cluster::new(ClientConfig::new(none, "t"), None).err(),
            Some(ClientError::NoEndpoints)
        );
        let mut config = ClientConfig::new(["127.0.0.1:1"], "t");
        config.credentials.principal = Some("al\nice".into());
        assert!(matches!(
            Cluster::new(config, None).err(),
            Some(ClientError::BadCredential {
                name: "principal",
                ..
            })
        ));
        let mut config = ClientConfig::new(["127.0.0.1:1"], "t");
        config.clock_drift_ppm = CLOCK_DRIFT_PPM_MAX + 1;
        assert!(matches!(
            Cluster::new(config, None).err(),
            Some(ClientError::BadConfig(why)) if why.contains("clock_drift_ppm")
        ));
    }

    #[test]
    fn hints_add_at_most_the_bound_and_known_ones_are_reused() {
        let cluster =
            Cluster::new(ClientConfig::new(["127.0.0.1:1", "127.0.0.1:2"], "t"), None).unwrap();
        cluster.follow(0, "127.0.0.1:2");
        assert_eq!(cluster.leader_guess(), "http://127.0.0.1:2");
        for port in 10..40 {
            cluster.follow(0, &format!("127.0.0.1:{port}"));
        }
        assert_eq!(cluster.route().replicas.len(), ENDPOINTS_MAX);
        let current = cluster.route().current;
        cluster.rotate(current);
        assert!(cluster.route().current < ENDPOINTS_MAX);
    }
}
