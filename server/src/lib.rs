//! picket-server: the node driver, the gRPC services and `picketd`.
//!
//! - [`driver`]: one task owns the core `Node`; it feeds it peer messages, client requests and
//!   timeouts, performs its `Persist` actions with group commit ([`durable`]), sends its
//!   messages ([`peer`]) and answers clients ([`service`]).
//! - [`durable`]: the replica's log, hard state and snapshots through `picket-storage`, and
//!   recovery (with the "durable state lost" start after corruption).
//! - [`clock`]: the [`clock::Clock`] trait (the simulator substitutes its own, as it does the
//!   storage `Disk`).
//! - [`config`]: the `picketd` TOML configuration; [`server`]: one running replica;
//!   [`dev`]: [`dev::DevCluster`], three replicas in one process (for `picketd dev` and tests).
//! - [`auth`]: who is calling (OIDC bearer tokens, or dev-mode metadata).
//! - [`metrics`]: the Prometheus registry, fed by the driver and by [`observe`] (gRPC calls);
//!   [`http`]: `/metrics`, `/healthz` and JSON inspection, read through [`inspect`].
//!
//! Operations (config reference, data layout, ports, TLS, recovery, logs): docs/operations.md.

pub mod auth;
#[cfg(madsim)]
pub mod buggify;
pub mod clock;
pub mod config;
#[cfg(not(madsim))]
pub mod dev;
pub mod driver;
pub mod durable;
#[cfg(not(madsim))]
pub mod error_detail;
#[cfg(not(madsim))]
pub mod http;
#[cfg(not(madsim))]
pub mod inspect;
pub mod metrics;
#[cfg(not(madsim))]
pub mod observe;
pub mod peer;
pub mod server;
pub mod service;
pub mod stream;
#[cfg(not(madsim))]
pub mod tls;
