//! The cluster fixture, generic over what runs on each machine ([`Host`]): machines, their
//! disks and the network between them, and the two ways of moving them on.
//!
//! - **Timed** ([`Cluster::settle`], [`Cluster::run_for`]): every message is on the wire for a
//!   random delay and may be dropped or duplicated; a disk acknowledges after a random delay,
//!   and a crash loses a random suffix of what it had not acknowledged. Events are taken in time
//!   order. The property tests, the fuzzer and the Paxos scripts run this way.
//! - **Held** ([`Weather::held`]; [`Cluster::deliver`], [`Cluster::stabilize`],
//!   [`Cluster::tick`]): a message sent waits in its recipient's inbox until the test hands it
//!   over, in the order it was sent, and a disk acknowledges at once. Nothing happens that the
//!   test did not ask for, so a script can stop between two messages. The Node scripts run
//!   this way.
//!
//! Both share one book of machines ([`Seat`]), one network with the same cuts, and one way to
//! crash, restart and drain a machine. What a machine's actions mean beyond storage and the
//! network (applying a value, answering a client) is the [`Host`]'s.

use std::collections::{BTreeSet, VecDeque};
use std::fmt::Debug;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::paxos::{Durable, Message, NodeId, Persist, PersistId};
use crate::time::Instant;

/// The network's and the disks' behaviour. Probabilities are per mille.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Weather {
    /// Seeds the fixture's random choices, and names the run in a failure.
    pub seed: u64,
    pub drop_per_mille: u64,
    pub duplicate_per_mille: u64,
    pub delay_ms_max: u64,
    pub persist_delay_ms_max: u64,
    /// Messages wait in their recipient's inbox until the test delivers them, and disks
    /// acknowledge at once (see the module's documentation).
    pub held: bool,
}

/// Where one of a machine's actions goes.
pub enum Routed<H: Host> {
    /// To its disk.
    Persist(Persist<H::Command, H::Snapshot>),
    /// To the network.
    Send {
        to: NodeId,
        msg: Message<H::Command, H::Snapshot>,
    },
    /// To the host ([`Host::handle`]).
    Local(H::Action),
}

/// What the fixture shows a host as it happens ([`Host::observe`]).
pub enum Event<'a, H: Host> {
    /// An action taken out of a machine, before it is routed.
    Action { id: NodeId, action: &'a H::Action },
    /// A message handed to the network; `dropped` when a cut stopped it at once.
    Sent {
        from: NodeId,
        to: NodeId,
        msg: &'a Message<H::Command, H::Snapshot>,
        dropped: bool,
    },
    /// A message about to be stepped by its (live) recipient.
    Delivered {
        from: NodeId,
        to: NodeId,
        msg: &'a Message<H::Command, H::Snapshot>,
    },
    /// A persist reached the disk (acknowledged, or written just before a crash).
    Durable {
        id: NodeId,
        persist: &'a Persist<H::Command, H::Snapshot>,
    },
}

/// What runs on each machine, and what a test keeps beside it.
pub trait Host: Sized {
    type Command: Clone + Debug;
    type Snapshot: Clone + Debug;
    /// The sans-IO object a machine steps: a Paxos `Replica`, or a whole `Node`.
    type Stepped;
    /// What it puts out.
    type Action;
    /// What a test keeps per machine, across its crashes (e.g. the state machine a replica
    /// applies to).
    type Local;
    /// What a test keeps for the whole cluster (checkers, printed lines).
    type Watch;
    /// The test's knobs, the [`Weather`] among them.
    type Config;

