//! Node-level tests: three Nodes (Paxos replica + lock state machine + leader-local session
//! deadlines) on a simulated network with random delays, synchronous disks, crashes and
//! restarts, all from one seed. Sessions survive leader changes; a session kept alive is never
//! expired; an abandoned one is expired within TTL + one election timeout.

mod common;

use picket_core::locks::{
    AcquireReply, Command, EventKind, Identity, LockConfig, LockMode, NotYours, Outcome,
    ReleaseCause, Reply, RequestId, Revision, SecretHash, SessionId, SessionProof, Token, Wait,
    WatchFilter,
};
use picket_core::node::{
    Action, Answer, KeepAliveError, Node, NodeConfig, NodeDurable, NodeProposeError, Proposal,
    Query,
};
use picket_core::paxos::{self, Input, NodeId, RoleKind};
use picket_core::time::Instant;
use proptest::prelude::*;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ELECTION_MS_MAX: u64 = 300;
const TTL_MS: u64 = 2_000;
const DELAY_MS_MAX: u64 = 5;
const HEARTBEAT_MS: u64 = 50;

struct Envelope {
    at: Instant,
    seq: u64,
    from: NodeId,
    to: NodeId,
    msg: picket_core::node::NodeMessage,
}

struct Sim {
    now: Instant,
    rng: ChaCha8Rng,
    seed: u64,
    nodes: Vec<Option<Node>>,
    durable: Vec<NodeDurable>,
    boots: Vec<u64>,
    net: Vec<Envelope>,
    seq: u64,
    /// (node index, proposal, outcome) of every reply.
    replies: Vec<(usize, u64, Outcome)>,
    /// (node index, proposal) -> the revision its reply was stamped with.
    reply_revisions: std::collections::BTreeMap<(usize, u64), Revision>,
    reads: Vec<(usize, u64, Answer)>,
    failed: Vec<(usize, u64)>,
    /// A node cut off from the others (messages to and from it are dropped).
    isolated: Option<usize>,
    /// Messages lost at random, per mille.
    drop_per_mille: u64,
}

fn config(index: usize, seed: u64, boot: u64) -> NodeConfig {
    let members = vec![NodeId(1), NodeId(2), NodeId(3)];
    let mut replica = paxos::Config::new(NodeId(index as u64 + 1), members, seed);
    replica.election_timeout_ms_min = 150;
    replica.election_timeout_ms_max = ELECTION_MS_MAX;
    replica.heartbeat_ms = HEARTBEAT_MS;
    NodeConfig {
        replica,
        locks: LockConfig::default(),
        boot,
        compact_every_slots: 50,
        waits_pending_max: picket_core::node::WAITS_PENDING_MAX_DEFAULT,
    }
}

impl Sim {
    fn new(seed: u64) -> Sim {
        Sim::starting_at(seed, NodeDurable::default())
    }

    /// A cluster whose log starts at cluster `version`, as `picketd run --init` records it in
    /// the first membership (`Sim::new`: none recorded, so 1, release 0.1's log).
    fn at_cluster_version(seed: u64, version: u32) -> Sim {
        let first = paxos::Membership {
            cluster_version: version,
            ..paxos::Membership::voters(vec![NodeId(1), NodeId(2), NodeId(3)])
        };
        let durable = NodeDurable {
            schedule: Some(paxos::Schedule::new(first)),
            ..NodeDurable::default()
        };
        Sim::starting_at(seed, durable)
    }

    fn starting_at(seed: u64, durable: NodeDurable) -> Sim {
        let mut sim = Sim {
            now: Instant::ZERO,
            rng: ChaCha8Rng::seed_from_u64(seed),
            seed,
            nodes: Vec::new(),
            durable: vec![durable.clone(); 3],
            boots: vec![1; 3],
            net: Vec::new(),
            seq: 0,
            replies: Vec::new(),
            reply_revisions: std::collections::BTreeMap::new(),
            reads: Vec::new(),
            failed: Vec::new(),
            isolated: None,
            drop_per_mille: 0,
        };
        for i in 0..3 {
            let node = Node::new(config(i, seed, 1), durable.clone(), Instant::ZERO).unwrap();
            sim.nodes.push(Some(node));
            sim.drain(i);
        }
        sim
    }

    fn drain(&mut self, i: usize) {
        loop {
            let Some(action) = self.nodes[i].as_mut().and_then(Node::poll_action) else {
                return;
            };
            match action {
                Action::Persist(persist) => {
                    // A synchronous disk: durable at once, then acknowledged.
                    self.durable[i].apply_persist(&persist);
                    let node = self.nodes[i].as_mut().unwrap();
                    node.step(self.now, Input::Persisted { id: persist.id })
                        .unwrap();
                }
                Action::Send { to, msg } => {
                    let to_index = to.0 as usize - 1;
                    if self.isolated.is_some_and(|x| x == i || x == to_index) {
                        continue;
                    }
                    if self.rng.next_u64() % 1_000 < self.drop_per_mille {
                        continue;
                    }
                    let delay = 1 + self.rng.next_u64() % DELAY_MS_MAX;
                    self.seq += 1;
                    self.net.push(Envelope {
                        at: self.now.add_ms(delay),
                        seq: self.seq,
                        from: NodeId(i as u64 + 1),
                        to,
                        msg,
                    });
                }
                Action::Reply {
                    proposal,
                    revision,
                    outcome,
                } => {
                    self.reply_revisions.insert((i, proposal.0), revision);
                    self.replies.push((i, proposal.0, outcome));
                }
                Action::ReadReply { read, answer, .. } => self.reads.push((i, read.0, answer)),
                Action::ProposalFailed { proposal, .. } => self.failed.push((i, proposal.0)),
                Action::ReadFailed { .. } | Action::RoleChanged { .. } | Action::Applied { .. } => {
                }
            }
        }
    }

