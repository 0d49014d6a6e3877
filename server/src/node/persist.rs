//! The persist thread (`[storage] persist = "thread"`): the driver hands its group commits to a
//! dedicated OS thread that owns the [`DurableStore`], and goes on stepping the node while the
//! fdatasync runs.
//!
//! - **Double buffering.** The driver sends every batch of `Persist` actions as soon as it has
//!   one, also while an earlier batch is syncing; the thread takes *all* the batches that are
//!   queued when it is free and writes them as one group commit. So the commands that arrive
//!   during a sync form the next batch instead of waiting for the driver's turn to end.
//! - **One hand-off each way.** The thread spins for [`SPIN`] after a commit (the next batch of
//!   a busy replica usually arrives within it), then parks on the channel; the driver wakes on
//!   the reply channel like on any other input.
//! - **Order.** Batches are written in the order they were sent and acknowledged with the id of
//!   the last persist of the group (the core's acknowledgement is cumulative).
//! - **Failure.** A failed write is reported once and the thread stops: nothing after it is
//!   written or acknowledged, and the driver stops with the error (as inline persist does).
//!
//! A background snapshot save of the store is polled by the thread after every commit, and
//! every [`SAVE_POLL`] while the thread is idle with a save running.
//!
//! Where the loop runs is a [`PersistSpawner`]: an OS thread in picketd, a task of the async
//! runtime in the simulation (`cfg(madsim)`: an OS thread is outside the simulated schedule), so
//! the simulation covers `persist = "thread"` too, as the snapshot saver's `SaveRunner` lets it
//! cover background saves. Both run the same group commit ([`Serving`]); only how they wait for
//! work differs.

use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use picket_core::node::NodePersist;
use picket_core::paxos::PersistId;
use picket_storage::Disk;
use tokio::sync::mpsc as async_mpsc;

use crate::node::durable::{DurableStore, SaveOutcome, StoreCounters, StoreError};

/// How long the thread spins for the next batch after a commit before it parks.
pub const SPIN: Duration = Duration::from_micros(50);
/// How often an idle thread polls a running background snapshot save.
pub const SAVE_POLL: Duration = Duration::from_millis(100);

/// What the thread reports to the driver.
#[derive(Debug)]
pub enum PersistEvent {
    /// Every persist up to `last` is durable.
    Persisted {
        last: PersistId,
        /// Write and fdatasync of the group commit.
        took: Duration,
        /// The group held a snapshot from a peer, saved synchronously in `took`.
        sync_snapshot: bool,
    },
    /// A background snapshot save ended (the log was compacted for it if it was saved).
    Saved(SaveOutcome),
    /// Writing failed; the thread stopped and nothing after it is acknowledged.
    Failed(StoreError),
}

/// A batch sent to the thread.
struct Work {
    persists: Vec<NodePersist>,
    sync_snapshot: bool,
}

/// How the persist loop gets a flow of control of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersistSpawner {
    /// A dedicated OS thread named `picket-persist`, which spins for [`SPIN`] after a commit,
    /// then parks: picketd's.
    Thread,
    /// A task of the async runtime, awaiting its work: the simulation's (one madsim task, so
    /// that the group commits run inside the simulated schedule and a seed replays them). It
    /// writes in the runtime's turn, so it is no place for a real disk.
    Task,
}

impl Default for PersistSpawner {
    /// [`PersistSpawner::Thread`]; under `cfg(madsim)`, [`PersistSpawner::Task`].
    fn default() -> PersistSpawner {
        if cfg!(madsim) {
            PersistSpawner::Task
        } else {
            PersistSpawner::Thread
        }
    }
}

/// The driver's end of the work channel (the kind its spawner's loop waits on).
enum WorkSender {
    Thread(mpsc::Sender<Work>),
    Task(async_mpsc::UnboundedSender<Work>),
}

/// The persist loop's own flow of control.
enum Worker {
    Thread(JoinHandle<()>),
    Task(tokio::task::JoinHandle<()>),
}

/// The driver's end of the persist thread.
pub struct PersistThread {
    work: Option<WorkSender>,
    events: async_mpsc::UnboundedReceiver<PersistEvent>,
    counters: Arc<Mutex<StoreCounters>>,
    thread: Option<Worker>,
    /// The id of the last persist sent, and of the last one acknowledged.
    sent: Option<PersistId>,
    acknowledged: Option<PersistId>,
    /// A write failure was handed to the driver (the thread stopped after it).
    failure_reported: bool,
}

