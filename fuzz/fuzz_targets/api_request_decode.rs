#![no_main]
//! See `picket_fuzz::api_request_decode` for what this target feeds and checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| picket_fuzz::api_request_decode::run(data));
