//! Design B of the host CM service, the process's side
//! (`IBCM_SERVICE_MODE=forward`; docs/SERVICE.md, "Design B"): the
//! device's engines run here, as in-process, and its transport is the
//! service connection. The service owns the device's real transport
//! (the UDP port of a `soft:` address, the umad agent of an HCA port),
//! forwards each MAD to the process whose comm ID or listen it names, and
//! tracks every connection so that it answers for a process that dies.
//!
//! * The open (`op::FWD_OPEN`) returns the device's ports and GUID, the
//!   key of the comm ID permutation that every process on the device
//!   shares and this process's slot, which its comm IDs carry
//!   (`engine::ids::IdLayout::forward`): IDs never collide across the
//!   processes and the service reads a MAD's owner from its comm ID.
//! * A listen is claimed in the host's table (a round trip: `-EBUSY`
//!   when another process holds the service ID) after the device's own
//!   table took it (`engine::shared::HostListens`), and released when the
//!   listener goes (one way).
//! * MADs leave as `ipc::fwd` records, up to `fwd::PER_MSG` per message;
//!   the event loop's threads read what the service sends.
//! * A service that goes away: the log says so once, every outstanding
//!   request fails at once with its error event (`REQ_ERROR`, …, as when
//!   its retries run out: `Engine::fail_sends`), and every later call
//!   that would send, and `create_id`, fails `-ENODEV` (`Transport::lost`);
//!   destroying ids still works. A new open reaches a restarted service.

