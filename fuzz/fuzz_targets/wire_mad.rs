//! Arbitrary bytes → `CmMad::parse`; a parsed MAD must survive emit and
//! re-parse unchanged (see `tests/common/fuzz_checks.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/fuzz_checks.rs"]
mod fuzz_checks;

fuzz_target!(|data: &[u8]| {
    fuzz_checks::check_wire_mad(data);
});