    fn weather(cfg: &Self::Config) -> Weather;
    fn receive(
        s: &mut Self::Stepped,
        now: Instant,
        from: NodeId,
        msg: Message<Self::Command, Self::Snapshot>,
    );
    fn tick(s: &mut Self::Stepped, now: Instant);
    /// Storage made the persist `id` (and every one before it) durable.
    fn persisted(s: &mut Self::Stepped, now: Instant, id: PersistId);
    fn poll_action(s: &mut Self::Stepped) -> Option<Self::Action>;
    fn poll_timeout(s: &Self::Stepped) -> Option<Instant>;
    fn route(action: Self::Action) -> Routed<Self>;
    /// An action that is neither storage's nor the network's.
    fn handle(cluster: &mut Cluster<Self>, id: NodeId, action: Self::Action);
    /// Sees what happens, e.g. to print it or to check it.
    fn observe(cluster: &mut Cluster<Self>, event: Event<'_, Self>);
    /// The machine has no action left: whether the host gave it more work (it is drained
    /// again). By default, no.
    fn idle(_cluster: &mut Cluster<Self>, _id: NodeId) -> bool {
        false
    }
}

struct PendingPersist<C, S> {
    due: Instant,
    persist: Persist<C, S>,
}

/// One machine: what runs on it (`None` while it is down), its disk, and the host's own.
pub struct Seat<H: Host> {
    pub up: Option<H::Stepped>,
    /// What storage acknowledged: survives crashes (not disk loss).
    pub durable: Durable<H::Command, H::Snapshot>,
    unacked: VecDeque<PendingPersist<H::Command, H::Snapshot>>,
    pub local: H::Local,
}

struct Envelope<C, S> {
    deliver_at: Instant,
    seq: u64,
    from: NodeId,
    to: NodeId,
    msg: Message<C, S>,
}

/// The simulated cluster: machines 1..=N, their disks and the network.
pub struct Cluster<H: Host> {
    pub now: Instant,
    pub cfg: H::Config,
    rng: ChaCha8Rng,
    pub nodes: Vec<Seat<H>>,
    /// Messages on the wire (timed) or in inboxes (held), in the order they were sent.
    net: Vec<Envelope<H::Command, H::Snapshot>>,
    seq: u64,
    /// Directed links that drop everything (a partition).
    blocked: BTreeSet<(NodeId, NodeId)>,
    /// The host's watch over the whole cluster (the Paxos checker, a script's printed lines).
    pub watch: H::Watch,
    /// When `Some`, the host renders what happens here (scripted tests).
    pub trace: Option<Vec<String>>,
}

/// Events processed in one settle before the cluster is declared livelocked.
const SETTLE_STEPS_MAX: usize = 2_000_000;

impl<H: Host> Cluster<H> {
    /// A cluster of no machine yet ([`Cluster::seat`] adds them).
    pub fn empty(cfg: H::Config, watch: H::Watch) -> Self {
        Cluster {
            now: Instant::ZERO,
            rng: ChaCha8Rng::seed_from_u64(H::weather(&cfg).seed),
            nodes: Vec::new(),
            net: Vec::new(),
            seq: 0,
            blocked: BTreeSet::new(),
            watch,
            trace: None,
            cfg,
        }
    }

    /// Adds machine `nodes.len() + 1` with its disk; it is not drained ([`Cluster::drain`]).
    pub fn seat(
        &mut self,
        up: Option<H::Stepped>,
        durable: Durable<H::Command, H::Snapshot>,
        local: H::Local,
    ) -> NodeId {
        self.nodes.push(Seat {
            up,
            durable,
            unacked: VecDeque::new(),
            local,
        });
        NodeId(self.nodes.len() as u64)
    }

    fn weather(&self) -> Weather {
        H::weather(&self.cfg)
    }

    pub fn ids(&self) -> Vec<NodeId> {
        (1..=self.nodes.len() as u64).map(NodeId).collect()
    }

    pub(super) fn idx(id: NodeId) -> usize {
        id.0 as usize - 1
    }

    pub fn seat_of(&self, id: NodeId) -> &Seat<H> {
        &self.nodes[Self::idx(id)]
    }

    pub fn seat_mut(&mut self, id: NodeId) -> &mut Seat<H> {
        &mut self.nodes[Self::idx(id)]
    }

    /// What runs on `id`, if it is up.
    pub fn up(&self, id: NodeId) -> Option<&H::Stepped> {
        self.nodes[Self::idx(id)].up.as_ref()
    }

    pub fn up_mut(&mut self, id: NodeId) -> Option<&mut H::Stepped> {
        self.nodes[Self::idx(id)].up.as_mut()
    }

    pub fn is_up(&self, id: NodeId) -> bool {
        self.up(id).is_some()
    }

    pub(super) fn random(&mut self, below: u64) -> u64 {
        if below == 0 {
            0
        } else {
            self.rng.next_u64() % below
        }
    }

    /// Appends a line to the trace, when there is one.
    pub fn log(&mut self, line: String) {
        if let Some(t) = self.trace.as_mut() {
            t.push(line);
        }
    }

    // ---- machines ----

    /// Stops `id`. A random prefix of the persists not yet acknowledged reached the disk anyway
    /// (written, but the crash came before the acknowledgement); the rest is lost, and so are
    /// the messages held in its inbox. The durable state stays.
    pub fn take_down(&mut self, id: NodeId) {
        let pending = self.nodes[Self::idx(id)].unacked.len() as u64;
        let reached = self.random(pending + 1) as usize;
        let seat = &mut self.nodes[Self::idx(id)];
        seat.up = None;
        let written: Vec<_> = seat.unacked.drain(..).take(reached).collect();
        for p in written {
            self.write(id, &p.persist);
        }
        if self.weather().held {
            self.net.retain(|e| e.to != id);
        }
    }