    /// Processes every message and timeout up to `now + ms`.
    fn run_for(&mut self, ms: u64) {
        let end = self.now.add_ms(ms);
        loop {
            let message = self.net.iter().map(|e| (e.at, e.seq)).min();
            let timer = (0..3)
                .filter_map(|i| {
                    self.nodes[i]
                        .as_ref()
                        .and_then(Node::poll_timeout)
                        .map(|t| (t, i))
                })
                .min();
            let next = [message.map(|m| m.0), timer.map(|t| t.0)]
                .into_iter()
                .flatten()
                .min();
            let Some(at) = next.filter(|at| *at <= end) else {
                break;
            };
            self.now = self.now.max(at);
            if message.is_some_and(|m| m.0 == at) {
                let index = self
                    .net
                    .iter()
                    .position(|e| (e.at, e.seq) == message.unwrap())
                    .unwrap();
                let e = self.net.remove(index);
                let to = e.to.0 as usize - 1;
                if let Some(node) = self.nodes[to].as_mut() {
                    node.step(
                        self.now,
                        Input::Message {
                            from: e.from,
                            msg: e.msg,
                        },
                    )
                    .unwrap();
                    self.drain(to);
                }
            } else {
                let (_, i) = timer.unwrap();
                self.nodes[i]
                    .as_mut()
                    .unwrap()
                    .step(self.now, Input::Timeout)
                    .unwrap();
                self.drain(i);
            }
        }
        self.now = end;
    }

    fn leader(&self) -> Option<usize> {
        (0..3).find(|i| self.nodes[*i].as_ref().is_some_and(Node::is_ready_leader))
    }

    fn wait_for_leader(&mut self) -> usize {
        for _ in 0..500 {
            if let Some(leader) = self.leader() {
                return leader;
            }
            self.run_for(10);
        }
        panic!("seed {}: no leader within 5 s", self.seed);
    }

    /// Proposes at the leader until applied; retries (same command) across leader changes.
    fn commit(&mut self, command: Command) -> Outcome {
        self.commit_held(command, None)
    }

    /// [`Self::commit`], with how long a waiting `Acquire`'s answer waits for the grant
    /// (`Some(0)`: answered `Queued` as soon as it is applied).
    fn commit_held(&mut self, command: Command, answer_within_ms: Option<u64>) -> Outcome {
        for _ in 0..20 {
            let leader = self.wait_for_leader();
            let node = self.nodes[leader].as_mut().unwrap();
            let proposal = Proposal {
                command: command.clone(),
                answer_within_ms,
            };
            let Ok(proposal) = node.propose(self.now, proposal) else {
                self.run_for(10);
                continue;
            };
            self.drain(leader);
            for _ in 0..100 {
                if let Some(pos) = self
                    .replies
                    .iter()
                    .position(|(i, p, _)| *i == leader && *p == proposal.0)
                {
                    return self.replies.remove(pos).2;
                }
                if self.nodes[leader].is_none() {
                    break;
                }
                self.run_for(5);
            }
        }
        panic!("seed {}: {command:?} not committed", self.seed);
    }

    /// One keepalive to whoever leads; `Ok(false)` if there was no ready leader.
    fn keepalive(&mut self, session: SessionId) -> Result<bool, KeepAliveError> {
        let Some(leader) = self.leader() else {
            return Ok(false);
        };
        let now = self.now;
        let result =
            self.nodes[leader]
                .as_mut()
                .unwrap()
                .keepalive(now, session, &SessionProof::legacy());
        self.drain(leader);
        match result {
            Ok(ttl) => {
                assert_eq!(ttl, TTL_MS);
                Ok(true)
            }
            Err(KeepAliveError::NotLeader { .. } | KeepAliveError::NotReady) => Ok(false),
            Err(error) => Err(error),
        }
    }

    fn crash(&mut self, i: usize) {
        self.nodes[i] = None;
        self.net.retain(|e| e.to.0 as usize - 1 != i);
    }

    fn restart(&mut self, i: usize) {
        self.boots[i] += 1;
        let node = Node::new(
            config(i, self.seed, self.boots[i]),
            self.durable[i].clone(),
            Instant::ZERO,
        )
        .unwrap();
        self.nodes[i] = Some(node);
        self.drain(i);
    }

    fn live(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().flatten()
    }

    fn session_live_everywhere(&self, session: SessionId) -> bool {
        self.live().all(|n| n.state().session(session).is_some())
    }

    fn session_gone_everywhere(&self, session: SessionId) -> bool {
        self.live().all(|n| n.state().session(session).is_none())
    }
}

fn create_session(sim: &mut Sim, name: &str) -> SessionId {
    match sim.commit(Command::CreateSession {
        secret_hash: None,
        ttl_ms: Some(TTL_MS),
        identity: identity(name),
    }) {
        Ok(Reply::SessionCreated { session, .. }) => session,
        other => panic!("{other:?}"),
    }
}

fn acquire(sim: &mut Sim, session: SessionId, key: &str) -> Token {
    match sim.commit(common::acquire_of(
        session,
        1,
        key,
        LockMode::Exclusive,
        None,
    )) {
        Ok(Reply::Acquire(AcquireReply::Granted { token, .. })) => token,
        other => panic!("{other:?}"),
    }
}

/// Runs `ms` with a keepalive every `every_ms`; panics if a keepalive is refused.
fn keep_alive_for(sim: &mut Sim, session: SessionId, ms: u64, every_ms: u64) {
    let end = sim.now.add_ms(ms);
    while sim.now < end {
        sim.keepalive(session)
            .unwrap_or_else(|e| panic!("seed {}: keepalive refused: {e}", sim.seed));
        sim.run_for(every_ms.min(end.ms_since(sim.now)).max(1));
    }
}

