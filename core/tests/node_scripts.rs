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
//! The world (the testkit `Cluster` in held weather) is deterministic: disks are synchronous (a `Persist` is durable and acknowledged
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

use picket_core::locks::{
    Command, Identity, LockConfig, LockMode, LockStateMachine, RequestId, SecretHash, SessionId,
    SessionProof, Token, Wait,
};
use picket_core::node::{
    Action, Node, NodeCommand, NodeConfig, NodeDurable, NodeMessage, NodeSnapshot, Proposal,
};
use picket_core::paxos::{self, Membership, NodeId, PersistId, Schedule, Slot, Value};
use picket_core::testkit::script::Line;
use picket_core::testkit::{Cluster, Event, Host, Routed, Weather};
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

/// The Node scripts' [`Host`]: a whole [`Node`] on each machine, in held weather (messages
/// wait in inboxes until delivered, disks acknowledge at once), printing what a client or an
/// operator sees.
struct Scripted;

/// The knobs of `setup`.
struct Setup {
    count: usize,
    /// The leader's pipeline window in slots (`setup window=N`; default 64).
    window: usize,
}

/// What the scripts print.
#[derive(Default)]
struct Printer {
    out: Vec<String>,
    verbose: bool,
}

impl Host for Scripted {
    type Command = NodeCommand;
    type Snapshot = NodeSnapshot;
    type Stepped = Node;
    type Action = Action;
    /// The machine's boot count (a restart is a new boot).
    type Local = u64;
    type Watch = Printer;
    type Config = Setup;

    fn weather(_: &Setup) -> Weather {
        Weather {
            seed: 0,
            drop_per_mille: 0,
            duplicate_per_mille: 0,
            delay_ms_max: 0,
            persist_delay_ms_max: 0,
            held: true,
        }
    }

    fn receive(node: &mut Node, now: Instant, from: NodeId, msg: Msg) {
        // A message a node refuses (e.g. from a stale ballot) is its business, not an error of
        // the script.
        node.receive(now, from, msg);
    }

    fn tick(node: &mut Node, now: Instant) {
        node.tick(now);
    }

    fn persisted(node: &mut Node, now: Instant, id: PersistId) {
        node.persisted(now, id).expect("persist acknowledged");
    }

    fn poll_action(node: &mut Node) -> Option<Action> {
        node.poll_action()
    }

    fn poll_timeout(node: &Node) -> Option<Instant> {
        node.poll_timeout()
    }

    fn route(action: Action) -> Routed<Self> {
        match action {
            Action::Persist(persist) => Routed::Persist(persist),
            Action::Send { to, msg } => Routed::Send { to, msg },
            other => Routed::Local(other),
        }
    }

    /// Prints what a client or an operator sees.
    fn handle(c: &mut Cluster<Self>, id: NodeId, action: Action) {
        let n = id.0;
        let line = match action {
            Action::Reply {
                proposal, outcome, ..
            } => format!("n{n}: reply p{} {outcome:?}", proposal.0),
            Action::ProposalFailed {
                proposal,
                leader_hint,
            } => format!(
                "n{n}: proposal p{} failed (leader hint {})",
                proposal.0,
                leader_hint.map_or("-".into(), |l| l.to_string())
            ),
            Action::RoleChanged { role, leader } => format!(
                "n{n}: role {role:?} leader={}",
                leader.map_or("-".into(), |l| l.to_string())
            ),
            Action::ReadReply { read, answer, .. } => format!("n{n}: read r{} {answer:?}", read.0),
            Action::ReadFailed { read, .. } => format!("n{n}: read r{} failed", read.0),
            Action::Applied { .. } => return,
            Action::Persist(_) | Action::Send { .. } => unreachable!("routed to disk and network"),
        };
        c.watch.out.push(line);
    }

