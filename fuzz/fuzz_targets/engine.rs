//! Operation sequences for two CM engines on a virtual clock (the harness
//! in `tests/common/fuzz_harness.rs`, also run by `tests/fuzz_smoke.rs`).
//! The input is the harness's choice sequence. Set `IBCM_FUZZ_TRACE=1` to
//! print every step when replaying an input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

#[path = "../../tests/common/fuzz_harness.rs"]
mod fuzz_harness;

static TEMPLATES: OnceLock<Vec<[u8; 256]>> = OnceLock::new();
static TRACE: OnceLock<bool> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let templates = TEMPLATES.get_or_init(fuzz_harness::kernel_mads);
    let limits = fuzz_harness::Limits {
        max_ops: 400,
        trace: *TRACE.get_or_init(|| std::env::var_os("IBCM_FUZZ_TRACE").is_some()),
    };
    let mut src = fuzz_harness::ByteSource::new(data);
    if let Err(e) = fuzz_harness::run(&mut src, templates, limits) {
        panic!("engine invariant broken: {e}");
    }
});