use super::device::{Device, DeviceOptions};
use super::lock;
use crate::engine::ids::IdLayout;
use crate::engine::shared::HostListens;
use crate::engine::{Errno, PortInfo, Transmit, errno};
use crate::fabric::{Ask, IdRow, Received, Transport, TransportStats};
use crate::ipc::{self, FwdOpened, Header, Public, fwd, op, sock};
use crate::log::{ERROR, INFO, WARN};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `IBCM_SERVICE_MODE`: `forward` (the default: design B, the engines in
/// the processes, the service forwarding their MADs) or `engine` (design
/// A, the engines in the service). Read once per process; an unknown
/// value is logged once and taken as `forward`.
pub fn forward_mode() -> bool {
    static M: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *M.get_or_init(|| match std::env::var("IBCM_SERVICE_MODE").as_deref() {
        Ok("engine") => false,
        Ok("forward") | Ok("") | Err(_) => true,
        Ok(other) => {
            crate::log::always(
                WARN,
                format_args!("IBCM_SERVICE_MODE={other:?} is not engine or forward: forward"),
            );
            true
        }
    })
}

/// What the readers of the connection share.
#[derive(Default)]
struct Rx {
    /// MADs a listen claim read while it waited for its answer; the
    /// event loop takes them first.
    stash: Vec<Received>,
    /// Listen answers by sequence number.
    answers: HashMap<u64, i32>,
    /// What the service asked (`fwd::STALE`, `fwd::IDS_ASK`), for
    /// `take_asks`.
    asks: Vec<Ask>,
}

/// A device's transport through the service.
pub(super) struct FwdTransport {
    fd: OwnedFd,
    wake: OwnedFd,
    name: String,
    opened: FwdOpened,
    stats: TransportStats,
    rx: Mutex<Rx>,
    seq: AtomicU64,
    gone: AtomicBool,
    timeout: Duration,
    /// Port tables the service pushed, for `port_change`.
    new_ports: (Mutex<Option<Vec<PortInfo>>>, std::sync::Condvar),
    /// `rx.asks` is not empty (checked without the lock every round).
    has_ask: AtomicBool,
}

/// Whether pushed port tables keep the ports of the open (their numbers
/// and link layers; a port keeps a P_Key), as `ipc::check_ports` holds
/// engine-mode pushes to.
fn ports_fit(new: &[PortInfo], opened: &[PortInfo]) -> bool {
    new.len() == opened.len()
        && new
            .iter()
            .zip(opened)
            .all(|(n, o)| n.port_num == o.port_num && n.is_roce == o.is_roce && !n.pkeys.is_empty())
}

/// Asks held between two event loop rounds at most (more is a service
/// gone wrong: dropped).
const MAX_ASKS: usize = 4096;

thread_local! {
    /// A reader's message buffers (`sock::RECV_MANY` of
    /// `ipc::MAX_RECORD`), reused: one system call reads every message
    /// queued, up to that many, and the last read of a drain is not a call
    /// that finds nothing.
    static BUFS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl FwdTransport {
    /// The service closed the connection (or it broke): said once.
    fn lost(&self, why: &str) {
        if !self.gone.swap(true, Ordering::SeqCst) {
            crate::log::always(
                ERROR,
                format_args!(
                    "{}: the CM service connection ended ({why}): this device can send nothing more: its outstanding requests fail now with their error events, later calls with -ENODEV",
                    self.name
                ),
            );
            // A service that is only hung sees the hang-up when it runs
            // again, and answers for this process as for a dead one.
            // SAFETY: our socket; shutdown leaves the descriptor valid.
            unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
        }
        self.wake();
    }

    /// Reads every message queued now (never waits): MADs to `out`,
    /// answers to `rx`. Call with `rx` locked.
    fn drain(&self, rx: &mut Rx, out: &mut Vec<Received>) {
        BUFS.with(|b| {
            let mut bufs = b.borrow_mut();
            if bufs.len() < sock::RECV_MANY {
                bufs.resize_with(sock::RECV_MANY, || vec![0u8; ipc::MAX_RECORD]);
            }
            let mut lens = [0usize; sock::RECV_MANY];
            loop {
                let got = match sock::try_recv_many(&self.fd, &mut bufs, &mut lens) {
                    Ok(n) => n,
                    Err(e) => return self.lost(&e.to_string()),
                };
                for (buf, &n) in bufs.iter().zip(&lens[..got]) {
                    if n == 0 {
                        return self.lost("closed by the service");
                    }
                    self.take(&buf[..n], rx, out);
                }
                // Fewer than asked: the queue is empty now.
                if got < sock::RECV_MANY {
                    return;
                }
            }
        })
    }

    fn take(&self, msg: &[u8], rx: &mut Rx, out: &mut Vec<Received>) {
        for r in fwd::records(msg) {
            match r {
                Ok(fwd::Rec::Mad(a, m)) => {
                    TransportStats::inc(&self.stats.rx_datagrams);
                    out.push(Received {
                        src: fwd::source(a),
                        mad: *m,
                    });
                }
                Ok(fwd::Rec::Listened { seq, err }) => {
                    rx.answers.insert(seq, err);
                }
                Ok(fwd::Rec::Stale { guid, qpn }) => self.ask(rx, Ask::Stale { guid, qpn }),
                Ok(fwd::Rec::IdsAsk { seq }) => self.ask(rx, Ask::Ids { seq }),
                Ok(fwd::Rec::StatAsk { seq }) => self.ask(rx, Ask::Stat { seq }),
                Ok(fwd::Rec::Ports(b)) => match fwd::ports(b) {
                    Ok(p) if ports_fit(&p, &self.opened.opened.ports) => {
                        *lock(&self.new_ports.0) = Some(p);
                        self.new_ports.1.notify_all();
                    }
                    _ => {
                        TransportStats::inc(&self.stats.rx_garbage);
                        ibcm_log!(
                            WARN,
                            "{}: port tables from the CM service that do not fit the device's: dropped",
                            self.name
                        );
                    }
                },
                Ok(_) | Err(()) => {
                    TransportStats::inc(&self.stats.rx_garbage);
                    ibcm_log!(
                        WARN,
                        "{}: a record from the CM service did not decode: dropped with the rest of its message",
                        self.name
                    );
                    return;
                }
            }
        }
    }

    fn ask(&self, rx: &mut Rx, a: Ask) {
        if rx.asks.len() < MAX_ASKS {
            rx.asks.push(a);
            self.has_ask.store(true, Ordering::Release);
        }
    }

    fn send_msg(&self, msg: &[u8]) -> bool {
        if self.gone.load(Ordering::Relaxed) {
            return false;
        }
        match sock::send(&self.fd, msg) {
            Ok(()) => true,
            Err(e) => {
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPIPE) | Some(libc::ECONNRESET) | Some(libc::ENOTCONN)
                ) {
                    self.lost(&e.to_string());
                }
                false
            }
        }
    }

    fn wait(&self, fds: &mut [libc::pollfd], timeout: Option<Duration>) {
        // SAFETY: our descriptors, a valid array.
        unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                crate::fabric::poll_ms(timeout),
            )
        };
    }

    fn clear_wake(&self) {
        let mut v = 0u64;
        // SAFETY: an 8-byte read of our non-blocking eventfd.
        unsafe { libc::read(self.wake.as_raw_fd(), (&raw mut v).cast(), 8) };
    }
}

