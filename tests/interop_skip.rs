//! The skip decisions of `interop/run.sh` (docs/INTEROP.md "Skips"), without
//! booting a guest: a copy of the script runs with a fake `fetch.sh` that
//! fails the way a failed package install, a stuck download or a broken
//! fetch does. Only the environment limits (not root, no `/dev/net/tun`)
//! may skip with `CI=true`; a failed install or download skips elsewhere
//! but fails in CI. The checks that need root (to get past the environment
//! checks, to drop privileges, to hide `/dev/net/tun` in a mount namespace)
//! run where the test runs as root, as `make test` does in CI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A private copy of `interop/` (run.sh, lib.sh) whose fetch.sh prints
/// `fetch_out` and exits with `fetch_rc`.
fn interop_copy(tag: &str, fetch_rc: i32, fetch_out: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("ibcm-interop-skip-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("interop")).unwrap();
    for f in ["run.sh", "lib.sh"] {
        std::fs::copy(root.join("interop").join(f), dir.join("interop").join(f)).unwrap();
    }
    std::fs::write(
        dir.join("interop/fetch.sh"),
        format!("echo '{fetch_out}'\nexit {fetch_rc}\n"),
    )
    .unwrap();
    // Readable by the unprivileged user of `not_root_skips_also_in_ci`.
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&dir)
        .status()
        .unwrap();
    dir
}

/// Runs `wrapper... bash <copy>/interop/run.sh` with `CI` set or unset.
fn run(dir: &Path, ci: bool, wrapper: &[&str]) -> (i32, String) {
    let script = dir.join("interop/run.sh");
    let mut cmd = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg("bash").arg(&script);
            c
        }
        None => {
            let mut c = Command::new("bash");
            c.arg(&script);
            c
        }
    };
    cmd.env_remove("CI")
        .env_remove("IC_OUT")
        .env_remove("IC_CACHE");
    if ci {
        cmd.env("CI", "true");
    }
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&stdout).into_owned() + &String::from_utf8_lossy(&stderr);
    (status.code().unwrap_or(-1), text)
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// Whether run.sh gets past its environment checks here (so the fetch step
/// and the CI rule behind it are reached).
fn can_reach_fetch() -> bool {
    let arch_ok = std::env::consts::ARCH == "x86_64" && std::env::consts::OS == "linux";
    if !(is_root() && Path::new("/dev/net/tun").exists() && arch_ok) {
        eprintln!("skipped: needs root, /dev/net/tun and x86_64 Linux to reach the fetch step");
        return false;
    }
    true
}

fn has(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn failed_install_skips_locally_and_fails_in_ci() {
    if !can_reach_fetch() {
        return;
    }
    let dir = interop_copy(
        "install",
        77,
        "[interop] cannot: apt-get install qemu-system-x86 failed",
    );
    let (rc, out) = run(&dir, false, &[]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("interop: skipped: apt-get install qemu-system-x86 failed"),
        "{out}"
    );
    let (rc, out) = run(&dir, true, &[]);
    assert_eq!(rc, 1, "CI=true: a failed install must fail the run:\n{out}");
    assert!(
        out.contains("interop: FAIL: apt-get install qemu-system-x86 failed"),
        "{out}"
    );
    assert!(!out.contains("skipped"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stuck_download_skips_locally_and_fails_in_ci() {
    if !can_reach_fetch() {
        return;
    }
    // `timeout` reports a fetch that ran over its 900 s as status 124.
    let dir = interop_copy("timeout", 124, "[interop] downloading");
    let (rc, out) = run(&dir, false, &[]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("interop: skipped: installing packages"),
        "{out}"
    );
    let (rc, out) = run(&dir, true, &[]);
    assert_eq!(rc, 1, "CI=true: a stuck download must fail the run:\n{out}");
    assert!(out.contains("interop: FAIL: installing packages"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn broken_fetch_fails_everywhere() {
    if !can_reach_fetch() {
        return;
    }
    let dir = interop_copy("broken", 3, "[interop] something else went wrong");
    for ci in [false, true] {
        let (rc, out) = run(&dir, ci, &[]);
        assert_eq!(rc, 1, "CI={ci}:\n{out}");
        assert!(out.contains("fetch.sh failed (3)"), "{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn not_root_skips_also_in_ci() {
    let dir = interop_copy("noroot", 3, "[interop] fetch must not run");
    let wrapper: &[&str] = if is_root() {
        if !has("setpriv") {
            eprintln!("skipped: no setpriv to drop root");
            return;
        }
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]
    } else {
        &[]
    };
    let (rc, out) = run(&dir, true, wrapper);
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("interop: skipped: needs root"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_tun_skips_also_in_ci() {
    if !is_root() || !has("unshare") {
        eprintln!("skipped: needs root and unshare to hide /dev/net/tun");
        return;
    }
    let dir = interop_copy("notun", 3, "[interop] fetch must not run");
    // A private mount namespace where /dev/net is an empty tmpfs.
    let script = dir.join("interop/run.sh");
    let inner = format!(
        "mount -t tmpfs tmpfs /dev/net && exec bash {}",
        script.display()
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &inner])
        .env("CI", "true")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("interop: skipped: no /dev/net/tun"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
