#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_confirm_fuzz::scan_body(data));
