//! What the rdma_* calls put on the wire, seen by a plain IB CM peer
//! (`ibcm::api`, as the kernel's ib_cm would see it): the REQ's service ID
//! (`ps << 16 | port`) and 36-byte rdma_cm IP header (version 0, IPv4,
//! the active side's source port, both addresses) before the user's
//! private data; the REP's private data and QPN back in CONNECT_RESPONSE;
//! `rdma_establish`'s RTU. And the other way: a plain REQ carrying the
//! header becomes a CONNECT_REQUEST with the addresses from it; one
//! without the header is rejected.

#[path = "common/cma.rs"]
mod cma_common;
#[path = "../../tests/common/net.rs"]
mod net;

use cma_common::{conn_param, sockaddr};
use ibcm::api::*;
use ibcm::cma::{self, IpHeader, RdmaCmEventType as R, port_space};
use ibcm_rdmacm::abi::*;
use ibcm_rdmacm::exports::*;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// The next event of `ch` within 5 s: (kind, status, event pointer).
fn next(ch: *mut RdmaEventChannel) -> *mut RdmaCmEvent {
    let fd = unsafe { (*ch).fd };
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    assert_eq!(unsafe { libc::poll(&mut p, 1, 5000) }, 1, "no event in 5 s");
    let mut ev = std::ptr::null_mut();
    assert_eq!(unsafe { rdma_get_cm_event(ch, &mut ev) }, 0);
    ev
}

fn expect(ch: *mut RdmaEventChannel, kind: R, status: i32) -> *mut RdmaCmEvent {
    let ev = next(ch);
    let (k, s) = unsafe { ((*ev).event, (*ev).status) };
    assert_eq!((k, s), (kind as i32, status), "got {:?}", unsafe {
        std::ffi::CStr::from_ptr(rdma_event_str(k))
    });
    ev
}

/// A new event channel and an id on it listening (backlog 1) on
/// `server:port` in the TCP port space.
fn listener(server: IpAddr, port: u16) -> (*mut RdmaEventChannel, *mut RdmaCmId) {
    let ch = rdma_create_event_channel();
    let mut l = std::ptr::null_mut();
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut l, std::ptr::null_mut(), port_space::TCP as i32) },
        0
    );
    let mut a = sockaddr(SocketAddr::new(server, port));
    assert_eq!(unsafe { rdma_bind_addr(l, (&raw mut a).cast()) }, 0);
    assert_eq!(rdma_listen(l, 1), 0);
    (ch, l)
}

/// A new event channel and an id on it in the TCP port space, its address
/// (from `client`) and route (to `server:port`) resolved.
fn resolved(client: IpAddr, server: IpAddr, port: u16) -> (*mut RdmaEventChannel, *mut RdmaCmId) {
    let ch = rdma_create_event_channel();
    assert!(!ch.is_null());
    let mut id = std::ptr::null_mut();
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut id, std::ptr::null_mut(), port_space::TCP as i32) },
        0
    );
    let mut src = sockaddr(SocketAddr::new(client, 0));
    let mut dst = sockaddr(SocketAddr::new(server, port));
    assert_eq!(
        unsafe { rdma_resolve_addr(id, (&raw mut src).cast(), (&raw mut dst).cast(), 1000) },
        0
    );
    rdma_ack_cm_event(expect(ch, R::AddrResolved, 0));
    assert_eq!(rdma_resolve_route(id, 1000), 0);
    rdma_ack_cm_event(expect(ch, R::RouteResolved, 0));
    (ch, id)
}

/// A plain IB CM REQ (RC, QPN `qp_num`, 3 retries, both CM response
/// timeouts `timeout`) for what listens on TCP port `port`.
fn plain_req(path: PathRec, port: u16, qp_num: u32, timeout: u8, pd: Vec<u8>) -> ReqParams {
    ReqParams {
        primary_path: path,
        service_id: cma::service_id(port_space::TCP, port),
        qp_num,
        qp_type: qp_type::RC,
        private_data: pd,
        remote_cm_response_timeout: timeout,
        local_cm_response_timeout: timeout,
        max_cm_retries: 3,
        ..ReqParams::default()
    }
}

fn setup() {
    // SAFETY: set before any thread of this test reads the environment
    // through the library; every test sets the same value.
    unsafe { std::env::set_var("IBCM_RDMACM_DEVICE", "soft") };
}

