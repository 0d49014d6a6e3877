//! What `picketd --version` and `picketctl --version` print: the release, the commit it was
//! built from, and the versions of the formats a replica speaks and writes (docs/upgrades.md).

use std::sync::OnceLock;

use picket_storage::format;

/// The release (the workspace's `version`, docs/upgrades.md and CHANGELOG.md).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit the binary was built from (40 hex digits), or `unknown` when it was built
/// outside a git checkout without `PICKET_GIT_COMMIT` (common/build.rs).
pub const COMMIT: &str = env!("PICKET_GIT_COMMIT");

/// The peer protocol version this build speaks (`PeerHello.protocol_version`).
pub const PEER_PROTOCOL_VERSION: u32 = picket_proto::PEER_PROTOCOL_VERSION;

/// The lowest peer protocol version this build speaks (`PeerHello.protocol_version_min`).
pub const PEER_PROTOCOL_VERSION_MIN: u32 = picket_proto::PEER_PROTOCOL_VERSION_MIN;

/// The highest cluster version this build supports (docs/upgrades.md, "The cluster version").
pub const CLUSTER_VERSION: u32 = picket_core::locks::CLUSTER_VERSION;

/// The oldest cluster version this build runs a log at.
pub const CLUSTER_VERSION_MIN: u32 = picket_core::locks::CLUSTER_VERSION_FIRST;

/// The log segment format version this build writes.
pub const LOG_SEGMENT_VERSION_WRITTEN: u32 = format::SEGMENT_VERSION_2;

/// The oldest log segment format version this build still reads.
pub const LOG_SEGMENT_VERSION_READ_MIN: u32 = format::SEGMENT_VERSION_1;

/// The format version of the hard state and snapshot files, written and read.
pub const BLOB_FORMAT_VERSION: u32 = format::FORMAT_VERSION;

/// The commit shortened to 12 digits (or `unknown`).
pub fn commit_short() -> &'static str {
    COMMIT.get(..12).unwrap_or(COMMIT)
}

/// `-V`: the release and the short commit, e.g. `0.2.0 (51b825b4a1c2)`.
pub fn short() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| format!("{VERSION} ({})", commit_short()))
}

/// `--version`: the release, then one `name: value` line per fact, e.g.
///
/// ```text
/// 0.2.0
/// commit: 51b825b4a1c2...
/// peer protocol: 1 (speaks 1 to 1)
/// log segment format: 2 (reads 1 to 2)
/// hard state and snapshot format: 1
/// cluster version: 2 (runs logs at 1 to 2)
/// ```
pub fn long() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{VERSION}\n\
             commit: {COMMIT}\n\
             peer protocol: {PEER_PROTOCOL_VERSION} (speaks {PEER_PROTOCOL_VERSION_MIN} to \
             {PEER_PROTOCOL_VERSION})\n\
             log segment format: {LOG_SEGMENT_VERSION_WRITTEN} (reads \
             {LOG_SEGMENT_VERSION_READ_MIN} to {LOG_SEGMENT_VERSION_WRITTEN})\n\
             hard state and snapshot format: {BLOB_FORMAT_VERSION}\n\
             cluster version: {CLUSTER_VERSION} (runs logs at {CLUSTER_VERSION_MIN} to \
             {CLUSTER_VERSION})"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_long_version_names_every_format_version() {
        let text = long();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], VERSION);
        assert_eq!(lines[1], format!("commit: {COMMIT}"));
        assert_eq!(
            lines[2],
            format!(
                "peer protocol: {} (speaks {} to {})",
                picket_proto::PEER_PROTOCOL_VERSION,
                picket_proto::PEER_PROTOCOL_VERSION_MIN,
                picket_proto::PEER_PROTOCOL_VERSION
            )
        );
        assert!(lines[3].starts_with(&format!(
            "log segment format: {} ",
            format::SEGMENT_VERSION_2
        )));
        assert_eq!(
            lines[4],
            format!("hard state and snapshot format: {}", format::FORMAT_VERSION)
        );
        assert_eq!(
            lines[5],
            format!(
                "cluster version: {} (runs logs at 1 to {})",
                picket_core::locks::CLUSTER_VERSION,
                picket_core::locks::CLUSTER_VERSION
            )
        );
    }

    #[test]
    fn the_commit_is_a_full_hash_or_unknown() {
        let is_hash = COMMIT.len() == 40 && COMMIT.bytes().all(|b| b.is_ascii_hexdigit());
        assert!(is_hash || COMMIT == "unknown", "{COMMIT}");
        assert!(short().starts_with(VERSION), "{}", short());
    }
}
