//! The `--baseline` half of `ibcm bench`: the best the kernel's UDP path
//! does for the CM's message pattern. Two UDP sockets on the devices'
//! addresses (8 MiB receive / 4 MiB send buffers, non-blocking with `poll`)
//! exchange 3 datagrams of the RoCEv2 GSI payload size (280 bytes) per
//! "connection" — request, response, confirmation, as REQ, REP and RTU —
//! with the same number in flight, and the same threads: one responder
//! thread, and on the requesting side one thread starting exchanges and one
//! receiving responses and confirming them. No parsing, no state, no timers:
//! what is left is the cost of the sockets, which is the bound the CM is
//! measured against.
//!
//! Every datagram has the same size and a burst goes to one peer, which is
//! what UDP segmentation offload is for: a burst of up to 64 datagrams is
//! one `sendmsg` with `UDP_SEGMENT` (the kernel builds one GSO packet and
//! splits it as late as it can; on loopback it reaches the receiver whole),
//! and the receiving socket sets `UDP_GRO` so that such a packet is one
//! `recvmmsg` entry whose segments are split here. A kernel without them
//! (setsockopt or sendmsg failing with `ENOPROTOOPT`/`EINVAL`/`EIO`) gets
//! the fabric's own batching, `sendmmsg`/`recvmmsg` of 64 single datagrams;
//! `IBCM_BASELINE_BATCH=mmsg` forces that for a comparison.

use ibcm::fabric::udp::{
    self, BATCH, RECV_BUF, addr_of, frame_gsi, icrc_matches, ipv4_id_deltas, linux_icrc_input,
    setsockopt_int, sockaddr_of,
};
use ibcm::wire::cm::{CmMad, CmMsg, Rep, Req, Rtu};
use ibcm::wire::roce::{self, GSI_PAYLOAD_LEN, IcrcInput, IcrcPrefix};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Datagram size: BTH + DETH + MAD + ICRC, as the fabric sends.
pub const SIZE: usize = GSI_PAYLOAD_LEN;

/// What each datagram carries and what both ends do with it. `Plain` is
/// the baseline; the others add, on the same sockets, threads and
/// batching, the per-message work the wire asks of a CM — so their rates
/// bound from above what a CM that speaks the wire can reach on this
/// path, before any state, timer or callback of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Numbered bytes: the sockets' cost and nothing else.
    Plain,
    /// Every datagram a RoCEv2 GSI frame (BTH, DETH, MAD, ICRC) built by
    /// the fabric's framing; the receiver parses BTH and DETH as the
    /// fabric does. What a peer (the kernel's rxe, an HCA) needs: without
    /// the ICRC it drops the frame.
    Frame,
    /// `Frame`, and each MAD a REQ, REP or RTU written and parsed by the
    /// engine's codec (`CmMad::emit`, `CmMad::parse`): the least a CM
    /// that speaks the wire does per message.
    Codec,
    /// `Codec`, and the receiver checks the ICRC as the fabric does
    /// (against every GSO segment's IP ID).
    Checked,
}

impl Work {
    /// The name `--baseline-work` takes and the report prints.
    pub fn name(self) -> &'static str {
        match self {
            Work::Plain => "plain",
            Work::Frame => "frame",
            Work::Codec => "frame+codec",
            Work::Checked => "frame+codec+icrc-check",
        }
    }

    pub fn parse(s: &str) -> Option<Work> {
        [Work::Plain, Work::Frame, Work::Codec, Work::Checked]
            .into_iter()
            .find(|w| w.name() == s)
    }

    fn codec(self) -> bool {
        matches!(self, Work::Codec | Work::Checked)
    }
}

/// One thread's end of an exchange: builds and reads its datagrams for
/// a `Work`. Kind 1 is the request (REQ), 2 the response (REP), 3 the
/// confirmation (RTU); `i` numbers the exchange.
pub struct Wire {
    work: Work,
    /// The pseudo-header CRC of this end's sends (IP ID 0) and of what
    /// it receives, as the fabric keeps them per peer.
    tx: IcrcPrefix,
    rx_input: IcrcInput,
    rx: IcrcPrefix,
    psn: u32,
    /// Segment `j` of a GSO burst carries IP ID `j`: frame for it.
    gso: bool,
    /// Received frames whose ICRC matched no segment's IP ID.
    pub bad_icrc: u64,
}

