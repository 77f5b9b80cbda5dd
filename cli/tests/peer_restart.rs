//! Peer restart: the server process (`ibcm bench --serve`) is killed with
//! connections up and started again on the same address. The client gets
//! the kernel CM's outcomes:
//!
//! * with the server gone, a new REQ ends in REQ_ERROR and a DREQ on an
//!   established connection in DREQ_ERROR (retries run out);
//! * the restarted server (same address, so the same CA GUID; QPNs start
//!   at 1 again) answers a new REQ with a REP whose (CA GUID, QPN) is that
//!   of a connection the client still holds: the client rejects it with
//!   REJ(STALE_CONN) and disconnects the stale connection (DREQ, answered
//!   with a DREP by the server, which has no such id); the new connection's
//!   REQ retransmission then gets a fresh QPN and is established;
//! * after the stale connection's timewait, new connections succeed and
//!   nothing is left: no ids, no timers on either side.

#[path = "../../tests/rel_common/mod.rs"]
mod rel_common;

use ibcm::engine::EventType as E;
use rel_common::*;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// This process's addresses of the server (`ibcm bench --serve`) and of
/// the client device.
const SERVER: u16 = 2;
const CLIENT: u16 = 3;

fn start_server() -> Child {
    // In-process (one process per address; no service at the host's
    // default socket): the restart under test is the peer process's.
    let mut c = Command::new(env!("CARGO_BIN_EXE_ibcm"))
        .env("IBCM_SERVICE", "off")
        .args([
            "bench",
            "--serve",
            "--server",
            &net::soft(SERVER),
            "--verify",
            "--settle",
            "5",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    c.stdout = Some(out.into_inner());
    c
}

/// Closes the server's stdin and returns its final JSON report.
fn stop_server(mut c: Child) -> serde_json::Value {
    drop(c.stdin.take());
    let mut s = String::new();
    c.stdout.take().unwrap().read_to_string(&mut s).unwrap();
    c.wait().unwrap();
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("server report {s:?}: {e}"))
}

#[test]
fn server_killed_and_restarted() {
    let rec = Arc::new(Recorder::default());
    let dev = open(&net::soft(CLIENT), 0);
    let h = rec.client_handler();
    let new_id = || {
        dev.create_id(None, std::ptr::null_mut(), Some(h.clone()))
            .unwrap()
    };
    // 0.6 s per try, 3 tries: a dead peer is noticed in about 2 s.
    let r = |qpn| req(&dev, &net::ip(SERVER), SERVICE, qpn, 14, 2);
    let t = Duration::from_secs(10);

    // 1. Server up: two connections.
    let s1 = start_server();
    let (c1, c2) = (new_id(), new_id());
    c1.send_req(&r(101)).unwrap();
    c2.send_req(&r(102)).unwrap();
    for c in [&c1, &c2] {
        assert!(rec.wait(c.local_id(), &[E::RepReceived], t).is_some());
    }

    // 2. Killed: no DREQ, no REJ — the peer just goes silent.
    let mut s1 = s1;
    s1.kill().unwrap();
    s1.wait().unwrap();

    // 3. While it is down: a DREQ times out, a REQ times out.
    c2.send_dreq(&[]).unwrap();
    let c3 = new_id();
    c3.send_req(&r(103)).unwrap();
    assert_eq!(
        rec.wait(c2.local_id(), &[E::DreqError, E::DrepReceived], t)
            .map(|e| e.1),
        Some(E::DreqError)
    );
    assert_eq!(
        rec.wait(c3.local_id(), &[E::ReqError, E::RepReceived], t)
            .map(|e| e.1),
        Some(E::ReqError)
    );
    c2.destroy().unwrap();
    c3.destroy().unwrap();

    // 4. Restarted: its first REP reuses QPN 1, which c1 still holds.
    let s2 = start_server();
    let c4 = new_id();
    c4.send_req(&r(104)).unwrap();
    // c1 is disconnected as stale (the new server answers its DREQ).
    assert_eq!(
        rec.wait(c1.local_id(), &[E::DrepReceived, E::DreqError], t)
            .map(|e| e.1),
        Some(E::DrepReceived),
        "c1: {:?}",
        rec.kinds_of(c1.local_id())
    );
    // c4's REQ retransmission gets a new QPN and connects.
    assert!(
        rec.wait(c4.local_id(), &[E::RepReceived], t).is_some(),
        "c4: {:?}",
        rec.kinds_of(c4.local_id())
    );
    let c = dev.counters();
    assert_eq!(c.rej_tx[10], 1, "one REJ(STALE_CONN) sent:\n{}", c.report());
    // After c1's timewait, connecting works as usual.
    assert!(rec.wait(c1.local_id(), &[E::TimewaitExit], t).is_some());
    c1.destroy().unwrap();
    let c5 = new_id();
    c5.send_req(&r(105)).unwrap();
    assert!(rec.wait(c5.local_id(), &[E::RepReceived], t).is_some());

    // 5. Tear down; nothing left on either side.
    for c in [&c4, &c5] {
        c.send_dreq(&[]).unwrap();
        assert_eq!(
            rec.wait(c.local_id(), &[E::DrepReceived, E::DreqError], t)
                .map(|e| e.1),
            Some(E::DrepReceived)
        );
        c.destroy().unwrap();
    }
    let report = stop_server(s2);
    eprintln!("restarted server: {report}");
    assert_eq!(report["rejected"], 1, "the server saw the REJ(STALE_CONN)");
    assert_eq!(report["live_ids"], 0);
    assert_eq!(report["timers"], 0);
    assert!(until(t, || dev.live_ids() == 0 && dev.timer_count() == 0));
    let c = dev.counters();
    eprintln!("client counters:\n{}", c.report());
    assert!(
        c.timeouts[1] >= 1 && c.timeouts[6] >= 1,
        "REQ and DREQ timeouts"
    );
    assert_eq!(c.ids_created, c.ids_destroyed);
    dev.close();
}
