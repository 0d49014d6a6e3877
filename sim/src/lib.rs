//! Whole-cluster simulation of Picket under madsim (`docs/simulation.md`).
//!
//! Always built (and unit-tested in the normal workspace build): the [`history`] a run records,
//! the [`checkers`] that judge it, the nemesis [`plan`] drawn from the seed, and the drifting
//! [`clock`]. Only under `--cfg madsim`: the simulated cluster itself ([`cluster`]: the real
//! server node and client library on madsim), run by `tests/sim.rs` and `scripts/sim`.

pub mod checkers;
pub mod clock;
#[cfg(madsim)]
pub mod cluster;
pub mod history;
pub mod plan;

/// The fenced resource's gRPC service (`proto/picket/sim/v1/resource.proto`).
pub mod proto {
    tonic::include_proto!("picket.sim.v1");
}
