//! Scripted interaction tests (etcd raft `testdata/*.txt` style) over the testkit cluster.
//!
//! Each file in `core/testdata/paxos/` is a list of blocks:
//!
//! ```text
//! # comment
//! command arg=value ...
//! ----
//! the exact actions the command produced, one per line ("ok" when none)
//! ```
//!
//! A block's output is compared with the file; a difference fails the test. Regenerate with
//! `UPDATE_TESTDATA=1 cargo test -p picket-core --test paxos_scripts` and review the diff.
//! `check-*` commands assert on the cluster and fail the test on mismatch in both modes.

use std::fmt;

use picket_core::paxos::{NodeId, RoleKind, Slot, Value};
use picket_core::testkit::script::Line;
use picket_core::testkit::{Cluster, ClusterConfig, History, Paxos};

mod common;

/// A command that prints without quotes.
#[derive(Clone, PartialEq, Eq)]
struct Cmd(String);

impl fmt::Debug for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Sim = Cluster<Paxos<Cmd, History<Cmd>>>;

/// `key=I` as a node id.
fn node(a: &Line, key: &str) -> NodeId {
    NodeId(a.num(key))
}

fn nodes(a: &Line, key: &str) -> Vec<NodeId> {
    a.nums(key).into_iter().map(NodeId).collect()
}

fn role_name(r: RoleKind) -> &'static str {
    match r {
        RoleKind::Follower => "Follower",
        RoleKind::PreCandidate => "PreCandidate",
        RoleKind::Candidate => "Candidate",
        RoleKind::Leader => "Leader",
        RoleKind::Recovering => "Recovering",
        RoleKind::Removed => "Removed",
    }
}

