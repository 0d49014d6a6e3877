//! The **sim-local client** (until the client library lands): opens a session, keeps it alive
//! from a background task, takes locks, writes to the fenced resource with the token while it
//! believes it holds the lock, releases. It gives the lock up on its own clock at
//! `last acknowledged keepalive send time + ttl·(1 − 2ρ)` (ρ the drift bound), before any server
//! clock within the bound can expire the session.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use madsim::net::Endpoint;
use madsim::rand::{thread_rng, Rng};
use picket_core::locks::{
    AcquireReply, Actor, Command, Identity, Outcome, Reply, RequestId, Role, SessionId, Token,
};
use picket_core::node::KeepAliveError;
use picket_core::paxos::NodeId;

use super::shared::{lock, Break, SharedRef};
use super::wire::{call, replica_addr, resource_ip, Request, Response, RESOURCE_PORT};
use crate::clock::DriftClock;
use crate::history::{AckedOp, KeepAliveAcked};
use crate::proto::resource_client::ResourceClient;
use crate::proto::WriteRequest;

pub const NAMESPACE: &str = "sim";
pub const KEYS: usize = 3;
pub use super::wire::CLIENT_PORT as CLIENT_PORT_USED;

#[derive(Clone)]
pub struct ClientCtx {
    pub id: u64,
    pub addr: SocketAddr,
    pub replicas: Vec<NodeId>,
    pub clock: DriftClock,
    pub drift_bound_ppm: u64,
    pub ttl_ms: u64,
    pub shared: SharedRef,
}

/// The connection to the cluster: an endpoint, request ids, and the replica believed leader.
struct Conn {
    ctx: ClientCtx,
    ep: Endpoint,
    ids: AtomicU64,
    target: AtomicUsize,
}

#[derive(Debug, Default)]
struct Lease {
    /// On the client's clock: the lock is lost from here on.
    until_ms: u64,
    lost: bool,
}

impl Conn {
    fn true_ms(&self) -> u64 {
        lock(&self.ctx.shared).now_ms()
    }

    fn client_ms(&self) -> u64 {
        self.ctx.clock.at(self.true_ms()).as_millis()
    }

    /// How long after sending an acknowledged keepalive the client may still claim its locks.
    fn claim_ms(&self, ttl_ms: u64) -> u64 {
        ttl_ms * (1_000_000 - 2 * self.ctx.drift_bound_ppm) / 1_000_000
    }

    fn follow(&self, hint: Option<NodeId>) {
        let next = match hint.and_then(|h| self.ctx.replicas.iter().position(|r| *r == h)) {
            Some(index) => index,
            None => (self.target.load(Ordering::Relaxed) + 1) % self.ctx.replicas.len(),
        };
        self.target.store(next, Ordering::Relaxed);
    }

    fn target_addr(&self) -> SocketAddr {
        replica_addr(self.ctx.replicas[self.target.load(Ordering::Relaxed)])
    }

