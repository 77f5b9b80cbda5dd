//! The shared library exports exactly the public C API listed in ibcm.map:
//! every kernel ib_cm function and the ibcm glue, nothing else.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn libpath() -> PathBuf {
    // target/<profile>/deps/exports-xxxx -> target/<profile>/libibcm.so
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("libibcm.so")
}

#[test]
fn dynamic_symbols_are_exactly_the_public_api() {
    let lib = libpath();
    assert!(
        lib.exists(),
        "{} missing: cargo builds the cdylib with the tests",
        lib.display()
    );
    let map = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ibcm.map")).unwrap();
    let want: BTreeSet<String> = map
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ib") && l.ends_with(';'))
        .map(|l| l.trim_end_matches(';').to_string())
        .collect();
    assert!(want.len() >= 21, "map lists {} symbols", want.len());
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let got: BTreeSet<String> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            matches!(kind, "T" | "D" | "B" | "R")
                .then(|| name.split('@').next().unwrap().to_string())
        })
        .collect();
    assert_eq!(got, want, "exported symbols differ from ibcm.map");
    let so = Command::new("readelf")
        .args(["-d"])
        .arg(&lib)
        .output()
        .expect("readelf");
    assert!(
        String::from_utf8_lossy(&so.stdout).contains("libibcm.so.0"),
        "soname"
    );
}
