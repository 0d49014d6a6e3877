//! `picketd`'s exit statuses (docs/operations.md, "Exit status"): one per thing the operator
//! (or systemd) does about it. `deploy/systemd/picketd.service` restarts on failure except on
//! the statuses a restart cannot cure ([`ExitStatus::restart_cures`]), which its
//! `RestartPreventExitStatus=` lists.

use picket_storage::Error as StorageError;

use crate::config::ConfigError;
use crate::error::StartError;
use crate::node::driver::DriverError;
use crate::node::durable::StoreError;

/// Why `picketd` exited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: stopped on request (SIGTERM, ctrl-c) after a graceful shutdown; `check-config`: the
    /// file is valid.
    Stopped,
    /// 1: a failure a restart may cure: a storage IO error (a failed write or fsync stops the
    /// replica), a port in use, the identity provider unreachable at start.
    Failure,
    /// 2: the command line is wrong (clap's own status).
    Usage,
    /// 65: the data directory needs the operator, and no restart will change that: it holds no
    /// replica state and neither `--init` nor `--rejoin` said whether this is a new replica or
    /// one whose disk was lost; or its boot record or storage is damaged in a way recovery does
    /// not repair by itself; or its log is at a cluster version this release does not support
    /// (install the release that stepped it, docs/upgrades.md).
    DataDirNeedsOperator,
    /// 70: a broken invariant (a panic in the replica's driver) stopped it. Restarted: it
    /// recovers from its data directory.
    Internal,
    /// 78: the configuration is invalid (the message names the field), or a TLS file is
    /// unusable.
    Config,
}

impl ExitStatus {
    /// Every status, for the documentation and the unit file's check.
    pub const ALL: [ExitStatus; 6] = [
        ExitStatus::Stopped,
        ExitStatus::Failure,
        ExitStatus::Usage,
        ExitStatus::DataDirNeedsOperator,
        ExitStatus::Internal,
        ExitStatus::Config,
    ];

    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Stopped => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Usage => 2,
            ExitStatus::DataDirNeedsOperator => 65,
            ExitStatus::Internal => 70,
            ExitStatus::Config => 78,
        }
    }

    /// Whether restarting the same binary with the same files can help: false for the
    /// statuses that need the operator (the unit's `RestartPreventExitStatus=`). `Stopped` is
    /// not a failure (`Restart=on-failure` leaves it alone).
    pub fn restart_cures(self) -> bool {
        matches!(self, ExitStatus::Failure | ExitStatus::Internal)
    }

    /// Why `picketd run` could not start.
    pub fn of_start(error: &StartError) -> ExitStatus {
        match error {
            StartError::Store { source, .. } => ExitStatus::of_store(source),
            StartError::Replica(_) | StartError::Address { .. } | StartError::Tls(_) => {
                ExitStatus::Config
            }
            StartError::Listen { .. } | StartError::Auth(_) | StartError::Io { .. } => {
                ExitStatus::Failure
            }
        }
    }

    /// A configuration file that did not load: unreadable, malformed or breaking a rule.
    pub fn of_config(_error: &ConfigError) -> ExitStatus {
        ExitStatus::Config
    }

    /// Why a running replica's driver stopped. Anything but a panic is restarted: a failed
    /// write or fsync leaves the files in an unknown state, which recovery sorts out at the next
    /// start (a torn tail cut, damage turned into durable-state-lost mode).
    pub fn of_driver(error: &DriverError) -> ExitStatus {
        match error {
            DriverError::Panicked(_) => ExitStatus::Internal,
            DriverError::ClusterVersionUnsupported { .. } => ExitStatus::DataDirNeedsOperator,
            _ => ExitStatus::Failure,
        }
    }

    /// What recovery refused at start.
    fn of_store(error: &StoreError) -> ExitStatus {
        match error {
            StoreError::Uninitialized { .. }
            | StoreError::BadBootRecord { .. }
            | StoreError::Storage(StorageError::Corruption { .. }) => {
                ExitStatus::DataDirNeedsOperator
            }
            _ => ExitStatus::Failure,
        }
    }
}

impl From<ExitStatus> for std::process::ExitCode {
    fn from(status: ExitStatus) -> std::process::ExitCode {
        std::process::ExitCode::from(status.code())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn codes_are_distinct_and_only_failures_and_panics_are_restarted() {
        let mut codes: Vec<u8> = ExitStatus::ALL.iter().map(|s| s.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), ExitStatus::ALL.len(), "{codes:?}");
        let restarted: Vec<u8> = ExitStatus::ALL
            .iter()
            .filter(|s| s.restart_cures())
            .map(|s| s.code())
            .collect();
        assert_eq!(restarted, [1, 70]);
    }

    #[test]
    fn an_empty_data_directory_needs_the_operator_and_an_io_error_a_restart() {
        let uninitialized = StartError::Store {
            dir: "/var/lib/picket".into(),
            source: StoreError::Uninitialized {
                dir: PathBuf::from("/var/lib/picket"),
            },
        };
        assert_eq!(
            ExitStatus::of_start(&uninitialized),
            ExitStatus::DataDirNeedsOperator
        );
        let boot = StartError::Store {
            dir: "/var/lib/picket".into(),
            source: StoreError::BadBootRecord {
                path: PathBuf::from("/var/lib/picket/boot/hardstate"),
                len: 3,
            },
        };
        assert_eq!(
            ExitStatus::of_start(&boot),
            ExitStatus::DataDirNeedsOperator
        );
        let io = StoreError::Storage(StorageError::Io {
            op: picket_storage::IoOp::Fdatasync,
            path: PathBuf::from("/var/lib/picket/replica-1/log"),
            source: std::io::Error::other("EIO"),
        });
        assert_eq!(
            ExitStatus::of_driver(&DriverError::Store(io)),
            ExitStatus::Failure
        );
        assert_eq!(
            ExitStatus::of_driver(&DriverError::Panicked("assertion failed".into())),
            ExitStatus::Internal
        );
        assert_eq!(
            ExitStatus::of_start(&StartError::Tls("tls.cert: no such file".into())),
            ExitStatus::Config
        );
    }
}
