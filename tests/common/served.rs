//! A real host CM service inside the test process, and a polling wait:
//! what the served-process tests share. Included by path (`#[path]`) by
//! `tests/service_ports.rs` and `tests/service_destroy.rs`, beside
//! `common/fake_service.rs` (as `fake`, for its socket paths).
#![allow(dead_code)]

use ibcm::service::{self, Limits, Options, Service};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A CM service in this process on a socket of its own for `test` of the
/// suite `suite` (its threads end with the test binary).
pub fn start_service(suite: &str, test: &str) -> (Arc<Service>, PathBuf) {
    let socket = super::fake::temp_socket(suite, test);
    let listener = service::bind(&socket).unwrap();
    let svc = Service::new(Options {
        socket: socket.clone(),
        idle_exit: None,
        limits: Limits::default(),
    });
    let s = svc.clone();
    std::thread::spawn(move || s.run(listener));
    (svc, socket)
}

/// Whether `f` holds within `limit` (looked at every 5 ms; the last look
/// decides).
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}