impl PersistThread {
    /// Moves `store` to a new thread named `picket-persist`.
    pub fn spawn<D: Disk + Clone + 'static>(
        store: DurableStore<D>,
    ) -> std::io::Result<PersistThread> {
        PersistThread::spawn_with(store, PersistSpawner::Thread)
    }

    /// Moves `store` to the persist loop, run where `spawner` says. [`PersistSpawner::Task`]
    /// must be called inside the async runtime.
    pub fn spawn_with<D: Disk + Clone + 'static>(
        store: DurableStore<D>,
        spawner: PersistSpawner,
    ) -> std::io::Result<PersistThread> {
        let (events_tx, events) = async_mpsc::unbounded_channel();
        let counters = Arc::new(Mutex::new(store.counters().clone()));
        let serving = Serving {
            store,
            events: events_tx,
            counters: Arc::clone(&counters),
            last_written: None,
        };
        let (work, thread) = match spawner {
            PersistSpawner::Thread => {
                let (work, work_rx) = mpsc::channel();
                let thread = std::thread::Builder::new()
                    .name("picket-persist".into())
                    .spawn(move || serve(serving, &work_rx))?;
                (WorkSender::Thread(work), Worker::Thread(thread))
            }
            PersistSpawner::Task => {
                let (work, work_rx) = async_mpsc::unbounded_channel();
                let task = tokio::spawn(serve_task(serving, work_rx));
                (WorkSender::Task(work), Worker::Task(task))
            }
        };
        Ok(PersistThread {
            work: Some(work),
            events,
            counters,
            thread: Some(thread),
            sent: None,
            acknowledged: None,
            failure_reported: false,
        })
    }

    /// Hands a batch to the thread (it may join batches sent before it into one group commit).
    /// `false`: the thread is gone (it stopped on a failure it has reported, or panicked).
    pub fn send(&mut self, persists: Vec<NodePersist>, sync_snapshot: bool) -> bool {
        let Some(last) = persists.last().map(|p| p.id) else {
            return true;
        };
        if let Some(sent) = self.sent {
            assert!(last > sent, "persist {last} sent after persist {sent}");
        }
        self.sent = Some(last);
        let batch = Work {
            persists,
            sync_snapshot,
        };
        match &self.work {
            Some(WorkSender::Thread(work)) => work.send(batch).is_ok(),
            Some(WorkSender::Task(work)) => work.send(batch).is_ok(),
            None => false,
        }
    }

    /// Whether a batch was sent and not yet acknowledged.
    pub fn in_flight(&self) -> bool {
        self.sent != self.acknowledged
    }

    /// The next event; `None` once the thread is gone and every event was taken.
    pub async fn recv(&mut self) -> Option<PersistEvent> {
        let event = self.events.recv().await;
        self.note(&event);
        event
    }

    /// The next event if one is ready.
    pub fn try_recv(&mut self) -> Option<PersistEvent> {
        let event = self.events.try_recv().ok();
        self.note(&event);
        event
    }

    /// Waits for the next event outside an async context (the driver's synchronous test turn).
    pub fn blocking_recv(&mut self) -> Option<PersistEvent> {
        let event = self.events.blocking_recv();
        self.note(&event);
        event
    }

    fn note(&mut self, event: &Option<PersistEvent>) {
        match event {
            Some(PersistEvent::Persisted { last, .. }) => self.acknowledged = Some(*last),
            Some(PersistEvent::Failed(_)) => self.failure_reported = true,
            _ => {}
        }
    }

    /// The store's counters as of the thread's last commit or save.
    pub fn counters(&self) -> StoreCounters {
        lock(&self.counters).clone()
    }

    /// Why the thread ended, if it did: after the write failure it reported, or its panic.
    pub fn end_reason(&mut self) -> Option<String> {
        if self.failure_reported {
            return Some("it stopped after the write failure it reported".into());
        }
        let thread = match self.thread.take()? {
            Worker::Thread(thread) => thread,
            Worker::Task(task) => {
                if !task.is_finished() {
                    self.thread = Some(Worker::Task(task));
                    return None;
                }
                // A task that ended without reporting a failure panicked (its runtime has the
                // message).
                return Some("the persist task panicked".into());
            }
        };
        if !thread.is_finished() {
            self.thread = Some(Worker::Thread(thread));
            return None;
        }
        let panic = thread.join().err()?;
        Some(
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_else(|| "the persist thread panicked".into()),
        )
    }
}