    /// Proposes `command` at the leader, following hints and retrying (idempotent for requests
    /// carrying a request id). `None`: no answer after the attempts.
    async fn propose(&self, command: Command, attempts: usize) -> Option<Outcome> {
        for _ in 0..attempts {
            let request = Request::Propose(Box::new(command.clone()));
            match call(&self.ep, &self.ids, self.target_addr(), request, 1_000).await {
                Some(Response::Outcome(outcome)) => return Some(outcome),
                Some(Response::NotLeader(hint)) => self.follow(hint),
                Some(Response::KeepAlive(_)) | None => self.follow(None),
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        None
    }
}

/// A client node's `init` future: sessions one after the other until the harness stops the
/// workload; then it abandons its session (as a crashed client would) and idles.
pub async fn client_main(ctx: ClientCtx) {
    let ep = Endpoint::bind(ctx.addr)
        .await
        .expect("bind the client's address");
    let conn = Arc::new(Conn {
        target: AtomicUsize::new(ctx.id as usize % ctx.replicas.len()),
        ctx,
        ep,
        ids: AtomicU64::new(1),
    });
    let mut resource = None;
    while !lock(&conn.ctx.shared).clients_stop {
        let Some((session, ttl_ms, lease)) = open_session(&conn).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let keeper = tokio::spawn(keep_alive(conn.clone(), session, ttl_ms, lease.clone()));
        run_session(&conn, session, &lease, &mut resource).await;
        keeper.abort();
    }
    std::future::pending::<()>().await;
}

async fn open_session(conn: &Conn) -> Option<(SessionId, u64, Arc<Mutex<Lease>>)> {
    let sent_ms = conn.client_ms();
    let command = Command::CreateSession {
        ttl_ms: Some(conn.ctx.ttl_ms),
        identity: Identity {
            name: format!("client-{}", conn.ctx.id),
            host: conn.ctx.addr.ip().to_string(),
            pid: 1,
            principal: "sim".to_string(),
        },
    };
    match conn.propose(command, 10).await? {
        Ok(Reply::SessionCreated { session, ttl_ms }) => {
            let lease = Lease {
                until_ms: sent_ms + conn.claim_ms(ttl_ms),
                lost: false,
            };
            lock(&conn.ctx.shared).trace(&format!("client {} session {}", conn.ctx.id, session.0));
            Some((session, ttl_ms, Arc::new(Mutex::new(lease))))
        }
        _ => None,
    }
}

/// Sends a keepalive every quarter TTL; extends the lease on an acknowledgement, marks the lease
/// lost when the session is gone.
async fn keep_alive(conn: Arc<Conn>, session: SessionId, ttl_ms: u64, lease: Arc<Mutex<Lease>>) {
    loop {
        let sent_true = conn.true_ms();
        let sent_client = conn.client_ms();
        let answer = call(
            &conn.ep,
            &conn.ids,
            conn.target_addr(),
            Request::KeepAlive(session),
            300,
        )
        .await;
        match answer {
            Some(Response::KeepAlive(Ok(ttl))) => {
                let mut l = lease.lock().unwrap_or_else(|e| e.into_inner());
                l.until_ms = l.until_ms.max(sent_client + conn.claim_ms(ttl));
                drop(l);
                let mut s = lock(&conn.ctx.shared);
                s.history.keepalives.push(KeepAliveAcked {
                    session: session.0,
                    sent_at_ms: sent_true,
                    ttl_ms: ttl,
                });
            }
            Some(Response::KeepAlive(Err(KeepAliveError::NotLeader { leader_hint }))) => {
                conn.follow(leader_hint);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            Some(Response::KeepAlive(Err(
                KeepAliveError::UnknownSession { .. } | KeepAliveError::Expiring { .. },
            ))) => {
                lease.lock().unwrap_or_else(|e| e.into_inner()).lost = true;
                lock(&conn.ctx.shared).trace(&format!(
                    "client {} lost session {}",
                    conn.ctx.id, session.0
                ));
                return;
            }
            Some(Response::KeepAlive(Err(KeepAliveError::NotReady))) => {}
            _ => conn.follow(None),
        }
        let wait_true = conn.ctx.clock.true_ms_for(ttl_ms / 4);
        tokio::time::sleep(Duration::from_millis(
            wait_true.saturating_sub(conn.true_ms() - sent_true).max(20),
        ))
        .await;
    }
}

fn holds(conn: &Conn, lease: &Mutex<Lease>) -> bool {
    let l = lease.lock().unwrap_or_else(|e| e.into_inner());
    !l.lost && conn.client_ms() < l.until_ms
}

async fn run_session(
    conn: &Arc<Conn>,
    session: SessionId,
    lease: &Arc<Mutex<Lease>>,
    resource: &mut Option<ResourceConn>,
) {
    let mut request = 0u64;
    let mut failures = 0;
    while !lock(&conn.ctx.shared).clients_stop && failures < 5 {
        if lease.lock().unwrap_or_else(|e| e.into_inner()).lost {
            return;
        }
        let key = format!("k{}", thread_rng().gen_range(0..KEYS));
        request += 1;
        let command = Command::Acquire {
            session,
            request: RequestId(request),
            namespace: NAMESPACE.to_string(),
            key: key.clone(),
            wait: false,
            wait_timeout_ms: None,
        };
        match conn.propose(command, 10).await {
            Some(Ok(Reply::Acquire(AcquireReply::Granted { token }))) => {
                failures = 0;
                let gate_key = format!("{NAMESPACE}/{key}");
                {
                    let mut s = lock(&conn.ctx.shared);
                    s.trace(&format!(
                        "client {} granted {gate_key} token {}",
                        conn.ctx.id, token.0
                    ));
                    s.history.acked.push(AckedOp::Grant {
                        key: gate_key.clone(),
                        token: token.0,
                        session: session.0,
                    });
                }
                let writes = thread_rng().gen_range(1..=4);
                for _ in 0..writes {
                    if !holds(conn, lease) {
                        break;
                    }
                    write(conn, resource, &gate_key, token.0).await;
                    let pause = thread_rng().gen_range(30..150);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                request += 1;
                let release = Command::Release {
                    session,
                    request: RequestId(request),
                    namespace: NAMESPACE.to_string(),
                    key: key.clone(),
                    token,
                };
                if let Some(Ok(Reply::Released {
                    token: released, ..
                })) = conn.propose(release, 10).await
                {
                    let mut s = lock(&conn.ctx.shared);
                    s.history.acked.push(AckedOp::Release {
                        key: gate_key.clone(),
                        token: released.0,
                    });
                }
                if lock(&conn.ctx.shared).broken == Some(Break::GateBypass) {
                    // Ignores the lost-lock signal: one more write with the old token, later.
                    let conn = conn.clone();
                    tokio::spawn(async move {
                        let later = thread_rng().gen_range(200..800);
                        tokio::time::sleep(Duration::from_millis(later)).await;
                        let mut resource = None;
                        write(&conn, &mut resource, &gate_key, token.0).await;
                    });
                }
            }
            Some(Ok(Reply::Acquire(_))) => {
                let pause = thread_rng().gen_range(50..200);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            Some(_) | None => {
                failures += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// A connection to the fenced resource (opened on first use, dropped after a failure).
pub type ResourceConn = ResourceClient<tonic::transport::Channel>;

async fn write(conn: &Conn, resource: &mut Option<ResourceConn>, key: &str, token: u64) {
    write_as(conn.ctx.id, resource, key, token).await;
}

/// Writes to the fenced resource with `token` as client `client_id`.
pub async fn write_as(client_id: u64, resource: &mut Option<ResourceConn>, key: &str, token: u64) {
    if resource.is_none() {
        let url = format!("http://{}:{RESOURCE_PORT}", resource_ip());
        *resource = ResourceClient::connect(url).await.ok();
    }
    let Some(client) = resource.as_mut() else {
        return;
    };
    let request = WriteRequest {
        key: key.to_string(),
        token,
        client_id,
        payload: Vec::new(),
    };
    let sent = tokio::time::timeout(Duration::from_millis(500), client.write(request)).await;
    if !matches!(sent, Ok(Ok(_))) {
        *resource = None;
    }
}

/// Force-releases in the sim-local workload (the server driver's operator does the same through
/// the admin API): every 1.5-4 s, for the newest acknowledged grant not yet released, `alice`
/// (on-call) requests a force-release of that token and `bob` (on-call) approves it. The holder is
/// not told; a request for a token no longer held is refused and changes nothing.
pub async fn operator_main(ctx: ClientCtx) {
    let ep = Endpoint::bind(ctx.addr)
        .await
        .expect("bind the operator's address");
    let conn = Conn {
        target: AtomicUsize::new(0),
        ctx,
        ep,
        ids: AtomicU64::new(1),
    };
    while !lock(&conn.ctx.shared).clients_stop {
        let pause = thread_rng().gen_range(1_500..4_000);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let Some((key, token)) = newest_unreleased_grant(&conn.ctx.shared) else {
            continue;
        };
        if let Some(released) = force_release(&conn, &key, token).await {
            let mut s = lock(&conn.ctx.shared);
            s.count("force-release");
            s.trace(&format!("force-released {key} token {released}"));
            s.history.acked.push(AckedOp::ForceRelease {
                key,
                token: released,
            });
        }
    }
    std::future::pending::<()>().await;
}

/// The newest acknowledged grant (`namespace/key`, token) with no acknowledged release or
/// force-release of its token.
fn newest_unreleased_grant(shared: &SharedRef) -> Option<(String, u64)> {
    let s = lock(shared);
    let ended = |key: &str, token: u64| {
        s.history.acked.iter().any(|op| match op {
            AckedOp::Release { key: k, token: t } | AckedOp::ForceRelease { key: k, token: t } => {
                k == key && *t == token
            }
            AckedOp::Grant { .. } => false,
        })
    };
    s.history.acked.iter().rev().find_map(|op| match op {
        AckedOp::Grant { key, token, .. } if !ended(key, *token) => Some((key.clone(), *token)),
        _ => None,
    })
}

async fn force_release(conn: &Conn, key: &str, token: u64) -> Option<u64> {
    let (namespace, key) = key.split_once('/')?;
    let request = Command::RequestForceRelease {
        actor: Actor::new("alice", &[Role::OnCall]),
        namespace: namespace.to_string(),
        key: key.to_string(),
        expected_token: Token(token),
        reason: "simulated incident: holder stuck".to_string(),
        revoke_session: false,
    };
    let Ok(Reply::ForceReleaseRequested { id, fenced, .. }) = conn.propose(request, 5).await?
    else {
        return None;
    };
    let approve = Command::ApproveForceRelease {
        actor: Actor::new("bob", &[Role::OnCall]),
        id,
        acknowledged_fenced: fenced,
    };
    match conn.propose(approve, 5).await? {
        Ok(Reply::ForceReleaseApproved { released_token, .. }) => Some(released_token.0),
        _ => None,
    }
}

/// The liveness probe: a fresh session acquires a fresh key; returns the token once granted.
pub async fn probe(ctx: ClientCtx, key: String) -> u64 {
    let ep = Endpoint::bind(ctx.addr)
        .await
        .expect("bind the probe's address");
    let conn = Conn {
        target: AtomicUsize::new(0),
        ctx,
        ep,
        ids: AtomicU64::new(1),
    };
    loop {
        if let Some((session, _, _)) = open_session(&conn).await {
            for request in 1..=20 {
                let command = Command::Acquire {
                    session,
                    request: RequestId(request),
                    namespace: NAMESPACE.to_string(),
                    key: key.clone(),
                    wait: false,
                    wait_timeout_ms: None,
                };
                if let Some(Ok(Reply::Acquire(AcquireReply::Granted { token }))) =
                    conn.propose(command, 10).await
                {
                    return token.0;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
