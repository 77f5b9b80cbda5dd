//! The `--baseline` half of `ibcm bench`: the transport's own limit for the
//! CM's message pattern. Two UDP sockets on the devices' addresses, tuned
//! and batched exactly as the soft fabric's (8 MiB receive / 4 MiB send
//! buffers, `recvmmsg`/`sendmmsg` in batches of 64, non-blocking with
//! `poll`), exchange 3 datagrams of the RoCEv2 GSI payload size (280 bytes)
//! per "connection" — request, response, confirmation, as REQ, REP and RTU
//! — with the same number in flight, and the same threads: one responder
//! thread, and on the requesting side one thread starting exchanges and one
//! receiving responses and confirming them. No parsing, no state, no timers: what
//! is left is the cost of the sockets, which is the bound the CM is
//! measured against.

use ibcm::fabric::udp::{self, BATCH, RECV_BUF, setsockopt_int, sockaddr_of};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Datagram size: BTH + DETH + MAD + ICRC, as the fabric sends.
pub const SIZE: usize = 280;

/// Binds a socket on `ip:port` with the fabric's options.
pub fn bind(ip: IpAddr, port: u16) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(SocketAddr::new(ip, port))?;
    s.set_nonblocking(true)?;
    let fd = s.as_raw_fd();
    let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, udp::RCVBUF);
    let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, udp::SNDBUF);
    Ok(s)
}

/// Waits up to `ms` for the socket to become readable.
pub fn readable(s: &UdpSocket, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Receives up to `BATCH` datagrams without blocking: `(bytes, from)` each.
pub fn recv_many(s: &UdpSocket, bufs: &mut [[u8; RECV_BUF]; BATCH]) -> Vec<(usize, SocketAddr)> {
    let mut got = [(0, None); BATCH];
    let n = udp::recv_mmsg(s.as_raw_fd(), bufs, &mut got).unwrap_or(0);
    got[..n]
        .iter()
        .filter_map(|&(len, from)| Some((len, from?)))
        .collect()
}

/// Sends every datagram, in batches, waiting for buffer room if needed.
pub fn send_many(s: &UdpSocket, dgrams: &mut [([u8; SIZE], SocketAddr)]) {
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
                    s.as_raw_fd(),
                    msgs[done..].as_mut_ptr(),
                    (msgs.len() - done) as u32,
                    0,
                )
            };
            if r > 0 {
                done += r as usize;
            } else {
                spins += 1;
                let mut p = libc::pollfd {
                    fd: s.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                unsafe { libc::poll(&mut p, 1, 10) };
            }
        }
    }
}

/// The responder: answers kind 1 with kind 2 (same bytes), ignores kind 3,
/// until `stop()` says so.
pub fn serve(sock: &UdpSocket, stop: impl Fn() -> bool) {
    let mut bufs = Box::new([[0u8; RECV_BUF]; BATCH]);
    let mut out = Vec::with_capacity(BATCH);
    while !stop() {
        if !readable(sock, 200) {
            continue;
        }
        loop {
            let got = recv_many(sock, &mut bufs);
            if got.is_empty() {
                break;
            }
            out.clear();
            for (i, (n, from)) in got.iter().enumerate() {
                if *n == SIZE && bufs[i][0] == 1 {
                    let mut d = [0u8; SIZE];
                    d.copy_from_slice(&bufs[i][..SIZE]);
                    d[0] = 2;
                    out.push((d, *from));
                }
            }
            send_many(sock, &mut out);
        }
    }
}

/// The requester: `n` exchanges, `window` in flight. Returns the rate
/// (exchanges per second) and each exchange's request→response latency.
///
/// Two threads, as the CM client has (the application thread starting
/// connects, the device's event loop receiving REPs and sending RTUs): this
/// thread sends requests in bursts of every free window slot; a receiver
/// thread takes responses, sends the confirmations and frees the slots.
pub fn run(
    sock: &UdpSocket,
    to: SocketAddr,
    n: usize,
    window: usize,
    timeout: Duration,
) -> (f64, Vec<u64>) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Condvar, Mutex};
    let start = Instant::now();
    let deadline = start + timeout;
    let ns = || start.elapsed().as_nanos() as u64 + 1;
    // Send time of each outstanding exchange (0 = not outstanding).
    let sent_at: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    let slots = (Mutex::new(0usize), Condvar::new());
    let finished = AtomicBool::new(false);
    let dgram = |kind: u8, i: usize| {
        let mut d = [0u8; SIZE];
        d[0] = kind;
        d[1..9].copy_from_slice(&(i as u64).to_le_bytes());
        (d, to)
    };
    let (done, lat) = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let mut lat = Vec::with_capacity(n);
            let mut bufs = Box::new([[0u8; RECV_BUF]; BATCH]);
            let mut out: Vec<([u8; SIZE], SocketAddr)> = Vec::with_capacity(BATCH);
            let mut done = 0usize;
            while done < n && Instant::now() < deadline {
                if !readable(sock, 500) {
                    // Lost datagrams (should not happen on loopback): resend.
                    out.clear();
                    for (i, t) in sent_at.iter().enumerate() {
                        if t.load(Ordering::Relaxed) != 0 {
                            out.push(dgram(1, i));
                        }
                    }
                    send_many(sock, &mut out);
                    continue;
                }
                out.clear();
                for (k, (len, _)) in recv_many(sock, &mut bufs).into_iter().enumerate() {
                    let b = &bufs[k];
                    if len != SIZE || b[0] != 2 {
                        continue;
                    }
                    let i = u64::from_le_bytes(b[1..9].try_into().unwrap()) as usize;
                    let t = sent_at.get(i).map_or(0, |t| t.swap(0, Ordering::Relaxed));
                    if t != 0 {
                        lat.push(ns() - t);
                        out.push(dgram(3, i));
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
            (done, lat)
        });
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
                out.push(dgram(1, i));
            }
            send_many(sock, &mut out);
            next += k;
        }
        rx.join().unwrap()
    });
    (done as f64 / start.elapsed().as_secs_f64(), lat)
}
