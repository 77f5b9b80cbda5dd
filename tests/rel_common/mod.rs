//! Helpers shared by the reliability suites (`peer_restart.rs`,
//! `hostile.rs`, `adversary.rs`): a client device whose events are
//! recorded, a REQ with short timeouts and a REP, one connect + disconnect,
//! and this process's memory.
#![allow(dead_code)]

#[path = "../common/net.rs"]
pub mod net;

use ibcm::api::{
    CmId, Device, DeviceOptions, Event, EventParam, EventType, RepParams, ReqParams, RustHandler,
    qp_type,
};
use ibcm::wire::cm::{CmMad, CmMsg};
use ibcm::wire::roce::{self, Bth, Deth, GSI_PAYLOAD_LEN, IcrcInput};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const SERVICE: u64 = 0x0000_0000_0106_7fff; // `ibcm bench`'s service ID

/// One recorded event: (comm ID of the id, kind, REJ reason or 0).
pub type Rec = (u32, EventType, u32);

/// Records every event of the ids it is the handler of.
#[derive(Default)]
pub struct Recorder {
    pub events: Mutex<Vec<Rec>>,
    cv: Condvar,
}

impl Recorder {
    /// A handler that records; `reply` may act on the event (its return
    /// value is the handler's).
    pub fn handler(
        self: &Arc<Self>,
        reply: impl Fn(&CmId, &Event) -> i32 + Send + Sync + 'static,
    ) -> RustHandler {
        let me = self.clone();
        Arc::new(move |id: &CmId, ev: &Event| {
            let reason = match ev.param {
                EventParam::Rej { reason, .. } => reason,
                _ => 0,
            };
            let r = reply(id, ev);
            me.events
                .lock()
                .unwrap()
                .push((id.local_id(), ev.kind, reason));
            me.cv.notify_all();
            r
        })
    }

    /// Waits for an event of `id` with one of `kinds`; returns it.
    pub fn wait(&self, id: u32, kinds: &[EventType], timeout: Duration) -> Option<Rec> {
        let until = Instant::now() + timeout;
        let mut g = self.events.lock().unwrap();
        loop {
            if let Some(r) = g.iter().find(|r| r.0 == id && kinds.contains(&r.1)) {
                return Some(*r);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            g = self.cv.wait_timeout(g, left).unwrap().0;
        }
    }

    /// A recording client handler that answers a REP with an RTU and a
    /// DREQ with a DREP.
    pub fn client_handler(self: &Arc<Self>) -> RustHandler {
        self.handler(|id, ev| {
            match ev.kind {
                EventType::RepReceived => {
                    let _ = id.send_rtu(&[]);
                }
                EventType::DreqReceived => {
                    let _ = id.send_drep(&[]);
                }
                _ => {}
            }
            0
        })
    }

    pub fn kinds_of(&self, id: u32) -> Vec<EventType> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.0 == id)
            .map(|r| r.1)
            .collect()
    }
}

