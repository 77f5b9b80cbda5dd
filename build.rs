//! Sets the shared library's soname. The exported symbol set is rustc's
//! version script (only `#[no_mangle]` entry points, everything else
//! local); `tests/exports.rs` checks it equals the list in `ibcm.map`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibcm.so.0");
}
