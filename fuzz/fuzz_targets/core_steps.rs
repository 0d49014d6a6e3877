#![no_main]
//! See `picket_fuzz::core_steps` for what this target feeds and checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| picket_fuzz::core_steps::run(data));