/// Opens `name` in this process whatever `IBCM_SERVICE` says: these tests
/// drive the in-process engine (its options, its transport, raw peers on
/// the wire) and must not start the host CM service.
pub fn open(name: &str, max_half_open: u32) -> Arc<Device> {
    Device::open_local(
        name,
        DeviceOptions {
            shards: 1,
            threads: 1,
            max_half_open,
            ..DeviceOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("open {name}: {e}"))
}

/// A REQ to `dest` (an IPv4 address) for `service` with timeouts of about
/// `2 * 268 ms + 4.096 us * 2^timeout` and `retries` retries.
pub fn req(
    dev: &Device,
    dest: &str,
    service: u64,
    qpn: u32,
    timeout: u8,
    retries: u8,
) -> ReqParams {
    let ip: std::net::IpAddr = dest.parse().unwrap();
    let path = dev.init_path(1, ip.into()).unwrap();
    ReqParams {
        primary_path: path,
        service_id: service,
        qp_num: qpn,
        qp_type: qp_type::RC,
        starting_psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: timeout,
        local_cm_response_timeout: timeout,
        retry_count: 7,
        rnr_retry_count: 7,
        max_cm_retries: retries,
        ..ReqParams::default()
    }
}

/// A REP from a server's QP `qpn` (its low 24 bits).
pub fn rep(qpn: u32) -> RepParams {
    RepParams {
        qp_num: qpn & 0xff_ffff,
        starting_psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        ..RepParams::default()
    }
}

/// How one connection from `connect_once` went.
pub struct Attempt {
    /// The event that ended the connect (REP, REJ or REQ_ERROR), if any
    /// came in time.
    pub connect: Option<Rec>,
    /// From sending the REQ to that event.
    pub latency: Duration,
    /// After a REP: the event that ended the disconnect (DREP or
    /// DREQ_ERROR), if any came in time.
    pub disconnect: Option<Rec>,
}

/// One connection from `dev`: a new id with `h` (a handler of `rec`'s, e.g.
/// `Recorder::client_handler`) sends `req`; after a REP it disconnects.
/// Each step waits up to `timeout`. The id is destroyed.
pub fn connect_once(
    dev: &Arc<Device>,
    rec: &Recorder,
    h: &RustHandler,
    req: &ReqParams,
    timeout: Duration,
) -> Attempt {
    let id = dev
        .create_id(None, std::ptr::null_mut(), Some(h.clone()))
        .unwrap();
    let t0 = Instant::now();
    id.send_req(req).unwrap();
    let connect = rec.wait(
        id.local_id(),
        &[
            EventType::RepReceived,
            EventType::RejReceived,
            EventType::ReqError,
        ],
        timeout,
    );
    let latency = t0.elapsed();
    let mut disconnect = None;
    if let Some((_, EventType::RepReceived, _)) = connect {
        id.send_dreq(&[]).unwrap();
        disconnect = rec.wait(
            id.local_id(),
            &[EventType::DrepReceived, EventType::DreqError],
            timeout,
        );
    }
    id.destroy().unwrap();
    Attempt {
        connect,
        latency,
        disconnect,
    }
}

/// This process's resident set size in KiB (from /proc/self/statm).
pub fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64 / 1024
}

/// Waits until `f` holds or `timeout` passes; returns whether it held.
pub fn until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ------------------------------------------------- a raw-MAD peer over UDP

/// A MAD framed as the software fabric frames it, from `from` to `to`
/// (valid ICRC).
pub fn frame(from: &UdpSocket, to: Ipv4Addr, mad: &[u8; 256]) -> [u8; GSI_PAYLOAD_LEN] {
    let SocketAddr::V4(src) = from.local_addr().unwrap() else {
        unreachable!()
    };
    let mut out = [0u8; GSI_PAYLOAD_LEN];
    let icrc = IcrcInput::linux_ipv4(*src.ip(), to, 4791, 4791);
    roce::emit_udp_payload(&Bth::gsi(1), &Deth::GSI, mad, icrc, &mut out);
    out
}

/// A UDP socket on `ip`, port 4791.
pub fn bind(ip: &str) -> UdpSocket {
    let ip: Ipv4Addr = ip.parse().unwrap();
    UdpSocket::bind((ip, 4791)).unwrap_or_else(|e| panic!("bind {ip}: {e}"))
}

/// The next CM MAD `sock` receives before `until`.
fn next_mad(sock: &UdpSocket, until: Instant) -> Option<CmMad> {
    let mut buf = [0u8; 600];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        sock.set_read_timeout(Some(left)).unwrap();
        match sock.recv_from(&mut buf) {
            Ok((n, _)) if n == GSI_PAYLOAD_LEN => {
                if let Ok(m) = CmMad::parse(&buf[20..276]) {
                    return Some(m);
                }
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
}

/// The CM MADs a socket receives within `wait` (parsed), in order.
pub fn receive(sock: &UdpSocket, wait: Duration) -> Vec<CmMad> {
    let until = Instant::now() + wait;
    std::iter::from_fn(|| next_mad(sock, until)).collect()
}

/// A REQ as our own stack sends it to `to` (captured by a socket there),
/// from a throw-away device at `from`.
pub fn captured_req(from: &str, to: &str, service: u64) -> CmMad {
    let sink = bind(to);
    let dev = open(&format!("soft:{from}"), 0);
    let id = dev.create_id(None, std::ptr::null_mut(), None).unwrap();
    id.send_req(&req(&dev, to, service, 7, 16, 0)).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let got =
        std::iter::from_fn(|| next_mad(&sink, until)).find(|m| matches!(m.msg, CmMsg::Req(_)));
    let _ = id.destroy();
    dev.close();
    got.expect("captured REQ")
}
