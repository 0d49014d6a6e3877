//! **Fault injection for tests only** (the `testkit` feature; compiled out of every other
//! build): a deliberately broken membership rule, switched on by a test to show that the
//! checker catches it. Nothing here is reachable from picketd.
//!
//! The switch is a thread-local (the in-memory cluster runs every replica on one thread).

use std::cell::Cell;

thread_local! {
    static RECONFIG_AT_ONCE: Cell<bool> = const { Cell::new(false) };
}

/// The planted bug: a membership change governs the log from the slot right after its own
/// instead of α slots later, while the leader still has slots in flight that it sent to the
/// old membership.
pub fn set_reconfig_at_once(on: bool) {
    RECONFIG_AT_ONCE.with(|f| f.set(on));
}

pub(super) fn reconfig_at_once() -> bool {
    RECONFIG_AT_ONCE.with(Cell::get)
}
