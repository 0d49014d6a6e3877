//! Multi-Paxos throughput without IO: commands chosen (and applied) per second through a
//! 3-replica in-memory cluster where every persist is acknowledged at once and every message is
//! delivered in FIFO order. Measures the core alone (no network, no disk, no encoding).
//!
//! Run: `cargo bench -p picket-core --bench paxos_throughput`

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use picket_core::paxos::{
    Action, Config, Durable, Input, Message, NodeId, Persist, Replica, RoleKind,
};
use picket_core::time::Instant;

type R = Replica<u64, ()>;

struct BenchCluster {
    replicas: Vec<R>,
    wire: VecDeque<(NodeId, NodeId, Message<u64, ()>)>,
    now: Instant,
    /// Commands applied by the leader (replica 0).
    applied_commands: u64,
}

impl BenchCluster {
    fn new(batch: usize) -> Self {
        let members = vec![NodeId(1), NodeId(2), NodeId(3)];
        let replicas = members
            .iter()
            .map(|id| {
                let mut c = Config::new(*id, members.clone(), 1);
                c.batch_commands_max = batch;
                c.window_slots = 64;
                c.pending_max = 1 << 20;
                Replica::new(c, Durable::default(), Instant::ZERO).expect("config")
            })
            .collect();
        let mut d = BenchCluster {
            replicas,
            wire: VecDeque::new(),
            now: Instant::ZERO,
            applied_commands: 0,
        };
        // Replica 1 times out first and wins.
        let t = d.replicas[0].poll_timeout().expect("deadline");
        d.now = t;
        d.replicas[0].step(t, Input::Timeout).expect("timeout");
        d.pump();
        assert_eq!(d.replicas[0].role(), RoleKind::Leader);
        d
    }

    /// Drains every replica and delivers every message until quiescent.
    fn pump(&mut self) {
        loop {
            let mut progressed = false;
            for i in 0..self.replicas.len() {
                progressed |= self.drain(i);
            }
            while let Some((from, to, msg)) = self.wire.pop_front() {
                progressed = true;
                let r = &mut self.replicas[to.0 as usize - 1];
                r.step(self.now, Input::Message { from, msg })
                    .expect("step");
                self.drain(to.0 as usize - 1);
            }
            if !progressed {
                return;
            }
        }
    }

    fn drain(&mut self, i: usize) -> bool {
        let mut any = false;
        loop {
            let mut persisted = None;
            while let Some(a) = self.replicas[i].poll_action() {
                any = true;
                match a {
                    Action::Persist(Persist { id, .. }) => persisted = Some(id),
                    Action::Send { to, msg } => {
                        self.wire.push_back((self.replicas[i].id(), to, msg));
                    }
                    Action::Apply { value, .. } => {
                        if i == 0 {
                            self.applied_commands += value.len() as u64;
                        }
                        black_box(value);
                    }
                    _ => {}
                }
            }
            match persisted {
                Some(id) => self.replicas[i]
                    .step(self.now, Input::Persisted { id })
                    .expect("persisted"),
                None => return any,
            }
        }
    }

    /// Proposes `n` commands at the leader and runs until all are applied there; then compacts.
    fn commit(&mut self, n: u64) {
        let target = self.applied_commands + n;
        let chunk = 4096;
        let mut next = 0;
        while self.applied_commands < target {
            if next < n {
                let k = chunk.min(n - next);
                self.replicas[0]
                    .propose_many(self.now, (next..next + k).collect())
                    .expect("propose");
                next += k;
            }
            self.pump();
        }
        for r in &mut self.replicas {
            let s = r.slot_applied();
            if s > r.slot_snapshot() {
                r.compact(s, ()).expect("compact");
            }
        }
        self.pump();
    }
}

fn throughput(c: &mut Criterion) {
    let mut g = c.benchmark_group("paxos_3_replicas_no_io");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    g.warm_up_time(Duration::from_secs(2));
    for (batch, n) in [(1usize, 20_000u64), (256, 512_000)] {
        g.throughput(Throughput::Elements(n));
        let mut d = BenchCluster::new(batch);
        g.bench_function(format!("batch_{batch}"), |b| b.iter(|| d.commit(n)));
    }
    g.finish();
}

criterion_group!(benches, throughput);
criterion_main!(benches);
