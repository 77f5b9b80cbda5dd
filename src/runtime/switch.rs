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
use crate::engine::ids::{FastMap, FastState};
use crate::engine::{MadSource, Transmit};
use crate::fabric::{Received, TransportStats};
use crate::wire::Gid;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The soft devices of one process, by GID and UDP port.
pub struct LocalSwitch {
    /// Keys are the addresses of the devices this process (the service)
    /// opened itself: a MAD's destination GID only looks one up, and a
    /// look-up of any key costs at most the probe run of the keys present,
    /// so the seeded fast hash needs no flooding defence here.
    devs: Mutex<FastMap<(Gid, u16), Weak<Device>>>,
    /// Bumped by every join and leave, under `devs`: a sender's cached
    /// route ([`Inbound`]) found under another generation is looked up
    /// again, so a device that left receives nothing more.
    generation: AtomicU64,
}

impl Default for LocalSwitch {
    fn default() -> LocalSwitch {
        LocalSwitch {
            devs: Mutex::new(FastMap::with_hasher(FastState::new(switch_seed()))),
            generation: AtomicU64::new(0),
        }
    }
}

/// A seed nobody outside the process knows (std's random keys).
fn switch_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x5157_u64)
}

/// MADs handed to a device by the switch, and whether a thread is running
/// them (one at a time, so they run in the order they were handed); and
/// the device's own last destination as a sender.
#[derive(Default)]
pub(super) struct Inbound {
    mads: Vec<Received>,
    /// The buffer `mads` is swapped with when a thread takes the queued
    /// MADs to run (empty, with the capacity of an earlier batch), so
    /// neither buffer is regrown from nothing for every batch.
    spare: Vec<Received>,
    busy: bool,
    /// Where this device last sent on the switch (read and written by
    /// `switch_out`, under the send lock): a MAD to the same GID skips the
    /// switch's lock and table.
    last: Option<Route>,
}