impl Wire {
    /// This end (`me`, on `sock`) talking to `peer`.
    pub fn new(work: Work, sock: &Socket, peer: SocketAddr) -> io::Result<Wire> {
        let me = sock.sock.local_addr()?;
        let (Some(tx_input), Some(rx_input)) =
            (linux_icrc_input(me, peer), linux_icrc_input(peer, me))
        else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{me} and {peer}: not one address family"),
            ));
        };
        Ok(Wire {
            work,
            tx: tx_input.prefix(),
            rx_input,
            rx: rx_input.prefix(),
            psn: 0,
            gso: sock.gso.load(Ordering::Relaxed),
            bad_icrc: 0,
        })
    }

    /// Datagram `kind` of exchange `i`, the `pos`-th of its send batch.
    fn make(&mut self, kind: u8, i: usize, pos: usize) -> [u8; SIZE] {
        let mut d = [0u8; SIZE];
        if self.work == Work::Plain {
            d[0] = kind;
            d[1..9].copy_from_slice(&(i as u64).to_le_bytes());
            return d;
        }
        let mut mad = [0u8; ibcm::wire::MAD_LEN];
        if self.work.codec() {
            let id = i as u32;
            let msg = match kind {
                1 => CmMsg::Req(Req {
                    local_comm_id: id,
                    service_id: 0x0106_0000_0000_4791,
                    local_qpn: id & 0xff_ffff,
                    starting_psn: id & 0xff_ffff,
                    ..Req::default()
                }),
                2 => CmMsg::Rep(Rep {
                    local_comm_id: !id,
                    remote_comm_id: id,
                    local_qpn: !id & 0xff_ffff,
                    starting_psn: !id & 0xff_ffff,
                    ..Rep::default()
                }),
                _ => CmMsg::Rtu(Rtu {
                    local_comm_id: id,
                    remote_comm_id: !id,
                    ..Rtu::default()
                }),
            };
            CmMad::send(i as u64, 0, msg).emit(&mut mad);
        } else {
            mad[0] = kind;
            mad[1..9].copy_from_slice(&(i as u64).to_le_bytes());
        }
        let delta = match self.v4() {
            true if self.gso => ipv4_id_deltas()[pos % BATCH],
            _ => 0,
        };
        self.psn = (self.psn + 1) & 0xff_ffff;
        frame_gsi(self.psn, roce::DEFAULT_PKEY, &mad, &self.tx, delta, &mut d);
        d
    }

    fn v4(&self) -> bool {
        matches!(self.rx_input, IcrcInput::LinuxIpv4 { .. })
    }

    /// (kind, exchange) of a received datagram; None for one that is not
    /// this work's (wrong size, framing or MAD).
    fn read(&mut self, b: &[u8]) -> Option<(u8, usize)> {
        if b.len() != SIZE {
            return None;
        }
        if self.work == Work::Plain {
            return Some((b[0], u64::from_le_bytes(b[1..9].try_into().ok()?) as usize));
        }
        let d = roce::parse_udp_payload(b).ok()?;
        if self.work == Work::Checked
            && !icrc_matches(self.rx_input, &self.rx, &b[..SIZE - 4], d.icrc)
        {
            self.bad_icrc += 1;
            return None;
        }
        if !self.work.codec() {
            let i = u64::from_le_bytes(d.mad[1..9].try_into().ok()?);
            return Some((d.mad[0], i as usize));
        }
        let m = CmMad::parse(&d.mad[..]).ok()?;
        let kind = match m.msg {
            CmMsg::Req(_) => 1,
            CmMsg::Rep(_) => 2,
            CmMsg::Rtu(_) => 3,
            _ => return None,
        };
        Some((kind, m.tid as usize))
    }
}

