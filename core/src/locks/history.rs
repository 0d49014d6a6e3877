//! The watch history's storage: events in immutable chunks that every snapshot of the state
//! shares. A snapshot (one per compaction) copies the newest, unsealed chunk and one reference
//! count per sealed chunk, instead of the 100,000 events of a full history (issue 17: the copy
//! was ~14 ms of the driver's turn).
//!
//! Dropping the oldest event moves a cursor; a chunk is let go of when all its events are
//! dropped. Two histories are equal when they hold the same events, however they are chunked.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use super::ids::Revision;
use super::watch::Event;

/// Events per sealed chunk.
const CHUNK: usize = 1024;

/// A sequence of events, oldest first, cheap to clone. See the module docs.
#[derive(Clone, Default)]
pub struct EventHistory {
    /// Full chunks of exactly `CHUNK` events, oldest first.
    sealed: VecDeque<Arc<[Event]>>,
    /// Events at the front of the first sealed chunk that were dropped (always `< CHUNK`).
    skip: usize,
    /// The newest events, fewer than `CHUNK`.
    tail: VecDeque<Event>,
}

impl EventHistory {
    pub fn new() -> EventHistory {
        EventHistory::default()
    }

    pub fn len(&self) -> usize {
        self.sealed.len() * CHUNK - self.skip + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The event at `index` (0: the oldest).
    pub fn get(&self, index: usize) -> Option<&Event> {
        let at = index + self.skip;
        let sealed = self.sealed.len() * CHUNK;
        if at < sealed {
            Some(&self.sealed[at / CHUNK][at % CHUNK])
        } else {
            self.tail.get(at - sealed)
        }
    }

    pub fn front(&self) -> Option<&Event> {
        self.get(0)
    }

    pub fn back(&self) -> Option<&Event> {
        self.tail
            .back()
            .or_else(|| self.sealed.back().and_then(|chunk| chunk.last()))
    }

    /// Appends the newest event.
    pub fn push_back(&mut self, event: Event) {
        self.tail.push_back(event);
        if self.tail.len() == CHUNK {
            let full = Vec::from(std::mem::take(&mut self.tail));
            self.sealed.push_back(full.into());
        }
    }

    /// Drops the oldest event and answers its revision.
    pub fn pop_front(&mut self) -> Option<Revision> {
        let Some(first) = self.sealed.front() else {
            return self.tail.pop_front().map(|event| event.revision);
        };
        let revision = first[self.skip].revision;
        self.skip += 1;
        if self.skip == CHUNK {
            self.sealed.pop_front();
            self.skip = 0;
        }
        Some(revision)
    }

    /// The events from `index` on, oldest first.
    pub fn iter_from(&self, index: usize) -> impl Iterator<Item = &Event> + '_ {
        let at = index.min(self.len()) + self.skip;
        let sealed = self.sealed.len() * CHUNK;
        let (chunk, offset) = if at < sealed {
            (at / CHUNK, at % CHUNK)
        } else {
            (self.sealed.len(), 0)
        };
        self.sealed
            .range(chunk..)
            .enumerate()
            .flat_map(move |(n, events)| &events[if n == 0 { offset } else { 0 }..])
            .chain(self.tail.range(at.saturating_sub(sealed)..))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Event> + '_ {
        self.iter_from(0)
    }

    /// The index of the first event for which `pred` is false (the events are partitioned by
    /// it: true for a prefix, false for the rest), as `slice::partition_point`.
    pub fn partition_point(&self, mut pred: impl FnMut(&Event) -> bool) -> usize {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            if pred(self.get(mid).expect("index below len")) {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        low
    }
}

impl PartialEq for EventHistory {
    fn eq(&self, other: &EventHistory) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for EventHistory {}

impl fmt::Debug for EventHistory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl FromIterator<Event> for EventHistory {
    fn from_iter<I: IntoIterator<Item = Event>>(events: I) -> EventHistory {
        let mut history = EventHistory::new();
        for event in events {
            history.push_back(event);
        }
        history
    }
}

impl From<Vec<Event>> for EventHistory {
    fn from(events: Vec<Event>) -> EventHistory {
        events.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::ids::SessionId;
    use crate::locks::watch::{EventKind, ReleaseCause};
    use crate::time::Instant;

    fn event(revision: u64) -> Event {
        Event {
            revision: Revision(revision),
            time: Instant::from_millis(revision),
            namespace: "ns".into(),
            key: "k".into(),
            kind: EventKind::WaitRemoved {
                session: SessionId(1),
                cause: ReleaseCause::WaitCancelled,
            },
            identity: None,
        }
    }

    /// The history against a plain deque, through pushes and drops across chunk boundaries,
    /// at every retention from tiny to several chunks.
    #[test]
    fn it_behaves_as_a_deque_across_chunks() {
        for retention in [1, 2, 7, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5] {
            let mut history = EventHistory::new();
            let mut model = VecDeque::new();
            for revision in 1..=(4 * CHUNK as u64 + 9) {
                if model.len() == retention {
                    let dropped: Event = model.pop_front().unwrap();
                    assert_eq!(history.pop_front(), Some(dropped.revision));
                }
                history.push_back(event(revision));
                model.push_back(event(revision));
                assert_eq!(history.len(), model.len());
                assert_eq!(history.front(), model.front());
                assert_eq!(history.back(), model.back());
            }
            assert!(history.iter().eq(model.iter()), "retention {retention}");
            for index in [
                0,
                1,
                retention / 2,
                retention.saturating_sub(1),
                retention,
                retention + 3,
            ] {
                assert!(
                    history
                        .iter_from(index)
                        .eq(model.range(index.min(model.len())..)),
                    "retention {retention}, from {index}"
                );
                assert_eq!(history.get(index), model.get(index));
            }
            let middle = model[model.len() / 2].revision;
            assert_eq!(
                history.partition_point(|e| e.revision < middle),
                model.partition_point(|e| e.revision < middle)
            );
        }
    }

    /// A clone shares the sealed chunks and keeps its events while the original moves on;
    /// equality does not depend on where the chunks begin.
    #[test]
    fn a_clone_is_a_snapshot_and_equality_is_by_content() {
        let mut history: EventHistory = (1..=3 * CHUNK as u64).map(event).collect();
        for _ in 0..10 {
            history.pop_front();
        }
        let snapshot = history.clone();
        assert!(Arc::ptr_eq(&snapshot.sealed[0], &history.sealed[0]));
        let rebuilt: EventHistory = snapshot.iter().cloned().collect();
        assert_eq!(rebuilt, snapshot);
        assert_ne!(rebuilt.skip, snapshot.skip);
        for revision in 3 * CHUNK as u64 + 1..=5 * CHUNK as u64 {
            history.pop_front();
            history.push_back(event(revision));
        }
        assert_eq!(snapshot.len(), 3 * CHUNK - 10);
        assert_eq!(snapshot.front().map(|e| e.revision), Some(Revision(11)));
        assert_ne!(history, snapshot);
    }
}
