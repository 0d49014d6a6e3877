//! Three drivers in one thread over `SimDisk`s and a manual clock; the test moves the messages.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use picket_core::locks::{
    AcquireReply, Command, Identity, LockConfig, LockMode, Reply, RequestId, SessionId,
    SessionProof, Wait,
};
use picket_core::node::{Node, NodeConfig};
use picket_core::paxos::{self, NodeId};
use picket_storage::{LogConfig, SimDisk, StorageConfig};
use tokio::sync::{mpsc, oneshot};

use super::*;

mod cluster_version;
mod waits;
use waits::{
    a_cancel_answers_the_held_call_and_is_idempotent,
    a_held_acquire_ends_when_its_session_is_closed,
    a_held_acquire_is_answered_by_the_grant_or_at_its_deadline,
    a_wait_deadline_is_enforced_by_the_cluster_and_answers_the_held_call,
};

/// Every test runs twice: persisting inline and on the persist thread.
macro_rules! in_both_persist_modes {
    ($($name:ident),* $(,)?) => {
        mod both_modes {
            $(
                mod $name {
                    #[test]
                    fn inline() {
                        super::super::$name(super::super::PersistMode::Inline);
                    }
                    #[test]
                    fn thread() {
                        super::super::$name(super::super::PersistMode::Thread);
                    }
                }
            )*
        }
    };
}
use crate::config::PersistMode;
use crate::node::clock::ManualClock;
use crate::node::durable::DurableStore;

struct Harness {
    mode: PersistMode,
    clock: Arc<ManualClock>,
    drivers: Vec<Driver<SimDisk, ManualClock>>,
    outs: Vec<Outs>,
    disks: Vec<SimDisk>,
}

/// The receiving ends of a driver's channels to the other members.
type Outs = Vec<(NodeId, mpsc::Receiver<NodeMessage>)>;

/// The driver of `node` (of cluster `test`, started as `boot`) over `store`, wired by a channel
/// to each other one of `members`, whose receiving ends come with it.
fn wired_driver(
    node: Node,
    store: DurableStore<SimDisk>,
    mode: PersistMode,
    clock: &Arc<ManualClock>,
    boot: u64,
    members: &[NodeId],
) -> (Driver<SimDisk, ManualClock>, Outs) {
    let id = node.replica().id();
    let mut peers_out = BTreeMap::new();
    let mut out = Vec::new();
    for other in members.iter().filter(|m| **m != id) {
        let (tx, rx) = mpsc::channel(100_000);
        peers_out.insert(*other, tx);
        out.push((*other, rx));
    }
    let endpoints = members
        .iter()
        .map(|m| (*m, format!("http://node-{}:7400", m.0)))
        .collect();
    let driver = Driver::new(DriverParts {
        node,
        store,
        persist: mode,
        clock: clock.clone(),
        limits: DriverLimits::default(),
        boot,
        cluster_id: "test".into(),
        endpoints,
        http_endpoints: BTreeMap::new(),
        peers_out,
        dialer: None,
        member_set: None,
        metrics: Default::default(),
    });
    (driver, out)
}

fn harness(batch_commands_max: usize, mode: PersistMode) -> Harness {
    harness_compacting(batch_commands_max, 0, mode)
}

/// [`harness`] with the nodes compacting every `compact_every_slots` applied slots (0: never).
fn harness_compacting(
    batch_commands_max: usize,
    compact_every_slots: u64,
    mode: PersistMode,
) -> Harness {
    let clock = ManualClock::new(1_000_000);
    let members: Vec<NodeId> = (1..=3).map(NodeId).collect();
    let mut drivers = Vec::new();
    let mut outs = Vec::new();
    let mut disks = Vec::new();
    for id in 1..=3u64 {
        let disk = SimDisk::new(id);
        let storage = StorageConfig {
            log: LogConfig {
                preallocate_bytes: 0,
                ..LogConfig::default()
            },
            ..StorageConfig::default()
        };
        let (store, recovered) =
            DurableStore::open(disk.clone(), Path::new("/data"), storage).unwrap();
        let mut replica = paxos::Config::new(NodeId(id), members.clone(), id);
        replica.batch_commands_max = batch_commands_max;
        let node = Node::new(
            NodeConfig {
                replica,
                locks: LockConfig::default(),
                boot: recovered.boot,
                compact_every_slots,
                waits_pending_max: picket_core::node::WAITS_PENDING_MAX_DEFAULT,
            },
            recovered.durable,
            clock.now(),
        )
        .unwrap();
        let (driver, out) = wired_driver(node, store, mode, &clock, recovered.boot, &members);
        drivers.push(driver);
        outs.push(out);
        disks.push(disk);
    }
    Harness {
        mode,
        clock,
        drivers,
        outs,
        disks,
    }
}