#[test]
fn sessions_and_holds_survive_a_leader_change() {
    for seed in 1..=4 {
        let mut sim = Sim::new(seed);
        let session = create_session(&mut sim, "svc");
        let token = acquire(&mut sim, session, "k");
        keep_alive_for(&mut sim, session, 1_000, 400);
        let old = sim.leader().unwrap();
        sim.crash(old);
        keep_alive_for(&mut sim, session, 3 * TTL_MS, 400);
        let new = sim.wait_for_leader();
        assert_ne!(new, old);
        assert!(sim.session_live_everywhere(session), "seed {seed}");
        // The hold is intact, and a linearizable read at the new leader shows a remaining TTL.
        let now = sim.now;
        let read = sim.nodes[new]
            .as_mut()
            .unwrap()
            .read(
                now,
                Query::Inspect {
                    namespace: "ns".into(),
                    key: "k".into(),
                },
            )
            .unwrap();
        sim.drain(new);
        sim.run_for(50);
        let (_, _, answer) = sim
            .reads
            .iter()
            .find(|(i, r, _)| *i == new && *r == read.0)
            .cloned()
            .expect("read answered");
        let Answer::Key(info) = answer else {
            panic!("{answer:?}")
        };
        let info = info.expect("inspect answered");
        let hold = info.holder.clone().unwrap();
        assert_eq!((hold.session, hold.token), (session, token));
        let remaining = hold
            .session_remaining_ms
            .expect("the leader knows the deadline");
        assert!(
            remaining > 0 && remaining <= TTL_MS,
            "remaining {remaining}"
        );
        // The list of every holder (what the console shows) says the same.
        assert_eq!(info.holders, vec![hold]);
        // The crashed node restarts and catches up (from the log or a snapshot).
        sim.restart(old);
        keep_alive_for(&mut sim, session, 1_000, 400);
        assert!(
            sim.session_live_everywhere(session),
            "seed {seed}: after restart"
        );
        let revisions: Vec<_> = sim.live().map(|n| n.state().revision()).collect();
        assert!(
            revisions.windows(2).all(|w| w[0] == w[1]),
            "seed {seed}: {revisions:?}"
        );
    }
}

#[test]
fn a_session_kept_alive_is_never_expired() {
    for seed in 10..=12 {
        let mut sim = Sim::new(seed);
        let session = create_session(&mut sim, "steady");
        let token = acquire(&mut sim, session, "k");
        // Five leader changes: crash the leader, let a new one take over, restart the old one.
        for _ in 0..5 {
            keep_alive_for(&mut sim, session, 1_500, TTL_MS / 4);
            let leader = sim.wait_for_leader();
            sim.crash(leader);
            keep_alive_for(&mut sim, session, 1_000, TTL_MS / 4);
            sim.restart(leader);
        }
        keep_alive_for(&mut sim, session, 2 * TTL_MS, TTL_MS / 4);
        assert!(sim.session_live_everywhere(session), "seed {seed}");
        for node in sim.live() {
            let info = node.state().inspect("ns", "k", sim.now).unwrap();
            assert_eq!(info.holder.map(|h| h.token), Some(token), "seed {seed}");
        }
    }
}

#[test]
fn an_abandoned_session_expires_within_ttl_plus_two_election_timeouts() {
    for seed in 20..=25 {
        for crash_leader in [false, true] {
            let mut sim = Sim::new(seed);
            let session = create_session(&mut sim, "gone");
            let other = create_session(&mut sim, "waiting");
            acquire(&mut sim, session, "k");
            let waiting =
                common::acquire_of(other, 1, "k", LockMode::Exclusive, Some(Wait::UNBOUNDED));
            let queued = sim.commit_held(waiting, Some(0));
            assert_eq!(
                queued,
                Ok(Reply::Acquire(AcquireReply::Queued { position: 1 }))
            );
            // The last keepalive of `session`; `other` stays alive throughout.
            assert_eq!(sim.keepalive(session), Ok(true));
            let last = sim.now;
            if crash_leader {
                let leader = sim.leader().unwrap();
                sim.crash(leader);
            }
            // TTL, plus the election, plus the takeover grace's allowance for a deposed leader's
            // acknowledgements (`election_timeout_ms_max + heartbeat_ms`), plus message delays.
            let bound = last.add_ms(TTL_MS + 2 * ELECTION_MS_MAX + HEARTBEAT_MS + 50);
            let mut expired_at = None;
            while sim.now <= bound.add_ms(1_000) {
                let _ = sim.keepalive(other);
                sim.run_for(20);
                if expired_at.is_none() && sim.session_gone_everywhere(session) {
                    expired_at = Some(sim.now);
                }
            }
            let expired_at = expired_at.unwrap_or_else(|| panic!("seed {seed}: never expired"));
            assert!(expired_at <= bound, "seed {seed} crash {crash_leader}: expired at {expired_at}, bound {bound}, last keepalive {last}");
            assert!(
                expired_at.ms_since(last) >= TTL_MS,
                "seed {seed}: expired early at {expired_at} (last keepalive {last})"
            );
            // The waiter got the key in the expiry's revision.
            for node in sim.live() {
                let info = node.state().inspect("ns", "k", sim.now).unwrap();
                assert_eq!(info.holder.map(|h| h.session), Some(other), "seed {seed}");
                let events = node
                    .state()
                    .watch(
                        picket_core::locks::Revision(1),
                        &WatchFilter::default(),
                        100,
                    )
                    .unwrap()
                    .events;
                assert!(
                    events.iter().any(|e| e.kind
                        == EventKind::Released {
                            session,
                            token: Token(3),
                            cause: ReleaseCause::SessionExpired
                        }),
                    "seed {seed}"
                );
            }
            assert!(sim.session_live_everywhere(other));
            let role_count = sim.live().filter(|n| n.role() == RoleKind::Leader).count();
            assert!(role_count <= 1);
        }
    }
}

/// Found by the simulation's checker 5 on the real server: a leader cut off from the others
/// goes on acknowledging keepalives until it notices (no quorum heard for the maximum election
/// timeout). A keepalive it acknowledged after the new leader took over is unknown to the new
/// leader, so the takeover grace must cover it: the session lives until at least `sent + ttl`.
#[test]
fn a_keepalive_acknowledged_by_a_deposed_leader_is_honoured_by_the_new_one() {
    let mut honoured = 0;
    for seed in 50..=57 {
        let mut sim = Sim::new(seed);
        let session = create_session(&mut sim, "svc");
        let old = sim.wait_for_leader();
        assert_eq!(sim.keepalive(session), Ok(true));
        sim.isolated = Some(old);
        let ready = |sim: &Sim, i: usize| sim.nodes[i].as_ref().is_some_and(Node::is_ready_leader);
        let mut new = None;
        for _ in 0..400 {
            sim.run_for(1);
            new = (0..3).find(|i| *i != old && ready(&sim, *i));
            if new.is_some() {
                break;
            }
        }
        let new = new.unwrap_or_else(|| panic!("seed {seed}: no new leader"));
        // The old leader has not noticed yet and acknowledges keepalives until it does; the
        // client's last acknowledged one is sent just before, then the client dies, counting
        // on its session until `sent + ttl`.
        let mut sent = None;
        loop {
            let now = sim.now;
            match sim.nodes[old]
                .as_mut()
                .unwrap()
                .keepalive(now, session, &SessionProof::legacy())
            {
                Ok(_) => sent = Some(now),
                Err(_) => break,
            }
            sim.run_for(1);
        }
        let Some(sent) = sent else {
            continue;
        };
        honoured += 1;
        let mut expired_at = None;
        while sim.now <= sent.add_ms(TTL_MS + 2 * ELECTION_MS_MAX + 1_000) {
            sim.run_for(10);
            let gone = sim.nodes[new]
                .as_ref()
                .is_some_and(|n| n.state().session(session).is_none());
            if gone {
                expired_at = Some(sim.now);
                break;
            }
        }
        let expired_at = expired_at.unwrap_or_else(|| panic!("seed {seed}: never expired"));
        assert!(
            expired_at.ms_since(sent) >= TTL_MS,
            "seed {seed}: expired at {expired_at}, before the deposed leader's ack at {sent} + ttl"
        );
    }
    assert!(
        honoured >= 4,
        "only {honoured} seeds reached the deposed ack"
    );
}

