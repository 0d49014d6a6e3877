//! The nodes of a run: replicas running the **real** node — `picket_server::server::start` (the
//! driver, its durable store, the gRPC `Lock`/`Admin` services, the framed peer transport on
//! madsim TCP) on the harness's `SimDisk` and a drifting clock — and clients built on the
//! **real client library** (`picket_client`). Observation goes through the public API and
//! two small hooks of the real code:
//!
//! - a watcher per replica follows that replica's lock log (checkers 1, 2, 4 and 7), the driver's
//!   status gives the applied revision and the leader;
//! - the driver's digest feed (`DriverHandle::subscribe_digests`: the real state's
//!   `LockStateMachine::digest` after every apply) gives each replica's digest per revision
//!   (checker 3); after each, a stale `Sessions` read through the driver shows the sessions
//!   that disappeared (checker 5);
//! - the client library's `Session::keepalive_acks` gives every acknowledged renewal with its
//!   send time (checker 5).
//!
//! The clients' workload (what they ask for and what they record) is in [`super::workload`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use madsim::rand::{thread_rng, Rng};
use picket_client::{Client, ClientConfig, ClientError, KeepAliveAck};
use picket_core::node::{Answer, Query};
use picket_core::paxos::{NodeId, RoleKind};
use picket_core::time::Instant;
use picket_proto::backup::{decode_backup, Backup};
use picket_proto::proto;
use picket_server::node::driver::{DriverHandle, Request};
use picket_server::node::durable::{EmptyDataDir, StoreError};
use picket_server::server::StartError;
use picket_storage::{Disk, SimDisk};
use tokio::sync::{broadcast, watch};

use super::addr::{replica_ip, REPLICA_PORT};
use super::lying_disk::NoSyncDisk;
use super::shared::{lock, BootEvents, Break, MembershipSeen, SharedRef};
use crate::clock::DriftClock;
use crate::history::{
    AckedOp, DigestSeen, FinalKind, GrantSeen, KeepAliveAcked, LeaderSeen, LogEvent, LogKind,
    SessionGone, WaitCause,
};
use crate::plan::Reads;

/// How often a replica's status (role, applied revision) is read.
const STATUS_POLL_MS: u64 = 50;

/// Peer port of a real replica (clients use `REPLICA_PORT`).
pub const PEER_PORT: u16 = 7001;

/// The workload's namespace and how many keys it takes (`sim/k0..k2`).
pub const NAMESPACE: &str = "sim";
pub const KEYS: usize = 3;

/// What a replica's `init` closure captures (cloned for every start).
#[derive(Clone)]
pub struct ReplicaCtx {
    pub id: NodeId,
    pub members: Vec<NodeId>,
    /// Owned by the harness: it outlives the replica's kills (and is crashed, damaged or wiped
    /// by the nemesis).
    pub disk: SimDisk,
    pub clock: DriftClock,
    pub shared: SharedRef,
    /// A replica a membership change adds: `join = true`, `members` are the contacts it
    /// reaches the cluster by (itself included), drawn the way operators write them.
    pub join: bool,
}

/// What a client, the probe or the operator captures.
#[derive(Clone)]
pub struct ClientCtx {
    pub id: u64,
    pub replicas: Vec<NodeId>,
    pub ttl_ms: u64,
    pub shared: SharedRef,
}

/// The server's `Clock`, drifting at the node's rate from the run's start.
pub struct SimClock {
    pub drift: DriftClock,
    pub start: tokio::time::Instant,
}

impl picket_server::node::clock::Clock for SimClock {
    fn now(&self) -> Instant {
        let true_ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.drift.at(true_ms)
    }
}

pub fn client_endpoint(node: NodeId) -> String {
    format!("{}:{REPLICA_PORT}", replica_ip(node))
}