impl Harness {
    /// One turn of every driver, then every queued message delivered.
    fn pump(&mut self) {
        for driver in &mut self.drivers {
            driver.turn().unwrap();
        }
        for (i, out) in self.outs.iter_mut().enumerate() {
            for (to, rx) in out.iter_mut() {
                while let Ok(msg) = rx.try_recv() {
                    let delivered =
                        self.drivers[to.0 as usize - 1]
                            .handle()
                            .peer_message(PeerInput {
                                from: NodeId(i as u64 + 1),
                                msg,
                            });
                    assert!(delivered);
                }
            }
        }
    }

    fn settle(&mut self, ms: u64) {
        for _ in 0..ms / 5 {
            self.clock.advance(5);
            self.pump();
        }
    }

    fn leader(&mut self) -> usize {
        for _ in 0..400 {
            if let Some(i) = self.drivers.iter().position(|d| d.node().is_ready_leader()) {
                return i;
            }
            self.settle(5);
        }
        panic!("no leader elected");
    }

    fn propose(
        &self,
        at: usize,
        command: Command,
        wait_ms: u64,
    ) -> oneshot::Receiver<Result<Answered, Refusal>> {
        let (reply, rx) = oneshot::channel();
        self.drivers[at]
            .handle()
            .submit(Request::Propose {
                proposal: Proposal {
                    command,
                    answer_within_ms: (wait_ms > 0).then_some(wait_ms),
                },
                reply,
            })
            .unwrap();
        rx
    }

    fn answer(
        &mut self,
        rx: &mut oneshot::Receiver<Result<Answered, Refusal>>,
    ) -> Result<Answered, Refusal> {
        for _ in 0..200 {
            self.settle(5);
            if let Ok(answer) = rx.try_recv() {
                return answer;
            }
        }
        panic!("no answer");
    }