#[test]
fn keepalives_go_to_the_leader_and_a_deposed_leader_fails_its_proposals() {
    let mut sim = Sim::new(40);
    let session = create_session(&mut sim, "svc");
    let leader = sim.wait_for_leader();
    let follower = (leader + 1) % 3;
    let now = sim.now;
    let refused =
        sim.nodes[follower]
            .as_mut()
            .unwrap()
            .keepalive(now, session, &SessionProof::legacy());
    assert_eq!(
        refused,
        Err(KeepAliveError::NotLeader {
            leader_hint: Some(NodeId(leader as u64 + 1))
        })
    );
    let unknown = SessionId(9_999);
    let refused =
        sim.nodes[leader]
            .as_mut()
            .unwrap()
            .keepalive(now, unknown, &SessionProof::legacy());
    assert_eq!(
        refused,
        Err(KeepAliveError::UnknownSession { session: unknown })
    );
    assert_eq!(sim.nodes[leader].as_ref().unwrap().sessions_tracked(), 1);
    // Clients cannot expire sessions: only the leader proposes that.
    let expire = Command::ExpireSessions {
        sessions: vec![session],
    };
    let refused = sim.nodes[leader].as_mut().unwrap().propose(now, expire);
    assert_eq!(refused, Err(NodeProposeError::LeaderOnlyCommand));

    // Cut the leader off, then propose at it: it cannot commit, steps down and fails the proposal.
    sim.isolated = Some(leader);
    let command = common::acquire_of(session, 7, "k", LockMode::Exclusive, None);
    let proposal = sim.nodes[leader]
        .as_mut()
        .unwrap()
        .propose(now, command.clone())
        .unwrap();
    sim.drain(leader);
    sim.run_for(2 * ELECTION_MS_MAX + 100);
    assert!(
        sim.failed.contains(&(leader, proposal.0)),
        "{:?}",
        sim.failed
    );
    assert_eq!(sim.nodes[leader].as_ref().unwrap().sessions_tracked(), 0);
    assert_eq!(
        sim.nodes[leader]
            .as_ref()
            .unwrap()
            .counters()
            .proposals_failed,
        1
    );
    // The client retries at the new leader with the same request id: granted once.
    let new = sim.wait_for_leader();
    assert_ne!(new, leader);
    let outcome = sim.commit(command.clone());
    let Ok(Reply::Acquire(AcquireReply::Granted { token, .. })) = outcome else {
        panic!("{outcome:?}")
    };
    sim.isolated = None;
    keep_alive_for(&mut sim, session, 1_000, 400);
    assert_eq!(
        sim.commit(command),
        Ok(Reply::Acquire(AcquireReply::Granted {
            token,
            permit: None
        }))
    );
    sim.run_for(200);
    let revisions: Vec<_> = sim.live().map(|n| n.state().revision()).collect();
    assert!(revisions.windows(2).all(|w| w[0] == w[1]), "{revisions:?}");
}

#[test]
fn a_lagging_replica_catches_up_from_a_snapshot_and_agrees() {
    let mut sim = Sim::new(50);
    let session = create_session(&mut sim, "busy");
    let leader = sim.wait_for_leader();
    let lagging = (leader + 1) % 3;
    sim.crash(lagging);
    // Enough commands for the others to compact their logs (every 50 slots) past it.
    for i in 0..60u64 {
        let key = format!("k{i}");
        let token = acquire_with(&mut sim, session, 2 * i + 1, &key);
        let release = Command::Release {
            session,
            proof: SessionProof::legacy(),
            request: RequestId(2 * i + 2),
            namespace: "ns".into(),
            key,
            token,
        };
        assert!(matches!(sim.commit(release), Ok(Reply::Released { .. })));
        let _ = sim.keepalive(session);
    }
    assert!(sim.live().all(|n| n.counters().compactions > 0));
    sim.restart(lagging);
    keep_alive_for(&mut sim, session, 1_000, 400);
    let node = sim.nodes[lagging].as_ref().unwrap();
    assert!(
        node.counters().snapshots_installed > 0,
        "caught up from a snapshot"
    );
    let snapshots: Vec<_> = sim.live().map(|n| n.state().snapshot()).collect();
    assert!(
        snapshots.windows(2).all(|w| w[0] == w[1]),
        "replicas disagree"
    );
    // A node restarted from its own durable snapshot installs it at once.
    let leader = sim.wait_for_leader();
    sim.crash(leader);
    sim.restart(leader);
    assert!(
        sim.nodes[leader]
            .as_ref()
            .unwrap()
            .counters()
            .snapshots_installed
            > 0
    );
    keep_alive_for(&mut sim, session, 1_000, 400);
    assert!(sim.session_live_everywhere(session));
}

fn acquire_with(sim: &mut Sim, session: SessionId, request: u64, key: &str) -> Token {
    let command = common::acquire_of(session, request, key, LockMode::Exclusive, None);
    match sim.commit(command) {
        Ok(Reply::Acquire(AcquireReply::Granted { token, .. })) => token,
        other => panic!("{other:?}"),
    }
}

