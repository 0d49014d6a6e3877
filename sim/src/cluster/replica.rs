//! The **sim-local replica driver**: one task owns a core `Node`, persists its `Persist` actions
//! to the harness-owned `SimDisk` through [`Store`], sends its messages over madsim's network,
//! answers clients, and reports what it applied to the history (observer). It stands in for the
//! server's driver until that lands (docs/simulation.md says which parts run which).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use madsim::net::Endpoint;
use picket_core::locks::EventKind;
use picket_core::locks::{LockConfig, Revision, WatchFilter};
use picket_core::node::{Action, Node, NodeConfig, NodeProposeError, ProposalId};
use picket_core::paxos::{self, NodeId, ProposeError, RoleKind};
use picket_storage::SimDisk;

use super::shared::{buggify, lock, BootEvents, Break, SharedRef};
use super::wire::{replica_addr, Inbound, Request, Response, TAG_INBOUND};
use crate::clock::DriftClock;
use crate::history::{DigestSeen, FinalKind, GrantSeen, LeaderSeen, SessionGone};
use crate::store::{PersistOp, Store};

/// Messages received but not yet handled, at most (more are dropped and counted).
const INBOX_MAX: usize = 4_096;

/// What a replica's `init` closure captures (cloned for every start).
#[derive(Clone)]
pub struct ReplicaCtx {
    pub id: NodeId,
    pub members: Vec<NodeId>,
    pub seed: u64,
    pub disk: SimDisk,
    pub clock: DriftClock,
    pub shared: SharedRef,
}

/// Lock configuration of the simulated cluster: events kept long enough for the final check.
pub fn lock_config() -> LockConfig {
    LockConfig {
        watch_retention: 100_000,
        ..LockConfig::default()
    }
}

struct Driver {
    ctx: ReplicaCtx,
    node: Node,
    store: Store,
    boot: u64,
    ep: std::sync::Arc<Endpoint>,
    inbox: tokio::sync::mpsc::Receiver<(madsim::net::Payload, SocketAddr)>,
    /// Client proposals waiting for their outcome: who asked, on which tag.
    pending: BTreeMap<ProposalId, (SocketAddr, u64)>,
    /// Observer state: the next watch revision to read, the sessions seen alive.
    watch_next: Revision,
    observed: Option<Revision>,
    sessions: BTreeSet<u64>,
}

/// The replica's `init` future: never returns (madsim would treat the node as exited).
pub async fn replica_main(ctx: ReplicaCtx) {
    let opened = Store::open(&ctx.disk);
    let (store, recovered) = match opened {
        Ok(found) => found,
        Err(error) => {
            wedge(&ctx, &format!("store did not open: {error}")).await;
            return;
        }
    };
    let boot = recovered.boot;
    {
        let mut s = lock(&ctx.shared);
        let line = format!(
            "replica {} boot {} lost={:?}",
            ctx.id.0, boot, recovered.lost_reason
        );
        s.trace(&line);
        if recovered.lost_reason.is_some() {
            s.count("replica-started-lost");
        }
        s.boot_events.insert(
            ctx.id,
            BootEvents {
                events_from: 1,
                events: Vec::new(),
            },
        );
        s.applied.insert(ctx.id, 0);
    }
    let cfg = NodeConfig {
        replica: paxos::Config::new(
            ctx.id,
            ctx.members.clone(),
            ctx.seed ^ (ctx.id.0 << 32) ^ boot,
        ),
        locks: lock_config(),
        boot,
        compact_every_slots: 64,
        waits_pending_max: picket_core::node::WAITS_PENDING_MAX_DEFAULT,
    };
    let node = Node::new(cfg, recovered.durable).expect("valid simulated configuration");
    let ep = Endpoint::bind(replica_addr(ctx.id))
        .await
        .expect("bind the replica's address");
    // A receive cancelled by the timer can lose a message inside madsim (after it left the
    // mailbox): one task receives, the driver reads a cancel-safe bounded channel.
    let ep = std::sync::Arc::new(ep);
    let (inbox_tx, inbox) = tokio::sync::mpsc::channel(INBOX_MAX);
    let receiver = ep.clone();
    let shared = ctx.shared.clone();
    tokio::spawn(async move {
        while let Ok(received) = receiver.recv_from_raw(TAG_INBOUND).await {
            if inbox_tx.try_send(received).is_err() {
                lock(&shared).count("inbox-full-dropped");
            }
        }
    });
    let mut driver = Driver {
        ctx,
        node,
        store,
        boot,
        ep,
        inbox,
        pending: BTreeMap::new(),
        watch_next: Revision(1),
        observed: None,
        sessions: BTreeSet::new(),
    };
    driver.run().await;
}