    /// Starts `id` (down) with what runs on it; it is not drained ([`Cluster::drain`]).
    pub fn put_up(&mut self, id: NodeId, stepped: H::Stepped) {
        self.nodes[Self::idx(id)].up = Some(stepped);
    }

    /// Takes every action out of `id` and routes it.
    pub fn drain(&mut self, id: NodeId) {
        loop {
            let Some(action) = self.up_mut(id).and_then(H::poll_action) else {
                if H::idle(self, id) {
                    continue;
                }
                return;
            };
            H::observe(
                self,
                Event::Action {
                    id,
                    action: &action,
                },
            );
            match H::route(action) {
                Routed::Persist(persist) => self.persist(id, persist),
                Routed::Send { to, msg } => self.send(id, to, msg),
                Routed::Local(action) => H::handle(self, id, action),
            }
        }
    }

    /// `persist` reaches `id`'s disk.
    fn write(&mut self, id: NodeId, persist: &Persist<H::Command, H::Snapshot>) {
        self.nodes[Self::idx(id)].durable.apply_persist(persist);
        H::observe(self, Event::Durable { id, persist });
    }

    fn persist(&mut self, id: NodeId, persist: Persist<H::Command, H::Snapshot>) {
        if self.weather().held {
            self.write(id, &persist);
            let now = self.now;
            if let Some(s) = self.up_mut(id) {
                H::persisted(s, now, persist.id);
            }
            return;
        }
        let delay = self.random(self.weather().persist_delay_ms_max + 1);
        let due = self.now.add_ms(delay);
        let seat = &mut self.nodes[Self::idx(id)];
        let due = seat.unacked.back().map_or(due, |p| p.due.max(due));
        seat.unacked.push_back(PendingPersist { due, persist });
    }

    fn send(&mut self, from: NodeId, to: NodeId, msg: Message<H::Command, H::Snapshot>) {
        let dropped = self.blocked.contains(&(from, to));
        H::observe(
            self,
            Event::Sent {
                from,
                to,
                msg: &msg,
                dropped,
            },
        );
        if dropped {
            return;
        }
        let weather = self.weather();
        if self.random(1000) < weather.drop_per_mille {
            return;
        }
        let copies = if self.random(1000) < weather.duplicate_per_mille {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = self.random(weather.delay_ms_max + 1);
            self.seq += 1;
            self.net.push(Envelope {
                deliver_at: self.now.add_ms(delay),
                seq: self.seq,
                from,
                to,
                msg: msg.clone(),
            });
        }
    }

    /// Steps a message at its recipient, if it is up.
    fn hand_over(&mut self, e: Envelope<H::Command, H::Snapshot>) {
        if !self.is_up(e.to) {
            return;
        }
        H::observe(
            self,
            Event::Delivered {
                from: e.from,
                to: e.to,
                msg: &e.msg,
            },
        );
        let now = self.now;
        if let Some(s) = self.up_mut(e.to) {
            H::receive(s, now, e.from, e.msg);
        }
        self.drain(e.to);
    }

    // ---- the network ----

    /// Cuts `a` and `b` apart (both directions).
    pub fn cut(&mut self, a: NodeId, b: NodeId) {
        self.blocked.insert((a, b));
        self.blocked.insert((b, a));
    }

    /// Loses every message from `from` to `to` (the other direction still works).
    pub fn cut_one_way(&mut self, from: NodeId, to: NodeId) {
        if from != to {
            self.blocked.insert((from, to));
        }
    }

    /// Isolates the `group` from everybody else.
    pub fn partition(&mut self, group: &[NodeId]) {
        for a in self.ids() {
            for b in self.ids() {
                if group.contains(&a) != group.contains(&b) {
                    self.blocked.insert((a, b));
                }
            }
        }
    }

    /// Cuts `id` from every other machine (a machine cut off this way is also cut from another
    /// one isolated, unlike two in one [`Cluster::partition`]).
    pub fn isolate(&mut self, id: NodeId) {
        for other in self.ids() {
            if other != id {
                self.cut(id, other);
            }
        }
    }

    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    /// Drops every message in flight from `from` to `to`.
    pub fn drop_in_flight(&mut self, from: NodeId, to: NodeId) -> usize {
        let before = self.net.len();
        self.net.retain(|e| !(e.from == from && e.to == to));
        before - self.net.len()
    }

    pub fn in_flight(&self) -> usize {
        self.net.len()
    }

