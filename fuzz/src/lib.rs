//! Fuzz targets of Picket, as plain functions over bytes: the cargo-fuzz binaries in
//! `fuzz_targets/` call them, and `tests/corpus.rs` replays the committed corpus through them
//! (so a crash once found stays a regression test of `cargo test` in this crate).
//!
//! How to run them, and what each checks: `docs/fuzzing.md`.

pub mod api_request_decode;
pub mod core_steps;
pub mod lock_commands;
pub mod log_recovery;
pub mod peer_message_decode;
pub mod record_decode;
pub mod seeds;

/// A target's entry point: one input, a panic on a finding.
pub type Target = fn(&[u8]);

/// Every target: name and entry point.
pub const TARGETS: [(&str, Target); 6] = [
    ("log_recovery", log_recovery::run),
    ("record_decode", record_decode::run),
    ("peer_message_decode", peer_message_decode::run),
    ("api_request_decode", api_request_decode::run),
    ("core_steps", core_steps::run),
    ("lock_commands", lock_commands::run),
];