proptest! {
    /// Random seeds, message loss and crash/restart schedules: a session kept alive is never
    /// expired, its hold stays, and the replicas' states agree.
    #[test]
    fn kept_alive_sessions_survive_random_faults(
        seed in 100..10_000u64,
        drop_per_mille in 0..50u64,
        crashes in prop::collection::vec((0..3usize, 200..1_500u64), 1..4),
    ) {
        let mut sim = Sim::new(seed);
        sim.drop_per_mille = drop_per_mille;
        let session = create_session(&mut sim, "svc");
        let token = acquire(&mut sim, session, "k");
        for (node, down_ms) in crashes {
            keep_alive_for(&mut sim, session, 500, TTL_MS / 4);
            sim.crash(node);
            keep_alive_for(&mut sim, session, down_ms, TTL_MS / 4);
            sim.restart(node);
        }
        sim.drop_per_mille = 0;
        keep_alive_for(&mut sim, session, 2 * TTL_MS, TTL_MS / 4);
        prop_assert!(sim.session_live_everywhere(session), "seed {}", seed);
        let snapshots: Vec<_> = sim.live().map(|n| n.state().snapshot()).collect();
        prop_assert!(snapshots.windows(2).all(|w| w[0] == w[1]), "seed {}: replicas disagree", seed);
        let holder = sim.live().next().unwrap().state().inspect("ns", "k", sim.now).unwrap().holder;
        prop_assert_eq!(holder.map(|h| (h.session, h.token)), Some((session, token)));
    }
}

fn identity(name: &str) -> Identity {
    Identity {
        name: name.into(),
        host: "h".into(),
        pid: 1,
        principal: name.into(),
    }
}

/// `propose_batch`: one result per command in order, the accepted ones share one slot and are
/// answered in order; a leader-only command in the middle is refused alone; off the leader
/// every command is refused with the leader's hint.
#[test]
fn a_batch_shares_a_slot_and_refuses_commands_one_by_one() {
    let mut sim = Sim::new(41);
    let leader = sim.wait_for_leader();
    sim.run_for(100);
    let chosen_before = sim.nodes[leader].as_ref().unwrap().replica().slot_chosen();
    let mut commands: Vec<Command> = (0..5)
        .map(|i| Command::CreateSession {
            secret_hash: None,
            ttl_ms: Some(TTL_MS),
            identity: identity(&format!("svc-{i}")),
        })
        .collect();
    commands.insert(
        2,
        Command::ExpireSessions {
            sessions: vec![SessionId(1)],
        },
    );
    let now = sim.now;
    let results = sim.nodes[leader]
        .as_mut()
        .unwrap()
        .propose_batch(now, commands.clone());
    assert_eq!(results.len(), 6);
    assert_eq!(results[2], Err(NodeProposeError::LeaderOnlyCommand));
    let proposals: Vec<u64> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().map(|p| p.0))
        .collect();
    assert_eq!(proposals.len(), 5);
    assert!(proposals.windows(2).all(|w| w[0] < w[1]), "{proposals:?}");
    sim.drain(leader);
    sim.run_for(100);
    let mut sessions = Vec::new();
    for p in &proposals {
        let (_, _, outcome) = sim
            .replies
            .iter()
            .find(|(i, q, _)| *i == leader && q == p)
            .unwrap_or_else(|| panic!("proposal {p} not answered"));
        match outcome {
            Ok(Reply::SessionCreated { session, .. }) => sessions.push(*session),
            other => panic!("{other:?}"),
        }
    }
    assert!(sessions.windows(2).all(|w| w[0] < w[1]), "{sessions:?}");
    // Each answer carries its own command's revision, stamped when it was applied (issue 35:
    // the driver read the state's revision when it drained the answers, the batch's last, for
    // all five).
    let revisions: Vec<u64> = proposals
        .iter()
        .map(|p| sim.reply_revisions[&(leader, *p)].0)
        .collect();
    assert!(
        revisions.windows(2).all(|w| w[1] == w[0] + 1),
        "{revisions:?}"
    );
    let chosen = sim.nodes[leader].as_ref().unwrap().replica().slot_chosen();
    assert_eq!(chosen.0 - chosen_before.0, 1, "five commands, one slot");

    let follower = (leader + 1) % 3;
    let results = sim.nodes[follower]
        .as_mut()
        .unwrap()
        .propose_batch(now, commands[..2].to_vec());
    let hint = Some(NodeId(leader as u64 + 1));
    for result in results {
        assert!(
            matches!(result, Err(NodeProposeError::Replica(paxos::ProposeError::NotLeader { leader_hint })) if leader_hint == hint),
            "{result:?}"
        );
    }
}

/// When the pending queue has room for only some commands of a batch, the first ones are
/// taken and the rest refused as `Busy`, with the queue's figures.
#[test]
fn a_batch_larger_than_the_room_takes_the_first_commands() {
    let mut sim = Sim::new(42);
    for i in 0..3 {
        let mut cfg = config(i, 42, 1);
        cfg.replica.pending_max = 3;
        sim.nodes[i] = Some(Node::new(cfg, NodeDurable::default(), Instant::ZERO).unwrap());
        sim.drain(i);
    }
    let leader = sim.wait_for_leader();
    let now = sim.now;
    let node = sim.nodes[leader].as_mut().unwrap();
    let commands: Vec<Command> = (0..5)
        .map(|i| Command::CreateSession {
            secret_hash: None,
            ttl_ms: Some(TTL_MS),
            identity: identity(&format!("svc-{i}")),
        })
        .collect();
    let results = node.propose_batch(now, commands);
    assert!(results[..3].iter().all(Result::is_ok), "{results:?}");
    for result in &results[3..] {
        assert_eq!(
            result,
            &Err(NodeProposeError::Replica(paxos::ProposeError::Busy {
                pending: 3,
                max: 3
            }))
        );
    }
}

