//! Arbitrary bytes → `capture::read_bytes` (pcap / pcapng) and the record
//! reader (see `tests/common/fuzz_checks.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/fuzz_checks.rs"]
mod fuzz_checks;

fuzz_target!(|data: &[u8]| {
    fuzz_checks::check_capture(data);
});
