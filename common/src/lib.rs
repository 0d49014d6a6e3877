//! picket-common: what `picketd` (picket-server) and `picketctl` both say, in one place so the
//! two binaries say the same, without picketctl taking the server's HTTP stack, templates or
//! allocator.
//!
//! - [`version`]: what `--version` prints (release, commit, format versions); the commit comes
//!   from this crate's build script.
//! - [`audit_report`]: the audit trail in words, JSON and CSV (`picketctl audit`, the console).
//! - [`wall_clock`]: log time as UTC text for people.
//! - [`package_docs`]: the man pages and completions of the Debian package (`generate-docs`).

pub mod audit_report;
pub mod package_docs;
pub mod version;
pub mod wall_clock;