/// Bytes one receive buffer holds with `UDP_GRO`: the largest UDP payload,
/// so that no coalesced packet is truncated.
const GRO_BUF: usize = 65_535;
/// Receive buffers of one `recvmmsg` with `UDP_GRO` (each may hold dozens of
/// datagrams).
const GRO_MSGS: usize = 16;

/// A baseline socket and the batching its kernel allows.
pub struct Socket {
    sock: UdpSocket,
    /// `sendmsg` with `UDP_SEGMENT` works (cleared at its first refusal).
    gso: AtomicBool,
    /// `UDP_GRO` is set: a received entry may hold several datagrams.
    gro: bool,
}

impl Socket {
    /// "gso+gro", "gso", "gro" or "mmsg": how this socket batches.
    pub fn batching(&self) -> &'static str {
        match (self.gso.load(Ordering::Relaxed), self.gro) {
            (true, true) => "gso+gro",
            (true, false) => "gso",
            (false, true) => "gro",
            (false, false) => "mmsg",
        }
    }
}

/// Binds a socket on `ip:port`, non-blocking, with the fabric's buffer
/// sizes and, unless `IBCM_BASELINE_BATCH=mmsg`, `UDP_GRO` and `UDP_SEGMENT`.
pub fn bind(ip: IpAddr, port: u16) -> io::Result<Socket> {
    let offload = std::env::var("IBCM_BASELINE_BATCH").map_or(true, |v| v != "mmsg");
    bind_with(ip, port, offload)
}

/// `bind`, with (`offload`) or without GSO/GRO.
fn bind_with(ip: IpAddr, port: u16, offload: bool) -> io::Result<Socket> {
    let s = UdpSocket::bind(SocketAddr::new(ip, port))?;
    s.set_nonblocking(true)?;
    let fd = s.as_raw_fd();
    let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, udp::RCVBUF);
    let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, udp::SNDBUF);
    let gro = offload && setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
    Ok(Socket {
        sock: s,
        gso: AtomicBool::new(offload),
        gro,
    })
}