#[test]
fn a_keepalive_without_the_session_secret_changes_nothing() {
    let mut sim = Sim::new(41);
    let secret = SecretHash([5; 32]);
    let identity = Identity {
        name: "svc".into(),
        host: "h".into(),
        pid: 1,
        principal: "alice".into(),
    };
    let session = match sim.commit(Command::CreateSession {
        ttl_ms: Some(TTL_MS),
        identity,
        secret_hash: Some(secret),
    }) {
        Ok(Reply::SessionCreated { session, .. }) => session,
        other => panic!("{other:?}"),
    };
    let leader = sim.wait_for_leader();
    sim.run_for(TTL_MS / 2);
    let now = sim.now;
    let node = sim.nodes[leader].as_mut().unwrap();
    let before = node.session_remaining_ms(now, session);
    for (proof, why) in common::not_alices(secret, SecretHash([6; 32])) {
        assert_eq!(
            node.keepalive(now, session, &proof),
            Err(KeepAliveError::NotYours { session, why })
        );
        assert_eq!(node.session_remaining_ms(now, session), before);
    }
    // A command with the wrong secret is refused before it reaches the log.
    let revision = node.state().revision();
    let release = Command::CloseSession {
        session,
        proof: SessionProof::new(SecretHash([6; 32]), "alice"),
    };
    assert_eq!(
        node.propose(now, release),
        Err(NodeProposeError::NotYours {
            session,
            why: NotYours::WrongSecret
        })
    );
    assert_eq!(node.state().revision(), revision);
    let accepted = node.keepalive(now, session, &SessionProof::new(secret, "alice"));
    assert_eq!(accepted, Ok(TTL_MS));
    assert_eq!(node.session_remaining_ms(now, session), Some(TTL_MS));
    assert!(before < Some(TTL_MS), "{before:?}");
}

// ---- waiting acquires: the node answers each once, when its wait ends ----

fn waiting(session: SessionId, request: u64, key: &str, timeout_ms: Option<u64>) -> Command {
    common::acquire_of(
        session,
        request,
        key,
        LockMode::Exclusive,
        Some(Wait { timeout_ms }),
    )
}

/// Proposes at the ready leader without waiting for the answer: (leader, proposal).
fn propose_waiting(sim: &mut Sim, command: Command) -> (usize, u64) {
    let leader = sim.wait_for_leader();
    let now = sim.now;
    let proposal = sim.nodes[leader]
        .as_mut()
        .unwrap()
        .propose(now, command)
        .unwrap();
    sim.drain(leader);
    (leader, proposal.0)
}

/// Every reply node `at` gave to `proposal` so far.
fn replies_to(sim: &Sim, at: usize, proposal: u64) -> Vec<Outcome> {
    sim.replies
        .iter()
        .filter(|(i, p, _)| *i == at && *p == proposal)
        .map(|(_, _, outcome)| outcome.clone())
        .collect()
}

/// Keeps `sessions` alive for `ms`.
fn keep_all_alive_for(sim: &mut Sim, sessions: &[SessionId], ms: u64) {
    let end = sim.now.add_ms(ms);
    while sim.now < end {
        for session in sessions {
            sim.keepalive(*session).unwrap();
        }
        sim.run_for(100.min(end.ms_since(sim.now)).max(1));
    }
}

fn release(sim: &mut Sim, session: SessionId, request: u64, key: &str, token: Token) -> Outcome {
    sim.commit(common::release_of(session, request, key, token))
}

#[test]
fn a_waiting_acquire_is_answered_once_when_it_is_granted() {
    for seed in 60..=62 {
        let mut sim = Sim::new(seed);
        let holder = create_session(&mut sim, "holder");
        let waiter = create_session(&mut sim, "waiter");
        let token = acquire(&mut sim, holder, "k");
        let (leader, proposal) = propose_waiting(&mut sim, waiting(waiter, 1, "k", None));
        keep_all_alive_for(&mut sim, &[holder, waiter], 1_000);
        // Queued in the state machine, but the node holds the answer.
        assert!(replies_to(&sim, leader, proposal).is_empty(), "seed {seed}");
        assert_eq!(sim.nodes[leader].as_ref().unwrap().waits_pending(), 1);
        let released = release(&mut sim, holder, 2, "k", token);
        let Ok(Reply::Released {
            next: Some((next, granted)),
            ..
        }) = released
        else {
            panic!("seed {seed}: {released:?}")
        };
        assert_eq!(next, waiter);
        keep_all_alive_for(&mut sim, &[waiter], 500);
        assert_eq!(
            replies_to(&sim, leader, proposal),
            vec![Ok(Reply::Acquire(AcquireReply::Granted {
                token: granted,
                permit: None
            }))],
            "seed {seed}: one reply, the grant"
        );
        assert_eq!(sim.nodes[leader].as_ref().unwrap().waits_pending(), 0);
    }
}

#[test]
fn a_wait_deadline_removes_the_wait_in_log_time_and_answers_it() {
    for seed in 63..=66 {
        for crash_leader in [false, true] {
            let mut sim = Sim::new(seed);
            let holder = create_session(&mut sim, "holder");
            let quick = create_session(&mut sim, "quick");
            let patient = create_session(&mut sim, "patient");
            let token = acquire(&mut sim, holder, "k");
            let (leader, proposal) = propose_waiting(&mut sim, waiting(quick, 1, "k", Some(800)));
            let queued = sim.commit_held(waiting(patient, 1, "k", None), Some(0));
            assert_eq!(
                queued,
                Ok(Reply::Acquire(AcquireReply::Queued { position: 2 }))
            );
            if crash_leader {
                // The deadline is replicated: the next leader enforces it; the deposed
                // leader's held wait is gone with it.
                sim.crash(leader);
            }
            keep_all_alive_for(
                &mut sim,
                &[holder, quick, patient],
                800 + 2 * ELECTION_MS_MAX + 500,
            );
            for node in sim.live() {
                let info = node.state().inspect("ns", "k", sim.now).unwrap();
                let waiters: Vec<SessionId> = info.waiters.iter().map(|w| w.session).collect();
                assert_eq!(waiters, vec![patient], "seed {seed} crash {crash_leader}");
                let events = node
                    .state()
                    .watch(
                        picket_core::locks::Revision(1),
                        &WatchFilter::default(),
                        100,
                    )
                    .unwrap()
                    .events;
                let removed = EventKind::WaitRemoved {
                    session: quick,
                    cause: ReleaseCause::WaitExpired,
                };
                assert!(events.iter().any(|e| e.kind == removed), "seed {seed}");
                // Removed at or after its deadline in log time.
                let at = events.iter().find(|e| e.kind == removed).unwrap().time;
                let queued_at = events
                    .iter()
                    .find(
                        |e| matches!(e.kind, EventKind::Queued { session, .. } if session == quick),
                    )
                    .unwrap()
                    .time;
                assert!(
                    at.ms_since(queued_at) >= 800,
                    "seed {seed}: removed at {at}"
                );
            }
            if !crash_leader {
                let expired = picket_core::locks::LockError::WaitExpired {
                    session: quick,
                    namespace: "ns".into(),
                    key: "k".into(),
                    timeout_ms: 800,
                };
                assert_eq!(replies_to(&sim, leader, proposal), vec![Err(expired)]);
            }
            // The holder releases: the patient waiter is next, the expired one never granted.
            let released = release(&mut sim, holder, 2, "k", token);
            assert!(
                matches!(released, Ok(Reply::Released { next: Some((s, _)), .. }) if s == patient),
                "seed {seed}: {released:?}"
            );
        }
    }
}

