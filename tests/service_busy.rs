//! A busy CM service is not a hung one: a round trip that waits longer
//! than `IBCM_SERVICE_TIMEOUT_MS` goes on while the service makes
//! progress (records arrive on the connection, its CPU time grows) and
//! ends with `ETIMEDOUT` when it makes none, or at
//! `IBCM_SERVICE_BUSY_MAX_MS` when it works without ever answering.
//!
//! The fake service is a thread of this process (its `SO_PEERCRED` pid is
//! this process's): the tests run one at a time (`SERIAL`) so that one's
//! CPU burn is not another's progress. The bounds are small, set for the
//! whole binary before anything reads them.

#[path = "common/fake_service.rs"]
mod fake;
#[path = "common/net.rs"]
mod net;
#[path = "common/served.rs"]
mod served;

use ibcm::api::{Device, Gid, PortInfo};
use ibcm::ipc::{self, Header, Public, Stat, op, sock};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

const BOUND_MS: u64 = 300;
const CEILING_MS: u64 = 2400;

static SERIAL: Mutex<()> = Mutex::new(());

fn setup() -> MutexGuard<'static, ()> {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        // SAFETY: set before any thread of this binary reads them (the
        // first test to run sets them, under `Once`, before it opens).
        unsafe {
            std::env::set_var("IBCM_SERVICE_TIMEOUT_MS", BOUND_MS.to_string());
            std::env::set_var("IBCM_SERVICE_BUSY_MAX_MS", CEILING_MS.to_string());
        }
    });
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(
        ibcm::api::service_timeout(),
        Duration::from_millis(BOUND_MS)
    );
    assert_eq!(
        ibcm::api::service_busy_max(),
        Duration::from_millis(CEILING_MS)
    );
    g
}

fn ports() -> Vec<PortInfo> {
    vec![PortInfo::roce(
        1,
        Gid::from(net::ip(2).parse::<std::net::IpAddr>().unwrap()),
    )]
}

/// A pushed record the client reads and drops (a `PORTS` record with a
/// nonzero seq): traffic on the connection, nothing else.
fn noise() -> Vec<u8> {
    let mut w = Header {
        op: op::PORTS,
        seq: 1,
        handle: 0,
    }
    .record();
    w.put(&ports().into_boxed_slice());
    w.into_bytes()
}

fn stat_reply(h: Header) -> Vec<u8> {
    ipc::reply(h, 0, Public::default(), |w| {
        w.put(&Stat::default());
    })
}

/// A fake service that answers OPEN at once and handles STAT with `stat`.
fn serve(
    test: &str,
    mut stat: impl FnMut(&std::os::fd::OwnedFd, Header) -> Option<Vec<u8>> + Send + 'static,
) -> (std::sync::Arc<Device>, std::thread::JoinHandle<()>) {
    let socket = fake::temp_socket("svc-busy", test);
    let server = fake::serve(&socket, move |fd, h, _| match h.op {
        op::OPEN => Some(fake::opened(h, ports())),
        op::STAT => stat(fd, h),
        _ => None,
    });
    let d = Device::open_served(&net::soft(2), &socket).unwrap();
    (d, server)
}

/// A call on `d` whose service answers after 2.5 bounds of progress: it
/// gets its reply (no timeout counted since `timeouts`, one busy wait
/// since `busy`: one log line), and the connection is not declared
/// broken — the next call is served.
fn waited_for_and_served(
    d: std::sync::Arc<Device>,
    server: std::thread::JoinHandle<()>,
    timeouts: u64,
    busy: u64,
) {
    let t = Instant::now();
    assert!(d.service_stat().is_some(), "the call did not get its reply");
    assert!(t.elapsed() >= Duration::from_millis(BOUND_MS * 5 / 2));
    assert_eq!(ibcm::api::service_timeouts(), timeouts);
    assert_eq!(ibcm::api::service_busy_waits(), busy + 1, "one log line");
    assert!(d.service_stat().is_some(), "declared broken after the wait");
    d.close();
    server.join().unwrap();
}

#[test]
fn a_service_pushing_records_is_waited_for_past_the_bound() {
    let _g = setup();
    let (timeouts, busy) = (
        ibcm::api::service_timeouts(),
        ibcm::api::service_busy_waits(),
    );
    let mut n = 0;
    let (d, server) = serve("records", move |fd, h| {
        // Working through other clients' records: the connection sees
        // traffic, this reply comes after 2.5 bounds.
        n += 1;
        let t = Instant::now();
        while n == 1 && t.elapsed() < Duration::from_millis(BOUND_MS * 5 / 2) {
            sock::send(fd, &noise()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(stat_reply(h))
    });
    waited_for_and_served(d, server, timeouts, busy);
}

#[test]
fn a_service_burning_cpu_is_waited_for_past_the_bound() {
    let _g = setup();
    let (timeouts, busy) = (
        ibcm::api::service_timeouts(),
        ibcm::api::service_busy_waits(),
    );
    let mut n = 0;
    let (d, server) = serve("cpu", move |_, h| {
        n += 1;
        if n == 1 {
            // Working on a long queue: nothing on this connection, CPU
            // time growing; the reply after 2.5 bounds.
            served::burn(Duration::from_millis(BOUND_MS * 5 / 2));
        }
        Some(stat_reply(h))
    });
    waited_for_and_served(d, server, timeouts, busy);
}

#[test]
fn a_service_that_burns_cpu_and_never_answers_times_out_at_the_ceiling() {
    let _g = setup();
    let (timeouts, busy) = (
        ibcm::api::service_timeouts(),
        ibcm::api::service_busy_waits(),
    );
    let (d, server) = serve("livelock", |_, _| {
        // A livelocked thread: CPU time grows, no answer ever.
        served::burn(Duration::from_millis(CEILING_MS + 3000));
        None
    });
    let t = Instant::now();
    assert!(d.service_stat().is_none());
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(CEILING_MS), "{took:?}");
    assert!(
        took < Duration::from_millis(CEILING_MS + BOUND_MS + 1500),
        "{took:?}"
    );
    assert_eq!(ibcm::api::service_timeouts(), timeouts + 1);
    assert_eq!(ibcm::api::service_busy_waits(), busy + 1);
    // Declared broken: later calls fail at once.
    let t = Instant::now();
    assert!(d.service_stat().is_none());
    assert!(t.elapsed() < Duration::from_millis(BOUND_MS));
    d.close();
    server.join().unwrap();
}

#[test]
fn a_silent_service_times_out_without_waiting_for_the_ceiling() {
    let _g = setup();
    let (timeouts, busy) = (
        ibcm::api::service_timeouts(),
        ibcm::api::service_busy_waits(),
    );
    // Deadlocked: no answer, no records, no CPU time.
    let (d, server) = serve("silent", |_, _| None);
    let t = Instant::now();
    assert!(d.service_stat().is_none());
    let took = t.elapsed();
    // One period, and one more to see the CPU time not grow.
    assert!(took >= Duration::from_millis(BOUND_MS), "{took:?}");
    assert!(took < Duration::from_millis(CEILING_MS), "{took:?}");
    assert_eq!(ibcm::api::service_timeouts(), timeouts + 1);
    assert_eq!(ibcm::api::service_busy_waits(), busy);
    d.close();
    server.join().unwrap();
}
