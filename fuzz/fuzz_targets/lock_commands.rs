#![no_main]
//! See `picket_fuzz::lock_commands` for what this target feeds and checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| picket_fuzz::lock_commands::run(data));
