//! This test process's own loopback addresses: a 127.A.B.0/23 claimed
//! under the same lock and from the same slots as `scripts/test-net.sh`
//! (the C tests' claim), so two test binaries, two runs of one binary, and
//! a C run beside them never bind the same soft-device address.
//!
//! Claims are files `slot-K` under `$IBCM_TEST_NETS` (default
//! `${TMPDIR:-/tmp}/ibcm-test-nets`) holding the owner's pid, taken under
//! `flock` on `.lock` there; slot K is 127.(128 + K / 128).(2 × (K % 128)).0/23.
//! A slot whose owner has exited is taken over. The owner here is this
//! process: the claim lasts as long as the test binary runs.
//!
//! `IBCM_TEST_NET=127.A.B` (B even) names the block instead of a claim:
//! [`pass_to`] hands this process's block to a child process (a re-run of
//! the test binary) that must bind inside it; set by hand, the caller
//! answers for nobody else using it (like `make test-c TEST_NET=…`).
//!
//! Shared by the Rust tests of every crate (`tests/`, `cli/tests/`,
//! `rdmacm/tests/`), each including this one file by path.
#![allow(dead_code)]

use std::fs::{self, File};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Slots of scripts/test-net.sh: 127 values of A × 128 even values of B.
pub const SLOTS: u32 = 16256;

/// `addr(n)` of this process's block: 127.A.B.n for n in 1..=254, and
/// 127.A.(B+1).(n − 256) for n in 257..=510 (the network and broadcast-like
/// .0 and .255 are not handed out).
pub fn addr(n: u16) -> Ipv4Addr {
    assert!(
        matches!(n, 1..=254 | 257..=510),
        "test address {n} is outside 1..=254 and 257..=510"
    );
    let [a, b] = block();
    Ipv4Addr::new(127, a, b + (n / 256) as u8, (n % 256) as u8)
}

/// `addr(n)` in dotted text.
pub fn ip(n: u16) -> String {
    addr(n).to_string()
}

/// `addr(n)` as a soft device name: `soft:127.A.B.n`.
pub fn soft(n: u16) -> String {
    format!("soft:{}", addr(n))
}

/// Makes the child `c` use this process's block (`IBCM_TEST_NET`).
pub fn pass_to(c: &mut Command) -> &mut Command {
    let [a, b] = block();
    c.env(ENV, format!("127.{a}.{b}"))
}

const ENV: &str = "IBCM_TEST_NET";

/// A and B of this process's 127.A.B.0/23 (`IBCM_TEST_NET`, or claimed on
/// first use).
pub fn block() -> [u8; 2] {
    static BLOCK: OnceLock<[u8; 2]> = OnceLock::new();
    *BLOCK.get_or_init(|| {
        if let Some(v) = std::env::var_os(ENV) {
            let v = v.to_string_lossy();
            let ab: Vec<u8> = v
                .strip_prefix("127.")
                .map(|r| r.split('.').filter_map(|x| x.parse().ok()).collect())
                .unwrap_or_default();
            match ab[..] {
                [a, b] if b % 2 == 0 => return [a, b],
                _ => panic!("{ENV}={v:?}: expected 127.A.B with B even"),
            }
        }
        let dir = claims_dir();
        let slot = claim(&dir, std::process::id())
            .unwrap_or_else(|e| panic!("cannot claim a test network under {}: {e}", dir.display()));
        slot_block(slot)
    })
}

/// A and B of slot `k`'s 127.A.B.0/23, as scripts/test-net.sh numbers them.
pub fn slot_block(k: u32) -> [u8; 2] {
    [(128 + k / 128) as u8, (2 * (k % 128)) as u8]
}

pub fn claims_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("IBCM_TEST_NETS") {
        return d.into();
    }
    std::env::var_os("TMPDIR")
        .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
        .join("ibcm-test-nets")
}

/// Takes a slot for `owner` under the lock: the one already holding
/// `owner`, else the first free or abandoned one from `owner mod SLOTS` on
/// (the order scripts/test-net.sh tries them in).
pub fn claim(dir: &Path, owner: u32) -> std::io::Result<u32> {
    fs::create_dir_all(dir)?;
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".lock"))?;
    // SAFETY: flock on a descriptor this function owns; released when
    // `lock` closes.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut held = std::collections::HashMap::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(k) = name.to_str().and_then(|n| n.strip_prefix("slot-")) else {
            continue;
        };
        if let (Ok(k), Ok(o)) = (k.parse::<u32>(), fs::read_to_string(e.path())) {
            held.insert(k, o.trim().parse::<u32>().ok());
        }
    }
    if let Some((&k, _)) = held.iter().find(|(_, o)| **o == Some(owner)) {
        return Ok(k);
    }
    let live = |o: &Option<u32>| o.is_some_and(|o| Path::new(&format!("/proc/{o}")).exists());
    let free = (0..SLOTS)
        .map(|i| (owner + i) % SLOTS)
        .find(|k| !held.get(k).is_some_and(live));
    let k = free.ok_or_else(|| std::io::Error::other("every slot is held by a live process"))?;
    fs::write(dir.join(format!("slot-{k}")), format!("{owner}\n"))?;
    Ok(k)
}
