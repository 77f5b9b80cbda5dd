//! The per-process test networks of `tests/common/net.rs`: a claim is one
//! slot per live owner, kept by its owner, taken over from a dead one, and
//! read and written the same way as `scripts/test-net.sh` (so a C run and a
//! Rust test process never get the same 127.A.B.0/23).

#[path = "common/net.rs"]
mod net;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A claims directory of its own (removed when dropped).
struct Dir(PathBuf);

impl Dir {
    fn new(test: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("ibcm-test-net-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A pid no process has (above the kernel's largest `pid_max`).
const DEAD: u32 = 4_194_305;

/// `scripts/test-net.sh OWNER` with its claims under `dir`: "127.A.B".
fn script(dir: &Path, owner: u32) -> String {
    let o = Command::new("sh")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/test-net.sh"))
        .arg(owner.to_string())
        .env("IBCM_TEST_NETS", dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

fn text([a, b]: [u8; 2]) -> String {
    format!("127.{a}.{b}")
}

#[test]
fn one_slot_per_live_owner_and_dead_owners_slots_are_taken_over() {
    let d = Dir::new("slots");
    let me = std::process::id();
    let mine = net::claim(&d.0, me).unwrap();
    assert_eq!(
        mine,
        me % net::SLOTS,
        "the first slot tried is the owner's pid"
    );
    assert_eq!(
        net::claim(&d.0, me).unwrap(),
        mine,
        "an owner keeps its slot"
    );
    // Another owner starting at the same slot (pid 1 is always alive):
    // the next one.
    let init = net::claim(&d.0, 1).unwrap();
    assert_eq!(init, 1);
    assert_eq!(net::claim(&d.0, 1 + net::SLOTS).unwrap(), 2);
    // A slot whose owner has exited is taken over.
    let dead = net::claim(&d.0, DEAD).unwrap();
    assert_eq!(dead, DEAD % net::SLOTS);
    let heir = dead + net::SLOTS;
    assert_eq!(net::claim(&d.0, heir).unwrap(), dead, "taken over");
    let owner = std::fs::read_to_string(d.0.join(format!("slot-{dead}"))).unwrap();
    assert_eq!(owner, format!("{heir}\n"));
}

#[test]
fn claims_are_the_scripts_claims() {
    let d = Dir::new("script");
    // The script's claim for a live owner is the one the helper reads...
    let c = script(&d.0, 1);
    assert_eq!(c, text(net::slot_block(net::claim(&d.0, 1).unwrap())));
    // ... it avoids the helper's ...
    let me = std::process::id();
    let mine = text(net::slot_block(net::claim(&d.0, me).unwrap()));
    assert_eq!(
        script(&d.0, me),
        mine,
        "the script finds the helper's claim"
    );
    // ... and the helper steps over the script's: both start at slot 1.
    let next = net::claim(&d.0, 1 + net::SLOTS).unwrap();
    assert_ne!(text(net::slot_block(next)), c);
    assert_eq!(net::slot_block(0), [128, 0]);
    assert_eq!(net::slot_block(129), [129, 2]);
    assert_eq!(net::slot_block(net::SLOTS - 1), [254, 254]);
}

#[test]
fn this_process_has_one_block_and_children_can_share_it() {
    let [a, b] = net::block();
    assert!((128..=254).contains(&a) && b % 2 == 0, "127.{a}.{b}");
    assert_eq!(net::addr(1).octets(), [127, a, b, 1]);
    assert_eq!(net::addr(510).octets(), [127, a, b + 1, 254]);
    assert_eq!(net::soft(7), format!("soft:127.{a}.{b}.7"));
    let mut c = Command::new("sh");
    net::pass_to(&mut c).args(["-c", "echo $IBCM_TEST_NET"]);
    let o = c.output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("127.{a}.{b}")
    );
    // Our claim is on record under our pid.
    let dir = net::claims_dir();
    let slot = (0..net::SLOTS)
        .find(|k| net::slot_block(*k) == [a, b])
        .unwrap();
    if std::env::var_os("IBCM_TEST_NET").is_none() {
        let owner = std::fs::read_to_string(dir.join(format!("slot-{slot}"))).unwrap();
        assert_eq!(owner.trim(), std::process::id().to_string());
    }
}

#[test]
#[should_panic(expected = "outside")]
fn addresses_past_the_block_are_refused() {
    net::addr(255);
}
