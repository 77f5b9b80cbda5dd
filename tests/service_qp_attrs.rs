//! The QP attributes a served process gets with its REP (`op::QP_ATTRS`):
//! the service pushes `INIT_QP_ATTR`'s answers for INIT, RTR and RTS just
//! before a `REP_RECEIVED` event, and the process's `init_qp_attr` answers
//! from them without a round trip — only while the snapshot they came with
//! is the id's newest and the id is still in its state. A fake service
//! here pushes the records and counts the `INIT_QP_ATTR` requests that
//! still reach it (it answers them with attributes of its own, so the
//! test sees which source each answer came from).

#[path = "common/fake_service.rs"]
mod fake;
#[path = "common/net.rs"]
mod net;
#[path = "common/served.rs"]
mod served;

use ibcm::api::{Device, Event, EventParam, EventType, PortInfo, QpAttr, RustHandler, State};
use ibcm::engine::{Handle, RepEvent, ReqEvent, qp_state};
use ibcm::ipc::{self, Created, Header, Public, QpAttrs, Stat, op, sock};

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The fake service's answer to `INIT_QP_ATTR` (told apart by its
/// destination QP number).
fn served_attr(state: u32) -> QpAttr {
    QpAttr {
        qp_state: state,
        dest_qp_num: 0xfa4e,
        ..QpAttr::default()
    }
}

/// The attributes the fake service pushes.
fn pushed_attrs(public: Public) -> QpAttrs {
    let at = |state, qpn| QpAttr {
        qp_state: state,
        dest_qp_num: qpn,
        rq_psn: 0x1234,
        sq_psn: 0x5678,
        ..QpAttr::default()
    };
    QpAttrs {
        public,
        init: at(qp_state::INIT, 0),
        rtr: at(qp_state::RTR, 77),
        rts: at(qp_state::RTS, 77),
    }
}

fn public(handle: u64, state: State, version: u64) -> Public {
    Public {
        state: state as u32,
        lap_state: 0,
        local_id: handle as u32,
        remote_id: 0x99,
        service_id: 0x4242,
        version,
    }
}

/// A record the service pushes on its own (`seq` 0) for `handle`.
fn pushed(op: u16, handle: u64) -> ipc::Writer {
    Header { op, seq: 0, handle }.record()
}

fn qp_attrs_record(handle: u64, a: &QpAttrs) -> Vec<u8> {
    let mut w = pushed(op::QP_ATTRS, handle);
    w.put(a);
    w.into_bytes()
}

fn rep_event_record(handle: u64, p: &Public) -> Vec<u8> {
    let mut w = pushed(op::EVENT, handle);
    let ev = Event {
        id: Handle(handle),
        kind: EventType::RepReceived,
        param: EventParam::Rep(RepEvent {
            remote_qpn: 77,
            ..RepEvent::default()
        }),
        local_id: handle as u32,
        mad: None,
    };
    ipc::put_event(&mut w, p, 0, &ev);
    w.into_bytes()
}

/// What the fake service saw: the `INIT_QP_ATTR` requests it answered,
/// and every request op with the number of the message that brought it.
#[derive(Default)]
struct Seen {
    asked: AtomicUsize,
    ops: Mutex<Vec<(usize, u16)>>,
}

