//! One running replica: storage recovered, the driver task, the peer tasks and the gRPC
//! servers, stopped together by [`RunningNode::shutdown`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use picket_core::node::{Node, NodeConfig};
use picket_core::paxos::{self, MemberAddress, NodeId};
use picket_proto::proto::admin_server::AdminServer;
use picket_proto::proto::lock_server::LockServer;
use picket_proto::API_MESSAGE_BYTES_MAX;
use picket_storage::{Disk, LogConfig, StorageConfig};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use crate::error::StartError;
use crate::shutdown::stopped;

use crate::api::admin::AdminService;
use crate::api::service::{Api, LockService, ServiceLimits};
use crate::auth::Authenticator;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::node::clock::Clock;
use crate::node::driver::{
    Driver, DriverError, DriverHandle, DriverLimits, DriverParts, NodeMessage, Request,
};
use crate::node::durable::{DurableStore, EmptyDataDir, StorageCondition};
use crate::node::peer::{self, MemberSet, PeerCounters, PeerLink, PeerTarget, PeerTiming};

/// Messages queued for one peer at most (beyond: dropped and counted).
const PEER_QUEUE_MAX: usize = 8_192;

/// How long shutdown waits for each server task before aborting it.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A started replica.
#[derive(Debug)]
pub struct RunningNode {
    pub id: NodeId,
    pub handle: DriverHandle,
    pub client_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    /// The HTTP listener (`/metrics`, inspection, `/healthz`), if `http_listen` is set.
    pub http_addr: Option<SocketAddr>,
    pub metrics: Arc<Metrics>,
    pub boot: u64,
    pub peer_counters: Arc<PeerCounters>,
    shutdown: watch::Sender<bool>,
    driver: JoinHandle<Result<(), DriverError>>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningNode {
    /// Stops the servers, the peer tasks and the driver, and waits for them. Everything
    /// acknowledged is already durable (the driver acknowledges only after fsync).
    pub async fn shutdown(self) -> Result<(), DriverError> {
        let _ = self.shutdown.send(true);
        for mut task in self.tasks {
            if tokio::time::timeout(SHUTDOWN_WAIT, &mut task)
                .await
                .is_err()
            {
                tracing::warn!("a server task did not stop in time: aborted");
                task.abort();
            }
        }
        match self.driver.await {
            Ok(result) => result,
            Err(join) => {
                tracing::error!(%join, "the driver task ended abnormally");
                // A panic is a broken invariant: the process must not exit as if stopped.
                if join.is_panic() {
                    Err(DriverError::Panicked(join.to_string()))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Resolves when the driver stops on its own (a storage failure); the caller then stops
    /// the process.
    pub fn driver_finished(&self) -> bool {
        self.driver.is_finished()
    }

    /// The node's status, through its driver.
    pub async fn status(&self) -> Option<crate::node::driver::NodeStatus> {
        self.handle
            .ask(|reply| Request::Status { reply })
            .await
            .ok()
    }
}

fn listen_addr(
    explicit: Option<SocketAddr>,
    address: &str,
    field: &'static str,
) -> Result<SocketAddr, StartError> {
    if let Some(addr) = explicit {
        return Ok(addr);
    }
    address.parse().map_err(|_| StartError::Address {
        field,
        rule: format!("required: `{address}` is not an IP:port to listen on"),
    })
}

/// Recovers the replica from `config.data_dir` on `disk` and starts it. `empty` says what a data
/// directory without any state of the replica means (`picketd run` refuses it unless told).
pub async fn start<D: Disk + Clone + 'static, C: Clock>(
    config: &Config,
    disk: D,
    clock: Arc<C>,
    empty: EmptyDataDir,
) -> Result<RunningNode, StartError> {
    let me = config.me().clone();
    let id = NodeId(config.node_id);
    let client_addr = listen_addr(config.client_listen, &me.client_address, "client_listen")?;
    let peer_addr = listen_addr(config.peer_listen, &me.peer_address, "peer_listen")?;
    let storage_config = StorageConfig {
        log: LogConfig {
            preallocate_bytes: config.storage.preallocate_bytes,
            faults: config.faults,
            write_mode: config.storage.write_mode.into(),
            ..LogConfig::default()
        },
        ..StorageConfig::default()
    };
    let (mut store, mut recovered) =
        DurableStore::open_with(disk, &config.data_dir, storage_config, empty).map_err(
            |source| StartError::Store {
                dir: config.data_dir.display().to_string(),
                source,
            },
        )?;
    match (recovered.was_empty, empty) {
        (true, EmptyDataDir::Init) => tracing::info!(node = %id, dir = %config.data_dir.display(),
            "empty data directory: a new replica starts with empty state"),
        (false, EmptyDataDir::Init | EmptyDataDir::Rejoin) => tracing::info!(node = %id,
            boot = recovered.boot, "the data directory holds this replica's state: --init and \
             --rejoin apply only to an empty one and are ignored"),
        _ => {}
    }
    if let Some(reason) = &recovered.lost_reason {
        tracing::error!(node = %id, %reason, new_storage = %store.root().display(),
            "DURABLE STATE LOST: this replica starts amnesiac; it will not vote or accept until \
             it has re-learned its state from the other replicas (this needs all of them up)");
    }
    if recovered.was_empty && empty == EmptyDataDir::Init && !config.join {
        // The first start of a new cluster's replica: the cluster's first membership, with the
        // addresses of its members, goes into the data directory. From then on the membership
        // (and whom this replica talks to) comes from there and the log, not from this file.
        // A new cluster's log starts at this release's cluster version (its replicas are all
        // of this release: docs/upgrades.md).
        let first = picket_core::paxos::Membership {
            cluster_version: picket_core::locks::CLUSTER_VERSION,
            ..config.membership_first()
        };
        tracing::info!(node = %id, membership = %first,
            cluster_version = first.cluster_version,
            "recorded the cluster's first membership, with its members' addresses");
        store
            .record_membership_first(first, &mut recovered.durable)
            .map_err(|source| StartError::Store {
                dir: config.data_dir.display().to_string(),
                source,
            })?;
    }
    let storage_condition = StorageCondition::after(&recovered, store.root());
    tracing::info!(node = %id, boot = recovered.boot, promised = %recovered.durable.promised,
        outcome = recovered.outcome.name(), recovery_ms = storage_condition.recovery_ms,
        accepted = recovered.durable.accepted.len(),
        snapshot_slot = ?recovered.durable.snapshot.as_ref().map(|(s, _)| s.0),
        lost = recovered.durable.lost, "recovered");
    // A joining replica's core lists the members it may hear from first, itself aside.
    let first_members = config
        .members
        .iter()
        .map(|m| NodeId(m.id))
        .filter(|m| !config.join || *m != id)
        .collect();
    let mut replica = paxos::Config::new(id, first_members, seed(config.node_id, recovered.boot));
    replica.joining = config.join;
    replica.election_timeout_ms_min = config.timing.election_timeout_ms_min;
    replica.election_timeout_ms_max = config.timing.election_timeout_ms_max;
    replica.heartbeat_ms = config.timing.heartbeat_ms;
    replica.read_lease_ms = config.timing.read_lease_ms();
    replica.window_slots = config.limits.window_slots;
    replica.batch_commands_max = config.limits.batch_commands_max;
    replica.pending_max = config.limits.proposals_pending_max;
    replica.faults = config.faults;
    let node = Node::new(
        NodeConfig {
            replica,
            locks: config.lock_config(),
            boot: recovered.boot,
            compact_every_slots: config.storage.snapshot_every_slots,
            waits_pending_max: config.limits.waits_max,
        },
        recovered.durable,
        // The first election timeout runs from now: a replica that has just started first
        // listens for a leader, and the replicas of a new cluster do not all campaign at once.
        clock.now(),
    )?;
    let scheme = config.scheme();
    let endpoints: BTreeMap<NodeId, String> = config
        .members
        .iter()
        .map(|m| (NodeId(m.id), format!("{scheme}://{}", m.client_address)))
        .collect();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let metrics = Arc::new(Metrics::with_external_url(config.external_url()));
    metrics.set_recovery(recovered.outcome, recovered.duration, recovered.boot);
    let peer_counters = Arc::new(PeerCounters::default());
    let mut tasks = Vec::new();
    let peers_out = BTreeMap::new();
    #[cfg(not(madsim))]
    let tls = crate::tls::TlsFiles::load(config.tls.as_ref())?;
    #[cfg(not(madsim))]
    let peer_tls = crate::tls::PeerTls::load(config.tls.as_ref())?;
    #[cfg(not(madsim))]
    let console_identity = crate::tls::console_client_identity(config)?;
    #[cfg(not(madsim))]
    if config.console_client_cert_missing() && config.http_listen.is_some() {
        tracing::warn!(
            "the web console cannot call this cluster: [tls] require_client_cert is on and \
             [console] client_cert / client_key are not set, so the client ports refuse its \
             TLS handshake; its pages say so (docs/console.md)"
        );
    }
    // Bound before anything is spawned, so that a port in use fails the start.
    let peer_listener = peer::bind(peer_addr)
        .await
        .map_err(|source| StartError::Listen {
            addr: peer_addr,
            what: "peer",
            source,
        })?;
    let peer_link = PeerLink {
        cluster_id: config.cluster_id.as_str().into(),
        me: id,
        members: MemberSet::new(config.members.iter().map(|m| NodeId(m.id))),
    };
    // Whom to dial is the driver's to say (`sync_members`): the members of the membership in
    // the data directory and the log, and while that is unknown, the contacts of this file.
    let contacts: BTreeMap<NodeId, MemberAddress> = config
        .members
        .iter()
        .filter(|m| m.id != config.node_id)
        .map(|m| (NodeId(m.id), config.member_address(m)))
        .collect();
    let driver = Driver::new(DriverParts {
        node,
        store,
        persist: config.storage.persist,
        clock,
        limits: DriverLimits {
            requests_queued_max: config.limits.requests_queued_max,
            ..DriverLimits::default()
        },
        boot: recovered.boot,
        cluster_id: config.cluster_id.clone(),
        endpoints,
        http_endpoints: config.http_endpoints(),
        peers_out,
        dialer: Some(Box::new(Dialer {
            link: peer_link.clone(),
            counters: peer_counters.clone(),
            shutdown: shutdown_rx.clone(),
            scheme,
            http_scheme: config.http_scheme(),
            contacts,
            #[cfg(not(madsim))]
            tls: peer_tls.clone(),
        })),
        member_set: Some(peer_link.members.clone()),
        metrics: metrics.clone(),
    })
    .with_storage(storage_condition);
    let handle = driver.handle();
    let driver_task = tokio::spawn(driver.run(shutdown_rx.clone()));
    let auth = authenticator(config).await?;
    auth.warn_if_open();
    let api = Api::new(
        handle.clone(),
        auth.clone(),
        ServiceLimits {
            watch_streams_max: config.limits.watch_streams_max,
            keepalive_streams_max: config.limits.keepalive_streams_max,
            session_stream_requests_max: config.limits.session_stream_requests_max,
        },
        shutdown_rx.clone(),
    );
    metrics.add_counters(peer_counters.clone());
    metrics.add_counters(Arc::new(api.log_feed.clone()));
    let lock = LockServer::new(LockService(api.clone()))
        .max_decoding_message_size(API_MESSAGE_BYTES_MAX)
        .max_encoding_message_size(API_MESSAGE_BYTES_MAX);
    #[cfg(not(madsim))]
    let told = api.told.clone();
    #[cfg(not(madsim))]
    if let Some(section) = config.backup.clone() {
        tasks.push(tokio::spawn(crate::backup::run_schedule(
            api.clone(),
            section,
            config.node_id,
            metrics.clone(),
            shutdown_rx.clone(),
        )));
    }
    let admin = AdminServer::new(AdminService(api))
        .max_decoding_message_size(API_MESSAGE_BYTES_MAX)
        .max_encoding_message_size(API_MESSAGE_BYTES_MAX);
    // Request counts and latencies by method and code (real sockets; the simulator's tonic
    // shim takes its services as generated).
    #[cfg(not(madsim))]
    let (lock, admin) = (
        crate::api::observe::Observed::new(lock, metrics.clone()),
        crate::api::observe::Observed::new(admin, metrics.clone()),
    );
    let client_builder = tonic::transport::Server::builder();
    #[cfg(not(madsim))]
    let client_builder = tls.client_server(client_builder)?;
    // Every refusal carries the standard-form detail, also those tonic answers by itself.
    #[cfg(not(madsim))]
    let mut client_builder = client_builder.layer(crate::api::error_detail::ErrorDetailLayer);
    #[cfg(madsim)]
    let mut client_builder = client_builder;
    let client_router = client_builder.add_service(lock).add_service(admin);
    tasks.push(serve(client_router, client_addr, "client", shutdown_rx.clone()).await?);
    #[cfg(not(madsim))]
    let http_addr = match config.http_listen {
        Some(addr) => {
            let https = crate::tls::http_server_config(config.tls.as_ref())?;
            let forward_ca_pem =
                match config.tls.as_ref().filter(|t| t.http) {
                    Some(tls) => Some(std::fs::read(&tls.ca).map_err(|e| {
                        StartError::Tls(format!("tls.ca: {}: {e}", tls.ca.display()))
                    })?),
                    None => None,
                };
            let cluster = crate::api::http::HttpCluster {
                node_id: config.node_id,
                endpoints: handle.http_endpoints(),
                forward_ca_pem,
            };
            if let Err(e) = cluster.forward_client() {
                return Err(StartError::Tls(format!(
                    "tls.ca: cannot trust it for forwarding inspection to the leader: {e}"
                )));
            }
            let require_client_cert = config.tls.as_ref().is_some_and(|t| t.require_client_cert);
            let console = crate::console::ConsoleConfig {
                endpoints: config
                    .members
                    .iter()
                    .map(|m| m.client_address.clone())
                    .collect(),
                tls: match config.tls.as_ref() {
                    Some(tls) => Some(picket_client::TlsConfig {
                        ca_pem: Some(std::fs::read(&tls.ca).map_err(|e| {
                            StartError::Tls(format!("tls.ca: {}: {e}", tls.ca.display()))
                        })?),
                        ..picket_client::TlsConfig::default()
                    }),
                    None => None,
                },
                client_identity: console_identity,
                client_cert_missing: config.console_client_cert_missing(),
                // With client certificates required, a verified certificate, never dev
                // metadata, is the caller: the dev sign-in could not act as the person picked.
                dev_sign_in: auth.is_insecure() && !require_client_cert,
                dev_sign_in_off: (auth.is_insecure() && require_client_cert)
                    .then(|| crate::console::DEV_SIGN_IN_OFF_MTLS.to_owned()),
                secure_cookie: https.is_some(),
                http_endpoints: cluster.endpoints.clone(),
                oidc: console_oidc(config, &auth)?,
                alertmanager_url: config.console.alertmanager_url.clone(),
            };
            let source = Arc::new(crate::api::inspect::DriverInspect {
                driver: handle.clone(),
            });
            let health_client = cluster
                .forward_client()
                .map_err(|e| StartError::Tls(format!("the console's health reads: {e}")))?;
            let told = crate::api::http::sessions_told::router(told, auth.clone(), config.node_id);
            let router = crate::api::http::replica_router(source, metrics.clone(), auth, cluster)
                .merge(told)
                .merge(crate::console::router(console, health_client).map_err(StartError::Auth)?);
            let (task, bound) = serve_http(addr, https, router, shutdown_rx.clone()).await?;
            tasks.push(task);
            Some(bound)
        }
        None => None,
    };
    #[cfg(madsim)]
    let http_addr = None;
    let peer_addr = peer_listener.addr;
    let inbound = peer::Inbound {
        link: peer_link,
        timing: PeerTiming::default(),
        driver: handle.clone(),
        counters: peer_counters.clone(),
        faults: config.faults,
        #[cfg(not(madsim))]
        tls: peer_tls.as_ref().map(crate::tls::PeerTls::server),
    };
    tasks.push(tokio::spawn(peer::run_inbound(
        peer_listener,
        inbound,
        shutdown_rx,
    )));
    tracing::info!(node = %id, client = %client_addr, peer = %peer_addr, http = ?http_addr,
        "serving");
    Ok(RunningNode {
        id,
        handle,
        client_addr,
        peer_addr,
        http_addr,
        metrics,
        boot: recovered.boot,
        peer_counters,
        shutdown: shutdown_tx,
        driver: driver_task,
        tasks,
    })
}

/// The console's OpenID Connect sign-in, with `[oidc.console]`: its client secret read now and
/// its redirect URL built on `redirect_url_base` (default: the cluster's `external_url`).
#[cfg(not(madsim))]
fn console_oidc(
    config: &Config,
    auth: &Authenticator,
) -> Result<Option<crate::console::oidc::ConsoleOidc>, StartError> {
    let Some(section) = config.oidc.as_ref().and_then(|o| o.console.as_ref()) else {
        return Ok(None);
    };
    let secret = section.secret().map_err(StartError::Auth)?;
    let base = section
        .redirect_url_base
        .as_deref()
        .map(|b| b.trim_end_matches('/').to_owned())
        .or_else(|| config.external_url())
        .ok_or_else(|| {
            StartError::Auth(
                "oidc.console.redirect_url_base: required (no external_url or HTTP address to build the redirect URL on)"
                    .to_owned(),
            )
        })?;
    Ok(Some(crate::console::oidc::ConsoleOidc {
        section: section.clone(),
        secret,
        redirect_uri: format!("{base}{}", crate::console::oidc::CALLBACK_PATH),
        auth: auth.clone(),
    }))
}

/// The authenticator `config` asks for: OIDC (keys loaded now, so a bad key file or an
/// unreachable issuer fails the start), insecure dev metadata, or none (admin changes refused);
/// with `[tls] require_client_cert`, verified client certificates are credentials too.
async fn authenticator(config: &Config) -> Result<Authenticator, StartError> {
    let auth = mode_authenticator(config).await?;
    Ok(match config.certificate_auth().map_err(StartError::Auth)? {
        Some(certs) => auth.with_certificates(certs),
        None => auth,
    })
}

async fn mode_authenticator(config: &Config) -> Result<Authenticator, StartError> {
    match (&config.oidc, config.insecure_dev_auth) {
        (Some(_), true) => Err(StartError::Auth(
            "[oidc] and insecure_dev_auth are exclusive: choose one".to_owned(),
        )),
        (Some(section), false) => {
            let auth = section.authenticator().map_err(StartError::Auth)?;
            if let Some(verifier) = auth.verifier() {
                verifier
                    .keys()
                    .refresh()
                    .await
                    .map_err(|e| StartError::Auth(format!("loading the issuer's keys: {e}")))?;
            }
            Ok(auth)
        }
        (None, true) => Ok(Authenticator::insecure_dev()),
        (None, false) => Ok(Authenticator::disabled()),
    }
}

/// The election-jitter seed: differs per node and per start.
/// The peer transport's side of membership changes: an outbound connection to each member the
/// log adds, the same way as to the configured ones.
struct Dialer {
    link: PeerLink,
    counters: Arc<PeerCounters>,
    shutdown: watch::Receiver<bool>,
    scheme: &'static str,
    /// `http` or `https`: how the members' HTTP ports serve.
    http_scheme: &'static str,
    /// The config file's members, this replica aside.
    contacts: BTreeMap<NodeId, MemberAddress>,
    #[cfg(not(madsim))]
    tls: Option<crate::tls::PeerTls>,
}

impl crate::node::driver::PeerDialer for Dialer {
    fn dial(&mut self, address: &MemberAddress) -> mpsc::Sender<NodeMessage> {
        let (tx, rx) = mpsc::channel(PEER_QUEUE_MAX);
        let target = PeerTarget {
            to: address.id,
            address: address.peer.clone(),
            #[cfg(not(madsim))]
            tls: match &self.tls {
                Some(tls) => match tls.client(&address.peer) {
                    Ok(tls) => Some(tls),
                    Err(error) => {
                        // Its queue's receiver is dropped: messages to it count as dropped.
                        tracing::error!(peer = %address.id, address = %address.peer, %error,
                            "cannot reach a member the log added over TLS");
                        return tx;
                    }
                },
                None => None,
            },
        };
        tokio::spawn(peer::run_outbound(
            self.link.clone(),
            target,
            PeerTiming::default(),
            rx,
            self.counters.clone(),
            self.shutdown.clone(),
        ));
        tx
    }

    fn endpoint(&self, address: &MemberAddress) -> String {
        format!("{}://{}", self.scheme, address.client)
    }

    fn http_endpoint(&self, address: &MemberAddress) -> Option<String> {
        (!address.http.is_empty()).then(|| format!("{}://{}", self.http_scheme, address.http))
    }

    fn contacts(&self) -> &BTreeMap<NodeId, MemberAddress> {
        &self.contacts
    }
}

fn seed(node_id: u64, boot: u64) -> u64 {
    node_id.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17)
        ^ boot.wrapping_mul(0xD6E8_FEB8_6659_FD93)
}

#[cfg(not(madsim))]
async fn serve(
    router: crate::api::error_detail::DetailedRouter,
    addr: SocketAddr,
    what: &'static str,
    shutdown: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, StartError> {
    // Bind first, so a port in use is an error of `start`, not a log line later.
    let incoming = tonic::transport::server::TcpIncoming::bind(addr)
        .map_err(|source| StartError::Listen { addr, what, source })?
        .with_nodelay(Some(true));
    Ok(tokio::spawn(async move {
        if let Err(error) = router
            .serve_with_incoming_shutdown(incoming, async move { stopped(&mut { shutdown }).await })
            .await
        {
            tracing::error!(%addr, what, %error, "server stopped");
        }
    }))
}

/// Binds the HTTP listener and serves `router` on it (`/metrics`, inspection through the
/// driver, `/healthz`, the console) until shutdown.
#[cfg(not(madsim))]
async fn serve_http(
    addr: SocketAddr,
    https: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    router: axum::Router,
    shutdown: watch::Receiver<bool>,
) -> Result<(JoinHandle<()>, SocketAddr), StartError> {
    let what = "http";
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen { addr, what, source })?;
    let bound =
        listener
            .local_addr()
            .map_err(|source| StartError::Listen { addr, what, source })?;
    let task = tokio::spawn(async move {
        let stop = async move { stopped(&mut { shutdown }).await };
        let served = match https {
            Some(config) => crate::api::http::serve_tls(listener, config, router, stop).await,
            None => crate::api::http::serve(listener, router, stop).await,
        };
        if let Err(error) = served {
            tracing::error!(%addr, what, %error, "server stopped");
        }
    });
    Ok((task, bound))
}

#[cfg(madsim)]
async fn serve(
    router: tonic::transport::server::Router,
    addr: SocketAddr,
    what: &'static str,
    shutdown: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, StartError> {
    Ok(tokio::spawn(async move {
        if let Err(error) = router
            .serve_with_shutdown(addr, async move { stopped(&mut { shutdown }).await })
            .await
        {
            tracing::error!(%addr, what, %error, "server stopped");
        }
    }))
}