#[test]
fn active_side_on_the_wire() {
    setup();
    let server: IpAddr = net::ip(2).parse().unwrap();
    let client: IpAddr = net::ip(3).parse().unwrap();
    let peer = Device::open(&format!("soft:{server}"), DeviceOptions::default()).unwrap();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let h: RustHandler = Arc::new(move |id, ev| {
        match (ev.kind, &ev.param) {
            (EventType::ReqReceived, EventParam::Req(r)) => {
                let pd = ev.private_data().unwrap().to_vec();
                tx.lock().unwrap().send(("req", pd, r.remote_qpn)).unwrap();
                let rep = RepParams {
                    qp_num: 0x4321,
                    starting_psn: 9,
                    private_data: b"from plain ib_cm".to_vec(),
                    ..RepParams::default()
                };
                return id.send_rep(&rep).map_or(1, |()| 0);
            }
            (EventType::RtuReceived, _) => {
                tx.lock().unwrap().send(("rtu", Vec::new(), 0)).unwrap();
            }
            _ => {}
        }
        0
    });
    let listener = peer.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
    listener
        .listen(cma::service_id(port_space::TCP, 7471))
        .unwrap();

    let (ch, id) = resolved(client, server, 7471);
    let sport = u16::from_be(rdma_get_src_port(id));
    assert_ne!(sport, 0);
    let mut cp = conn_param(b"user data", 0x1234);
    assert_eq!(unsafe { rdma_connect(id, &mut cp) }, 0);

    let (what, pd, qpn) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(what, "req");
    assert_eq!(qpn, 0x1234);
    assert_eq!(pd.len(), 92);
    assert_eq!(pd[0], 0, "cma_version");
    assert_eq!(pd[1], 0x40, "IPv4 in the high nibble");
    let (hdr, user) = IpHeader::parse(&pd).unwrap();
    assert_eq!(hdr.src_port, sport);
    assert_eq!((hdr.src, hdr.dst), (client, server));
    assert_eq!(&user[..9], b"user data");
    assert!(user[9..].iter().all(|&b| b == 0));

    let ev = expect(ch, R::ConnectResponse, 0);
    let conn = unsafe { (*ev).param.conn };
    assert_eq!(conn.qp_num, 0x4321);
    assert_eq!(conn.private_data_len, 196);
    let data = unsafe { std::slice::from_raw_parts(conn.private_data.cast::<u8>(), 16) };
    assert_eq!(data, b"from plain ib_cm");
    assert_eq!(rdma_ack_cm_event(ev), 0);
    assert_eq!(rdma_establish(id), 0);
    let (what, _, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(what, "rtu");
    assert_eq!(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
    listener.destroy().unwrap();
}

#[test]
fn passive_side_from_plain_requests() {
    setup();
    let server: IpAddr = net::ip(12).parse().unwrap();
    let client: IpAddr = net::ip(13).parse().unwrap();
    let (ch, l) = listener(server, 7472);

    let peer = Device::open(&format!("soft:{client}"), DeviceOptions::default()).unwrap();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let h: RustHandler = Arc::new(move |_, ev| {
        let reason = match ev.param {
            EventParam::Rej { reason, .. } => reason as i32,
            _ => -1,
        };
        tx.lock().unwrap().send((ev.kind, reason)).unwrap();
        0
    });
    let path = peer.init_path(1, Gid::from(server)).unwrap();
    let req = |pd: Vec<u8>| plain_req(path, 7472, 0x77, 20, pd);
    // With the header: a CONNECT_REQUEST whose child has the addresses.
    let hdr = IpHeader {
        src_port: 40000,
        src: client,
        dst: server,
    };
    let id = peer
        .create_id(None, std::ptr::null_mut(), Some(h.clone()))
        .unwrap();
    id.send_req(&req(hdr.with_user_data(b"hi").unwrap()))
        .unwrap();
    let ev = expect(ch, R::ConnectRequest, 0);
    let child = unsafe { (*ev).id };
    assert_eq!(unsafe { (*ev).listen_id }, l);
    assert_eq!(u16::from_be(rdma_get_dst_port(child)), 40000);
    assert_eq!(u16::from_be(rdma_get_src_port(child)), 7472);
    let dst = unsafe { &*(&raw const (*child).route.addr.dst).cast::<libc::sockaddr_in>() };
    assert_eq!(
        IpAddr::from(u32::from_be(dst.sin_addr.s_addr).to_be_bytes()),
        client
    );
    let conn = unsafe { (*ev).param.conn };
    assert_eq!((conn.private_data_len, conn.qp_num), (56, 0x77));
    assert_eq!(
        unsafe { std::slice::from_raw_parts(conn.private_data.cast::<u8>(), 2) },
        b"hi"
    );
    assert_eq!(unsafe { rdma_reject(child, std::ptr::null(), 0) }, 0);
    assert_eq!(rdma_ack_cm_event(ev), 0);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        (EventType::RejReceived, 28)
    );
    assert_eq!(rdma_destroy_id(child), 0);

    // Without the header: rejected, nothing reported.
    let id2 = peer.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
    id2.send_req(&req(b"no header".to_vec())).unwrap();
    let (kind, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(kind, EventType::RejReceived);
    let mut p = libc::pollfd {
        fd: unsafe { (*ch).fd },
        events: libc::POLLIN,
        revents: 0,
    };
    assert_eq!(unsafe { libc::poll(&mut p, 1, 100) }, 0);
    let _ = id.destroy();
    let _ = id2.destroy();
    assert_eq!(rdma_destroy_id(l), 0);
    rdma_destroy_event_channel(ch);
}

/// A request the application has not answered yet is acknowledged with an
/// MRA when its REQ comes again (as the kernel's rdma_cm does): the active
/// side stops retransmitting instead of timing out while the server is busy.
#[test]
fn unanswered_request_is_mraed_on_a_duplicate() {
    setup();
    let server: IpAddr = net::ip(14).parse().unwrap();
    let client: IpAddr = net::ip(15).parse().unwrap();
    let (ch, l) = listener(server, 7473);

    let peer = Device::open(&format!("soft:{client}"), DeviceOptions::default()).unwrap();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let h: RustHandler = Arc::new(move |_, ev| {
        tx.lock().unwrap().send(ev.kind).unwrap();
        0
    });
    let mut path = peer.init_path(1, Gid::from(server)).unwrap();
    path.packet_life_time = 0;
    let hdr = IpHeader {
        src_port: 40001,
        src: client,
        dst: server,
    };
    let id = peer.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
    // 4.096 µs × 2^12 ≈ 17 ms per try, 3 retries: without an MRA the
    // request times out (REQ_ERROR) well within the 5 s below.
    id.send_req(&plain_req(
        path,
        7473,
        0x78,
        12,
        hdr.with_user_data(b"").unwrap(),
    ))
    .unwrap();
    let ev = expect(ch, R::ConnectRequest, 0);
    let child = unsafe { (*ev).id };
    // The application sits on the request; the peer retransmits.
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        EventType::MraReceived
    );
    assert_eq!(unsafe { rdma_reject(child, std::ptr::null(), 0) }, 0);
    assert_eq!(rdma_ack_cm_event(ev), 0);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        EventType::RejReceived
    );
    assert_eq!(rdma_destroy_id(child), 0);
    let _ = id.destroy();
    assert_eq!(rdma_destroy_id(l), 0);
    rdma_destroy_event_channel(ch);
}

