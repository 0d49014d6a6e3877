//! **Simulation only** (`--cfg madsim`, compiled out of picketd): the server's buggify points,
//! switched on per run by the simulation harness (`docs/simulation.md`) and drawn from the
//! simulator's seeded RNG, so a seed replays them exactly. They live in the real code paths:
//!
//! - the peer transport's frame-fault layer ([`crate::node::peer::faults`]): received message
//!   frames dropped, duplicated, delayed and reordered (madsim's TCP never loses, duplicates or
//!   reorders a byte);
//! - the driver's persist path ([`crate::node::driver`]): a slow fsync, [`slow_fsync`].
//!
//! madsim's own `buggify::enable()` is not used: it also turns on the simulator's network
//! buggify, which stalls 10% of an endpoint's receives for 1-5 s in line, so that no election
//! completes.

use std::cell::Cell;
use std::time::Duration;

use madsim::rand::Rng;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static SLOW_FSYNCS: Cell<u64> = const { Cell::new(0) };
    static PEERS_FROM_FILE: Cell<bool> = const { Cell::new(false) };
}

/// A planted bug for the checkers' bite test (not a buggify point): the transport takes its
/// peers from the config file again, as before issue 34 (the first membership's members are
/// dialed and accepted only if the file names them; only members added by a change are reached
/// at the log's addresses), so a replica that joined with a short contact list never reaches
/// the members its file leaves out.
pub fn set_peers_from_file(on: bool) {
    PEERS_FROM_FILE.with(|p| p.set(on));
}

pub(crate) fn peers_from_file() -> bool {
    PEERS_FROM_FILE.with(Cell::get)
}

/// How long a slow fsync takes (a disk busy with something else, a RAID controller flushing).
pub const SLOW_FSYNC: Duration = Duration::from_millis(50);

/// Switches the buggify points for the run that starts now (and zeroes their counts).
pub fn set(on: bool) {
    ON.with(|on_now| on_now.set(on));
    SLOW_FSYNCS.with(|n| n.set(0));
}

/// Slow fsyncs of this run so far (the harness reports them).
pub fn slow_fsyncs() -> u64 {
    SLOW_FSYNCS.with(Cell::get)
}

/// The points are on for this run.
pub(crate) fn on() -> bool {
    ON.with(Cell::get)
}

/// True with `probability` when the points are on.
pub(crate) fn fire(probability: f64) -> bool {
    on() && madsim::rand::thread_rng().gen_bool(probability)
}

/// A group commit whose fsync is slow: 5% of them take [`SLOW_FSYNC`] (the driver is stalled
/// that long, as a blocking fsync stalls it, before it acknowledges the persist).
pub(crate) fn slow_fsync() -> Option<Duration> {
    let slow = fire(0.05);
    if slow {
        SLOW_FSYNCS.with(|n| n.set(n.get() + 1));
    }
    slow.then_some(SLOW_FSYNC)
}