impl Seen {
    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

/// A service of one connection: answers OPEN, leases the ids of `handles`
/// one per `CREATE_IDS`, answers LISTEN, answers `INIT_QP_ATTR` with
/// `served_attr` (the id in state `served`) and, on the k-th `STAT`
/// request, pushes `pushes[k]` before its reply; what it saw goes to the
/// `Seen` it returns.
fn fake_service(
    socket: PathBuf,
    handles: Vec<u64>,
    served: State,
    pushes: Vec<Vec<Vec<u8>>>,
) -> (std::thread::JoinHandle<()>, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let saw = seen.clone();
    let (mut leased, mut stats) = (0, 0);
    let svc = fake::serve_records(&socket, move |fd, msg, h, mut r| {
        saw.ops.lock().unwrap().push((msg, h.op));
        Some(match h.op {
            op::OPEN => {
                let ip: IpAddr = net::ip(2).parse().unwrap();
                fake::opened(h, vec![PortInfo::roce(1, ip.into())])
            }
            op::CREATE_IDS => {
                let handle = handles[leased];
                leased += 1;
                let c = Created {
                    handle,
                    public: public(handle, State::Idle, 1),
                };
                ipc::reply(h, 0, Public::default(), |w| {
                    w.put(&vec![c].into_boxed_slice());
                })
            }
            op::LISTEN => ipc::reply(h, 0, public(h.handle, State::Listen, 2), |_| ()),
            op::INIT_QP_ATTR => {
                saw.asked.fetch_add(1, Ordering::SeqCst);
                let state: u32 = r.get().unwrap();
                ipc::reply(h, 0, public(h.handle, served, 3), |w| {
                    w.put(&served_attr(state));
                })
            }
            op::STAT => {
                for rec in pushes.get(stats).cloned().unwrap_or_default() {
                    sock::send(fd, &rec).unwrap();
                }
                stats += 1;
                ipc::reply(h, 0, Public::default(), |w| {
                    w.put(&Stat::default());
                })
            }
            _ => return None,
        })
    });
    (svc, seen)
}

type Asked = Vec<Result<QpAttr, String>>;

/// The states librdmacm asks `INIT_QP_ATTR` for, in its order.
const STATES: [u32; 3] = [qp_state::INIT, qp_state::RTR, qp_state::RTS];

/// The three answers when every call went to the service.
fn served_all() -> Asked {
    STATES.iter().map(|&s| Ok(served_attr(s))).collect()
}

/// The three answers when the attributes pushed with `p` gave them.
fn pushed_all(p: Public) -> Asked {
    let a = pushed_attrs(p);
    vec![Ok(a.init), Ok(a.rtr), Ok(a.rts)]
}

/// Has the service push its next records (a `STAT` request) and returns
/// the answers the handler got on the event they bring.
fn next_event(dev: &Device, events: &Receiver<Asked>) -> Asked {
    dev.service_stat().unwrap();
    events
        .recv_timeout(Duration::from_secs(10))
        .expect("the event's callback ran")
}

/// A handler that, on an event of `kind`, asks for the QP attributes as
/// librdmacm does (INIT, RTR, RTS: on a REP before the RTU, on a REQ in
/// `rdma_accept` before the REP) and hands the three answers over.
fn qp_handler(kind: EventType) -> (RustHandler, Receiver<Asked>) {
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    let h: RustHandler = Arc::new(move |id, ev| {
        if ev.kind == kind {
            let got = STATES
                .iter()
                .map(|&s| id.init_qp_attr(s).map_err(|e| format!("{e:?}")))
                .collect();
            let _ = tx.lock().unwrap().send(got);
        }
        0
    });
    (h, rx)
}

#[test]
fn a_rep_brings_its_qp_attributes_and_init_qp_attr_makes_no_round_trip() {
    let socket = fake::temp_socket("qpattrs", "rep");
    let (h1, h2, h3) = (0x101, 0x102, 0x103);
    // h1: attributes and event of one snapshot (the engine's order).
    let p1 = public(h1, State::MraRepSent, 10);
    let fresh = vec![
        qp_attrs_record(h1, &pushed_attrs(p1)),
        rep_event_record(h1, &p1),
    ];
    // h2: attributes older than the event's snapshot (the id moved on in
    // between): not used.
    let stale = vec![
        qp_attrs_record(h2, &pushed_attrs(public(h2, State::MraRepSent, 20))),
        rep_event_record(h2, &public(h2, State::MraRepSent, 21)),
    ];
    // h3: a record whose sets are not INIT, RTR, RTS: dropped.
    let mut bad = pushed_attrs(public(h3, State::MraRepSent, 30));
    bad.init.qp_state = qp_state::RTR;
    let broken = vec![
        qp_attrs_record(h3, &bad),
        rep_event_record(h3, &public(h3, State::MraRepSent, 30)),
    ];
    let (svc, seen) = fake_service(
        socket.clone(),
        vec![h1, h2, h3],
        State::MraRepSent,
        vec![fresh, stale, broken],
    );
    let dev = Device::open_served(&net::soft(2), &socket).unwrap();
    let (handler, events) = qp_handler(EventType::RepReceived);
    let ids: Vec<_> = (0..3)
        .map(|_| {
            dev.create_id(None, std::ptr::null_mut(), Some(handler.clone()))
                .unwrap()
        })
        .collect();
    assert_eq!(ids[0].handle(), h1);

    // The pushed attributes answer all three calls: no request reaches
    // the service.
    assert_eq!(next_event(&dev, &events), pushed_all(p1));
    assert_eq!(seen.asked(), 0, "no INIT_QP_ATTR round trip");
    // Taking the RTS ones drops the set: a later call asks the service.
    assert_eq!(
        ids[0].init_qp_attr(qp_state::RTR),
        Ok(served_attr(qp_state::RTR))
    );
    assert_eq!(seen.asked(), 1);

    // Stale attributes: every call goes to the service.
    assert_eq!(next_event(&dev, &events), served_all());
    assert_eq!(seen.asked(), 4);

    // A malformed record is dropped: the same.
    assert_eq!(next_event(&dev, &events), served_all());
    assert_eq!(seen.asked(), 7);

    dev.close();
    svc.join().unwrap();
}

fn req_event_record(handle: u64, p: &Public, listener: u64) -> Vec<u8> {
    let mut w = pushed(op::EVENT, handle);
    let ev = Event {
        id: Handle(handle),
        kind: EventType::ReqReceived,
        param: EventParam::Req(Box::new(ReqEvent {
            listen_id: Handle(listener),
            bth_pkey: 0xffff,
            port: 1,
            primary_path: Default::default(),
            alternate_path: None,
            sgid_attr: (1, 0),
            remote_ca_guid: 9,
            remote_qkey: 0,
            remote_qpn: 77,
            qp_type: ibcm::api::qp_type::RC,
            starting_psn: 0x1234,
            responder_resources: 1,
            initiator_depth: 1,
            local_cm_response_timeout: 20,
            flow_control: 0,
            remote_cm_response_timeout: 20,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            ece: Default::default(),
        })),
        local_id: handle as u32,
        mad: None,
    };
    ipc::put_event(&mut w, p, listener, &ev);
    w.into_bytes()
}

/// The passive side: a listener marked with `set_qp_attrs_on_req` sends
/// the mark in its LISTEN's message, and a REQ pushed with its QP
/// attributes (the new id's, before the event that creates the id) is
/// accepted without an `INIT_QP_ATTR` round trip; attributes of another
/// snapshot or another id are not used.
#[test]
fn a_marked_listeners_req_brings_its_qp_attributes_and_accept_makes_no_round_trip() {
    let socket = fake::temp_socket("qpattrs", "req");
    let l = 0x201;
    let (n1, n2, n3) = (0x301, 0x302, 0x303);
    let p1 = public(n1, State::ReqRcvd, 10);
    let fresh = vec![
        qp_attrs_record(n1, &pushed_attrs(p1)),
        req_event_record(n1, &p1, l),
    ];
    // n2: attributes older than the event's snapshot.
    let p2 = public(n2, State::ReqRcvd, 21);
    let stale = vec![
        qp_attrs_record(n2, &pushed_attrs(public(n2, State::ReqRcvd, 20))),
        req_event_record(n2, &p2, l),
    ];
    // n3: attributes of another id.
    let p3 = public(n3, State::ReqRcvd, 30);
    let other = vec![
        qp_attrs_record(0x3ff, &pushed_attrs(public(0x3ff, State::ReqRcvd, 30))),
        req_event_record(n3, &p3, l),
    ];
    let (svc, seen) = fake_service(
        socket.clone(),
        vec![l],
        State::ReqRcvd,
        vec![fresh, stale, other],
    );
    let dev = Device::open_served(&net::soft(2), &socket).unwrap();
    let (handler, events) = qp_handler(EventType::ReqReceived);
    let listener = dev
        .create_id(None, std::ptr::null_mut(), Some(handler))
        .unwrap();
    assert_eq!(listener.handle(), l);
    listener.set_qp_attrs_on_req(true).unwrap();
    listener.listen(0x4242).unwrap();
    // The mark rode in the LISTEN's message, just before it.
    let s = seen.ops.lock().unwrap().clone();
    let mark = s
        .iter()
        .position(|&(_, o)| o == op::ONEWAY | op::QP_ATTRS_ON_REQ)
        .expect("the mark reached the service");
    assert_eq!(s.get(mark + 1).map(|&(_, o)| o), Some(op::LISTEN));
    assert_eq!(s[mark].0, s[mark + 1].0, "one message: {s:?}");

    // n1: the pushed attributes answer the accept's three calls.
    assert_eq!(next_event(&dev, &events), pushed_all(p1));
    assert_eq!(seen.asked(), 0, "no INIT_QP_ATTR round trip");

    // n2 (stale) and n3 (another id's): every call goes to the service.
    assert_eq!(next_event(&dev, &events), served_all());
    assert_eq!(seen.asked(), 3);
    assert_eq!(next_event(&dev, &events), served_all());
    assert_eq!(seen.asked(), 6);

    dev.close();
    svc.join().unwrap();
}

/// A fake-service process asks for its REPs' attributes once, with its
/// first `init_qp_attr` (the mark rides in that call's message, just
/// before it), and never again.
#[test]
fn the_first_init_qp_attr_asks_for_rep_attributes_once_in_its_own_message() {
    let socket = fake::temp_socket("qpattrs", "ask");
    let h1 = 0x401;
    let (svc, seen) = fake_service(socket.clone(), vec![h1], State::MraRepSent, vec![]);
    let dev = Device::open_served(&net::soft(2), &socket).unwrap();
    let id = dev.create_id(None, std::ptr::null_mut(), None).unwrap();
    dev.service_stat().unwrap();
    let marks = |s: &[(usize, u16)]| {
        s.iter()
            .filter(|&&(_, o)| o == op::ONEWAY | op::QP_ATTRS_ON_REP)
            .count()
    };
    assert_eq!(marks(&seen.ops.lock().unwrap()), 0, "not asked before");
    for s in STATES {
        assert_eq!(id.init_qp_attr(s), Ok(served_attr(s)));
    }
    assert_eq!(seen.asked(), 3);
    let s = seen.ops.lock().unwrap().clone();
    assert_eq!(marks(&s), 1, "asked once: {s:?}");
    let mark = s
        .iter()
        .position(|&(_, o)| o == op::ONEWAY | op::QP_ATTRS_ON_REP)
        .unwrap();
    assert_eq!(
        s.get(mark + 1).map(|&(_, o)| o),
        Some(op::INIT_QP_ATTR),
        "{s:?}"
    );
    assert_eq!(s[mark].0, s[mark + 1].0, "one message: {s:?}");
    dev.close();
    svc.join().unwrap();
}

/// A real service serving two devices, `soft(server)` with a listener on
/// `sid` that answers each REQ with a REP (QP number the client's + 100)
/// and `soft(client)`, and the client's path to the server.
fn served_pair(
    tag: &str,
    server: u16,
    client: u16,
    sid: u64,
) -> (
    Arc<ibcm::service::Service>,
    Arc<Device>,
    Arc<Device>,
    ibcm::api::CmId,
    ibcm::api::PathRec,
) {
    let (svc, socket) = served::start_service(fake::temp_socket("qpattrs", tag));
    let srv = Device::open_served(&net::soft(server), &socket).unwrap();
    let cli = Device::open_served(&net::soft(client), &socket).unwrap();
    let handler: RustHandler = Arc::new(|id, ev| {
        if let EventParam::Req(req) = &ev.param {
            let rep = ibcm::api::RepParams {
                qp_num: req.remote_qpn + 100,
                starting_psn: 1,
                ..Default::default()
            };
            return id.send_rep(&rep).map_or(-1, |()| 0);
        }
        0
    });
    let listener = srv
        .create_id(None, std::ptr::null_mut(), Some(handler))
        .unwrap();
    listener.listen(sid).unwrap();
    let path = cli.init_path(1, net::ip(server).parse().unwrap()).unwrap();
    (svc, srv, cli, listener, path)
}

/// Against a real service (two served devices of one service): a process
/// that never called `init_qp_attr` is pushed no QP attributes with its
/// REPs; its first calls are round trips (and ask for them); the REP of
/// its next connection brings them, and its three calls make no round
/// trip. Counted by the service (`Stat::qp_attrs_pushed`,
/// `qp_attr_requests`).
#[test]
fn rep_attributes_are_pushed_only_to_a_process_that_asked() {
    let (_svc, srv, cli, _listener, path) = served_pair("real", 51, 52, 0x4343);
    // One connection; the REP's handler asks for the QP attributes (as
    // librdmacm does) when `ask`: its answers.
    // (Each connection its own QP number: the same one again would be a
    // stale connection to the server.)
    let qpn = AtomicUsize::new(10);
    let connect = |ask: bool| -> (u32, Asked) {
        let (tx, rx) = channel();
        let tx = Mutex::new(tx);
        let h: RustHandler = Arc::new(move |id, ev| {
            if ev.kind == EventType::RepReceived {
                let got: Asked = if ask {
                    STATES
                        .iter()
                        .map(|&s| id.init_qp_attr(s).map_err(|e| format!("{e:?}")))
                        .collect()
                } else {
                    Vec::new()
                };
                let _ = id.send_rtu(&[]);
                let _ = tx.lock().unwrap().send(got);
            }
            0
        });
        let id = cli.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
        let qp_num = qpn.fetch_add(1, Ordering::SeqCst) as u32;
        id.send_req(&ibcm::api::ReqParams {
            primary_path: path,
            service_id: 0x4343,
            qp_num,
            qp_type: ibcm::api::qp_type::RC,
            ..Default::default()
        })
        .unwrap();
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the REP's callback ran");
        (qp_num, got)
    };
    let counts = || {
        let s = cli.service_stat().unwrap();
        (s.qp_attrs_pushed, s.qp_attr_requests)
    };
    // Never asked: nothing pushed.
    assert!(connect(false).1.is_empty());
    assert!(connect(false).1.is_empty());
    assert_eq!(counts(), (0, 0), "(pushed, requests) before asking");
    // The first calls ask the service, and ask for the attributes.
    let (_, first) = connect(true);
    assert!(first.iter().all(|a| a.is_ok()), "{first:?}");
    assert_eq!(counts(), (0, 3));
    // From now on each REP brings them: no round trip, the same answers
    // (but for the PSNs and QP numbers of the new connection).
    let (qp_num, second) = connect(true);
    assert_eq!(counts(), (1, 3), "(pushed, requests) after asking");
    let states: Vec<_> = second
        .iter()
        .map(|a| a.as_ref().map(|a| a.qp_state))
        .collect();
    assert_eq!(states, STATES.iter().map(|&s| Ok(s)).collect::<Vec<_>>());
    assert_eq!(
        second[1].as_ref().unwrap().dest_qp_num,
        qp_num + 100,
        "the RTR attributes name this connection's REP's QP"
    );
    connect(true);
    assert_eq!(counts(), (2, 3));
    srv.close();
    cli.close();
}

/// Against a real service: an id said to move a QP before its REQ
/// (`CmId::want_qp_attrs_on_rep`, what librdmacm's `rdma_connect` of an
/// id with a QP does) gets the attributes with the process's very first
/// REP: its three `init_qp_attr` calls make no round trip.
#[test]
fn an_id_that_will_move_a_qp_gets_the_first_reps_attributes() {
    let (_svc, srv, cli, _listener, path) = served_pair("first", 53, 54, 0x4344);
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    let h: RustHandler = Arc::new(move |id, ev| {
        if ev.kind == EventType::RepReceived {
            let got: Asked = STATES
                .iter()
                .map(|&s| id.init_qp_attr(s).map_err(|e| format!("{e:?}")))
                .collect();
            let _ = id.send_rtu(&[]);
            let _ = tx.lock().unwrap().send(got);
        }
        0
    });
    let id = cli.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
    id.want_qp_attrs_on_rep();
    id.send_req(&ibcm::api::ReqParams {
        primary_path: path,
        service_id: 0x4344,
        qp_num: 20,
        qp_type: ibcm::api::qp_type::RC,
        ..Default::default()
    })
    .unwrap();
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the REP's callback ran");
    let s = cli.service_stat().unwrap();
    assert_eq!(
        (s.qp_attrs_pushed, s.qp_attr_requests),
        (1, 0),
        "(pushed, requests) of the first connection"
    );
    let states: Vec<_> = got.iter().map(|a| a.as_ref().map(|a| a.qp_state)).collect();
    assert_eq!(states, STATES.iter().map(|&s| Ok(s)).collect::<Vec<_>>());
    assert_eq!(got[1].as_ref().unwrap().dest_qp_num, 120);
    srv.close();
    cli.close();
}