/// A sender's cached look-up: the destination GID, the switch generation
/// it was found under, and the device (`None`: not on the switch, the
/// wire). Weak: two devices caching each other must not keep each other.
struct Route {
    gid: Gid,
    generation: u64,
    to: Option<Weak<Device>>,
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
        let mut d = lock(&self.devs);
        d.insert(key, Arc::downgrade(dev));
        self.generation.fetch_add(1, Ordering::SeqCst);
        true
    }

    /// A device leaves (closed): MADs to it take the wire again.
    pub fn leave(&self, dev: &Device) {
        if let Some(key) = dev.transport.soft_addr() {
            let mut d = lock(&self.devs);
            if d.get(&key).is_some_and(|w| std::ptr::eq(w.as_ptr(), dev)) {
                d.remove(&key);
                self.generation.fetch_add(1, Ordering::SeqCst);
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
        // The last destination, if the switch is as it was when it was
        // found (a device that left since then is looked up again).
        let generation = sw.generation.load(Ordering::SeqCst);
        let mut last: Option<(Gid, Option<Arc<Device>>)> = lock(&self.inbound)
            .last
            .as_ref()
            .filter(|r| r.generation == generation)
            .map(|r| (r.gid, r.to.as_ref().and_then(Weak::upgrade)));
        let mut changed = false;
        batch.retain(|t| {
            let dgid = t.dest.dgid;
            if last.as_ref().is_none_or(|(g, _)| *g != dgid) {
                last = Some((dgid, sw.find(dgid, port)));
                changed = true;
            }
            let Some(to) = last.as_ref().and_then(|(_, to)| to.as_ref()) else {
                return true;
            };
            if std::ptr::eq(Arc::as_ptr(to), self) {
                return true;
            }
            lock(&to.inbound).mads.push(Received {
                // As the UDP fabric reports a MAD from this device.
                src: MadSource::roce_gsi(sgid, dgid, 1, t.dest.pkey),
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
            if !handed.iter().any(|d| Arc::ptr_eq(d, to)) {
                handed.push(to.clone());
            }
            false
        });
        if changed {
            // Under the generation read before the look-ups: a join or
            // leave since then makes the next call look up again.
            lock(&self.inbound).last = last.map(|(gid, to)| Route {
                gid,
                generation,
                to: to.as_ref().map(Arc::downgrade),
            });
        }
        handed
    }

    /// Runs the MADs other devices handed this one, in order, unless
    /// another thread is already doing so (it runs these too).
    pub(super) fn run_inbound(&self) {
        let mut batch = {
            let mut q = lock(&self.inbound);
            if q.busy || q.mads.is_empty() {
                return;
            }
            q.busy = true;
            std::mem::take(&mut q.spare)
        };
        loop {
            {
                let mut q = lock(&self.inbound);
                batch.clear();
                if q.mads.is_empty() || self.stop.load(Ordering::SeqCst) {
                    q.mads.clear();
                    q.busy = false;
                    q.spare = batch;
                    return;
                }
                // The queue keeps the run buffer's capacity; the MADs run
                // from the queue's.
                std::mem::swap(&mut q.mads, &mut batch);
            }
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

/// This test process's own loopback block (`tests/common/net.rs`).
#[cfg(test)]
#[path = "../../tests/common/net.rs"]
mod test_net;

#[cfg(test)]
mod tests {
    use super::test_net as net;
    use super::*;
    use crate::engine::MadDest;
    use crate::runtime::DeviceOptions;

    /// A soft device on this test process's address `n`, on the switch.
    fn joined(sw: &Arc<LocalSwitch>, n: u16) -> Arc<Device> {
        let d = Device::open_local(&net::soft(n), DeviceOptions::default()).expect("open");
        assert!(sw.join(&d));
        d
    }

    fn gid(d: &Device) -> Gid {
        d.transport.soft_addr().expect("a soft device").0
    }

    /// A MAD to `to`, numbered `seq` in its first byte.
    fn mad_to(to: Gid, seq: u8) -> Transmit {
        let mut mad = [0u8; 256];
        mad[0] = seq;
        Transmit {
            dest: MadDest {
                port: 1,
                dgid: to,
                ..Default::default()
            },
            mad,
        }
    }

    /// What `d`'s queue holds, as (sender, number), and empties it.
    fn taken(d: &Device) -> Vec<(Gid, u8)> {
        let mut q = lock(&d.inbound);
        let got = q.mads.iter().map(|r| (r.src.sgid, r.mad[0])).collect();
        q.mads.clear();
        got
    }

    /// Sends `batch` from `from` through the switch: what stays for the
    /// wire (numbers), and the devices handed MADs.
    fn send(from: &Device, batch: Vec<Transmit>) -> (Vec<u8>, Vec<Arc<Device>>) {
        let mut batch = batch;
        let handed = from.switch_out(&mut batch);
        (batch.iter().map(|t| t.mad[0]).collect(), handed)
    }

    /// Destinations alternating within one batch and from call to call,
    /// and two senders each with their own last destination: every MAD
    /// reaches the device its GID names, in order, and only MADs to a
    /// device off the switch stay for the wire.
    #[test]
    fn alternating_destinations_reach_their_own_devices() {
        let sw = LocalSwitch::new();
        let (a, b, c) = (joined(&sw, 1), joined(&sw, 2), joined(&sw, 3));
        let (ga, gb, gc) = (gid(&a), gid(&b), gid(&c));
        let off: Gid = std::net::IpAddr::V4(net::addr(9)).into();
        let batch = vec![
            mad_to(gb, 1),
            mad_to(gc, 2),
            mad_to(gb, 3),
            mad_to(off, 4),
            mad_to(gc, 5),
        ];
        let (wire, handed) = send(&a, batch);
        assert_eq!(wire, [4], "only the MAD to a device off the switch is left");
        assert_eq!(handed.len(), 2);
        assert_eq!(taken(&b), [(ga, 1), (ga, 3)]);
        assert_eq!(taken(&c), [(ga, 2), (ga, 5)]);
        // One MAD per call, destinations alternating; B and C answer A.
        for i in 10..16u8 {
            let to = if i % 2 == 0 { &b } else { &c };
            assert_eq!(send(&a, vec![mad_to(gid(to), i)]).0, [], "MAD {i}");
            assert_eq!(taken(to), [(ga, i)], "MAD {i}");
            let other = if i % 2 == 0 { &c } else { &b };
            assert_eq!(taken(other), [], "MAD {i} reached the other device");
            assert_eq!(send(to, vec![mad_to(ga, i + 100)]).0, []);
            assert_eq!(taken(&a), [(gid(to), i + 100)]);
        }
        // The same destination twice in a row (a cache hit), then off it.
        assert_eq!(send(&a, vec![mad_to(gc, 20)]).0, []);
        assert_eq!(send(&a, vec![mad_to(gc, 21)]).0, []);
        assert_eq!(send(&a, vec![mad_to(off, 22)]).0, [22]);
        assert_eq!(send(&a, vec![mad_to(off, 23)]).0, [23]);
        assert_eq!(taken(&c), [(ga, 20), (ga, 21)]);
        assert_eq!(taken(&b), []);
        for d in [a, b, c] {
            d.close();
        }
    }

    /// A device that leaves the switch while it is a sender's cached last
    /// destination receives nothing more through the switch: the next MAD
    /// to it stays for the wire.
    #[test]
    fn a_device_that_left_gets_nothing_from_a_cached_route() {
        let sw = LocalSwitch::new();
        let (a, b) = (joined(&sw, 4), joined(&sw, 5));
        let gb = gid(&b);
        assert_eq!(send(&a, vec![mad_to(gb, 1)]).0, []);
        assert_eq!(send(&a, vec![mad_to(gb, 2)]).0, []);
        assert_eq!(taken(&b), [(gid(&a), 1), (gid(&a), 2)]);
        sw.leave(&b);
        let (wire, handed) = send(&a, vec![mad_to(gb, 3)]);
        assert_eq!(wire, [3], "the MAD to a device that left takes the wire");
        assert!(handed.is_empty());
        assert_eq!(taken(&b), [], "a device that left received a MAD");
        a.close();
        b.close();
    }

    /// Running handed MADs keeps both of the queue's buffers: after two
    /// rounds, handing and running as many MADs again grows neither.
    #[test]
    fn running_inbound_mads_keeps_the_queue_capacity() {
        let sw = LocalSwitch::new();
        let (a, b) = (joined(&sw, 6), joined(&sw, 7));
        let gb = gid(&b);
        let round = || {
            let (wire, handed) = send(&a, (0..40).map(|i| mad_to(gb, i)).collect());
            assert!(wire.is_empty());
            for d in handed {
                d.run_inbound();
            }
        };
        round();
        round();
        let caps = |d: &Device| {
            let q = lock(&d.inbound);
            assert!(q.mads.is_empty() && !q.busy);
            (q.mads.capacity(), q.spare.capacity())
        };
        let (queue, spare) = caps(&b);
        assert!(
            queue >= 40 && spare >= 40,
            "capacities {queue} and {spare} after two rounds of 40"
        );
        round();
        assert_eq!(caps(&b), (queue, spare));
        a.close();
        b.close();
    }
}
