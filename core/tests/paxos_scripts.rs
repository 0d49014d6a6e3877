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

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use picket_core::paxos::{NodeId, RoleKind, Slot, Value};
use picket_core::testkit::{Cluster, ClusterConfig, History};

/// A command that prints without quotes.
#[derive(Clone, PartialEq, Eq)]
struct Cmd(String);

impl fmt::Debug for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Sim = Cluster<Cmd, History<Cmd>>;

struct Block {
    line: usize,
    command: String,
    expected: Vec<String>,
}

fn parse(text: &str) -> (Vec<String>, Vec<Block>) {
    // Comments directly above a command are kept with it (as a prefix list per block).
    let mut blocks = Vec::new();
    let mut comments = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    let mut pending_comments: Vec<String> = Vec::new();
    while let Some((i, line)) = lines.next() {
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with('#') {
            pending_comments.push(line.to_string());
            continue;
        }
        let command = line.to_string();
        let sep = lines.next().map(|(_, l)| l);
        assert_eq!(
            sep,
            Some("----"),
            "line {}: expected ---- after command",
            i + 1
        );
        let mut expected = Vec::new();
        while let Some((j, l)) = lines.peek() {
            if l.trim().is_empty() {
                break;
            }
            // A separator here means a command lost its blank line and became output.
            assert_ne!(
                *l,
                "----",
                "line {}: missing blank line before a command",
                j + 1
            );
            expected.push(l.to_string());
            lines.next();
        }
        comments.push(pending_comments.join("\n"));
        pending_comments.clear();
        blocks.push(Block {
            line: i + 1,
            command,
            expected,
        });
    }
    (comments, blocks)
}

fn args(command: &str) -> (String, BTreeMap<String, String>) {
    let mut parts = command.split_whitespace();
    let name = parts.next().expect("command name").to_string();
    let mut map = BTreeMap::new();
    for p in parts {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        map.insert(k.to_string(), v.to_string());
    }
    (name, map)
}

fn node(a: &BTreeMap<String, String>, key: &str) -> NodeId {
    NodeId(
        a.get(key)
            .unwrap_or_else(|| panic!("missing {key}="))
            .parse()
            .expect("node id"),
    )
}

fn num(a: &BTreeMap<String, String>, key: &str) -> u64 {
    a.get(key)
        .unwrap_or_else(|| panic!("missing {key}="))
        .parse()
        .expect("number")
}

fn nodes(a: &BTreeMap<String, String>, key: &str) -> Vec<NodeId> {
    a.get(key)
        .unwrap_or_else(|| panic!("missing {key}="))
        .split(',')
        .map(|s| NodeId(s.parse().expect("node id")))
        .collect()
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
    let (name, a) = args(command);
    if name == "cluster" {
        let mut cfg = ClusterConfig::reliable(num(&a, "nodes") as usize, num(&a, "seed"));
        if a.contains_key("window") {
            cfg.window_slots = num(&a, "window") as usize;
        }
        if a.contains_key("batch") {
            cfg.batch_commands_max = num(&a, "batch") as usize;
        }
        if a.contains_key("lease") {
            cfg.read_lease_ms = num(&a, "lease");
        }
        let mut c = Sim::new(cfg);
        c.trace = Some(Vec::new());
        *sim = Some(c);
        return vec!["ok".into()];
    }
    let c = sim.as_mut().expect("cluster first");
    let mut out = Vec::new();
    match name.as_str() {
        "tick" => c.run_for(num(&a, "ms")),
        "stabilize" => c.settle(),
        "propose" => {
            let cmds: Vec<Cmd> = a["cmds"].split(',').map(|s| Cmd(s.to_string())).collect();
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
            let want = a.get("node").map(|s| NodeId(s.parse().expect("node")));
            assert_eq!(c.leader(), want, "{at}: leader");
        }
        "check-role" => {
            let r = c.replica(node(&a, "node")).expect("node up");
            assert_eq!(role_name(r.role()), a["role"], "{at}: role");
        }
        "check-ballot" => {
            let r = c.replica(node(&a, "node")).expect("node up");
            assert_eq!(r.ballot_promised().to_string(), a["ballot"], "{at}: ballot");
        }
        "check-applied" => {
            for n in nodes(&a, "nodes") {
                let applied = c.node(n).applied;
                assert_eq!(applied, Slot(num(&a, "slot")), "{at}: {n} applied");
            }
        }
        "check-chosen" => {
            let slot = Slot(num(&a, "slot"));
            let want = a.get("cmds");
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
            assert_eq!(r.is_amnesiac().to_string(), a["value"], "{at}: amnesiac");
        }
        "check-read-ready" => {
            let n = node(&a, "node");
            let ready: Vec<u64> = c.node(n).reads_ready.iter().map(|r| r.0).collect();
            assert!(
                ready.contains(&num(&a, "id")),
                "{at}: read not ready: {ready:?}"
            );
        }
        "check-read-pending" => {
            let n = node(&a, "node");
            let id = num(&a, "id");
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
                failed.contains(&num(&a, "id")),
                "{at}: read not failed: {failed:?}"
            );
            let ready: Vec<u64> = c.node(n).reads_ready.iter().map(|r| r.0).collect();
            assert!(
                !ready.contains(&num(&a, "id")),
                "{at}: failed read was ready"
            );
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

// The golden files are test fixtures: the no-IO rule is for the library, not its tests.
#[allow(clippy::disallowed_methods)]
fn run_file(path: &Path) {
    let text = std::fs::read_to_string(path).expect("read script");
    let (comments, blocks) = parse(&text);
    let update = std::env::var_os("UPDATE_TESTDATA").is_some();
    let mut sim = None;
    let mut rewritten = String::new();
    let mut mismatches = Vec::new();
    for (b, comment) in blocks.iter().zip(comments) {
        let at = format!("{}:{}", path.display(), b.line);
        let got = run(&mut sim, &b.command, &at);
        if got != b.expected {
            mismatches.push(format!(
                "{at}: {}\n--- expected\n{}\n+++ got\n{}",
                b.command,
                b.expected.join("\n"),
                got.join("\n")
            ));
        }
        if !comment.is_empty() {
            rewritten += &comment;
            rewritten += "\n";
        }
        rewritten += &format!("{}\n----\n{}\n\n", b.command, got.join("\n"));
    }
    if update {
        std::fs::write(path, rewritten.trim_end().to_string() + "\n").expect("write script");
    } else {
        assert!(
            mismatches.is_empty(),
            "output differs (UPDATE_TESTDATA=1 to regenerate):\n{}",
            mismatches.join("\n\n")
        );
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/paxos")
        .join(format!("{name}.txt"))
}

macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_file(&script(stringify!($name)));
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