/// A replica whose store failed stops (after a failed fsync the files are in an unknown state)
/// and waits for the nemesis to restart it.
pub(super) async fn wedge(ctx: &ReplicaCtx, why: &str) {
    {
        let mut s = lock(&ctx.shared);
        s.trace(&format!("replica {} wedged: {why}", ctx.id.0));
        s.wedged.insert(ctx.id);
    }
    std::future::pending::<()>().await;
}

impl Driver {
    fn now(&self) -> picket_core::time::Instant {
        let true_ms = lock(&self.ctx.shared).now_ms();
        self.ctx.clock.at(true_ms)
    }

    async fn run(&mut self) {
        loop {
            if let Err(why) = self.drain().await {
                wedge(&self.ctx, &why).await;
            }
            let wait_ms = match self.node.poll_timeout() {
                Some(deadline) => {
                    let now = self.now();
                    let ahead = deadline.as_millis().saturating_sub(now.as_millis());
                    self.ctx.clock.true_ms_for(ahead)
                }
                None => 1_000,
            };
            let received =
                tokio::time::timeout(Duration::from_millis(wait_ms), self.inbox.recv()).await;
            let now = self.now();
            match received {
                Err(_elapsed) => {
                    if self.node.poll_timeout().is_some_and(|d| d <= now) {
                        self.node
                            .step(now, paxos::Input::Timeout)
                            .expect("timeout step");
                    }
                }
                Ok(None) => {}
                Ok(Some((payload, from))) => match payload.downcast::<Inbound>() {
                    Ok(inbound) => self.on_inbound(*inbound, from),
                    Err(_) => lock(&self.ctx.shared).count("malformed-dropped"),
                },
            }
        }
    }

    fn on_inbound(&mut self, inbound: Inbound, from: SocketAddr) {
        let now = self.now();
        match inbound {
            Inbound::Peer { from, msg } => {
                self.node
                    .step(now, paxos::Input::Message { from, msg })
                    .expect("message step");
            }
            Inbound::Request {
                id,
                request: Request::KeepAlive(session),
            } => {
                let answer = self.node.keepalive(now, session);
                self.respond(from, id, Response::KeepAlive(answer));
            }
            Inbound::Request {
                id,
                request: Request::Propose(command),
            } => match self.node.propose(now, *command) {
                Ok(proposal) => {
                    self.pending.insert(proposal, (from, id));
                }
                Err(NodeProposeError::Replica(ProposeError::NotLeader { leader_hint })) => {
                    self.respond(from, id, Response::NotLeader(leader_hint));
                }
                Err(_) => self.respond(from, id, Response::NotLeader(None)),
            },
        }
    }

    fn respond(&self, to: SocketAddr, tag: u64, response: Response) {
        let ep = self.ep.clone();
        tokio::spawn(async move {
            let _ = ep.send_to_raw(to, tag, Box::new(response)).await;
        });
    }

    /// Drains the action FIFO: persists are grouped into one store write and acknowledged
    /// after it (persist before reply: the core holds back what depends on them).
    async fn drain(&mut self) -> Result<(), String> {
        loop {
            let mut persisted = None;
            let mut any = false;
            while let Some(action) = self.node.poll_action() {
                any = true;
                match action {
                    Action::Replica(paxos::Action::Persist {
                        id,
                        promised,
                        accepted,
                        snapshot,
                        incarnation,
                        recovered,
                    }) => {
                        let sync = lock(&self.ctx.shared).broken != Some(Break::AckBeforeSync);
                        self.store
                            .persist(
                                PersistOp {
                                    promised,
                                    accepted,
                                    snapshot,
                                    incarnation,
                                    recovered,
                                },
                                sync,
                            )
                            .map_err(|e| format!("persist failed: {e}"))?;
                        persisted = Some(id);
                    }
                    Action::Replica(paxos::Action::Send { to, msg }) => self.send(to, msg),
                    Action::Replica(_) => {}
                    Action::Reply { proposal, outcome } => {
                        if let Some((to, tag)) = self.pending.remove(&proposal) {
                            self.respond(to, tag, Response::Outcome(outcome));
                        }
                    }
                    Action::ProposalFailed {
                        proposal,
                        leader_hint,
                    } => {
                        if let Some((to, tag)) = self.pending.remove(&proposal) {
                            self.respond(to, tag, Response::NotLeader(leader_hint));
                        }
                    }
                    Action::ReadReply { .. } | Action::ReadFailed { .. } => {}
                    Action::RoleChanged { role, leader } => self.on_role(role, leader),
                    Action::Applied { revision } => self.observe(revision),
                }
            }
            if let Some(id) = persisted {
                // The fsync takes time; buggify makes it take much longer.
                let ms = if buggify(&self.ctx.shared, 0.05) {
                    50
                } else {
                    1
                };
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let now = self.now();
                self.node
                    .step(now, paxos::Input::Persisted { id })
                    .expect("persisted step");
                continue;
            }
            if !any {
                return Ok(());
            }
        }
    }

