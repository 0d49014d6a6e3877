//! Scripted tests of the `Node` (replica + lock state machine + leader-local sessions and
//! waits), in the style of `paxos_scripts.rs` and etcd raft's `testdata/*.txt`.
//!
//! Each file in `core/testdata/node/` is a list of blocks:
//!
//! ```text
//! # comment
//! command arg=value ...
//! ----
//! what the command produced, one line per event ("ok" when nothing)
//! ```
//!
//! The world is deterministic: disks are synchronous (a `Persist` is durable and acknowledged
//! at once), messages wait in the recipient's inbox until `deliver-msgs` or `stabilize` hands
//! them over, and time moves only with `tick`. By default only what a client or an operator
//! sees is printed (replies, failed proposals, role changes); `verbose=true` on `stabilize`,
//! `tick` or `deliver-msgs` also prints each message and persist.
//!
//! Commands:
//! - `setup nodes=3 leader=1 [window=N] [cluster-version=V]`: starts the nodes and lets only
//!   `leader` time out, so it is elected and ready (the election preamble is not printed);
//!   `window`: the pipeline window in slots (default 64), to queue proposals behind a full one;
//!   `cluster-version`: the version the log starts at, as `picketd run --init` records it in the
//!   first membership (default: none recorded, so 1, release 0.1's log).
//! - `tick ms=N [verbose=true]`: moves time, firing every timeout that falls due (each followed
//!   by delivery of all messages until the network is quiet).
//! - `deliver-msgs node=I [count=N] [verbose=true]`: hands node I the messages in its inbox
//!   (the first N), without delivering what they cause.
//! - `stabilize [verbose=true]`: delivers messages until none is left (no timeout fires).
//! - `create-session node=I name=A [ttl=MS] [secret=B]` (secret: the hash is 32 bytes B),
//!   `acquire node=I session=S key=K req=R [wait=true] [timeout=MS] [hold=MS] [shared=true]
//!   [secret=B]`,
//!   `release node=I session=S key=K token=T req=R [secret=B]`,
//!   `cancel-wait node=I session=S key=K [secret=B]`, `close-session node=I session=S
//!   [secret=B]`: propose at node I; prints `pN` (the proposal) or the refusal. The reply
//!   comes as `nI: reply pN ...` once applied.
//! - `keepalive node=I session=S [secret=B]`: the leader's answer.
//! - `crash node=I`, `restart node=I`, `isolate node=I` (drops its messages both ways),
//!   `heal`.
//! - `status`: role, leader, applied slot, revision, waits held, sessions with deadlines.
//! - `log node=I`: the batches node I applied, one line per slot: its log time and its
//!   commands (what a replica of any release reads from the log).
//! - `check-replay node=I`: applies node I's log (from its disk) to two fresh state machines
//!   and checks that both reach node I's state (the same digest): applying is a function of the
//!   log.
//! - `check-holder node=I key=K session=S|none`, `check-waiting node=I key=K session=S
//!   position=P|none`, `check-session node=I session=S live=true|false`: print `ok`, or
//!   `FAILED: ...` into the output (a difference from the file, never a panic mid-script).
//!
//! Regenerate with `UPDATE_TESTDATA=1 cargo test -p picket-core --test node_scripts` and review
//! the diff (a `FAILED` check is never written: the update refuses it).

use std::collections::{BTreeSet, VecDeque};

use picket_core::locks::{
    Command, Identity, LockConfig, LockMode, LockStateMachine, RequestId, SecretHash, SessionId,
    SessionProof, Token, Wait,
};
use picket_core::node::{Action, Node, NodeConfig, NodeDurable, NodeMessage, Proposal};
use picket_core::paxos::{self, Input, Membership, NodeId, Schedule, Slot, Value};
use picket_core::testkit::script::Line;
use picket_core::time::Instant;

mod common;

const NAMESPACE: &str = "ns";

type Msg = NodeMessage;

/// The Node's own readings of a command line.
trait NodeLine {
    /// The node index (0-based) of `node=I` (1-based, as printed).
    fn node(&self) -> usize;
    fn session(&self) -> SessionId;
    fn key(&self) -> String;
    fn proof(&self) -> SessionProof;
}

impl NodeLine for Line {
    fn node(&self) -> usize {
        self.num("node") as usize - 1
    }

    fn session(&self) -> SessionId {
        SessionId(self.num("session"))
    }

    fn key(&self) -> String {
        self.str("key").to_string()
    }

    fn proof(&self) -> SessionProof {
        match self.opt_num("secret") {
            Some(b) => SessionProof::new(secret_hash(b), ""),
            None => SessionProof::legacy(),
        }
    }
}