/// Runs one command; returns its output lines. `check-*` commands panic on mismatch.
fn run(sim: &mut Option<Sim>, command: &str, at: &str) -> Vec<String> {
    let a = Line::parse(command);
    let name = a.name.clone();
    if name == "cluster" {
        let mut cfg = ClusterConfig::reliable(a.num("nodes") as usize, a.num("seed"));
        if a.has("window") {
            cfg.window_slots = a.num("window") as usize;
        }
        if a.has("batch") {
            cfg.batch_commands_max = a.num("batch") as usize;
        }
        if a.has("lease") {
            cfg.read_lease_ms = a.num("lease");
        }
        let mut c = Sim::new(cfg);
        c.trace = Some(Vec::new());
        *sim = Some(c);
        return vec!["ok".into()];
    }
    let c = sim.as_mut().expect("cluster first");
    let mut out = Vec::new();
    match name.as_str() {
        "tick" => c.run_for(a.num("ms")),
        "stabilize" => c.settle(),
        "propose" => {
            let cmds: Vec<Cmd> = a
                .str("cmds")
                .split(',')
                .map(|s| Cmd(s.to_string()))
                .collect();
            if let Err(e) = c.propose(node(&a, "node"), cmds) {
                out.push(format!("error: {e}"));
            }
        }
        "read" => match c.read_index(node(&a, "node")) {
            Ok(id) => out.push(format!("read r{}", id.0)),
            Err(e) => out.push(format!("error: {e}")),
        },
        "crash" => c.crash(node(&a, "node")),
        "restart" => c.restart(node(&a, "node")),
        "lose-disk" => {
            let n = node(&a, "node");
            c.crash_losing_disk(n);
            c.restart(n);
        }
        "partition" => c.partition(&nodes(&a, "nodes")),
        "heal" => c.heal(),
        "drop" => {
            let k = c.drop_in_flight(node(&a, "from"), node(&a, "to"));
            out.push(format!("dropped {k}"));
        }
        "compact" => {
            let n = node(&a, "node");
            if !c.compact(n) {
                out.push("error: compact refused".into());
            }
        }
        "status" => {
            for id in c.ids() {
                let line = match c.replica(id) {
                    None => format!("{id}: down"),
                    Some(r) => format!(
                        "{id}: {} promised={} leader={} applied={} snapshot={} amnesiac={}",
                        role_name(r.role()),
                        r.ballot_promised(),
                        r.leader().map_or("-".into(), |l| l.to_string()),
                        r.slot_applied(),
                        r.slot_snapshot(),
                        r.is_amnesiac()
                    ),
                };
                out.push(line);
            }
            return out;
        }
        "check-leader" => {
            let want = a.has("node").then(|| node(&a, "node"));
            assert_eq!(c.leader(), want, "{at}: leader");
        }
        "check-role" => {
            let r = c.replica(node(&a, "node")).expect("node up");
            assert_eq!(role_name(r.role()), a.str("role"), "{at}: role");
        }
        "check-ballot" => {
            let r = c.replica(node(&a, "node")).expect("node up");
            assert_eq!(
                r.ballot_promised().to_string(),
                a.str("ballot"),
                "{at}: ballot"
            );
        }
        "check-applied" => {
            for n in nodes(&a, "nodes") {
                let applied = c.node(n).applied;
                assert_eq!(applied, Slot(a.num("slot")), "{at}: {n} applied");
            }
        }
        "check-chosen" => {
            let slot = Slot(a.num("slot"));
            let want = a.args.get("cmds");
            let got = c.chosen(slot).cloned();
            match (want.map(String::as_str), got) {
                (None | Some("none"), None) => {}
                (Some("noop"), Some(Value::Noop)) => {}
                (Some(w), Some(Value::Batch { commands, .. })) => {
                    let w: Vec<Cmd> = w.split(',').map(|s| Cmd(s.to_string())).collect();
                    assert_eq!(commands, w, "{at}: chosen at {slot}");
                }
                (w, g) => panic!("{at}: chosen at {slot}: want {w:?}, got {g:?}"),
            }
        }
        "check-amnesiac" => {
            let r = c.replica(node(&a, "node")).expect("node up");
            assert_eq!(
                r.is_amnesiac().to_string(),
                a.str("value"),
                "{at}: amnesiac"
            );
        }
        "check-read-ready" => {
            let n = node(&a, "node");
            let ready: Vec<u64> = c.node(n).reads_ready.iter().map(|r| r.0).collect();
            assert!(
                ready.contains(&a.num("id")),
                "{at}: read not ready: {ready:?}"
            );
        }
        "check-read-pending" => {
            let n = node(&a, "node");
            let id = a.num("id");
            let done = c.node(n).reads_ready.iter().chain(&c.node(n).reads_failed);
            assert!(
                !done.map(|r| r.0).any(|r| r == id),
                "{at}: read r{id} is not pending"
            );
        }
        "check-read-failed" => {
            let n = node(&a, "node");
            let failed: Vec<u64> = c.node(n).reads_failed.iter().map(|r| r.0).collect();
            assert!(
                failed.contains(&a.num("id")),
                "{at}: read not failed: {failed:?}"
            );
            let ready: Vec<u64> = c.node(n).reads_ready.iter().map(|r| r.0).collect();
            assert!(!ready.contains(&a.num("id")), "{at}: failed read was ready");
        }
        other => panic!("{at}: unknown command {other}"),
    }
    out.append(c.trace.as_mut().expect("trace"));
    c.check_prefixes_agree();
    if out.is_empty() {
        out.push("ok".into());
    }
    out
}

fn run_file(name: &str) {
    let mut sim = None;
    common::script::run_file(&common::script::path("paxos", name), |block, at| {
        run(&mut sim, &block.command, at)
    });
}

macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_file(stringify!($name));
            }
        )*
    };
}

scripts!(
    normal_commit,
    leader_crash_mid_pipeline,
    duelling_proposers,
    minority_partition,
    rejoin_without_deposing,
    follower_catchup,
    snapshot_transfer,
    lost_disk,
    read_index,
    lease_read,
);

/// Every script in the directory has a test above (a new file is not silently skipped).
#[test]
fn every_script_runs() {
    common::script::assert_all_named(
        "paxos",
        &[
            "duelling_proposers",
            "follower_catchup",
            "leader_crash_mid_pipeline",
            "lease_read",
            "lost_disk",
            "minority_partition",
            "normal_commit",
            "read_index",
            "rejoin_without_deposing",
            "snapshot_transfer",
        ],
    );
}
