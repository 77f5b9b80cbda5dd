//! An in-process fabric: devices in one process exchange MADs through
//! queues, without sockets. For tests and for benchmarks of everything but
//! the kernel's UDP path. Devices are named by GID like soft devices.

use super::{Received, Transport, TransportStats};
use crate::capture::Direction;
use crate::capture::live::{self, Tap};
use crate::engine::{MadSource, PortInfo, Transmit};
use crate::wire::Gid;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Arc, Condvar, LazyLock, Mutex, Weak};
use std::time::Duration;

struct Endpoint {
    queue: Mutex<(VecDeque<Received>, bool)>,
    cond: Condvar,
}

static REGISTRY: LazyLock<Mutex<HashMap<Gid, Weak<Endpoint>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn registry() -> std::sync::MutexGuard<'static, HashMap<Gid, Weak<Endpoint>>> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct LoopbackTransport {
    ep: Arc<Endpoint>,
    gid: Gid,
    guid: u64,
    stats: TransportStats,
    tap: Tap,
}

impl LoopbackTransport {
    /// Registers a device with address `gid`; `AddrInUse` if a live one has it.
    pub fn new(gid: Gid, guid: u64) -> io::Result<LoopbackTransport> {
        let ep = Arc::new(Endpoint {
            queue: Mutex::new((VecDeque::new(), false)),
            cond: Condvar::new(),
        });
        let mut reg = registry();
        if reg.get(&gid).is_some_and(|w| w.strong_count() > 0) {
            return Err(io::Error::from(io::ErrorKind::AddrInUse));
        }
        reg.insert(gid, Arc::downgrade(&ep));
        drop(reg);
        Ok(LoopbackTransport {
            ep,
            gid,
            guid,
            stats: TransportStats::default(),
            tap: Tap::new(format!("loop:{}", gid.to_ip())),
        })
    }
}

impl Drop for LoopbackTransport {
    fn drop(&mut self) {
        let mut reg = registry();
        if reg
            .get(&self.gid)
            .is_some_and(|w| w.ptr_eq(&Arc::downgrade(&self.ep)))
        {
            reg.remove(&self.gid);
        }
    }
}

impl Transport for LoopbackTransport {
    fn send(&self, batch: &[Transmit]) {
        let reg = registry();
        for t in batch {
            let Some(ep) = reg.get(&t.dest.dgid).and_then(|w| w.upgrade()) else {
                TransportStats::inc(&self.stats.tx_unroutable);
                continue;
            };
            TransportStats::inc(&self.stats.tx_datagrams);
            if live::active() {
                let d = &t.dest;
                self.tap
                    .mad(Direction::Outbound, &self.gid, &d.dgid, d.pkey, &t.mad);
            }
            let r = Received {
                src: MadSource::roce_gsi(self.gid, t.dest.dgid, 1, t.dest.pkey),
                mad: t.mad,
            };
            let mut q = ep.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.0.push_back(r);
            drop(q);
            ep.cond.notify_one();
        }
    }

    fn recv(&self, timeout: Option<Duration>, out: &mut Vec<Received>) -> io::Result<()> {
        let mut q = self.ep.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.0.is_empty() && !q.1 && timeout != Some(Duration::ZERO) {
            q = match timeout {
                None => self
                    .ep
                    .cond
                    .wait_while(q, |q| q.0.is_empty() && !q.1)
                    .unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    self.ep
                        .cond
                        .wait_timeout_while(q, d, |q| q.0.is_empty() && !q.1)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        q.1 = false;
        let start = out.len();
        for r in q.0.drain(..) {
            TransportStats::inc(&self.stats.rx_datagrams);
            out.push(r);
        }
        drop(q);
        if live::active() {
            for r in &out[start..] {
                let s = &r.src;
                self.tap
                    .mad(Direction::Inbound, &s.sgid, &s.dgid, s.pkey, &r.mad);
            }
        }
        Ok(())
    }

    fn wake(&self) {
        let mut q = self.ep.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.1 = true;
        drop(q);
        self.ep.cond.notify_all();
    }

    fn ports(&self) -> Vec<PortInfo> {
        vec![PortInfo::roce(1, self.gid)]
    }

    fn node_guid(&self) -> u64 {
        self.guid
    }

    fn stats(&self) -> &TransportStats {
        &self.stats
    }

    fn describe(&self) -> String {
        format!("loop:{}", self.gid.to_ip())
    }
}
