//! A real host CM service inside the test process, a polling wait, and a
//! CPU burner for "busy" peers: what the served-process tests of every
//! crate share, each including this one file by path (`#[path]`).
#![allow(dead_code)]

use ibcm::service::{self, Limits, Options, Service};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A CM service in this process on `socket` (its threads end with the
/// test binary).
pub fn start_service(socket: PathBuf) -> (Arc<Service>, PathBuf) {
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

/// Spins on this thread for `d`.
pub fn burn(d: Duration) {
    let t = Instant::now();
    let mut x = 0u64;
    while t.elapsed() < d {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
}