fn secret_hash(byte: u64) -> SecretHash {
    SecretHash([u8::try_from(byte).expect("secret is one byte"); 32])
}

fn config(index: usize, nodes: usize, boot: u64, window: usize) -> NodeConfig {
    let members = (1..=nodes as u64).map(NodeId).collect();
    let mut replica = paxos::Config::new(NodeId(index as u64 + 1), members, 1);
    replica.window_slots = window;
    replica.election_timeout_ms_min = 150;
    replica.election_timeout_ms_max = 300;
    replica.heartbeat_ms = 50;
    NodeConfig {
        replica,
        locks: LockConfig::default(),
        boot,
        compact_every_slots: 0,
        waits_pending_max: 8,
    }
}

/// The nodes, their disks and the network.
struct World {
    now: Instant,
    nodes: Vec<Option<Node>>,
    durable: Vec<NodeDurable>,
    boots: Vec<u64>,
    /// Messages for each node, in the order they were sent.
    inbox: Vec<VecDeque<(NodeId, Msg)>>,
    isolated: BTreeSet<usize>,
    /// The leader's pipeline window in slots (`setup window=N`; default 64).
    window: usize,
    out: Vec<String>,
    verbose: bool,
}

impl World {
    fn new(count: usize, window: usize, cluster_version: Option<u32>) -> World {
        let mut durable = NodeDurable::default();
        if let Some(version) = cluster_version {
            // What `picketd run --init` records: the first membership, with its cluster version.
            let voters = (1..=count as u64).map(NodeId).collect();
            let first = Membership {
                cluster_version: version,
                ..Membership::voters(voters)
            };
            durable.schedule = Some(Schedule::new(first));
        }
        let mut world = World {
            now: Instant::ZERO,
            nodes: Vec::new(),
            durable: vec![durable; count],
            boots: vec![1; count],
            inbox: vec![VecDeque::new(); count],
            isolated: BTreeSet::new(),
            window,
            out: Vec::new(),
            verbose: false,
        };
        for i in 0..count {
            let durable = world.durable[i].clone();
            let node =
                Node::new(config(i, count, 1, window), durable, Instant::ZERO).expect("config");
            world.nodes.push(Some(node));
            world.drain(i);
        }
        world
    }

    fn node(&mut self, i: usize) -> &mut Node {
        self.nodes[i]
            .as_mut()
            .unwrap_or_else(|| panic!("n{} is crashed", i + 1))
    }

    fn say(&mut self, line: String) {
        self.out.push(line);
    }

    /// Handles node `i`'s actions: persists at once, sends to inboxes, prints the rest.
    fn drain(&mut self, i: usize) {
        let n = i + 1;
        while let Some(action) = self.nodes[i].as_mut().and_then(Node::poll_action) {
            match action {
                Action::Persist(persist) => {
                    if self.verbose {
                        let slots: Vec<String> = persist
                            .accepted
                            .iter()
                            .map(|(s, _, _)| s.to_string())
                            .collect();
                        let promised = persist.promised.map_or("-".into(), |b| b.to_string());
                        self.say(format!(
                            "n{n}: persist promised={promised} accepted=[{}]",
                            slots.join(", ")
                        ));
                    }
                    self.durable[i].apply_persist(&persist);
                    let now = self.now;
                    self.node(i)
                        .step(now, Input::Persisted { id: persist.id })
                        .expect("persist acknowledged");
                }
                Action::Send { to, msg } => {
                    let j = to.0 as usize - 1;
                    let dropped = self.isolated.contains(&i) || self.isolated.contains(&j);
                    if self.verbose {
                        let what = if dropped { " (dropped)" } else { "" };
                        self.say(format!("n{n} -> {to}: {}{what}", kind(&msg)));
                    }
                    if !dropped {
                        self.inbox[j].push_back((NodeId(n as u64), msg));
                    }
                }
                Action::Reply {
                    proposal, outcome, ..
                } => self.say(format!("n{n}: reply p{} {outcome:?}", proposal.0)),
                Action::ProposalFailed {
                    proposal,
                    leader_hint,
                } => self.say(format!(
                    "n{n}: proposal p{} failed (leader hint {})",
                    proposal.0,
                    leader_hint.map_or("-".into(), |l| l.to_string())
                )),
                Action::RoleChanged { role, leader } => self.say(format!(
                    "n{n}: role {role:?} leader={}",
                    leader.map_or("-".into(), |l| l.to_string())
                )),
                Action::ReadReply { read, answer, .. } => {
                    self.say(format!("n{n}: read r{} {answer:?}", read.0))
                }
                Action::ReadFailed { read, .. } => {
                    self.say(format!("n{n}: read r{} failed", read.0))
                }
                Action::Applied { .. } => {}
            }
        }
    }

