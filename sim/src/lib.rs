//! Whole-cluster simulation of Picket under madsim (`docs/simulation.md`).
//!
//! Always built (and unit-tested in the normal workspace build): the [`history`] a run records,
//! the [`checkers`] that judge it, the nemesis [`plan`] drawn from the seed, the replica's
//! durable [`store`] on a `SimDisk`, and the drifting [`clock`]. Only under `--cfg madsim`: the
//! simulated cluster itself ([`cluster`]), run by `tests/sim.rs` and `scripts/sim`.

pub mod checkers;
pub mod clock;
#[cfg(madsim)]
pub mod cluster;
pub mod history;
pub mod plan;
pub mod store;

/// The fenced resource's gRPC service (`proto/picket/sim/v1/resource.proto`).
pub mod proto {
    tonic::include_proto!("picket.sim.v1");
}