    // ---- timed ----

    /// Processes everything due at `now` until nothing more happens.
    pub fn settle(&mut self) {
        for step in 0.. {
            assert!(
                step < SETTLE_STEPS_MAX,
                "seed {}: livelock at {}",
                self.weather().seed,
                self.now
            );
            if !self.step_once() {
                break;
            }
        }
    }

    /// Advances time by `ms`, processing every event on the way.
    pub fn run_for(&mut self, ms: u64) {
        let end = self.now.add_ms(ms);
        loop {
            self.settle();
            match self.next_event() {
                Some(t) if t <= end => self.now = self.now.max(t),
                _ => break,
            }
        }
        self.now = end;
        self.settle();
    }

    fn next_event(&self) -> Option<Instant> {
        let net = self.net.iter().map(|e| e.deliver_at).min();
        let disks = self
            .nodes
            .iter()
            .filter_map(|n| n.unacked.front().map(|p| p.due))
            .min();
        let timers = self
            .nodes
            .iter()
            .filter_map(|n| n.up.as_ref().and_then(H::poll_timeout))
            .min();
        [net, disks, timers].into_iter().flatten().min()
    }

    /// One event due now, if any: a message, a disk acknowledgement or a timeout.
    fn step_once(&mut self) -> bool {
        let now = self.now;
        if let Some(i) = self
            .net
            .iter()
            .enumerate()
            .filter(|(_, e)| e.deliver_at <= now)
            .min_by_key(|(_, e)| (e.deliver_at, e.seq))
            .map(|(i, _)| i)
        {
            let e = self.net.remove(i);
            if !self.blocked.contains(&(e.from, e.to)) {
                self.hand_over(e);
            }
            return true;
        }
        for id in self.ids() {
            if self.nodes[Self::idx(id)]
                .unacked
                .front()
                .is_some_and(|p| p.due <= now)
            {
                self.ack_persists(id);
                return true;
            }
        }
        for id in self.ids() {
            if self.fire_timeout(id, now) {
                return true;
            }
        }
        false
    }

    /// Steps `id`'s timeout if it is due by `at`: whether it was.
    fn fire_timeout(&mut self, id: NodeId, at: Instant) -> bool {
        let now = self.now;
        let Some(s) = self.up_mut(id) else {
            return false;
        };
        if H::poll_timeout(s).is_none_or(|t| t > at) {
            return false;
        }
        H::tick(s, now);
        self.drain(id);
        true
    }

    /// Makes every due persist of `id` durable and acknowledges the last one.
    fn ack_persists(&mut self, id: NodeId) {
        let now = self.now;
        let mut last = None;
        while let Some(p) = self.nodes[Self::idx(id)]
            .unacked
            .pop_front_if(|p| p.due <= now)
        {
            self.write(id, &p.persist);
            last = Some(p.persist.id);
        }
        if let (Some(last), Some(s)) = (last, self.up_mut(id)) {
            H::persisted(s, now, last);
            self.drain(id);
        }
    }

    // ---- held ----

    /// Hands `to` the first `count` messages of its inbox, in the order they were sent (a
    /// message to a machine that is down is lost); returns how many it took.
    pub fn deliver(&mut self, to: NodeId, count: usize) -> usize {
        let mut taken = Vec::new();
        let mut kept = Vec::new();
        for e in std::mem::take(&mut self.net) {
            if e.to == to && taken.len() < count {
                taken.push(e);
            } else {
                kept.push(e);
            }
        }
        self.net = kept;
        let delivered = taken.len();
        for e in taken {
            self.hand_over(e);
        }
        delivered
    }

    /// Delivers messages, inbox by inbox, until none is left (no timeout fires).
    pub fn stabilize(&mut self) {
        while !self.net.is_empty() {
            for id in self.ids() {
                let count = self.net.iter().filter(|e| e.to == id).count();
                self.deliver(id, count);
            }
        }
    }

    /// Fires the timeouts of `only` (or of every machine) due up to `now + ms`, in time order,
    /// stabilizing after each.
    pub fn tick(&mut self, ms: u64, only: Option<NodeId>) {
        let end = self.now.add_ms(ms);
        loop {
            let due = self
                .ids()
                .into_iter()
                .filter(|id| only.is_none_or(|o| o == *id))
                .filter_map(|id| Some((H::poll_timeout(self.up(id)?)?, id)))
                .min();
            let Some((at, id)) = due.filter(|(at, _)| *at <= end) else {
                break;
            };
            self.now = self.now.max(at);
            self.fire_timeout(id, at);
            self.stabilize();
        }
        self.now = end;
    }
}