    fn session(&mut self, at: usize) -> SessionId {
        let mut rx = self.propose(at, create_session(), 0);
        match self.answer(&mut rx).unwrap().outcome {
            Ok(Reply::SessionCreated { session, .. }) => session,
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn create_session() -> Command {
    Command::CreateSession {
        secret_hash: None,
        ttl_ms: Some(60_000),
        identity: Identity {
            name: "test".into(),
            ..Identity::default()
        },
    }
}

fn acquire(session: SessionId, request: u64, wait: bool) -> Command {
    Command::Acquire {
        session,
        proof: SessionProof::legacy(),
        request: RequestId(request),
        namespace: "orders".into(),
        key: "k".into(),
        mode: LockMode::Exclusive,
        wait: wait.then_some(Wait::UNBOUNDED),
    }
}

fn proposals_taken_in_one_turn_are_persisted_with_one_log_sync(mode: PersistMode) {
    let mut h = harness(1, mode); // one command per slot: every proposal is its own Persist
    let leader = h.leader();
    h.settle(100);
    let commits_before = h.drivers[leader].counters().group_commits;
    let ops_before = h.drivers[leader].counters().persist_ops;
    let syncs_before = h.drivers[leader].store_counters().log_syncs;
    let disk_syncs_before = h.disks[leader].sync_data_count();
    let mut replies: Vec<_> = (0..20)
        .map(|_| h.propose(leader, create_session(), 0))
        .collect();
    h.drivers[leader].turn().unwrap();
    let ops = h.drivers[leader].counters().persist_ops - ops_before;
    assert!(ops >= 20, "20 proposals in 20 slots: {ops} persists");
    assert_eq!(
        h.drivers[leader].counters().group_commits - commits_before,
        1
    );
    assert_eq!(
        h.drivers[leader].store_counters().log_syncs - syncs_before,
        1
    );
    assert_eq!(h.disks[leader].sync_data_count() - disk_syncs_before, 1);
    for rx in &mut replies {
        let answer = h.answer(rx).unwrap();
        assert!(matches!(answer.outcome, Ok(Reply::SessionCreated { .. })));
    }
}

/// The requests taken in one turn are proposed together: with room in the window they still
/// share one slot (one Accept, one log record per replica) instead of taking one slot each.
fn proposals_taken_in_one_turn_share_one_slot(mode: PersistMode) {
    let mut h = harness(256, mode);
    let leader = h.leader();
    h.settle(100);
    let chosen_before = h.drivers[leader].node().replica().slot_chosen();
    let mut replies: Vec<_> = (0..20)
        .map(|_| h.propose(leader, create_session(), 0))
        .collect();
    h.settle(50);
    let mut sessions = Vec::new();
    for rx in &mut replies {
        match h.answer(rx).unwrap().outcome {
            Ok(Reply::SessionCreated { session, .. }) => sessions.push(session),
            other => panic!("expected a session, got {other:?}"),
        }
    }
    sessions.dedup();
    assert_eq!(sessions.len(), 20, "20 distinct sessions");
    let chosen = h.drivers[leader].node().replica().slot_chosen();
    assert_eq!(chosen.0 - chosen_before.0, 1, "20 commands in one slot");
}

fn a_follower_answers_not_leader_with_the_leaders_endpoint(mode: PersistMode) {
    let mut h = harness(64, mode);
    let leader = h.leader();
    h.settle(100);
    let follower = (leader + 1) % 3;
    let mut rx = h.propose(follower, create_session(), 0);
    let refusal = h.answer(&mut rx).unwrap_err();
    let Refusal::Propose {
        error: picket_core::node::NodeProposeError::Replica(paxos::ProposeError::NotLeader { .. }),
        leader: hint,
    } = refusal
    else {
        panic!("not a NotLeader: {refusal:?}");
    };
    assert_eq!(hint.node_id, Some(leader as u64 + 1));
    assert_eq!(
        hint.endpoint.as_deref(),
        Some(format!("http://node-{}:7400", leader + 1).as_str())
    );
}

impl Harness {
    /// Replaces member `i` by a replica that lost its disk (fresh storage, `lost` set).
    fn lose_disk(&mut self, i: usize) {
        let id = i as u64 + 1;
        let members: Vec<NodeId> = (1..=3).map(NodeId).collect();
        let disk = SimDisk::new(100 + id);
        let storage = StorageConfig {
            log: LogConfig {
                preallocate_bytes: 0,
                ..LogConfig::default()
            },
            ..StorageConfig::default()
        };
        let (store, mut recovered) =
            DurableStore::open(disk.clone(), Path::new("/data"), storage).unwrap();
        recovered.durable.lost = true;
        let node = Node::new(
            NodeConfig {
                replica: paxos::Config::new(NodeId(id), members.clone(), 77),
                locks: LockConfig::default(),
                boot: 7,
                compact_every_slots: 0,
                waits_pending_max: picket_core::node::WAITS_PENDING_MAX_DEFAULT,
            },
            recovered.durable,
            self.clock.now(),
        )
        .unwrap();
        let (driver, out) = wired_driver(node, store, self.mode, &self.clock, 7, &members);
        self.drivers[i] = driver;
        self.outs[i] = out;
        self.disks[i] = disk;
    }
}

/// Issue 17: every replica's compactions go to background saves (the driver's turns go on),
/// the driver's turns take their results, and the snapshot each saved is what a crash recovers.
fn compactions_are_saved_in_the_background_and_polled_by_the_driver(mode: PersistMode) {
    let mut h = harness_compacting(1, 8, mode);
    let leader = h.leader();
    h.settle(100);
    for _ in 0..40 {
        h.session(leader);
    }
    // The saves run on their own threads: turn until each replica has taken a result.
    for _ in 0..10_000 {
        if h.drivers
            .iter()
            .all(|d| d.store_counters().snapshots_saved > 0)
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        h.settle(5);
    }
    for (i, driver) in h.drivers.iter().enumerate() {
        let counters = driver.store_counters();
        assert!(
            counters.snapshots_background > 0,
            "replica {i}: {counters:?}"
        );
        assert!(counters.snapshots_saved > 0, "replica {i}: {counters:?}");
        assert_eq!(counters.snapshot_save_failures, 0, "replica {i}");
        assert!(driver.node().replica().slot_snapshot() >= paxos::Slot(8));
        // The log the compactions cut was handed off to be freed, not freed in the turn.
        assert!(
            driver.counters().retired_slots_freed >= 8,
            "replica {i}: {:?}",
            driver.counters()
        );
        let crashed = h.disks[i].fork();
        crashed.crash();
        let storage = StorageConfig {
            log: LogConfig {
                preallocate_bytes: 0,
                ..LogConfig::default()
            },
            ..StorageConfig::default()
        };
        let (_, recovered) = DurableStore::open(crashed, Path::new("/data"), storage).unwrap();
        let slot = recovered.durable.snapshot.as_ref().map(|(s, _)| *s);
        // Replicas compact on grids shifted by their rank, the first time at least half a step
        // (4 slots) in: a replica's saved snapshot may be older than its newest compaction
        // (a save skipped while another ran).
        assert!(
            slot.is_some_and(|s| s >= paxos::Slot(4)),
            "replica {i} recovered snapshot {slot:?}"
        );
    }
}

fn a_replica_that_lost_its_disk_recovers_through_the_driver(mode: PersistMode) {
    let mut h = harness(64, mode);
    let leader = h.leader();
    h.settle(100);
    for _ in 0..5 {
        h.session(leader);
    }
    let victim = (leader + 1) % 3;
    h.lose_disk(victim);
    assert!(h.drivers[victim].node().replica().is_amnesiac());
    for _ in 0..400 {
        h.settle(5);
        if !h.drivers[victim].node().replica().is_amnesiac() {
            break;
        }
    }
    assert!(
        !h.drivers[victim].node().replica().is_amnesiac(),
        "still amnesiac; roles: {:?}",
        h.drivers
            .iter()
            .map(|d| (d.node().role(), d.node().leader()))
            .collect::<Vec<_>>()
    );
    let leader = h.leader();
    let s = h.session(leader);
    assert!(s.0 > 5);
}

fn the_digest_feed_reports_applied_revisions_and_replicas_agree_on_them(mode: PersistMode) {
    let mut h = harness(64, mode);
    let mut feeds: Vec<_> = h
        .drivers
        .iter()
        .map(|d| d.handle().subscribe_digests())
        .collect();
    let leader = h.leader();
    let session = h.session(leader);
    let mut rx = h.propose(leader, acquire(session, 1, false), 0);
    h.answer(&mut rx).unwrap();
    h.settle(200);
    let mut seen: Vec<BTreeMap<Revision, u64>> = vec![BTreeMap::new(); 3];
    for (i, feed) in feeds.iter_mut().enumerate() {
        while let Ok((revision, digest)) = feed.try_recv() {
            seen[i].insert(revision, digest);
        }
    }
    for (i, driver) in h.drivers.iter().enumerate() {
        let state = driver.node().state();
        assert!(
            state.revision().0 >= 2,
            "replica {i} at {}",
            state.revision()
        );
        assert_eq!(
            seen[i].get(&state.revision()),
            Some(&state.digest()),
            "replica {i}: the feed's last digest is its state's"
        );
    }
    for (revision, digest) in &seen[leader] {
        for (i, other) in seen.iter().enumerate() {
            if let Some(theirs) = other.get(revision) {
                assert_eq!(theirs, digest, "replica {i} at revision {revision}");
            }
        }
    }
}

/// A failed fsync stops the driver with the error, and what it was persisting is never
/// answered as done (inline and on the persist thread alike).
fn a_failed_fsync_stops_the_driver_without_acknowledging(mode: PersistMode) {
    let mut h = harness(64, mode);
    let leader = h.leader();
    h.settle(100);
    h.disks[leader].fail_next_syncs(1_000);
    let mut rx = h.propose(leader, create_session(), 0);
    let result = h.drivers[leader].turn();
    assert!(matches!(result, Err(DriverError::Store(_))), "{result:?}");
    assert!(
        !matches!(rx.try_recv(), Ok(Ok(_))),
        "a proposal whose persist failed was answered"
    );
    // What comes after is not acknowledged either, and the error still names the write
    // failure (inline: the store's again; on the thread: the failure it reported).
    let mut later = h.propose(leader, create_session(), 0);
    let again = h.drivers[leader].turn();
    match (&again, mode) {
        (Err(DriverError::Store(_)), PersistMode::Inline) => {}
        (Err(DriverError::PersistThread(why)), PersistMode::Thread) => {
            assert!(why.contains("write failure"), "{why}")
        }
        _ => panic!("{mode:?}: {again:?}"),
    }
    assert!(!matches!(later.try_recv(), Ok(Ok(_))));
}

in_both_persist_modes!(
    a_failed_fsync_stops_the_driver_without_acknowledging,
    proposals_taken_in_one_turn_are_persisted_with_one_log_sync,
    proposals_taken_in_one_turn_share_one_slot,
    a_follower_answers_not_leader_with_the_leaders_endpoint,
    a_held_acquire_is_answered_by_the_grant_or_at_its_deadline,
    a_wait_deadline_is_enforced_by_the_cluster_and_answers_the_held_call,
    a_cancel_answers_the_held_call_and_is_idempotent,
    a_held_acquire_ends_when_its_session_is_closed,
    compactions_are_saved_in_the_background_and_polled_by_the_driver,
    a_replica_that_lost_its_disk_recovers_through_the_driver,
    the_digest_feed_reports_applied_revisions_and_replicas_agree_on_them,
);
