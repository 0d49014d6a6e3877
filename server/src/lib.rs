//! picket-server: the node driver, the gRPC services and `picketd` (`picketctl` is a crate of
//! its own, `ctl/`, a client of the cluster like any other).
//!
//! - [`node`]: one replica. [`node::driver`]: one task owns the core `Node`; it feeds it peer
//!   messages, client requests and timeouts, performs its `Persist` actions with group commit
//!   ([`node::durable`]: the log, hard state and snapshots through `picket-storage`, and
//!   recovery), sends its messages ([`node::peer`]) and answers clients. [`node::clock`]: the
//!   clock trait (the simulator substitutes its own, as it does the storage `Disk`).
//! - [`api`]: what clients and operators reach: the gRPC services ([`api::service`]) and the
//!   HTTP port ([`api::http`]: `/metrics`, `/healthz` and JSON inspection).
//! - [`auth`]: who is calling (OIDC bearer tokens, client certificates, or dev-mode metadata).
//! - [`metrics`]: the Prometheus registry, fed by the driver and by the gRPC calls.
//! - [`config`]: the `picketd` TOML configuration; [`server`]: one running replica, composed of
//!   the above; [`dev`]: three replicas in one process (for `picketd dev` and tests).
//! - [`error`]: why a replica did not start; [`exit_status`]: what `picketd`'s exit status
//!   says about it; [`shutdown`]: the shutdown signal every task watches; [`tls`]: the TLS
//!   configurations of the three ports.
//! - [`version`], [`audit_report`], [`wall_clock`], [`package_docs`]: re-exported from
//!   picket-common, which picketctl shares (what `--version` prints, the audit trail in words,
//!   UTC text, the Debian package's man pages and completions).
//!
//! Operations (config reference, data layout, ports, TLS, recovery, logs): docs/operations.md.

pub mod api;
pub mod auth;
pub mod backup;
pub mod config;
#[cfg(not(madsim))]
pub mod console;
#[cfg(not(madsim))]
pub mod dev;
pub mod error;
pub mod exit_status;
pub mod metrics;
pub mod node;
pub mod server;
pub mod shutdown;
#[cfg(not(madsim))]
pub mod tls;

pub use picket_common::{audit_report, package_docs, version, wall_clock};