    fn send(
        &self,
        to: NodeId,
        msg: paxos::Message<picket_core::node::NodeCommand, picket_core::locks::LockSnapshot>,
    ) {
        let ep = self.ep.clone();
        let from = self.ctx.id;
        // Buggify: a message now and then is sent twice (the core must shrug duplicates off).
        let twice = buggify(&self.ctx.shared, 0.02);
        tokio::spawn(async move {
            let copies = if twice { 2 } else { 1 };
            for _ in 0..copies {
                let inbound = Inbound::Peer {
                    from,
                    msg: msg.clone(),
                };
                let _ = ep
                    .send_to_raw(replica_addr(to), TAG_INBOUND, Box::new(inbound))
                    .await;
            }
        });
    }

    fn on_role(&mut self, role: RoleKind, leader: Option<NodeId>) {
        let mut s = lock(&self.ctx.shared);
        s.trace(&format!(
            "replica {} role {role:?} leader {leader:?}",
            self.ctx.id.0
        ));
        if role == RoleKind::Leader {
            s.leader = Some(self.ctx.id);
            s.count("leader-elected");
            let at_ms = s.now_ms();
            s.history.leaders.push(LeaderSeen {
                node: self.ctx.id.0,
                at_ms,
                observed_within_ms: 0,
            });
        }
    }

    /// The observer: after each apply, the state digest, the new events (grants for checker 1,
    /// all for checker 4) and the sessions that disappeared (checker 5).
    fn observe(&mut self, _applied: Revision) {
        let sm = self.node.state();
        // One input can apply several batches: `Applied` actions queue up behind the state, so
        // the observer keys everything by the state's own revision, once per revision.
        let revision = sm.revision();
        if self.observed == Some(revision) {
            return;
        }
        self.observed = Some(revision);
        // The core's own state digest (the server's digest feed computes the same).
        let digest = sm.digest();
        let mut s = lock(&self.ctx.shared);
        let node = self.ctx.id.0;
        let boot = self.boot;
        s.history.digests.push(DigestSeen {
            node,
            boot,
            revision: revision.0,
            digest,
        });
        s.applied.insert(self.ctx.id, revision.0);
        let now_ms = s.now_ms();

        // New events since the last read (from the oldest retained after a snapshot install).
        let filter = WatchFilter::default();
        let page = match sm.watch(self.watch_next, &filter, usize::MAX) {
            Ok(page) => page,
            Err(picket_core::locks::WatchError::Compacted {
                oldest_available, ..
            }) => {
                if let Some(be) = s.boot_events.get_mut(&self.ctx.id) {
                    if be.events.is_empty() {
                        be.events_from = oldest_available.0;
                    }
                }
                self.watch_next = oldest_available;
                sm.watch(self.watch_next, &filter, usize::MAX)
                    .expect("reading from the oldest retained revision")
            }
        };
        self.watch_next = page.resume_from;
        for event in page.events {
            let key = format!("{}/{}", event.namespace, event.key);
            let (kind, token) = match event.kind {
                EventKind::Granted { session, token } => {
                    let token = token.0;
                    s.history.grants.push(GrantSeen {
                        node,
                        boot,
                        revision: event.revision.0,
                        key: key.clone(),
                        token,
                        session: session.0,
                    });
                    (FinalKind::Granted, token)
                }
                EventKind::Released { token, .. } => (FinalKind::Released, token.0),
                EventKind::ForceReleased { token, .. } => (FinalKind::ForceReleased, token.0),
                _ => continue,
            };
            if let Some(be) = s.boot_events.get_mut(&self.ctx.id) {
                be.events.push((event.revision.0, key, kind, token));
            }
        }

        // Sessions gone (closed, expired or revoked); the checker leaves out closed ones.
        let alive: BTreeSet<u64> = sm.sessions().map(|info| info.id.0).collect();
        for gone in self.sessions.difference(&alive) {
            s.history.sessions_gone.push(SessionGone {
                session: *gone,
                at_ms: now_ms,
                node,
            });
        }
        self.sessions = alive;
        s.trace(&format!(
            "replica {node} applied {} digest {digest:016x}",
            revision.0
        ));
    }
}
