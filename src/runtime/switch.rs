//! A process's soft devices handing each other MADs without the wire.
//!
//! The host CM service opens every soft device of the host's processes, so
//! a connect between two processes on two local addresses is a MAD from
//! one of its devices to another. Through the switch such a MAD skips the
//! UDP socket pair: the sending device queues it on the receiving device
//! (in its send order, under its send lock) and the sending thread then
//! runs the receiving device's engine on it — no UDP send, receive or
//! ICRC, and no wake-up of the receiving device's event loop. Only the
//! service joins its devices: the receiving device's callbacks then run on
//! the sending thread, which suits the service's handlers (they encode and
//! queue, never call back into the CM) but not a consumer's, whose
//! callbacks the kernel contract keeps off its calling threads. MADs that
//! take this path are recorded by a live capture (`IBCM_PCAP`) once, on
//! the sending device's tap, as the RoCEv2 frames they replace (as a
//! loopback interface shows a datagram once), and count as those
//! datagrams (sent by one device, received by the other), so captures and
//! counters still show every MAD.

use super::device::Device;
use super::lock;
use crate::capture::Direction;
use crate::capture::live;
use crate::engine::{MadSource, Transmit};
use crate::fabric::{Received, TransportStats};
use crate::wire::Gid;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// The soft devices of one process, by GID and UDP port.
#[derive(Default)]
pub struct LocalSwitch {
    devs: Mutex<HashMap<(Gid, u16), Weak<Device>>>,
}

/// MADs handed to a device by the switch, and whether a thread is running
/// them (one at a time, so they run in the order they were handed).
#[derive(Default)]
pub(super) struct Inbound {
    mads: Vec<Received>,
    busy: bool,
}

impl LocalSwitch {
    pub fn new() -> Arc<LocalSwitch> {
        Arc::new(LocalSwitch::default())
    }

    /// Joins a soft device (other devices, and a device already on a
    /// switch, are left alone: `false`).
    pub fn join(self: &Arc<Self>, dev: &Arc<Device>) -> bool {
        let Some(key) = dev.transport.soft_addr() else {
            return false;
        };
        if dev.remote.is_some() || dev.switch.set(self.clone()).is_err() {
            return false;
        }
        lock(&self.devs).insert(key, Arc::downgrade(dev));
        true
    }

    /// A device leaves (closed): MADs to it take the wire again.
    pub fn leave(&self, dev: &Device) {
        if let Some(key) = dev.transport.soft_addr() {
            let mut d = lock(&self.devs);
            if d.get(&key).is_some_and(|w| std::ptr::eq(w.as_ptr(), dev)) {
                d.remove(&key);
            }
        }
    }

    fn find(&self, gid: Gid, port: u16) -> Option<Arc<Device>> {
        lock(&self.devs).get(&(gid, port))?.upgrade()
    }
}

impl Device {
    /// Takes the MADs of `batch` addressed to another device of this
    /// device's switch and queues them there (called under `send_lock`,
    /// so in send order); the devices to run afterwards (`run_inbound`,
    /// with no lock held).
    pub(super) fn switch_out(&self, batch: &mut Vec<Transmit>) -> Vec<Arc<Device>> {
        let mut handed: Vec<Arc<Device>> = Vec::new();
        let (Some(sw), Some((sgid, port))) = (self.switch.get(), self.transport.soft_addr()) else {
            return handed;
        };
        batch.retain(|t| {
            let Some(to) = sw.find(t.dest.dgid, port) else {
                return true;
            };
            if std::ptr::eq(Arc::as_ptr(&to), self) {
                return true;
            }
            lock(&to.inbound).mads.push(Received {
                // As the UDP fabric reports a MAD from this device.
                src: MadSource::roce_gsi(sgid, t.dest.dgid, 1, t.dest.pkey),
                mad: t.mad,
            });
            // Seen by a live capture once, as the frame it replaces would
            // be on a loopback interface (on the sender's tap), and counted
            // as the datagram on both devices.
            if live::active()
                && let Some(tap) = self.transport.tap()
            {
                let d = &t.dest;
                tap.mad(Direction::Outbound, &sgid, &d.dgid, d.pkey, &t.mad);
            }
            TransportStats::inc(&self.transport.stats().tx_datagrams);
            TransportStats::inc(&to.transport.stats().rx_datagrams);
            if !handed.iter().any(|d| Arc::ptr_eq(d, &to)) {
                handed.push(to);
            }
            false
        });
        handed
    }

    /// Runs the MADs other devices handed this one, in order, unless
    /// another thread is already doing so (it runs these too).
    pub(super) fn run_inbound(&self) {
        {
            let mut q = lock(&self.inbound);
            if q.busy || q.mads.is_empty() {
                return;
            }
            q.busy = true;
        }
        loop {
            let batch = {
                let mut q = lock(&self.inbound);
                if q.mads.is_empty() || self.stop.load(std::sync::atomic::Ordering::SeqCst) {
                    q.mads.clear();
                    q.busy = false;
                    return;
                }
                std::mem::take(&mut q.mads)
            };
            self.process(&batch);
            // A timer the MADs set may be earlier than the one the event
            // loop sleeps for.
            for s in &self.shards {
                let wake = self.note_deadline(&lock(s));
                if wake {
                    self.wake_for_timer();
                }
            }
        }
    }
}
