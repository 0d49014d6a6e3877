//! Where the driver's group commits are written: in its own turn, or on the persist thread.

use super::*;

/// Where the driver's group commits are written.
pub(super) enum Persister<D: Disk + Clone + 'static> {
    /// In the driver's turn.
    Inline(Box<DurableStore<D>>),
    /// On the persist thread (in the simulation, a simulation task: `PersistSpawner`).
    Thread(PersistThread),
}

impl<D: Disk + Clone + 'static> Persister<D> {
    pub(super) fn new(store: DurableStore<D>, mode: PersistMode) -> Persister<D> {
        match mode {
            PersistMode::Inline => Persister::Inline(Box::new(store)),
            PersistMode::Thread => {
                match PersistThread::spawn_with(store, PersistSpawner::default()) {
                    Ok(thread) => {
                        tracing::info!(
                        "group commits are written by the persist thread ([storage] persist = \"thread\")"
                    );
                        Persister::Thread(thread)
                    }
                    // `spawn` failed before the store moved to a thread: it cannot be had back,
                    // and a replica without its store cannot go on.
                    Err(error) => panic!("cannot start the persist thread: {error}"),
                }
            }
        }
    }
}

/// The next event of the persist thread; never, when persisting inline.
pub(super) async fn persist_event<D: Disk + Clone + 'static>(
    persister: &mut Persister<D>,
) -> Option<PersistEvent> {
    match persister {
        Persister::Inline(_) => std::future::pending().await,
        Persister::Thread(thread) => thread.recv().await,
    }
}