#[test]
fn a_release_after_a_wait_deadline_never_hands_the_key_to_that_wait() {
    // The release is proposed the moment the deadline has passed, before the leader's own
    // `ExpireWaits` (its timer has not fired): at cluster version 1 the expiry goes first in the
    // release's batch, at 2 the release removes the expired wait at the head of the queue
    // itself; either way the key goes to the next live wait, never to the expired one (found by
    // the simulation's waits-end checker, seed 50), and the expired one is answered as expired.
    for (seed, version) in (70..=73).flat_map(|seed| [(seed, 1), (seed, 2)]) {
        let mut sim = Sim::at_cluster_version(seed, version);
        let first = sim.nodes[0].as_ref().unwrap();
        assert_eq!(first.state().cluster_version(), version);
        let holder = create_session(&mut sim, "holder");
        let quick = create_session(&mut sim, "quick");
        let patient = create_session(&mut sim, "patient");
        let token = acquire(&mut sim, holder, "k");
        let (leader, proposal) = propose_waiting(&mut sim, waiting(quick, 1, "k", Some(100)));
        let queued_at = sim.now;
        let queued = sim.commit_held(waiting(patient, 1, "k", None), Some(0));
        assert_eq!(
            queued,
            Ok(Reply::Acquire(AcquireReply::Queued { position: 2 }))
        );
        // Just past the deadline, with no timer stepped in between (well within an election
        // timeout: the leader stays).
        sim.now = sim.now.max(queued_at.add_ms(120));
        let released = release(&mut sim, holder, 2, "k", token);
        assert!(
            matches!(released, Ok(Reply::Released { next: Some((s, _)), .. }) if s == patient),
            "seed {seed}: {released:?}"
        );
        keep_all_alive_for(&mut sim, &[quick, patient], 500);
        let expired = picket_core::locks::LockError::WaitExpired {
            session: quick,
            namespace: "ns".into(),
            key: "k".into(),
            timeout_ms: 100,
        };
        assert_eq!(
            replies_to(&sim, leader, proposal),
            vec![Err(expired)],
            "seed {seed}: the expired wait is answered as expired, once (failed: {:?})",
            sim.failed
        );
        // Where the wait was removed: at cluster version 1 by the `ExpireWaits` the leader put
        // right before the release (the revision before it); at 2 by the release itself, in its
        // own revision, with no command of its own in the log.
        for node in sim.live() {
            let events = node
                .state()
                .watch(Revision(1), &WatchFilter::default(), 100)
                .unwrap()
                .events;
            let revision_of = |kind: &dyn Fn(&EventKind) -> bool| {
                events.iter().find(|e| kind(&e.kind)).unwrap().revision
            };
            let removed = revision_of(&|k| {
                *k == EventKind::WaitRemoved {
                    session: quick,
                    cause: ReleaseCause::WaitExpired,
                }
            });
            let released = revision_of(
                &|k| matches!(k, EventKind::Released { session, .. } if *session == holder),
            );
            let expected = if version == 1 {
                Revision(released.0 - 1)
            } else {
                released
            };
            assert_eq!(removed, expected, "seed {seed} version {version}");
        }
    }
}

#[test]
fn a_cancel_answers_the_waiting_acquire_and_after_a_grant_answers_the_grant() {
    let mut sim = Sim::new(67);
    let holder = create_session(&mut sim, "holder");
    let waiter = create_session(&mut sim, "waiter");
    let token = acquire(&mut sim, holder, "k");
    let (leader, proposal) = propose_waiting(&mut sim, waiting(waiter, 1, "k", None));
    let cancel = Command::CancelWait {
        session: waiter,
        proof: SessionProof::legacy(),
        namespace: "ns".into(),
        key: "k".into(),
    };
    let removed = Ok(Reply::WaitCancelled {
        removed: true,
        held: None,
    });
    assert_eq!(sim.commit(cancel.clone()), removed);
    let not_waiting = Ok(Reply::WaitCancelled {
        removed: false,
        held: None,
    });
    assert_eq!(sim.commit(cancel.clone()), not_waiting, "idempotent");
    sim.run_for(50);
    let cancelled = picket_core::locks::LockError::WaitCancelled {
        session: waiter,
        namespace: "ns".into(),
        key: "k".into(),
    };
    assert_eq!(replies_to(&sim, leader, proposal), vec![Err(cancelled)]);
    // A retry of the cancelled request is told the wait ended, not `Queued`.
    let retried = sim.commit_held(waiting(waiter, 1, "k", None), Some(0));
    assert!(
        matches!(
            retried,
            Err(picket_core::locks::LockError::WaitEnded { .. })
        ),
        "{retried:?}"
    );
    // Queue again, get the key, then cancel: the cancel raced the grant and answers it.
    let queued = sim.commit_held(waiting(waiter, 2, "k", None), Some(0));
    assert_eq!(
        queued,
        Ok(Reply::Acquire(AcquireReply::Queued { position: 1 }))
    );
    let Ok(Reply::Released {
        next: Some((_, granted)),
        ..
    }) = release(&mut sim, holder, 2, "k", token)
    else {
        panic!("no hand-off")
    };
    assert_eq!(
        sim.commit(cancel),
        Ok(Reply::WaitCancelled {
            removed: false,
            held: Some(granted)
        })
    );
}

