//! picket-server: the node driver, the gRPC services and `picketd` (`picketctl` is its own
//! binary, `src/bin/picketctl/`, a client of the cluster like any other).
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
//! - [`version`]: what `--version` prints (release, commit, format versions);
//!   `package_docs`: the man pages and completions of the Debian package.
//!
//! Operations (config reference, data layout, ports, TLS, recovery, logs): docs/operations.md.

pub mod api;
pub mod audit_report;
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
pub mod package_docs;
pub mod server;
pub mod shutdown;
#[cfg(not(madsim))]
pub mod tls;
pub mod version;
pub mod wall_clock;