/// Waits up to `ms` for the socket to become readable.
fn readable(s: &Socket, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: s.sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Waits up to 10 ms for room in the send buffer.
fn writable(s: &Socket) {
    let mut p = libc::pollfd {
        fd: s.sock.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    unsafe { libc::poll(&mut p, 1, 10) };
}

/// Receive buffers, sized for the socket's batching.
pub struct Rx {
    buf: Vec<u8>,
    each: usize,
    count: usize,
    addrs: Vec<libc::sockaddr_storage>,
    /// Per entry: received length, segment size (from `UDP_GRO`, else the length).
    got: Vec<(usize, usize)>,
    ctrl: Vec<u64>,
}

/// Control bytes per entry: one `cmsghdr` carrying an `int`, aligned.
const CTRL_WORDS: usize = 4;

impl Rx {
    pub fn new(s: &Socket) -> Rx {
        let (each, count) = if s.gro {
            (GRO_BUF, GRO_MSGS)
        } else {
            (RECV_BUF, BATCH)
        };
        Rx {
            buf: vec![0; each * count],
            each,
            count,
            addrs: vec![unsafe { std::mem::zeroed() }; count],
            got: vec![(0, 0); count],
            ctrl: vec![0; CTRL_WORDS * count],
        }
    }

    /// One non-blocking `recvmmsg`: every datagram that arrived (a GRO
    /// entry split into its segments) with its sender.
    pub fn recv(&mut self, s: &Socket) -> Vec<(&[u8], SocketAddr)> {
        let mut iovs: Vec<libc::iovec> = self
            .buf
            .chunks_mut(self.each)
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = (0..self.count)
            .map(|i| {
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name = &mut self.addrs[i] as *mut _ as *mut libc::c_void;
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
                m.msg_hdr.msg_iov = &mut iovs[i];
                m.msg_hdr.msg_iovlen = 1;
                if s.gro {
                    m.msg_hdr.msg_control =
                        self.ctrl[i * CTRL_WORDS..].as_mut_ptr() as *mut libc::c_void;
                    m.msg_hdr.msg_controllen = CTRL_WORDS * 8;
                }
                m
            })
            .collect();
        let n = unsafe {
            libc::recvmmsg(
                s.sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                self.count as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let n = if n < 0 { 0 } else { n as usize };
        for (i, m) in msgs.iter().enumerate().take(n) {
            let len = (m.msg_len as usize).min(self.each);
            self.got[i] = (len, gro_segment(&m.msg_hdr).unwrap_or(len).max(1));
        }
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let Some(from) = addr_of(&self.addrs[i]) else {
                continue;
            };
            let (len, seg) = self.got[i];
            let entry = &self.buf[i * self.each..i * self.each + len];
            out.extend(entry.chunks(seg).map(|d| (d, from)));
        }
        out
    }
}

/// The segment size a `UDP_GRO` control message reports, if any.
fn gro_segment(h: &libc::msghdr) -> Option<usize> {
    let mut c = unsafe { libc::CMSG_FIRSTHDR(h) };
    while !c.is_null() {
        let cm = unsafe { &*c };
        if cm.cmsg_level == libc::SOL_UDP && cm.cmsg_type == libc::UDP_GRO {
            let v = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int) };
            return usize::try_from(v).ok().filter(|&v| v > 0);
        }
        c = unsafe { libc::CMSG_NXTHDR(h, c) };
    }
    None
}

/// Sends every datagram, waiting for buffer room if needed: bursts to one
/// peer as GSO packets of up to `BATCH` segments, or (without GSO) with
/// `sendmmsg` in batches of `BATCH`.
pub fn send_many(s: &Socket, dgrams: &mut [([u8; SIZE], SocketAddr)]) {
    let mut i = 0;
    while i < dgrams.len() {
        if !s.gso.load(Ordering::Relaxed) {
            send_mmsg(s, &mut dgrams[i..]);
            return;
        }
        let to = dgrams[i].1;
        let run = dgrams[i..]
            .iter()
            .take(BATCH)
            .take_while(|(_, a)| *a == to)
            .count();
        if send_gso(s, &mut dgrams[i..i + run]) {
            i += run;
        }
    }
}

/// One GSO `sendmsg` of `dgrams` (same peer, at most `BATCH`). False when
/// the kernel refused GSO (then `s.gso` is cleared and nothing was sent).
fn send_gso(s: &Socket, dgrams: &mut [([u8; SIZE], SocketAddr)]) -> bool {
    let (mut addr, alen) = sockaddr_of(&dgrams[0].1);
    let mut iovs: Vec<libc::iovec> = dgrams
        .iter_mut()
        .map(|(d, _)| libc::iovec {
            iov_base: d.as_mut_ptr() as *mut libc::c_void,
            iov_len: SIZE,
        })
        .collect();
    let mut ctrl = [0u64; CTRL_WORDS];
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_name = &mut addr as *mut _ as *mut libc::c_void;
    h.msg_namelen = alen;
    h.msg_iov = iovs.as_mut_ptr();
    h.msg_iovlen = iovs.len();
    if dgrams.len() > 1 {
        h.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
        h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&h);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, SIZE as u16);
        }
    }
    for _ in 0..1000 {
        if unsafe { libc::sendmsg(s.sock.as_raw_fd(), &h, 0) } >= 0 {
            return true;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => writable(s),
            _ => {
                s.gso.store(false, Ordering::Relaxed);
                return false;
            }
        }
    }
    true
}