    /// Delivers the first `count` messages of node `i`'s inbox; returns how many it took.
    fn deliver(&mut self, i: usize, count: usize) -> usize {
        let batch: Vec<(NodeId, Msg)> = {
            let inbox = &mut self.inbox[i];
            let take = count.min(inbox.len());
            inbox.drain(..take).collect()
        };
        let delivered = batch.len();
        for (from, msg) in batch {
            if self.nodes[i].is_none() {
                continue;
            }
            if self.verbose {
                self.say(format!("n{} <- {from}: {}", i + 1, kind(&msg)));
            }
            let now = self.now;
            // A message a node refuses (e.g. from a stale ballot) is its business, not an error
            // of the script.
            let _ = self.node(i).step(now, Input::Message { from, msg });
            self.drain(i);
        }
        delivered
    }

    fn stabilize(&mut self) {
        while (0..self.nodes.len()).any(|i| !self.inbox[i].is_empty()) {
            for i in 0..self.nodes.len() {
                let count = self.inbox[i].len();
                self.deliver(i, count);
            }
        }
    }

    /// Fires the timeouts of `only` (or of every node) due up to `now + ms`, in time order,
    /// stabilizing after each.
    fn tick(&mut self, ms: u64, only: Option<usize>) {
        let end = self.now.add_ms(ms);
        loop {
            let due = (0..self.nodes.len())
                .filter(|i| only.is_none_or(|o| o == *i))
                .filter_map(|i| {
                    let at = self.nodes[i].as_ref()?.poll_timeout()?;
                    Some((at, i))
                })
                .min();
            let Some((at, i)) = due.filter(|(at, _)| *at <= end) else {
                break;
            };
            self.now = self.now.max(at);
            let now = self.now;
            self.node(i).step(now, Input::Timeout).expect("timeout");
            self.drain(i);
            self.stabilize();
        }
        self.now = end;
    }

    fn propose(&mut self, i: usize, command: Command, answer_within_ms: Option<u64>) {
        let now = self.now;
        let proposal = Proposal {
            command,
            answer_within_ms,
        };
        let result = self.node(i).propose(now, proposal);
        match result {
            Ok(proposal) => self.say(format!("n{}: proposed p{}", i + 1, proposal.0)),
            Err(refused) => self.say(format!("n{}: refused: {refused}", i + 1)),
        }
        self.drain(i);
    }

    fn status(&mut self) {
        for i in 0..self.nodes.len() {
            let line = match &self.nodes[i] {
                None => format!("n{}: crashed", i + 1),
                Some(node) => format!(
                    "n{}: {:?}{} leader={} applied={} revision={} waits={} sessions-tracked={}",
                    i + 1,
                    node.role(),
                    if node.is_ready_leader() { " ready" } else { "" },
                    node.leader().map_or("-".into(), |l| l.to_string()),
                    node.replica().slot_applied(),
                    node.state().revision().0,
                    node.waits_pending(),
                    node.sessions_tracked(),
                ),
            };
            self.say(line);
        }
    }

    /// The values node `i` applied, slot by slot, from its disk (nothing is compacted here).
    fn applied_log(&mut self, i: usize) -> Vec<(Slot, Value<picket_core::node::NodeCommand>)> {
        let applied = self.node(i).replica().slot_applied();
        self.durable[i]
            .accepted
            .range(..=applied)
            .map(|(slot, (_, value))| (*slot, value.clone()))
            .collect()
    }

    fn log(&mut self, i: usize) {
        for (slot, value) in self.applied_log(i) {
            let line = match value {
                Value::Batch { stamp, commands } => {
                    let kinds: Vec<String> = commands
                        .iter()
                        .map(|c| first_word(&format!("{:?}", c.command)))
                        .collect();
                    format!("n{} slot {slot} at {stamp}: {}", i + 1, kinds.join(", "))
                }
                Value::Noop => format!("n{} slot {slot}: no-op", i + 1),
                Value::Reconfig(m) => format!("n{} slot {slot}: membership {m}", i + 1),
            };
            self.say(line);
        }
    }