#[test]
fn a_deposed_leaders_waits_fail_and_the_retry_answers_the_same_wait() {
    let mut sim = Sim::new(68);
    let holder = create_session(&mut sim, "holder");
    let waiter = create_session(&mut sim, "waiter");
    acquire(&mut sim, holder, "k");
    let (old, proposal) = propose_waiting(&mut sim, waiting(waiter, 1, "k", None));
    sim.run_for(50);
    assert_eq!(sim.nodes[old].as_ref().unwrap().waits_pending(), 1);
    sim.isolated = Some(old);
    sim.run_for(2 * ELECTION_MS_MAX + 100);
    assert!(sim.failed.contains(&(old, proposal)), "{:?}", sim.failed);
    assert!(replies_to(&sim, old, proposal).is_empty());
    assert_eq!(sim.nodes[old].as_ref().unwrap().waits_pending(), 0);
    // The same request at the new leader: still queued first, not queued twice.
    let retried = sim.commit_held(waiting(waiter, 1, "k", None), Some(0));
    assert_eq!(
        retried,
        Ok(Reply::Acquire(AcquireReply::Queued { position: 1 }))
    );
    let new = sim.wait_for_leader();
    let info = sim.nodes[new]
        .as_ref()
        .unwrap()
        .state()
        .inspect("ns", "k", sim.now)
        .unwrap();
    assert_eq!(info.queue_depth, 1);
}

#[test]
fn pending_waits_are_bounded_and_the_bound_is_a_clear_error() {
    let mut sim = Sim::new(69);
    let leader = sim.wait_for_leader();
    let mut cfg = config(leader, 69, 1);
    cfg.waits_pending_max = 1;
    let holder = create_session(&mut sim, "holder");
    let first = create_session(&mut sim, "first");
    let second = create_session(&mut sim, "second");
    acquire(&mut sim, holder, "k");
    // Restart the leader with a bound of one pending wait.
    sim.crash(leader);
    sim.boots[leader] += 1;
    let node = Node::new(cfg, sim.durable[leader].clone(), Instant::ZERO).unwrap();
    sim.nodes[leader] = Some(node);
    sim.drain(leader);
    let mut bounded = None;
    for _ in 0..100 {
        match sim.leader() {
            Some(l) if l == leader => {
                bounded = Some(leader);
                break;
            }
            // Another node leads: depose it so that the bounded node can take over.
            Some(other) => {
                sim.isolated = Some(other);
                sim.run_for(2 * ELECTION_MS_MAX);
                sim.isolated = None;
            }
            None => sim.run_for(50),
        }
    }
    let leader = bounded.expect("the bounded node leads at some point");
    keep_all_alive_for(&mut sim, &[holder, first, second], 100);
    let (_, _) = propose_waiting(&mut sim, waiting(first, 1, "k", None));
    let now = sim.now;
    let refused = sim.nodes[leader]
        .as_mut()
        .unwrap()
        .propose(now, waiting(second, 1, "k", None));
    assert_eq!(refused, Err(NodeProposeError::TooManyWaits { max: 1 }));
    // A try (no wait) is not a wait and is not refused.
    let tried = sim.nodes[leader].as_mut().unwrap().propose(
        now,
        common::acquire_of(second, 2, "k", LockMode::Exclusive, None),
    );
    assert!(tried.is_ok(), "{tried:?}");
}

/// The cluster version (docs/upgrades.md): a log whose first membership states none starts at
/// 1 (release 0.1's); commands of version 2 are refused before the log holds them; only the
/// ready leader proposes the step, every replica applies it, and it is on the audit record.
#[test]
fn the_cluster_version_starts_at_the_first_memberships_and_only_the_leader_steps_it() {
    use picket_core::locks::{Actor, AuditAction, Role, CLUSTER_VERSION};
    let mut sim = Sim::new(41);
    let leader = sim.wait_for_leader();
    create_session(&mut sim, "a");
    for node in sim.live() {
        assert_eq!(node.state().cluster_version(), 1, "no stated version: 1");
    }
    let now = sim.now;
    let admin = Actor::new("ada", &[Role::ClassAdmin]);
    let record = Command::RecordSnapshotSave {
        actor: admin.clone(),
    };
    let node = sim.nodes[leader].as_mut().unwrap();
    assert_eq!(
        node.propose(now, record.clone()),
        Err(NodeProposeError::ClusterVersionTooLow {
            needs: 2,
            current: 1
        })
    );
    // A client cannot propose the step; a follower does not.
    let step = Command::SetClusterVersion {
        version: 2,
        reason: "test".into(),
    };
    assert_eq!(
        node.propose(now, step),
        Err(NodeProposeError::LeaderOnlyCommand)
    );
    let follower = (leader + 1) % 3;
    let refused = sim.nodes[follower]
        .as_mut()
        .unwrap()
        .propose_cluster_version(now, 2, "test".into());
    assert!(refused.is_err(), "{refused:?}");
    let revision = sim.nodes[leader].as_ref().unwrap().state().revision();
    sim.nodes[leader]
        .as_mut()
        .unwrap()
        .propose_cluster_version(now, CLUSTER_VERSION, "every member supports it".into())
        .unwrap();
    sim.drain(leader);
    sim.run_for(200);
    for node in sim.live() {
        let state = node.state();
        assert_eq!(state.cluster_version(), CLUSTER_VERSION);
        assert_eq!(
            state.revision().0,
            revision.0 + 1,
            "the step takes a revision"
        );
        let record = state.snapshot().audit.last().cloned().unwrap();
        assert_eq!(record.action, AuditAction::ClusterVersionSet);
        assert_eq!(record.actor, "picketd");
        assert!(
            record
                .reason
                .starts_with("cluster version 1 -> 2: every member"),
            "{}",
            record.reason
        );
    }
    // Not again: the version only rises.
    let leader = sim.wait_for_leader();
    let now = sim.now;
    assert!(sim.nodes[leader]
        .as_mut()
        .unwrap()
        .propose_cluster_version(now, CLUSTER_VERSION, "again".into())
        .is_err());
    // Version 2's commands are accepted now.
    assert_eq!(sim.commit(record), Ok(Reply::SnapshotSaveRecorded));
    // A replica restarted from its disk replays to the same version.
    sim.crash(follower);
    sim.restart(follower);
    sim.run_for(500);
    let restarted = sim.nodes[follower].as_ref().unwrap();
    assert_eq!(restarted.state().cluster_version(), CLUSTER_VERSION);
}
