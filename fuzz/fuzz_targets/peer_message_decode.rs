#![no_main]
//! See `picket_fuzz::peer_message_decode` for what this target feeds and checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| picket_fuzz::peer_message_decode::run(data));
