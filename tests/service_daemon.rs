//! The service's own per-record shortcuts (docs/SERVICE.md, "Round 15a"):
//! a wake-up's records run with the device it read once, falling back to
//! the connection's when an OPEN in the same wake-up set it; all ids of a
//! connection share one event handler, which names each event's own id.

#[path = "common/fake_service.rs"]
mod fake;
#[path = "common/net.rs"]
mod net;
#[path = "common/served.rs"]
mod served;

use ibcm::api::{Device, Event, EventType, ReqParams, RustHandler, qp_type};
use ibcm::ipc::{self, Header, Reader, op, sock};

use std::net::IpAddr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The replies in `msg` (a lone record or a `BATCH`): (op, seq, errno).
fn replies(msg: &[u8]) -> Vec<(u16, u64, i32)> {
    let mut recs: Vec<&[u8]> = Vec::new();
    let (h, r) = Header::parse(msg).unwrap();
    if h.op == op::BATCH {
        let body = &msg[msg.len() - r.remaining()..];
        ipc::unbatch_with(body, |rec| recs.push(rec)).unwrap();
    } else {
        recs.push(msg);
    }
    recs.iter()
        .map(|rec| {
            let (h, mut r): (Header, Reader<'_>) = Header::parse(rec).unwrap();
            let err: i32 = r.get().unwrap();
            (h.op, h.seq, err)
        })
        .collect()
}

/// OPEN and two CREATE_IDs in one message: the wake-up that reads it has
/// no device yet, so the calls behind the OPEN must find the one it set.
#[test]
fn calls_behind_an_open_in_the_same_message_find_its_device() {
    let (_svc, socket) = served::start_service(fake::temp_socket("svc-daemon", "open"));
    let fd = sock::connect(&socket).unwrap();
    let rec = |op: u16, seq: u64, body: &[u8]| {
        let mut w = Header { op, seq, handle: 0 }.record();
        w.0.extend_from_slice(body);
        w.into_bytes()
    };
    let mut open = Header {
        op: op::OPEN,
        seq: 1,
        handle: 0,
    }
    .record();
    open.put(&net::soft(31).into_bytes());
    let recs = vec![
        open.into_bytes(),
        rec(op::CREATE_ID, 2, &[]),
        rec(op::CREATE_ID, 3, &[]),
    ];
    let msgs = ipc::batch(recs);
    assert_eq!(msgs.len(), 1, "the three records go in one message");
    sock::send(&fd, &msgs[0]).unwrap();

    sock::set_timeouts(&fd, Duration::from_secs(10), true).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; ipc::MAX_RECORD];
    while got.len() < 3 {
        let n = sock::recv(&fd, &mut buf).expect("the service answers");
        assert!(n > 0, "the service closed the connection");
        got.extend(replies(&buf[..n]));
    }
    got.sort_by_key(|r| r.1);
    assert_eq!(
        got,
        vec![
            (op::REPLY | op::OPEN, 1, 0),
            (op::REPLY | op::CREATE_ID, 2, 0),
            (op::REPLY | op::CREATE_ID, 3, 0),
        ],
        "a call behind the OPEN did not find the device"
    );
}

/// Two ids of one connection, one after the other (the first destroyed
/// before the second exists): each REQ's REJ reaches its own id's handler
/// in the process, i.e. the service's shared handler named each event's
/// own id.
#[test]
fn each_id_of_a_connection_gets_its_own_events() {
    let (_svc, socket) = served::start_service(fake::temp_socket("svc-daemon", "events"));
    let (server, client) = (net::soft(32), net::soft(33));
    let a = Device::open_served(&server, &socket).unwrap();
    let b = Device::open_served(&client, &socket).unwrap();

    // The listener refuses every REQ (its handler destroys the new id):
    // the requester gets a REJ.
    let refuse: RustHandler = Arc::new(|_, _: &Event| 1);
    let listener = a
        .create_id(None, std::ptr::null_mut(), Some(refuse))
        .unwrap();
    listener.listen(0x5e15).unwrap();
    let dest: IpAddr = net::addr(32).into();
    let path = b.init_path(1, dest.into()).unwrap();

    for round in 0..3 {
        let (tx, rx) = mpsc::channel::<EventType>();
        let tx = Mutex::new(tx);
        let record: RustHandler = Arc::new(move |_, ev: &Event| {
            let _ = tx.lock().unwrap().send(ev.kind);
            0
        });
        let id = b
            .create_id(None, std::ptr::null_mut(), Some(record))
            .unwrap();
        id.send_req(&ReqParams {
            primary_path: path,
            service_id: 0x5e15,
            qp_num: 0x20 + round,
            qp_type: qp_type::RC,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(EventType::RejReceived),
            "round {round}: the id's REJ did not reach it"
        );
        id.destroy().unwrap();
    }
    let _ = listener.destroy();
    a.close();
    b.close();
}