    /// With `verbose=true`, prints each persist and message too.
    fn observe(c: &mut Cluster<Self>, event: Event<'_, Self>) {
        if !c.watch.verbose {
            return;
        }
        let line = match event {
            Event::Action {
                id,
                action: Action::Persist(persist),
            } => {
                let slots: Vec<String> = persist
                    .accepted
                    .iter()
                    .map(|(s, _, _)| s.to_string())
                    .collect();
                let promised = persist.promised.map_or("-".into(), |b| b.to_string());
                format!(
                    "n{}: persist promised={promised} accepted=[{}]",
                    id.0,
                    slots.join(", ")
                )
            }
            Event::Sent {
                from,
                to,
                msg,
                dropped,
            } => {
                let what = if dropped { " (dropped)" } else { "" };
                format!("n{} -> {to}: {}{what}", from.0, kind(msg))
            }
            Event::Delivered { from, to, msg } => format!("n{} <- {from}: {}", to.0, kind(msg)),
            Event::Action { .. } | Event::Durable { .. } => return,
        };
        c.watch.out.push(line);
    }
}

/// The nodes, their disks and the network: the testkit cluster with the [`Scripted`] host.
struct World {
    c: Cluster<Scripted>,
}

/// Node `i`'s id (`i` is 0-based, as in `NodeLine::node`).
fn id(i: usize) -> NodeId {
    NodeId(i as u64 + 1)
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
        let mut c = Cluster::empty(Setup { count, window }, Printer::default());
        for i in 0..count {
            let node = Node::new(config(i, count, 1, window), durable.clone(), Instant::ZERO)
                .expect("config");
            let id = c.seat(Some(node), durable.clone(), 1);
            c.drain(id);
        }
        World { c }
    }

    fn node(&mut self, i: usize) -> &mut Node {
        self.c
            .up_mut(id(i))
            .unwrap_or_else(|| panic!("n{} is crashed", i + 1))
    }

    fn say(&mut self, line: String) {
        self.c.watch.out.push(line);
    }

    fn drain(&mut self, i: usize) {
        self.c.drain(id(i));
    }

    fn tick(&mut self, ms: u64, only: Option<usize>) {
        self.c.tick(ms, only.map(id));
    }

    fn propose(&mut self, i: usize, command: Command, answer_within_ms: Option<u64>) {
        let now = self.c.now;
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
        for i in 0..self.c.cfg.count {
            let line = match self.c.up(id(i)) {
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
        self.c
            .seat_of(id(i))
            .durable
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
        self.c.watch.verbose = line.flag("verbose");
        match line.name.as_str() {
            "setup" => unreachable!("setup starts a script"),
            "tick" => self.tick(line.num("ms"), None),
            "stabilize" => self.c.stabilize(),
            "deliver-msgs" => {
                let i = line.node();
                let count = line.opt_num("count").map_or(usize::MAX, |c| c as usize);
                let delivered = self.c.deliver(id(i), count);
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
                let (i, now) = (line.node(), self.c.now);
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
                self.c.take_down(id(i));
                self.say(format!("n{}: crashed", i + 1));
            }
            "restart" => {
                let i = line.node();
                let seat = self.c.seat_mut(id(i));
                seat.local += 1;
                let boot = seat.local;
                let durable = seat.durable.clone();
                let cfg = config(i, self.c.cfg.count, boot, self.c.cfg.window);
                let node = Node::new(cfg, durable, Instant::ZERO).expect("restart");
                self.c.put_up(id(i), node);
                self.say(format!("n{}: restarted (boot {boot})", i + 1));
                self.drain(i);
            }
            "isolate" => self.c.isolate(id(line.node())),
            "heal" => self.c.heal(),
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
        if world.c.up(id(leader)).is_some_and(Node::is_ready_leader) {
            world.c.watch.out.clear();
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
        std::mem::take(&mut w.c.watch.out)
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
fn crash_restart() {
    run_file("crash_restart");
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
            "crash_restart",
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
        world.c.watch.out,
        [
            "FAILED: session 99 live=false",
            "FAILED: session 4 does not hold k"
        ]
    );
}
