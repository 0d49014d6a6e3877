#![no_main]
//! See `picket_fuzz::log_recovery` for what this target feeds and checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| picket_fuzz::log_recovery::run(data));
