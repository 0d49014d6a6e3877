//! The state machine a simulated node applies chosen values to.

use std::fmt::Debug;

use crate::paxos::{Slot, Value};

/// What the harness needs from a state machine.
pub trait Machine<C> {
    type Snapshot: Clone + Debug + Eq;
    fn empty() -> Self;
    fn apply(&mut self, slot: Slot, value: &Value<C>);
    fn snapshot(&self) -> Self::Snapshot;
    fn restore(snapshot: &Self::Snapshot) -> Self;
    /// Every (slot, value) applied so far, in order (for the checker).
    fn values(&self) -> Vec<(Slot, Value<C>)>;
    fn contains(&self, command: &C) -> bool;
}

/// The simplest state machine: it remembers everything applied. Its snapshot is the history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History<C> {
    pub entries: Vec<(Slot, Value<C>)>,
}

impl<C: Clone + Debug + Eq> Machine<C> for History<C> {
    type Snapshot = Vec<(Slot, Value<C>)>;

    fn empty() -> Self {
        History {
            entries: Vec::new(),
        }
    }

    fn apply(&mut self, slot: Slot, value: &Value<C>) {
        self.entries.push((slot, value.clone()));
    }

    fn snapshot(&self) -> Self::Snapshot {
        self.entries.clone()
    }

    fn restore(snapshot: &Self::Snapshot) -> Self {
        History {
            entries: snapshot.clone(),
        }
    }

    fn values(&self) -> Vec<(Slot, Value<C>)> {
        self.entries.clone()
    }

    fn contains(&self, command: &C) -> bool {
        self.entries.iter().any(|(_, v)| match v {
            Value::Noop | Value::Reconfig(_) => false,
            Value::Batch { commands, .. } => commands.contains(command),
        })
    }
}