/// `sendmmsg` of every datagram in batches of `BATCH`.
fn send_mmsg(s: &Socket, dgrams: &mut [([u8; SIZE], SocketAddr)]) {
    for chunk in dgrams.chunks_mut(BATCH) {
        let mut addrs: Vec<_> = chunk.iter().map(|(_, a)| sockaddr_of(a)).collect();
        let mut iovs: Vec<libc::iovec> = chunk
            .iter_mut()
            .map(|(d, _)| libc::iovec {
                iov_base: d.as_mut_ptr() as *mut libc::c_void,
                iov_len: SIZE,
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = (0..chunk.len())
            .map(|i| {
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name = &mut addrs[i].0 as *mut _ as *mut libc::c_void;
                m.msg_hdr.msg_namelen = addrs[i].1;
                m.msg_hdr.msg_iov = &mut iovs[i];
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        let mut done = 0;
        let mut spins = 0;
        while done < msgs.len() && spins < 1000 {
            let r = unsafe {
                libc::sendmmsg(
                    s.sock.as_raw_fd(),
                    msgs[done..].as_mut_ptr(),
                    (msgs.len() - done) as u32,
                    0,
                )
            };
            if r > 0 {
                done += r as usize;
            } else {
                spins += 1;
                writable(s);
            }
        }
    }
}

/// The responder: answers kind 1 with kind 2, ignores kind 3, until
/// `stop()` says so. With `Work::Plain` the answer is the request's bytes
/// with the kind changed; otherwise a REP framed for `peer`. Returns the
/// count of received frames whose ICRC did not verify.
pub fn serve(sock: &Socket, work: Work, peer: SocketAddr, stop: impl Fn() -> bool) -> u64 {
    let Ok(mut wire) = Wire::new(work, sock, peer) else {
        return 0;
    };
    let mut rx = Rx::new(sock);
    let mut out = Vec::with_capacity(BATCH);
    while !stop() {
        if !readable(sock, 200) {
            continue;
        }
        loop {
            let got = rx.recv(sock);
            if got.is_empty() {
                break;
            }
            out.clear();
            for (b, from) in got {
                if let Some((1, i)) = wire.read(b) {
                    let d = if work == Work::Plain {
                        let mut d = [0u8; SIZE];
                        d.copy_from_slice(b);
                        d[0] = 2;
                        d
                    } else {
                        wire.make(2, i, out.len())
                    };
                    out.push((d, from));
                }
            }
            send_many(sock, &mut out);
        }
    }
    wire.bad_icrc
}

/// The requester: `n` exchanges, `window` in flight. Returns the rate
/// (exchanges per second) and each exchange's request→response latency.
///
/// Two threads, as the CM client has (the application thread starting
/// connects, the device's event loop receiving REPs and sending RTUs): this
/// thread sends requests in bursts of every free window slot; a receiver
/// thread takes responses, sends the confirmations and frees the slots.
pub fn run(
    sock: &Socket,
    work: Work,
    to: SocketAddr,
    n: usize,
    window: usize,
    timeout: Duration,
) -> io::Result<Outcome> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Condvar, Mutex};
    // One per thread, as the fabric keeps its framing state per thread.
    let mut tx_wire = Wire::new(work, sock, to)?;
    let mut rx_wire = Wire::new(work, sock, to)?;
    rx_wire.psn = 0x80_0000;
    let start = Instant::now();
    let deadline = start + timeout;
    let ns = || start.elapsed().as_nanos() as u64 + 1;
    // Send time of each outstanding exchange (0 = not outstanding).
    let sent_at: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    let slots = (Mutex::new(0usize), Condvar::new());
    let finished = AtomicBool::new(false);
    let (done, lat, bad_icrc) = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let wire = &mut rx_wire;
            let mut lat = Vec::with_capacity(n);
            let mut rx = Rx::new(sock);
            let mut out: Vec<([u8; SIZE], SocketAddr)> = Vec::with_capacity(BATCH);
            let mut done = 0usize;
            while done < n && Instant::now() < deadline {
                if !readable(sock, 500) {
                    // Lost datagrams (should not happen on loopback): resend.
                    out.clear();
                    for (i, t) in sent_at.iter().enumerate() {
                        if t.load(Ordering::Relaxed) != 0 {
                            out.push((wire.make(1, i, out.len()), to));
                        }
                    }
                    send_many(sock, &mut out);
                    continue;
                }
                out.clear();
                for (b, _) in rx.recv(sock) {
                    let Some((2, i)) = wire.read(b) else {
                        continue;
                    };
                    let t = sent_at.get(i).map_or(0, |t| t.swap(0, Ordering::Relaxed));
                    if t != 0 {
                        lat.push(ns() - t);
                        out.push((wire.make(3, i, out.len()), to));
                    }
                }
                send_many(sock, &mut out);
                if !out.is_empty() {
                    done += out.len();
                    *slots.0.lock().unwrap() -= out.len();
                    slots.1.notify_one();
                }
            }
            finished.store(true, Ordering::SeqCst);
            slots.1.notify_one();
            (done, lat, wire.bad_icrc)
        });
        let wire = &mut tx_wire;
        let mut out: Vec<([u8; SIZE], SocketAddr)> = Vec::with_capacity(window);
        let mut next = 0usize;
        while next < n && !finished.load(Ordering::SeqCst) {
            let k = {
                let mut inflight = slots.0.lock().unwrap();
                while *inflight >= window && !finished.load(Ordering::SeqCst) {
                    inflight = slots
                        .1
                        .wait_timeout(inflight, Duration::from_millis(100))
                        .unwrap()
                        .0;
                }
                let k = (window - (*inflight).min(window)).min(n - next);
                *inflight += k;
                k
            };
            out.clear();
            for (i, t) in sent_at.iter().enumerate().skip(next).take(k) {
                t.store(ns(), Ordering::Relaxed);
                out.push((wire.make(1, i, out.len()), to));
            }
            send_many(sock, &mut out);
            next += k;
        }
        rx.join().unwrap()
    });
    Ok(Outcome {
        rate: done as f64 / start.elapsed().as_secs_f64(),
        done,
        lat_ns: lat,
        bad_icrc,
    })
}