/// A replica's configuration file; `cluster_id`: a restored cluster's (absent: the default).
pub fn config_text(ctx: &ReplicaCtx, ttl_ms: u64, cluster_id: Option<&str>) -> String {
    let mut text = format!(
        "node_id = {}\ndata_dir = \"/data\"\ninsecure_dev_auth = true\n\n[sessions]\nttl_ms_min = 1000\nttl_ms_default = {ttl_ms}\n\n[storage]\npreallocate_bytes = 0\nsnapshot_every_slots = 64\n",
        ctx.id.0
    );
    if ctx.join {
        text.insert_str(0, "join = true\n");
    }
    if let Some(id) = cluster_id {
        text.insert_str(0, &format!("cluster_id = \"{id}\"\n"));
    }
    for m in &ctx.members {
        text.push_str(&format!(
            "\n[[members]]\nid = {}\npeer_address = \"{}:{PEER_PORT}\"\nclient_address = \"{}\"\n",
            m.0,
            replica_ip(*m),
            client_endpoint(*m)
        ));
    }
    text
}

/// A replica whose store failed stops (after a failed fsync the files are in an unknown state)
/// and waits for the nemesis to restart it.
async fn wedge(ctx: &ReplicaCtx, why: &str) {
    {
        let mut s = lock(&ctx.shared);
        s.trace(&format!("replica {} wedged: {why}", ctx.id.0));
        s.wedged.insert(ctx.id);
    }
    std::future::pending::<()>().await;
}

/// A start that refused an empty data directory: the harness checks it was refused.
fn record_refusal(ctx: &ReplicaCtx, boot: u64, error: &StartError) {
    let mut s = lock(&ctx.shared);
    s.trace(&format!(
        "real replica {} refused to start: {error}",
        ctx.id.0
    ));
    s.refused.insert(ctx.id, boot);
}

/// A real replica's `init` future: starts the server's node, then reports its status to the
/// harness until the driver stops (a failed store: the replica is wedged until restarted).
///
/// Its first start is `picketd run --init` (a new cluster); a restart is plain `picketd run`
/// (an empty data directory is refused), unless the harness set `Shared::start_as` (a wiped
/// disk: refused, then `--rejoin`).
pub async fn real_replica_main(ctx: ReplicaCtx, ttl_ms: u64) {
    let (boot, empty) = {
        let mut s = lock(&ctx.shared);
        let boot = s.boots.entry(ctx.id).or_insert(0);
        *boot += 1;
        let boot = *boot;
        let empty = s.start_as.remove(&ctx.id).unwrap_or(if boot == 1 {
            EmptyDataDir::Init
        } else {
            EmptyDataDir::Refuse
        });
        s.applied.insert(ctx.id, 0);
        s.ready.insert(ctx.id, false);
        s.boot_events.insert(
            ctx.id,
            BootEvents {
                events_from: 1,
                events: Vec::new(),
            },
        );
        s.trace(&format!(
            "real replica {} boot {boot} ({empty:?})",
            ctx.id.0
        ));
        (boot, empty)
    };
    // A replica whose disk was wiped may come back with a contact list as its file
    // (`join = true`, itself and one member), as an operator writes it (issue 34). After a
    // restore every replica's file names the new cluster and its first members (the ones
    // `picketd restore` was given), unless a contact list was written since.
    let (contacts, restored) = {
        let s = lock(&ctx.shared);
        (s.contacts.get(&ctx.id).cloned(), s.restored.clone())
    };
    let ctx = match (contacts, &restored) {
        (Some(contacts), _) => ReplicaCtx {
            members: contacts,
            join: true,
            ..ctx
        },
        (None, Some(restored)) => ReplicaCtx {
            members: restored.members.clone(),
            join: false,
            ..ctx
        },
        (None, None) => ctx,
    };
    let cluster_id = restored.as_ref().map(|r| r.cluster_id.as_str());
    let mut text = config_text(&ctx, ttl_ms, cluster_id);
    if lock(&ctx.shared).reads == Reads::Lease {
        // As an operator turns leases on; the file's checks (the election timeout above the
        // heartbeat and the drift margin) apply.
        text.push_str("\n[timing]\nread_mode = \"lease\"\n");
    }
    let mut config = picket_server::config::Config::parse(&text)
        .expect("the simulated replica's configuration is valid");
    let (start, broken) = {
        let s = lock(&ctx.shared);
        // The run's planted bug and buggify switch (no file key sets them).
        config.faults = s.faults;
        if s.persist_thread {
            config.storage.persist = picket_server::config::PersistMode::Thread;
        }
        (s.start, s.broken)
    };
    let clock = Arc::new(SimClock {
        drift: ctx.clock,
        start,
    });
    if broken == Some(Break::AckBeforeSync) {
        let disk = NoSyncDisk(ctx.disk.clone());
        serve_replica(&ctx, boot, &config, disk, clock, empty).await;
    } else {
        serve_replica(&ctx, boot, &config, ctx.disk.clone(), clock, empty).await;
    }
}