/// A REP the application has not completed yet (no QP: `rdma_establish`
/// comes later) is acknowledged with an MRA when it comes again, as the
/// kernel's rdma_cm prepares it on REP receipt: the passive side waits
/// instead of running out of REP retries.
#[test]
fn uncompleted_reply_is_mraed_on_a_duplicate() {
    setup();
    let server: IpAddr = net::ip(16).parse().unwrap();
    let client: IpAddr = net::ip(17).parse().unwrap();
    // The plain peer re-sends its REP every 20 ms, 15 times: without an MRA
    // it gives up (REP_ERROR) well within the 5 s below.
    let opts = DeviceOptions {
        rep_timeout_cap_ms: 20,
        rep_max_retries: 15,
        ..DeviceOptions::default()
    };
    let peer = Device::open(&format!("soft:{server}"), opts).unwrap();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let h: RustHandler = Arc::new(move |id, ev| {
        if ev.kind == EventType::ReqReceived {
            let rep = RepParams {
                qp_num: 0x4322,
                starting_psn: 9,
                ..RepParams::default()
            };
            return id.send_rep(&rep).map_or(1, |()| 0);
        }
        tx.lock().unwrap().send(ev.kind).unwrap();
        0
    });
    let listener = peer.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
    listener
        .listen(cma::service_id(port_space::TCP, 7474))
        .unwrap();

    let (ch, id) = resolved(client, server, 7474);
    let mut cp = conn_param(b"", 0x1235);
    assert_eq!(unsafe { rdma_connect(id, &mut cp) }, 0);
    let ev = expect(ch, R::ConnectResponse, 0);
    // The application holds the response; the peer re-sends its REP.
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        EventType::MraReceived,
        "the duplicate REP was not answered with an MRA"
    );
    assert_eq!(rdma_ack_cm_event(ev), 0);
    assert_eq!(rdma_establish(id), 0);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        EventType::RtuReceived
    );
    assert_eq!(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
    listener.destroy().unwrap();
}