/// What `run` measured.
pub struct Outcome {
    /// Completed exchanges per second.
    pub rate: f64,
    pub done: usize,
    /// Each exchange's request→response time, ns.
    pub lat_ns: Vec<u64>,
    /// Responses whose ICRC did not verify (dropped; 0 on a sound path).
    pub bad_icrc: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 150 datagrams (bursts of 64, 64, 22) from one socket to another,
    /// each numbered: all arrive once, whole and in order, whichever batching.
    fn exchange(offload: bool, a: [u8; 4], b: [u8; 4]) -> &'static str {
        let tx = bind_with(IpAddr::from(a), 0, offload).unwrap();
        let rx_sock = bind_with(IpAddr::from(b), 0, offload).unwrap();
        let to = rx_sock.sock.local_addr().unwrap();
        let mut out: Vec<([u8; SIZE], SocketAddr)> = (0..150u32)
            .map(|i| {
                let mut d = [0u8; SIZE];
                d[0] = 1;
                d[1..5].copy_from_slice(&i.to_le_bytes());
                d[SIZE - 1] = 0xee;
                (d, to)
            })
            .collect();
        send_many(&tx, &mut out);
        let mut rx = Rx::new(&rx_sock);
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.len() < 150 && Instant::now() < deadline {
            if !readable(&rx_sock, 100) {
                continue;
            }
            for (d, from) in rx.recv(&rx_sock) {
                assert_eq!(d.len(), SIZE);
                assert_eq!(d[SIZE - 1], 0xee);
                assert_eq!(from, tx.sock.local_addr().unwrap());
                seen.push(u32::from_le_bytes(d[1..5].try_into().unwrap()));
            }
        }
        assert_eq!(seen, (0..150).collect::<Vec<_>>());
        tx.batching()
    }

    #[test]
    fn gso_gro_batches_split_into_datagrams() {
        // Linux ≥ 4.18 (GSO) / 5.0 (GRO): this machine's kernel has both.
        assert_eq!(exchange(true, [127, 0, 91, 1], [127, 0, 91, 2]), "gso+gro");
    }

    #[test]
    fn mmsg_fallback_delivers_the_same() {
        assert_eq!(exchange(false, [127, 0, 91, 3], [127, 0, 91, 4]), "mmsg");
    }

    /// `run` against `serve` doing `work`: every exchange completes and no
    /// ICRC fails, GSO/GRO on and off.
    #[test]
    fn every_work_completes_its_exchanges() {
        let mut host = 10u8;
        for offload in [true, false] {
            for work in [Work::Plain, Work::Frame, Work::Codec, Work::Checked] {
                let a = bind_with(IpAddr::from([127, 0, 91, host]), 0, offload).unwrap();
                let b = bind_with(IpAddr::from([127, 0, 91, host + 1]), 0, offload).unwrap();
                host += 2;
                let (aa, ba) = (a.sock.local_addr().unwrap(), b.sock.local_addr().unwrap());
                let stop = AtomicBool::new(false);
                let (out, bad) = std::thread::scope(|s| {
                    let server = s.spawn(|| serve(&b, work, aa, || stop.load(Ordering::SeqCst)));
                    let out = run(&a, work, ba, 700, 256, Duration::from_secs(20)).unwrap();
                    stop.store(true, Ordering::SeqCst);
                    (out, server.join().unwrap())
                });
                assert_eq!(out.done, 700, "{work:?}, offload {offload}");
                assert_eq!(out.lat_ns.len(), 700);
                assert_eq!((out.bad_icrc, bad), (0, 0), "{work:?}");
            }
        }
    }

    /// The rungs' frames are the fabric's: BTH/DETH for the GSI, the ICRC
    /// right for the IP ID segment `j` of a GSO burst carries, and with
    /// the codec a REQ / REP / RTU the engine's parser reads.
    #[test]
    fn framed_work_puts_real_gsi_frames_on_the_wire() {
        let a = bind_with(IpAddr::from([127, 0, 91, 40]), 0, true).unwrap();
        let b = SocketAddr::from(([127, 0, 91, 41], 4790));
        let me = a.sock.local_addr().unwrap();
        let IpAddr::V4(mine) = me.ip() else { panic!() };
        for work in [Work::Frame, Work::Codec] {
            let mut w = Wire::new(work, &a, b).unwrap();
            for (j, kind) in [(0, 1u8), (1, 2), (63, 3), (64, 1)] {
                let d = w.make(kind, 4242, j);
                let inp = IcrcInput::linux_ipv4(mine, [127, 0, 91, 41].into(), me.port(), 4790)
                    .with_ip_id((j % BATCH) as u16);
                roce::verify_icrc_ipv4(&inp.ipv4_header().unwrap(), &inp.udp_header(), &d)
                    .unwrap_or_else(|e| panic!("{work:?} segment {j}: {e}"));
                let g = roce::parse_udp_payload(&d).unwrap();
                assert_eq!(g.bth.dest_qp, roce::GSI_QP);
                if work == Work::Codec {
                    let m = CmMad::parse(&g.mad[..]).unwrap();
                    assert_eq!(m.tid, 4242);
                    let want = ["REQ", "REP", "RTU"][kind as usize - 1];
                    assert_eq!(m.msg.name(), want);
                }
            }
        }
    }

    /// Only `Checked` checks the ICRC: a frame with one ICRC bit flipped
    /// is dropped and counted there, read by the others.
    #[test]
    fn only_the_checked_rung_drops_a_bad_icrc() {
        let a = bind_with(IpAddr::from([127, 0, 91, 42]), 0, false).unwrap();
        let b = bind_with(IpAddr::from([127, 0, 91, 43]), 0, false).unwrap();
        let (aa, ba) = (a.sock.local_addr().unwrap(), b.sock.local_addr().unwrap());
        let mut tx = Wire::new(Work::Codec, &a, ba).unwrap();
        let good = tx.make(2, 9, 0);
        let mut bad = good;
        bad[SIZE - 1] ^= 0x10;
        for work in [Work::Codec, Work::Checked] {
            let mut rx = Wire::new(work, &b, aa).unwrap();
            assert_eq!(rx.read(&good), Some((2, 9)), "{work:?}");
            assert_eq!(rx.bad_icrc, 0);
            let got = rx.read(&bad);
            if work == Work::Checked {
                assert_eq!((got, rx.bad_icrc), (None, 1));
            } else {
                assert_eq!((got, rx.bad_icrc), (Some((2, 9)), 0));
            }
        }
        assert_eq!(
            Wire::new(Work::Frame, &b, aa)
                .unwrap()
                .read(&good[..SIZE - 1]),
            None
        );
    }
}