/// Starts the server's node on `disk` and reports its status until the driver stops.
async fn serve_replica<D: Disk + Clone + 'static>(
    ctx: &ReplicaCtx,
    boot: u64,
    config: &picket_server::config::Config,
    disk: D,
    clock: Arc<SimClock>,
    empty: EmptyDataDir,
) {
    let running = match picket_server::server::start(config, disk, clock, empty).await {
        Ok(running) => running,
        Err(
            error @ StartError::Store {
                source: StoreError::Uninitialized { .. },
                ..
            },
        ) => {
            // What `picketd run` does on an empty data directory without --init or --rejoin.
            record_refusal(ctx, boot, &error);
            std::future::pending::<()>().await;
            return;
        }
        Err(error) => {
            wedge(ctx, &format!("start failed (boot {boot}): {error}")).await;
            return;
        }
    };
    tokio::spawn(observe_applied(
        ctx.id,
        boot,
        running.handle.clone(),
        ctx.shared.clone(),
    ));
    let mut role = None;
    loop {
        if running.driver_finished() {
            wedge(ctx, "driver stopped (store failure)").await;
        }
        if let Some(status) = running.status().await {
            let mut s = lock(&ctx.shared);
            s.applied.insert(ctx.id, status.revision.0);
            let at_ms = s.now_ms();
            s.membership_seen.insert(
                ctx.id,
                MembershipSeen {
                    at_ms,
                    members: status.membership.members().collect(),
                    from_slot: status.membership_from,
                    slot_applied: status.slot_applied,
                },
            );
            s.slow_fsyncs
                .insert((ctx.id, boot), status.counters.slow_fsyncs);
            s.ready
                .insert(ctx.id, status.not_serving_because().is_none());
            let seen = s
                .history
                .recoveries
                .iter()
                .any(|r| r.node == ctx.id.0 && r.boot == boot);
            if !seen {
                s.trace(&format!(
                    "real replica {} boot {boot} recovery {}",
                    ctx.id.0, status.storage.recovery
                ));
                s.history.recoveries.push(crate::history::RecoverySeen {
                    node: ctx.id.0,
                    boot,
                    outcome: status.storage.recovery.clone(),
                });
            }
            if role != Some(status.role) {
                role = Some(status.role);
                s.trace(&format!("real replica {} role {:?}", ctx.id.0, status.role));
                if status.role == RoleKind::Leader {
                    s.leader = Some(ctx.id);
                    s.count("leader-elected");
                    let at_ms = s.now_ms();
                    s.history.leaders.push(LeaderSeen {
                        node: ctx.id.0,
                        at_ms,
                        observed_within_ms: STATUS_POLL_MS,
                    });
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(STATUS_POLL_MS)).await;
    }
}

/// Follows the driver's digest feed of one boot of a replica: a digest per applied revision
/// (checker 3), then the sessions that disappeared since the last look (checker 5).
async fn observe_applied(node: NodeId, boot: u64, handle: DriverHandle, shared: SharedRef) {
    let mut digests = handle.subscribe_digests();
    let mut last = None;
    let mut sessions: Option<BTreeSet<u64>> = None;
    loop {
        let (revision, digest) = match digests.recv().await {
            Ok(applied) => applied,
            Err(broadcast::error::RecvError::Lagged(_)) => {
                lock(&shared).count("digests-lagged");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if last == Some(revision) {
            continue;
        }
        last = Some(revision);
        {
            let mut s = lock(&shared);
            s.history.digests.push(DigestSeen {
                node: node.0,
                boot,
                revision: revision.0,
                digest,
            });
            s.trace(&format!(
                "real replica {} applied {} digest {digest:016x}",
                node.0, revision.0
            ));
        }
        let read = handle
            .ask(|reply| Request::Read {
                query: Query::Sessions,
                stale: true,
                reply,
            })
            .await;
        let Ok(Ok((_, Answer::Sessions(list)))) = read else {
            continue;
        };
        let alive: BTreeSet<u64> = list.iter().map(|info| info.id.0).collect();
        if let Some(before) = &sessions {
            let mut s = lock(&shared);
            let at_ms = s.now_ms();
            for gone in before.difference(&alive) {
                s.history.sessions_gone.push(SessionGone {
                    session: *gone,
                    at_ms,
                    node: node.0,
                });
            }
        }
        sessions = Some(alive);
    }
}

/// Records every acknowledged renewal of a session (the real library's `keepalive_acks`) until
/// the session ends.
async fn record_acks(mut acks: watch::Receiver<KeepAliveAck>, shared: SharedRef) {
    loop {
        let ack = *acks.borrow_and_update();
        {
            let mut s = lock(&shared);
            let sent_at_ms = ack.sent_at.saturating_duration_since(s.start).as_millis();
            s.history.keepalives.push(KeepAliveAcked {
                session: ack.session_id,
                sent_at_ms: u64::try_from(sent_at_ms).unwrap_or(u64::MAX),
                ttl_ms: u64::try_from(ack.ttl.as_millis()).unwrap_or(u64::MAX),
            });
        }
        if acks.changed().await.is_err() {
            return;
        }
    }
}

/// Follows replica `node`'s lock log from the oldest retained revision, starting over for each
/// boot of the replica: grants for checkers 1 and 2, all events for checker 4, wait and hold
/// events for checker 7.
pub async fn watcher_main(node: NodeId, shared: SharedRef) {
    loop {
        let boot = lock(&shared).boots.get(&node).copied().unwrap_or(0);
        let mut config = ClientConfig::new([client_endpoint(node)], "watcher");
        config.rpc_timeout = Duration::from_millis(1_000);
        config.retry_budget = Duration::from_millis(3_000);
        let Ok(client) = Client::new(config) else {
            return;
        };
        let mut watcher = client.watch(None, "", 0);
        while lock(&shared).boots.get(&node).copied().unwrap_or(0) == boot {
            let page = tokio::time::timeout(Duration::from_millis(500), watcher.next_page()).await;
            let events = match page {
                Ok(Ok(events)) => events,
                Ok(Err(_)) => break,
                Err(_) => continue,
            };
            let mut s = lock(&shared);
            if s.boots.get(&node).copied().unwrap_or(0) != boot {
                break;
            }
            for event in events {
                record_event(&mut s, node, boot, event);
            }
            s.watched.insert(node, watcher.resume_from());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn record_event(s: &mut super::shared::Shared, node: NodeId, boot: u64, event: proto::Event) {
    use proto::event::Kind;
    let key = format!("{}/{}", event.namespace, event.key);
    let (session, logged, final_kind) = match event.kind {
        Some(Kind::Granted(g)) => {
            s.history.grants.push(GrantSeen {
                node: node.0,
                boot,
                revision: event.revision,
                key: key.clone(),
                token: g.token,
                session: g.session_id,
                slot: g.slot,
            });
            let token = g.token;
            (
                g.session_id,
                LogKind::Granted { token },
                Some((FinalKind::Granted, token)),
            )
        }
        Some(Kind::Queued(q)) => (q.session_id, LogKind::Queued, None),
        Some(Kind::WaitRemoved(w)) => {
            let cause = if w.cause == proto::ReleaseCause::WaitCancelled as i32 {
                WaitCause::Cancelled
            } else if w.cause == proto::ReleaseCause::WaitExpired as i32 {
                WaitCause::Expired
            } else {
                WaitCause::SessionEnded
            };
            (w.session_id, LogKind::WaitRemoved { cause }, None)
        }
        Some(Kind::Released(r)) => (
            r.session_id,
            LogKind::HoldEnded { token: r.token },
            Some((FinalKind::Released, r.token)),
        ),
        Some(Kind::ForceReleased(f)) => (
            f.session_id,
            LogKind::HoldEnded { token: f.token },
            Some((FinalKind::ForceReleased, f.token)),
        ),
        _ => return,
    };
    s.history.log.push(LogEvent {
        node: node.0,
        boot,
        revision: event.revision,
        time_ms: event.time_ms,
        key: key.clone(),
        session,
        kind: logged,
    });
    if let (Some((kind, token)), Some(be)) = (final_kind, s.boot_events.get_mut(&node)) {
        be.events.push((event.revision, key, kind, token));
    }
}

fn library_config(ctx: &ClientCtx) -> ClientConfig {
    let endpoints: Vec<String> = ctx.replicas.iter().map(|r| client_endpoint(*r)).collect();
    let mut config = ClientConfig::new(endpoints, &format!("client-{}", ctx.id));
    // The default is this process's id: it reaches the replicated state (the session's
    // identity), so it would make the digests differ from one run of a seed to the next.
    config.identity_pid = u32::try_from(ctx.id).unwrap_or(u32::MAX);
    config.session_ttl = Some(Duration::from_millis(ctx.ttl_ms));
    config.rpc_timeout = Duration::from_millis(1_000);
    config.retry_budget = Duration::from_millis(5_000);
    config
}

/// A client node on the real client library: sessions, each running the workload
/// ([`super::workload::run_session`]: acquires of every kind, accesses to the fenced resource
/// while the guard is held, release), a new session when one is lost.
pub async fn real_client_main(ctx: ClientCtx) {
    let client = Client::new(library_config(&ctx)).expect("valid client configuration");
    if lock(&ctx.shared).reads != Reads::Off {
        // A client of its own, as an inspection tool is: it follows the leader by its own
        // reads' answers, not by the sessions'.
        let reader = Client::new(library_config(&ctx)).expect("valid client configuration");
        tokio::spawn(super::workload::run_reader(ctx.clone(), reader));
    }
    let mut resource = None;
    while !lock(&ctx.shared).clients_stop {
        match client.create_session().await {
            Ok(session) => {
                record_opened(&ctx.shared, session.id());
                tokio::spawn(record_acks(session.keepalive_acks(), ctx.shared.clone()));
                super::workload::run_session(&ctx, &session, &mut resource).await;
                // Dropping the last handle of a session not lost closes it (not an expiry).
                if session.lost_signal().borrow().is_none() {
                    lock(&ctx.shared).history.sessions_closed.push(session.id());
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    std::future::pending::<()>().await;
}

/// A session whose creation was just answered (checkers 4 and 8 tell the old cluster's
/// sessions from a restored one's by when they opened).
fn record_opened(shared: &SharedRef, session: u64) {
    let mut s = lock(shared);
    let at_ms = s.now_ms();
    s.history.sessions_opened.entry(session).or_insert(at_ms);
}

/// Saves a backup as `picketctl snapshot save` does, on the real client library: an admin
/// (`erin`, role `picket-admin`, dev credentials) asks the leader for `Admin.SaveSnapshot`,
/// reads the stream to its end (each chunk at the offset the bytes so far reach) and checks the
/// file whole (`picket_proto::backup::decode_backup`). Retried until it succeeds.
pub async fn save_backup(replicas: Vec<NodeId>, shared: SharedRef) -> Backup {
    let admin = operator_client(&replicas, "erin", "picket-admin")
        .expect("the admin's client configuration is valid");
    loop {
        match save_backup_once(&admin).await {
            Ok(backup) => return backup,
            Err(why) => {
                lock(&shared).trace(&format!("backup not saved: {why}"));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn save_backup_once(admin: &Client) -> Result<Backup, String> {
    let mut stream = admin.save_snapshot().await.map_err(|e| e.to_string())?;
    let mut bytes: Vec<u8> = Vec::new();
    let mut total = None;
    while let Some(chunk) = stream
        .message()
        .await
        .map_err(|status| format!("the backup stream broke: {}", status.message()))?
    {
        if chunk.offset != bytes.len() as u64 {
            return Err(format!(
                "a chunk at {} after {} bytes",
                chunk.offset,
                bytes.len()
            ));
        }
        total.get_or_insert(chunk.total_bytes);
        bytes.extend_from_slice(&chunk.data);
    }
    if total != Some(bytes.len() as u64) {
        return Err(format!(
            "the stream ended after {} of {total:?} bytes",
            bytes.len()
        ));
    }
    decode_backup(&bytes).map_err(|e| format!("a bad backup: {e}"))
}

/// An operator's client on the real library: dev credentials (`insecure_dev_auth`) with `role`.
fn operator_client(replicas: &[NodeId], principal: &str, role: &str) -> Option<Client> {
    let endpoints: Vec<String> = replicas.iter().map(|r| client_endpoint(*r)).collect();
    let mut config = ClientConfig::new(endpoints, principal);
    config.identity_pid = 0;
    config.rpc_timeout = Duration::from_millis(1_000);
    config.retry_budget = Duration::from_millis(3_000);
    config.credentials.principal = Some(principal.to_string());
    config.credentials.roles = Some(role.to_string());
    Client::new(config).ok()
}

/// Force-releases in the workload: now and then one on-call operator (`alice`) inspects a key
/// (a lock or a semaphore) and requests a force-release of its (oldest) holder's token, and a
/// second (`bob`) approves it, acknowledging the class's fenced flag. The old holder is not told
/// (its session stays): it may write again with its old token, which the fenced resource must
/// refuse once a newer holder wrote (of the key, or of a permit's slot). An acknowledged
/// approval is checked by checker 4 like a release.
///
/// First, a class admin (`carol`) declares the run's semaphores (`SetSemaphore`, retried until
/// acknowledged: a retry of an applied one changes nothing); until then the clients' permit
/// requests are refused (`not_a_semaphore`).
pub async fn operator_main(replicas: Vec<NodeId>, shared: SharedRef) {
    let (Some(alice), Some(bob), Some(carol)) = (
        operator_client(&replicas, "alice", "on-call"),
        operator_client(&replicas, "bob", "on-call"),
        operator_client(&replicas, "carol", "class-admin"),
    ) else {
        return;
    };
    declare_semaphores(&carol, &shared).await;
    while !lock(&shared).clients_stop {
        let pause = thread_rng().gen_range(1_500..4_000);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        // The first key held, from a random one on: the locks, then the semaphores (a
        // permit's holder: the oldest, whose slot the next permit takes).
        let keys: Vec<String> = (0..KEYS)
            .map(|i| format!("k{i}"))
            .chain(lock(&shared).semaphores.iter().map(|(key, _)| key.clone()))
            .collect();
        let first = thread_rng().gen_range(0..keys.len());
        for i in 0..keys.len() {
            let key = &keys[(first + i) % keys.len()];
            if let Some(token) = force_release(&alice, &bob, key).await {
                let mut s = lock(&shared);
                s.count("force-release");
                s.trace(&format!("force-released {NAMESPACE}/{key} token {token}"));
                s.history.acked.push(AckedOp::ForceRelease {
                    key: format!("{NAMESPACE}/{key}"),
                    token,
                });
                break;
            }
        }
    }
    std::future::pending::<()>().await;
}

/// Declares the run's semaphores through the real admin path, each retried until acknowledged,
/// and records each N for checker 2 (`History::semaphores`).
async fn declare_semaphores(admin: &Client, shared: &SharedRef) {
    let semaphores = lock(shared).semaphores.clone();
    for (key, permits) in semaphores {
        let request = proto::SetSemaphoreRequest {
            namespace: NAMESPACE.to_string(),
            key: key.clone(),
            permits,
            reason: "simulated workload: a pool of permits".to_string(),
        };
        loop {
            if lock(shared).clients_stop {
                return;
            }
            match admin.set_semaphore(request.clone()).await {
                Ok(answer) => {
                    let mut s = lock(shared);
                    s.count("semaphore-declared");
                    s.trace(&format!(
                        "semaphore {NAMESPACE}/{key} declared with {permits} permits at revision {}",
                        answer.revision
                    ));
                    s.history
                        .semaphores
                        .insert(format!("{NAMESPACE}/{key}"), permits);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

/// Request (alice) and approval (bob) of a force-release of `key`'s holder; the released token
/// if the approval was acknowledged.
async fn force_release(alice: &Client, bob: &Client, key: &str) -> Option<u64> {
    let info = alice
        .inspect(proto::InspectRequest {
            namespace: NAMESPACE.to_string(),
            key: key.to_string(),
            allow_stale: false,
        })
        .await
        .ok()?;
    let holder = info.holder?;
    let requested = alice
        .request_force_release(proto::RequestForceReleaseRequest {
            namespace: NAMESPACE.to_string(),
            key: key.to_string(),
            expected_token: holder.token,
            reason: "simulated incident: holder stuck".to_string(),
            revoke_session: false,
            holder_session_id: holder.session_id,
            checklist: None,
        })
        .await
        .ok()?;
    let approved = bob
        .approve_force_release(proto::ApproveForceReleaseRequest {
            force_release_id: requested.force_release_id,
            acknowledged_fenced: requested.fenced,
        })
        .await
        .ok()?;
    Some(approved.released_token)
}

/// A membership change as an operator makes it (docs/runbooks/replace-machine.md), on the real
/// admin API: add `new` as a learner, promote it, remove `old`; each call retried until it is
/// answered, through leader changes (an add or promotion asked again is answered as done, a
/// removal asked again finds `old` gone: `not_a_member`). `true` when all three were answered.
pub async fn replace_member(
    replicas: Vec<NodeId>,
    old: NodeId,
    new: NodeId,
    shared: SharedRef,
) -> bool {
    let Some(admin) = operator_client(&replicas, "dana", "class-admin") else {
        return false;
    };
    let reason = format!("simulated machine replacement of replica {}", old.0);
    let add = proto::AddMemberRequest {
        node_id: new.0,
        peer_address: format!("{}:{PEER_PORT}", replica_ip(new)),
        client_address: client_endpoint(new),
        http_address: String::new(),
        reason: reason.clone(),
    };
    let promote = proto::PromoteMemberRequest {
        node_id: new.0,
        reason: reason.clone(),
        force: false,
    };
    let remove = proto::RemoveMemberRequest {
        node_id: old.0,
        reason,
        force: false,
    };
    let steps: [(&'static str, &[&str]); 3] = [
        ("member-added", &[]),
        ("member-promoted", &["learner_not_caught_up"]),
        ("member-removed", &["quorum_unreachable"]),
    ];
    for (n, (what, also_retried)) in steps.into_iter().enumerate() {
        loop {
            let answer = match n {
                0 => admin.add_member(add.clone()).await,
                1 => admin.promote_member(promote.clone()).await,
                _ => admin.remove_member(remove.clone()).await,
            };
            match answer {
                Ok(answer) => {
                    let mut s = lock(&shared);
                    s.count(what);
                    s.trace(&format!(
                        "{what}: voters {:?} learners {:?} from slot {}",
                        answer.voters, answer.learners, answer.from_slot
                    ));
                    break;
                }
                Err(ClientError::Refused { refusal, .. })
                    if refusal.rule == "membership_change_in_progress"
                        || also_retried.contains(&refusal.rule.as_str()) =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(ClientError::Refused { refusal, .. })
                    if n == 2 && refusal.rule == "not_a_member" =>
                {
                    // A removal answered before (its answer lost in an election).
                    let mut s = lock(&shared);
                    s.count(what);
                    s.trace(&format!("{what}: replica {} was removed already", old.0));
                    break;
                }
                Err(ClientError::Refused { refusal, .. }) => {
                    lock(&shared).trace(&format!(
                        "membership change refused ({what}): {} {}",
                        refusal.rule, refusal.message
                    ));
                    return false;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    true
}

/// The liveness probe on the client library: a fresh session takes a fresh key.
pub async fn real_probe(ctx: ClientCtx, key: String) -> u64 {
    let client = Client::new(library_config(&ctx)).expect("valid client configuration");
    loop {
        if let Ok(session) = client.create_session().await {
            record_opened(&ctx.shared, session.id());
            for _ in 0..20 {
                if let Ok(guard) = session.try_lock(NAMESPACE, &key).await {
                    return guard.token().0;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
