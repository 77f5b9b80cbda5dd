//! Helpers shared by the reliability suites (`peer_restart.rs`,
//! `hostile.rs`): a client device whose events are recorded, and a REQ
//! with short timeouts.
#![allow(dead_code)]

use ibcm::api::{
    CmId, Device, DeviceOptions, Event, EventParam, EventType, ReqParams, RustHandler, qp_type,
};
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

pub fn open(name: &str, max_half_open: u32) -> Arc<Device> {
    Device::open(
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