impl Drop for PersistThread {
    /// Closes the channel and waits for the thread: the batch it is writing is finished (and
    /// the store's files are closed) before the driver is gone. A task cannot be waited for
    /// here: it is between two group commits whenever the driver runs, and ends at its next
    /// look at the closed channel.
    fn drop(&mut self) {
        self.work.take();
        if let Some(Worker::Thread(thread)) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(counters: &Mutex<StoreCounters>) -> std::sync::MutexGuard<'_, StoreCounters> {
    counters
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The persist loop's state, whichever spawner runs it: the store and the driver's ends.
struct Serving<D: Disk + Clone + 'static> {
    store: DurableStore<D>,
    events: async_mpsc::UnboundedSender<PersistEvent>,
    counters: Arc<Mutex<StoreCounters>>,
    last_written: Option<PersistId>,
}

impl<D: Disk + Clone + 'static> Serving<D> {
    /// Writes `first` and every batch `more` yields (those queued behind it) as one group
    /// commit, and reports it. `false`: the write failed (reported); the loop stops.
    fn commit(&mut self, first: Work, mut more: impl FnMut() -> Option<Work>) -> bool {
        let mut group = first.persists;
        let mut sync_snapshot = first.sync_snapshot;
        while let Some(more) = more() {
            group.extend(more.persists);
            sync_snapshot |= more.sync_snapshot;
        }
        let last = group.last().map(|p| p.id).expect("a batch is never empty");
        if let (Some(before), Some(first)) = (self.last_written, group.first()) {
            assert!(first.id > before, "persist {} after {before}", first.id);
        }
        let started = Instant::now();
        if let Err(error) = self.store.persist_owned(group) {
            *lock(&self.counters) = self.store.counters().clone();
            let _ = self.events.send(PersistEvent::Failed(error));
            return false;
        }
        self.last_written = Some(last);
        *lock(&self.counters) = self.store.counters().clone();
        let took = started.elapsed();
        let _ = self.events.send(PersistEvent::Persisted {
            last,
            took,
            sync_snapshot,
        });
        true
    }

    /// Reports a background snapshot save that ended. `false`: polling failed (reported).
    fn poll_saved(&mut self) -> bool {
        match self.store.poll_saved() {
            Ok(Some(outcome)) => {
                *lock(&self.counters) = self.store.counters().clone();
                let _ = self.events.send(PersistEvent::Saved(outcome));
                true
            }
            Ok(None) => true,
            Err(error) => {
                let _ = self.events.send(PersistEvent::Failed(error));
                false
            }
        }
    }
}

/// The thread ([`PersistSpawner::Thread`]): waits for work, joins every queued batch into one
/// group commit, reports it. Returns when the driver's end is dropped or a write failed.
fn serve<D: Disk + Clone + 'static>(mut serving: Serving<D>, work: &mpsc::Receiver<Work>) {
    while let Some(first) = next_work(work, serving.store.save_in_flight()) {
        if let Some(first) = first {
            if !serving.commit(first, || work.try_recv().ok()) {
                return;
            }
        }
        if !serving.poll_saved() {
            return;
        }
    }
}

/// The task ([`PersistSpawner::Task`]): the thread's loop, awaiting its work instead of
/// spinning and parking (it polls a running save every [`SAVE_POLL`] as the thread does).
async fn serve_task<D: Disk + Clone + 'static>(
    mut serving: Serving<D>,
    mut work: async_mpsc::UnboundedReceiver<Work>,
) {
    loop {
        let first = if serving.store.save_in_flight() {
            match tokio::time::timeout(SAVE_POLL, work.recv()).await {
                Ok(Some(batch)) => Some(batch),
                Ok(None) => return,
                Err(_) => None,
            }
        } else {
            match work.recv().await {
                Some(batch) => Some(batch),
                None => return,
            }
        };
        if let Some(first) = first {
            if !serving.commit(first, || work.try_recv().ok()) {
                return;
            }
        }
        if !serving.poll_saved() {
            return;
        }
    }
}

