//! A destroy made on a served process's reader thread (a callback's
//! non-zero return) is held inside the wake-up's `Device::batch`, to ride
//! in the message its end sends with the callbacks' other one-way calls
//! (docs/SERVICE.md, "Round 12"). The service must still see it when no
//! other message follows: the process goes idle after the callback.

#[path = "common/fake_service.rs"]
mod fake;
#[path = "common/net.rs"]
mod net;
#[path = "common/served.rs"]
mod served;

use ibcm::api::{Device, Event, EventType, ReqParams, RustHandler, State, qp_type};
use ibcm::service;

use std::net::IpAddr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn a_callback_s_destroy_reaches_the_service_when_nothing_follows() {
    let (svc, socket) = served::start_service(fake::temp_socket("svc-destroy", "idle"));
    let (server, client) = (net::soft(1), net::soft(2));
    let a = Device::open_served(&server, &socket).unwrap();
    let b = Device::open_served(&client, &socket).unwrap();

    // The listener's handler destroys each new id (non-zero return) on
    // the reader thread; the process then sends nothing more.
    let (seen_tx, seen) = mpsc::channel::<EventType>();
    let seen_tx = Mutex::new(seen_tx);
    let refuse: RustHandler = Arc::new(move |_, ev: &Event| {
        let _ = seen_tx.lock().unwrap().send(ev.kind);
        1
    });
    let listener = a
        .create_id(None, std::ptr::null_mut(), Some(refuse))
        .unwrap();
    listener.listen(0x5e12).unwrap();

    let (got_tx, got) = mpsc::channel::<EventType>();
    let got_tx = Mutex::new(got_tx);
    let record: RustHandler = Arc::new(move |_, ev: &Event| {
        let _ = got_tx.lock().unwrap().send(ev.kind);
        0
    });
    let id = b
        .create_id(None, std::ptr::null_mut(), Some(record))
        .unwrap();
    let dest: IpAddr = net::addr(1).into();
    let path = b.init_path(1, dest.into()).unwrap();
    id.send_req(&ReqParams {
        primary_path: path,
        service_id: 0x5e12,
        qp_num: 0x11,
        qp_type: qp_type::RC,
        ..Default::default()
    })
    .unwrap();

    assert_eq!(
        seen.recv_timeout(Duration::from_secs(5)),
        Ok(EventType::ReqReceived),
        "the listener's handler saw the REQ"
    );
    // The service ran the held DESTROY: the REQ_RCVD id's destroy sends
    // the requester a REJ.
    assert_eq!(
        got.recv_timeout(Duration::from_secs(5)),
        Ok(EventType::RejReceived),
        "the destroy never reached the service"
    );
    // The id is gone in the process and in the service (only the
    // listener is left on the server's device).
    // (Read from the process itself: `all_counters` would ask the service,
    // a message that carries whatever is held.)
    assert_eq!(a.live_ids(), 1, "the process kept the id");
    let sdev = svc.device(&server).expect("the service serves the device");
    assert!(
        served::wait_for(Duration::from_secs(2), || sdev.all_counters().live_ids == 1),
        "the service kept the destroyed id: {} live",
        sdev.all_counters().live_ids
    );
    let ids = service::query_ids(&socket).unwrap();
    assert!(
        ids.iter().all(|i| i.state != State::ReqRcvd as u32),
        "an id still in REQ_RCVD: {ids:?}"
    );
    let _ = id.destroy();
    let _ = listener.destroy();
    a.close();
    b.close();
}