    /// Node `i`'s log applied to a fresh state machine (`None`: it holds a membership change,
    /// which the scripts never make).
    fn replay(&mut self, i: usize) -> Option<LockStateMachine> {
        let mut sm = LockStateMachine::new(LockConfig::default());
        let first = self.node(i).replica().schedule().entries()[0]
            .1
            .cluster_version;
        sm.begin_cluster_version(first);
        for (_, value) in self.applied_log(i) {
            match value {
                Value::Batch { stamp, commands } => {
                    sm.apply_batch(stamp, commands.into_iter().map(|c| c.command));
                }
                Value::Noop => {}
                Value::Reconfig(_) => return None,
            }
        }
        Some(sm)
    }

    fn check_replay(&mut self, i: usize) {
        let own = self.node(i).state().digest();
        let (a, b) = (self.replay(i), self.replay(i));
        let ok = match (a, b) {
            (Some(a), Some(b)) if a.digest() == own && b.digest() == own => Ok(()),
            (Some(a), Some(b)) => Err(format!(
                "replays reach digests {:x} and {:x}, n{} is at {own:x}",
                a.digest(),
                b.digest(),
                i + 1
            )),
            _ => Err("the log holds a membership change (not replayed here)".into()),
        };
        self.check(ok);
    }

    fn check(&mut self, ok: Result<(), String>) {
        match ok {
            Ok(()) => self.say("ok".into()),
            Err(why) => self.say(format!("FAILED: {why}")),
        }
    }

    fn run(&mut self, line: &Line) {
        self.verbose = line.flag("verbose");
        match line.name.as_str() {
            "setup" => unreachable!("setup starts a script"),
            "tick" => self.tick(line.num("ms"), None),
            "stabilize" => self.stabilize(),
            "deliver-msgs" => {
                let i = line.node();
                let count = line.opt_num("count").map_or(usize::MAX, |c| c as usize);
                let delivered = self.deliver(i, count);
                self.say(format!("n{}: {delivered} delivered", i + 1));
            }
            "create-session" => {
                let name = line.str("name").to_string();
                let command = Command::CreateSession {
                    secret_hash: line.opt_num("secret").map(secret_hash),
                    ttl_ms: line.opt_num("ttl"),
                    identity: Identity {
                        name: name.clone(),
                        host: "host".into(),
                        pid: 1,
                        principal: String::new(),
                    },
                };
                self.propose(line.node(), command, None);
            }
            "acquire" => {
                let command = Command::Acquire {
                    session: line.session(),
                    proof: line.proof(),
                    request: RequestId(line.num("req")),
                    namespace: NAMESPACE.into(),
                    key: line.key(),
                    wait: line.flag("wait").then_some(Wait {
                        timeout_ms: line.opt_num("timeout"),
                    }),
                    mode: if line.flag("shared") {
                        LockMode::Shared
                    } else {
                        LockMode::Exclusive
                    },
                };
                self.propose(line.node(), command, line.opt_num("hold"));
            }
            "release" => {
                let command = Command::Release {
                    session: line.session(),
                    proof: line.proof(),
                    request: RequestId(line.num("req")),
                    namespace: NAMESPACE.into(),
                    key: line.key(),
                    token: Token(line.num("token")),
                };
                self.propose(line.node(), command, None);
            }
            "cancel-wait" => {
                let command = Command::CancelWait {
                    session: line.session(),
                    proof: line.proof(),
                    namespace: NAMESPACE.into(),
                    key: line.key(),
                };
                self.propose(line.node(), command, None);
            }
            "close-session" => {
                let command = Command::CloseSession {
                    session: line.session(),
                    proof: line.proof(),
                };
                self.propose(line.node(), command, None);
            }
            "keepalive" => {
                let (i, now) = (line.node(), self.now);
                let result = self.node(i).keepalive(now, line.session(), &line.proof());
                let said = match result {
                    Ok(ttl_ms) => format!("n{}: keepalive ok ttl={ttl_ms}", i + 1),
                    Err(refused) => format!("n{}: keepalive refused: {refused}", i + 1),
                };
                self.say(said);
                self.drain(i);
            }
            "crash" => {
                let i = line.node();
                self.nodes[i] = None;
                self.inbox[i].clear();
                self.say(format!("n{}: crashed", i + 1));
            }
            "restart" => {
                let i = line.node();
                self.boots[i] += 1;
                let cfg = config(i, self.nodes.len(), self.boots[i], self.window);
                let node = Node::new(cfg, self.durable[i].clone(), Instant::ZERO).expect("restart");
                self.nodes[i] = Some(node);
                self.say(format!("n{}: restarted (boot {})", i + 1, self.boots[i]));
                self.drain(i);
            }
            "isolate" => {
                self.isolated.insert(line.node());
            }
            "heal" => self.isolated.clear(),
            "status" => self.status(),
            "log" => self.log(line.node()),
            "check-replay" => self.check_replay(line.node()),
            "check-holder" => {
                let (node, key) = (self.node(line.node()), line.key());
                let sm = node.state();
                let ok = match line.str("session") {
                    "none" => match sm.inspect(NAMESPACE, &key, sm.time()) {
                        Ok(info) => match info.holder {
                            None => Ok(()),
                            Some(h) => Err(format!("{key} is held by session {}", h.session.0)),
                        },
                        Err(error) => Err(format!("inspect {key}: {error}")),
                    },
                    _ => match sm.holder_token(line.session(), NAMESPACE, &key) {
                        Some(_) => Ok(()),
                        None => Err(format!(
                            "session {} does not hold {key}",
                            line.num("session")
                        )),
                    },
                };
                self.check(ok);
            }
            "check-waiting" => {
                let node = self.node(line.node());
                let position = node
                    .state()
                    .wait_position(line.session(), NAMESPACE, &line.key());
                let expected = match line.str("position") {
                    "none" => None,
                    _ => Some(line.num("position") as u32),
                };
                let ok = if position == expected {
                    Ok(())
                } else {
                    Err(format!("position {position:?}, expected {expected:?}"))
                };
                self.check(ok);
            }
            "check-session" => {
                let node = self.node(line.node());
                let live = node.state().session(line.session()).is_some();
                let expected = line.flag("live");
                let ok = if live == expected {
                    Ok(())
                } else {
                    Err(format!("session {} live={live}", line.num("session")))
                };
                self.check(ok);
            }
            other => panic!("unknown command {other}"),
        }
    }
}