/// The next batch: spins for [`SPIN`], then parks (for at most [`SAVE_POLL`] while a save
/// runs: `Some(None)` then). `None`: the driver's end is gone.
fn next_work(work: &mpsc::Receiver<Work>, save_running: bool) -> Option<Option<Work>> {
    let spin_until = Instant::now() + SPIN;
    loop {
        match work.try_recv() {
            Ok(batch) => return Some(Some(batch)),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if Instant::now() < spin_until => std::hint::spin_loop(),
            Err(TryRecvError::Empty) => break,
        }
    }
    if save_running {
        match work.recv_timeout(SAVE_POLL) {
            Ok(batch) => Some(Some(batch)),
            Err(RecvTimeoutError::Timeout) => Some(None),
            Err(RecvTimeoutError::Disconnected) => None,
        }
    } else {
        work.recv().ok().map(Some)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use picket_core::paxos::{Ballot, NodeId, Persist};
    use picket_storage::{LogConfig, SimDisk, StorageConfig};

    use super::*;

    fn store(disk: &SimDisk) -> DurableStore<SimDisk> {
        let storage = StorageConfig {
            log: LogConfig {
                preallocate_bytes: 0,
                ..LogConfig::default()
            },
            ..StorageConfig::default()
        };
        DurableStore::open(disk.clone(), Path::new("/data"), storage)
            .unwrap()
            .0
    }

    fn promise(id: PersistId, round: u64) -> NodePersist {
        Persist {
            id,
            promised: Some(Ballot {
                round,
                node: NodeId(1),
            }),
            accepted: Vec::new(),
            snapshot: None,
            schedule: None,
            snapshot_local: false,
            incarnation: None,
            recovered: false,
        }
    }

    #[test]
    fn batches_queued_while_the_thread_is_busy_are_written_as_one_group_commit() {
        let disk = SimDisk::new(1);
        let store = store(&disk);
        let saves_before = store.counters().hard_state_saves;
        let (work_tx, work_rx) = mpsc::channel();
        let (events_tx, mut events) = async_mpsc::unbounded_channel();
        // Three batches wait before the thread runs (as if they arrived during a sync).
        for id in 1..=3 {
            work_tx
                .send(Work {
                    persists: vec![promise(id, id)],
                    sync_snapshot: false,
                })
                .unwrap();
        }
        drop(work_tx);
        let counters = Arc::new(Mutex::new(StoreCounters::default()));
        let serving = Serving {
            store,
            events: events_tx,
            counters: Arc::clone(&counters),
            last_written: None,
        };
        serve(serving, &work_rx);
        match events.try_recv() {
            Ok(PersistEvent::Persisted { last, .. }) => assert_eq!(last, 3),
            other => panic!("expected one acknowledgement of persist 3, got {other:?}"),
        }
        assert!(events.try_recv().is_err(), "one group commit, one event");
        let counters = lock(&counters).clone();
        assert_eq!(counters.commits, 1);
        assert_eq!(counters.hard_state_saves, saves_before + 1);
        // And it is durable: the promise of the last batch is what recovery reads.
        let (_, recovered) =
            DurableStore::open(disk.clone(), Path::new("/data"), StorageConfig::default()).unwrap();
        assert_eq!(recovered.durable.promised.round, 3);
    }

    #[test]
    fn a_failed_write_is_reported_once_and_nothing_after_it_is_acknowledged() {
        let disk = SimDisk::new(1);
        let store = store(&disk);
        disk.fail_next_syncs(1_000);
        let mut thread = PersistThread::spawn(store).unwrap();
        assert!(thread.send(vec![promise(1, 1)], false));
        match thread.blocking_recv() {
            Some(PersistEvent::Failed(_)) => {}
            other => panic!("expected the failure, got {other:?}"),
        }
        // The thread stopped: nothing more is reported, and a later batch is not written
        // (whether `send` still finds the channel open depends on how far the thread got).
        let syncs = disk.sync_data_count();
        let _ = thread.send(vec![promise(2, 2)], false);
        assert!(thread.blocking_recv().is_none());
        assert!(thread.in_flight(), "nothing was acknowledged");
        assert_eq!(disk.sync_data_count(), syncs);
        assert_eq!(thread.counters().commits, 0);
    }

    /// The simulation's spawner: the same loop as a task, batches queued before it runs
    /// joined into one group commit, and the task ends when the driver's end is dropped.
    #[tokio::test]
    async fn the_task_spawner_joins_queued_batches_into_one_group_commit() {
        let disk = SimDisk::new(1);
        let store = store(&disk);
        let mut thread = PersistThread::spawn_with(store, PersistSpawner::Task).unwrap();
        // The task has not run yet (one runtime thread): all three wait for it.
        for id in 1..=3 {
            assert!(thread.send(vec![promise(id, id)], false));
        }
        match thread.recv().await {
            Some(PersistEvent::Persisted { last, .. }) => assert_eq!(last, 3),
            other => panic!("expected one acknowledgement of persist 3, got {other:?}"),
        }
        assert!(!thread.in_flight());
        assert_eq!(thread.counters().commits, 1);
        assert!(thread.send(vec![promise(4, 4)], false));
        match thread.recv().await {
            Some(PersistEvent::Persisted { last, .. }) => assert_eq!(last, 4),
            other => panic!("expected the acknowledgement of persist 4, got {other:?}"),
        }
        assert_eq!(thread.counters().commits, 2);
        drop(thread);
        // The task sees the closed channel and ends, closing the store.
        tokio::task::yield_now().await;
        let (_, recovered) =
            DurableStore::open(disk.clone(), Path::new("/data"), StorageConfig::default()).unwrap();
        assert_eq!(recovered.durable.promised.round, 4);
    }
}