impl Transport for FwdTransport {
    fn send(&self, batch: &[Transmit]) {
        let mut msg = Vec::with_capacity(fwd::PER_MSG.min(batch.len()) * fwd::MAD_REC);
        for chunk in batch.chunks(fwd::PER_MSG) {
            msg.clear();
            for t in chunk {
                fwd::put_dest(&mut msg, &t.dest, &t.mad);
            }
            let c = if self.send_msg(&msg) {
                &self.stats.tx_datagrams
            } else {
                &self.stats.tx_errors
            };
            c.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
    }

    fn recv(&self, timeout: Option<Duration>, out: &mut Vec<Received>) -> std::io::Result<()> {
        {
            let mut rx = lock(&self.rx);
            out.append(&mut rx.stash);
            if !self.gone.load(Ordering::Relaxed) {
                self.drain(&mut rx, out);
            }
        }
        // (An ask alone returns too: the loop does it.)
        if !out.is_empty()
            || timeout == Some(Duration::ZERO)
            || self.has_ask.load(Ordering::Relaxed)
        {
            return Ok(());
        }
        let gone = self.gone.load(Ordering::Relaxed);
        let mut fds = [
            libc::pollfd {
                fd: self.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        self.wait(&mut fds[..if gone { 1 } else { 2 }], timeout);
        if fds[0].revents != 0 {
            self.clear_wake();
        }
        let mut rx = lock(&self.rx);
        out.append(&mut rx.stash);
        if !gone && fds[1].revents != 0 {
            self.drain(&mut rx, out);
        }
        Ok(())
    }

    fn wake(&self) {
        let v = 1u64;
        // SAFETY: an 8-byte write to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&raw const v).cast(), 8) };
    }

    fn ports(&self) -> Vec<PortInfo> {
        self.opened.opened.ports.to_vec()
    }

    fn node_guid(&self) -> u64 {
        self.opened.opened.node_guid
    }

    fn stats(&self) -> &TransportStats {
        &self.stats
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    fn lost(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    fn watches_ports(&self) -> bool {
        true
    }

    fn close(&self) {
        if !self.gone.swap(true, Ordering::SeqCst) {
            // SAFETY: our socket; shutdown leaves the descriptor valid.
            unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
        }
    }

    fn take_asks(&self, out: &mut Vec<Ask>) {
        if self.has_ask.swap(false, Ordering::Acquire) {
            out.append(&mut lock(&self.rx).asks);
        }
    }

    fn answer_stat(&self, seq: u64, c: &crate::engine::Counters) {
        let mut msg = Vec::new();
        fwd::put_stat(&mut msg, seq, c);
        self.send_msg(&msg);
    }

    fn answer_ids(&self, seq: u64, rows: &[IdRow]) {
        let infos: Vec<ipc::IdInfo> = rows
            .iter()
            .map(|r| ipc::IdInfo {
                pid: 0,
                device: Vec::new(),
                state: r.state,
                local_id: r.local_id,
                remote_id: r.remote_id,
                service_id: r.service_id,
                peer: r.peer,
                age_ms: r.age_ms,
            })
            .collect();
        let mut parts = infos.chunks(fwd::IDS_PER_REC).peekable();
        if parts.peek().is_none() {
            let mut msg = Vec::new();
            fwd::put_ids(&mut msg, seq, true, &[]);
            self.send_msg(&msg);
        }
        while let Some(p) = parts.next() {
            let mut msg = Vec::new();
            fwd::put_ids(&mut msg, seq, parts.peek().is_none(), p);
            if !self.send_msg(&msg) {
                break;
            }
        }
    }

    /// Port tables the service pushed (the event loop's reader stores
    /// them).
    fn port_change(&self, timeout: Duration) -> Option<Vec<PortInfo>> {
        let mut p = lock(&self.new_ports.0);
        if p.is_none() {
            p = self
                .new_ports
                .1
                .wait_timeout(p, timeout)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        p.take()
    }
}

impl HostListens for FwdTransport {
    fn claim(&self, service_id: u64) -> Result<(), Errno> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut msg = Vec::with_capacity(20);
        fwd::put_listen(&mut msg, seq, service_id);
        if !self.send_msg(&msg) {
            return Err(Errno::ENODEV);
        }
        // The claim reads the connection itself (under the readers' lock,
        // so it works on any thread, an event loop's included); MADs read
        // meanwhile wait in the stash for the event loop.
        let end = Instant::now() + self.timeout;
        let mut rx = lock(&self.rx);
        loop {
            if let Some(err) = rx.answers.remove(&seq) {
                if !rx.stash.is_empty() || self.has_ask.load(Ordering::Relaxed) {
                    self.wake();
                }
                return if err == 0 { Ok(()) } else { Err(Errno(-err)) };
            }
            if self.gone.load(Ordering::Relaxed) {
                return Err(Errno::ENODEV);
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // Hung (stopped, wedged): declared broken, as engine mode
                // declares it, so that later calls fail at once and the
                // outstanding requests get their error events now.
                super::remote::count_service_timeout();
                self.lost(&format!(
                    "it did not answer a listen within {} ms, IBCM_SERVICE_TIMEOUT_MS",
                    self.timeout.as_millis()
                ));
                return Err(Errno(errno::ETIMEDOUT));
            }
            let mut fds = [libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            self.wait(&mut fds, Some(left));
            let mut got = std::mem::take(&mut rx.stash);
            self.drain(&mut rx, &mut got);
            rx.stash = got;
        }
    }

    fn release(&self, service_id: u64) {
        let mut msg = Vec::with_capacity(12);
        fwd::put_unlisten(&mut msg, service_id);
        self.send_msg(&msg);
    }
}

/// Opens `name` through the service on `fd` in forward mode.
pub(super) fn open(fd: OwnedFd, name: &str) -> Result<Arc<Device>, Errno> {
    let timeout = super::remote::service_timeout();
    if let Err(e) = sock::set_timeouts(&fd, timeout, true) {
        ibcm_log!(WARN, "{name}: CM service socket: {e}");
        return Err(Errno::ENODEV);
    }
    let mut w = Header {
        op: op::FWD_OPEN,
        seq: 1,
        handle: 0,
    }
    .record();
    w.put(&name.as_bytes().to_vec());
    let fail = |what: &str, e: std::io::Error| {
        crate::log::always(
            WARN,
            format_args!(
                "{name}: the CM service did not {what} the forward open within {} ms or failed ({e})",
                timeout.as_millis()
            ),
        );
        if e.kind() == std::io::ErrorKind::WouldBlock {
            super::remote::count_service_timeout();
            Errno(errno::ETIMEDOUT)
        } else {
            Errno::ENODEV
        }
    };
    sock::send(&fd, &w.into_bytes()).map_err(|e| fail("take", e))?;
    let mut buf = vec![0u8; ipc::MAX_RECORD];
    let n = sock::recv(&fd, &mut buf).map_err(|e| fail("answer", e))?;
    let undecoded = |what: &str| {
        crate::log::always(
            WARN,
            format_args!(
                "{name}: the CM service's answer to the forward open ({n} bytes) {what}: -ENODEV"
            ),
        );
        Errno::ENODEV
    };
    if n == 0 {
        return Err(undecoded("was its hang-up"));
    }
    let (h, mut r) = Header::parse(&buf[..n]).map_err(|_| undecoded("did not decode"))?;
    if h.op != op::REPLY | op::FWD_OPEN || h.seq != 1 {
        ibcm_log!(
            WARN,
            "{name}: the CM service answered the forward open with op {:#x}: it does not forward (an older service?)",
            h.op
        );
        return Err(Errno::ENODEV);
    }
    let err: i32 = r.get().map_err(|_| undecoded("did not decode"))?;
    let _: Public = r.get().map_err(|_| undecoded("did not decode"))?;
    if err != 0 {
        crate::log::always(
            WARN,
            format_args!("{name}: the CM service refused to forward it: {err}"),
        );
        return Err(Errno(-err));
    }
    let opened: FwdOpened = r.get().map_err(|_| undecoded("did not decode"))?;
    // SAFETY: a new eventfd, owned here.
    let wake = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if wake < 0 {
        return Err(Errno::ENOMEM);
    }
    let slot = opened.proc_slot;
    let key = opened.id_key;
    let gen_base = opened.gen_base;
    let t = Arc::new(FwdTransport {
        fd,
        // SAFETY: just opened, owned only here.
        wake: unsafe { OwnedFd::from_raw_fd(wake) },
        name: format!("fwd:{}", String::from_utf8_lossy(&opened.opened.name)),
        opened,
        stats: TransportStats::default(),
        rx: Mutex::new(Rx::default()),
        seq: AtomicU64::new(1),
        gone: AtomicBool::new(false),
        timeout,
        new_ports: Default::default(),
        has_ask: AtomicBool::new(false),
    });
    ibcm_log!(
        INFO,
        "{name}: forwarded by the CM service, process slot {slot}"
    );
    let listens: Arc<dyn HostListens> = t.clone();
    Ok(Device::with_engines(
        t,
        DeviceOptions::default(),
        key,
        |shard_bits| {
            let mut l = IdLayout::forward(shard_bits, slot);
            l.gen_base = gen_base;
            l
        },
        Some(listens),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::Opened;

    fn transport(fd: OwnedFd, ports: Vec<PortInfo>) -> FwdTransport {
        // SAFETY: a new eventfd, owned here.
        let wake = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(wake >= 0);
        FwdTransport {
            fd,
            // SAFETY: just opened, owned only here.
            wake: unsafe { OwnedFd::from_raw_fd(wake) },
            name: "fwd:test".into(),
            opened: FwdOpened {
                opened: Opened {
                    name: b"test".to_vec(),
                    node_guid: 1,
                    ports: ports.into_boxed_slice(),
                },
                id_key: 7,
                proc_slot: 0,
                gen_base: 0,
            },
            stats: TransportStats::default(),
            rx: Mutex::new(Rx::default()),
            seq: AtomicU64::new(1),
            gone: AtomicBool::new(false),
            timeout: Duration::from_secs(2),
            new_ports: Default::default(),
            has_ask: AtomicBool::new(false),
        }
    }

    /// Pushed port tables that keep the open's ports are installed by
    /// `port_change`; others are dropped and counted. The service's
    /// hang-up makes the transport lost and a listen claim -ENODEV.
    #[test]
    fn pushed_ports_are_checked_and_a_hang_up_is_loss() {
        let (fd, svc) = sock::pair();
        let gid = "10.2.0.1".parse().unwrap();
        let t = transport(fd, vec![PortInfo::roce(1, gid)]);
        assert!(t.watches_ports());
        assert_eq!(t.port_change(Duration::from_millis(1)), None);
        let mut good = vec![PortInfo::roce(1, gid)];
        good[0].lid = 9;
        let bad = vec![PortInfo::roce(1, gid), PortInfo::roce(2, gid)];
        let mut msg = Vec::new();
        assert!(fwd::put_ports(&mut msg, &bad));
        assert!(fwd::put_ports(&mut msg, &good));
        sock::send(&svc, &msg).unwrap();
        let mut out = Vec::new();
        t.recv(Some(Duration::from_secs(1)), &mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!(t.stats.rx_garbage.load(Ordering::Relaxed), 1);
        assert_eq!(t.port_change(Duration::from_millis(1)), Some(good));
        assert_eq!(t.port_change(Duration::from_millis(1)), None);
        drop(svc);
        t.recv(Some(Duration::from_secs(1)), &mut out).unwrap();
        assert!(Transport::lost(&t));
        assert_eq!(t.claim(0x10), Err(Errno::ENODEV));
    }

    /// One receive takes every message queued, more than one `recvmmsg`
    /// holds, in order; the records before a hang-up are still taken,
    /// then the transport is lost.
    #[test]
    fn every_queued_message_is_read_in_order_then_the_hang_up() {
        let (fd, svc) = sock::pair();
        let gid: crate::wire::Gid = "10.2.0.1".parse().unwrap();
        let t = transport(fd, vec![PortInfo::roce(1, gid)]);
        let n = 3 * sock::RECV_MANY + 1;
        for i in 0..n {
            let mut mad = [0u8; 256];
            mad[0] = 1;
            mad[255] = i as u8;
            let mut msg = Vec::new();
            let src = crate::engine::MadSource::roce_gsi(gid, gid, 1, 0xffff);
            fwd::put_source(&mut msg, &src, &mad);
            sock::send(&svc, &msg).unwrap();
        }
        drop(svc);
        let mut out = Vec::new();
        t.recv(Some(Duration::ZERO), &mut out).unwrap();
        let got: Vec<u8> = out.iter().map(|r| r.mad[255]).collect();
        assert_eq!(got, (0..n as u8).collect::<Vec<_>>());
        assert!(Transport::lost(&t));
    }

    /// A stale record alone ends the event loop's wait (its DREQ is due),
    /// and is taken once.
    #[test]
    fn a_stale_record_wakes_the_loop_and_is_taken_once() {
        let (fd, svc) = sock::pair();
        let t = transport(fd, vec![PortInfo::roce(1, "10.2.0.1".parse().unwrap())]);
        let mut msg = Vec::new();
        fwd::put_stale(&mut msg, 0xabc, 0x777);
        sock::send(&svc, &msg).unwrap();
        let mut out = Vec::new();
        let mut qps = Vec::new();
        // Read by a first wait (which may return at once with nothing, a
        // wake-up), then it returns at once however long it may wait.
        t.recv(Some(Duration::ZERO), &mut out).unwrap();
        let t0 = Instant::now();
        t.recv(Some(Duration::from_secs(5)), &mut out).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        assert!(out.is_empty());
        t.take_asks(&mut qps);
        assert_eq!(
            qps,
            vec![Ask::Stale {
                guid: 0xabc,
                qpn: 0x777
            }]
        );
        t.take_asks(&mut qps);
        assert_eq!(qps.len(), 1);
    }
}