/// The message's kind, e.g. `Accept` (the full `Debug` form carries whole batches).
fn kind(msg: &Msg) -> String {
    first_word(&format!("{msg:?}"))
}

/// The variant name at the start of a `Debug` form.
fn first_word(text: &str) -> String {
    text.split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// `setup nodes=N leader=L`: elects L without printing the preamble.
fn setup(line: &Line) -> (World, String) {
    let count = line.num("nodes") as usize;
    let leader = line.num("leader") as usize - 1;
    let window = line.opt_num("window").map_or(64, |w| w as usize);
    let cluster_version = line
        .opt_num("cluster-version")
        .map(|v| u32::try_from(v).expect("a cluster version"));
    let mut world = World::new(count, window, cluster_version);
    for _ in 0..100 {
        if world.nodes[leader]
            .as_ref()
            .is_some_and(Node::is_ready_leader)
        {
            world.out.clear();
            return (world, format!("n{} leads, ready", leader + 1));
        }
        world.tick(50, Some(leader));
    }
    panic!("setup: n{} did not become a ready leader", leader + 1);
}

/// Runs one script file: `setup` first, then each command on the world it made.
fn run_file(name: &str) {
    let mut world: Option<World> = None;
    common::script::run_file(&common::script::path("node", name), |block, at| {
        let line = Line::parse(&block.command);
        if line.name == "setup" {
            let (w, said) = setup(&line);
            world = Some(w);
            return vec![said];
        }
        let w = world
            .as_mut()
            .unwrap_or_else(|| panic!("{at}: a script starts with setup"));
        w.run(&line);
        std::mem::take(&mut w.out)
    });
}

#[test]
fn sessions() {
    run_file("sessions");
}

#[test]
fn waits() {
    run_file("waits");
}

#[test]
fn wait_deadlines() {
    run_file("wait_deadlines");
}

#[test]
fn wait_deadlines_v2() {
    run_file("wait_deadlines_v2");
}

#[test]
fn leader_change() {
    run_file("leader_change");
}

/// Every script in the directory has a test above (a new file is not silently skipped).
#[test]
fn every_script_runs() {
    common::script::assert_all_named(
        "node",
        &[
            "leader_change",
            "sessions",
            "wait_deadlines",
            "wait_deadlines_v2",
            "waits",
        ],
    );
}

/// A check that does not hold prints `FAILED: ...` (a difference from the file) and the
/// script goes on.
#[test]
fn a_failed_check_is_printed_not_panicked() {
    let (mut world, said) = setup(&Line::parse("setup nodes=3 leader=2"));
    assert_eq!(said, "n2 leads, ready");
    world.run(&Line::parse("check-session node=1 session=99 live=true"));
    world.run(&Line::parse("check-holder node=3 key=k session=4"));
    assert_eq!(
        world.out,
        [
            "FAILED: session 99 live=false",
            "FAILED: session 4 does not hold k"
        ]
    );
}
