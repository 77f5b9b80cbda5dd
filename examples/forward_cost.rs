//! What design B of the host CM service would cost (docs/SERVICE.md,
//! "Round 18"): the engines in the processes and a forwarder process that
//! only switches their MADs, against the in-process path, in one run.
//!
//! The same workload as `ibcm bench` (N connects with C in flight, then N
//! disconnects with C in flight; the server answers a REQ with a REP and a
//! DREQ with a DREP, the client a REP with an RTU), over three set-ups,
//! alternating:
//!
//! * `inproc`: client and server devices in one process, over the UDP
//!   software fabric (`soft:`) — what `ibcm bench` measures in-process;
//! * `udp2`: the client and the server in two processes, each with its own
//!   `soft:` device (engines in the processes, the kernel's UDP between
//!   them);
//! * `fwd`: the client and the server in two processes whose devices have
//!   no socket of their own: each hands its MADs, in batched records, over
//!   a Unix `SOCK_SEQPACKET` socket to a forwarder process, which routes
//!   every MAD to its process — a REQ by its service ID, every other MAD
//!   by its destination GID (design B's switch; the comm ID would do as
//!   well) — and sends each process's MADs on in batches;
//! * `fwdt`: `fwd` with the forwarder also tracking every connection as
//!   design B's service must (each end's comm ID, owner, peer and state,
//!   from the MADs it forwards; a MAD that speaks for a comm ID its
//!   process does not own is refused): the bookkeeping a dead process's
//!   DREQs and REJs would be sent from. The forwarder fails (exit 1)
//!   when a connection is left in its table after the run or a MAD was
//!   refused (`ibcm::tracker`). Host-wide listens are not here;
//! * `kill` (after each round): `fwdt`'s set-up with a client that is
//!   SIGKILLed once half of its N connects are done (C in flight): the
//!   forwarder's tracker sends the server the DREQs and REJs the kernel
//!   would have sent for the dead process; printed: how long after the
//!   kill the server's last open connection closed (a failure if not
//!   within 5 s, or if the tracker is left with anything).
//!
//! Printed per set-up and round: the connect and disconnect phases' rates,
//! and the CPU time (user + system, every process of the set-up: the
//! parent's own for `inproc`, `wait4` of each child otherwise) per
//! connection, with the forwarder's share.
//!
//! `cargo run --release --example forward_cost [N] [C] [ROUNDS]`
//! (defaults 100000, 256, 2); `FWD_SETUPS=inproc,fwd` runs only those,
//! `FWD_NET=127.A.B` chooses the loopback addresses.
//! Exits 1 when a connection failed (`make test-rust` runs it small).

use ibcm::api::{
    CmId, Device, DeviceOptions, Event, EventType, Gid, PathRec, RepParams, ReqParams, RustHandler,
    qp_type,
};
use ibcm::engine::{MadSource, PortInfo, Transmit};
use ibcm::fabric::{Received, Transport, TransportStats};
use ibcm::tracker::{Proc, Tracker, Verdict};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const SERVICE: u64 = 0x1_0000_5eed;
/// One record: source GID, destination GID, P_Key, 2 bytes of padding, the MAD.
const REC: usize = 16 + 16 + 2 + 2 + 256;
/// Records per message at most.
const PER_MSG: usize = 32;

// ------------------------------------------------------------ the transport

/// A device's MADs over a `SOCK_SEQPACKET` socket to the forwarder.
struct FwdTransport {
    sock: OwnedFd,
    wake: OwnedFd,
    gid: Gid,
    guid: u64,
    stats: TransportStats,
}

fn put_rec(buf: &mut Vec<u8>, sgid: &Gid, dgid: &Gid, pkey: u16, mad: &[u8; 256]) {
    buf.extend_from_slice(&sgid.0);
    buf.extend_from_slice(&dgid.0);
    buf.extend_from_slice(&pkey.to_be_bytes());
    buf.extend_from_slice(&[0, 0]);
    buf.extend_from_slice(mad);
}

fn send_msg(fd: RawFd, buf: &[u8]) {
    loop {
        // SAFETY: our socket and buffer.
        let r = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), 0) };
        if r >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Reads one message without waiting: its length, 0 when none waits.
fn recv_msg(fd: RawFd, buf: &mut [u8]) -> usize {
    // SAFETY: our socket and buffer.
    let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if r <= 0 { 0 } else { r as usize }
}

impl Transport for FwdTransport {
    fn send(&self, batch: &[Transmit]) {
        let mut buf = Vec::with_capacity(PER_MSG * REC);
        for chunk in batch.chunks(PER_MSG) {
            buf.clear();
            for t in chunk {
                put_rec(&mut buf, &self.gid, &t.dest.dgid, t.dest.pkey, &t.mad);
            }
            send_msg(self.sock.as_raw_fd(), &buf);
            self.stats
                .tx_datagrams
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
    }

    fn recv(&self, timeout: Option<Duration>, out: &mut Vec<Received>) -> io::Result<()> {
        // One buffer per thread, not a zeroed 9 KiB one per wake-up.
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; PER_MSG * REC]);
        }
        BUF.with(|b| self.recv_into(&mut b.borrow_mut(), timeout, out));
        Ok(())
    }

    fn wake(&self) {
        let v = 1u64;
        // SAFETY: an 8-byte write to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&raw const v).cast(), 8) };
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
        format!("fwd:{}", self.gid.to_ip())
    }
}

impl FwdTransport {
    /// `recv` with the thread's buffer: drains what waits, else waits up
    /// to `timeout` and drains again.
    fn recv_into(&self, buf: &mut [u8], timeout: Option<Duration>, out: &mut Vec<Received>) {
        if self.drain(buf, out) == 0 && timeout != Some(Duration::ZERO) {
            let mut fds = [
                libc::pollfd {
                    fd: self.sock.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.wake.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: our descriptors.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, ibcm::fabric::poll_ms(timeout)) };
            if fds[1].revents != 0 {
                let mut v = 0u64;
                // SAFETY: an 8-byte read of our eventfd.
                unsafe { libc::read(self.wake.as_raw_fd(), (&raw mut v).cast(), 8) };
            }
            if fds[0].revents & libc::POLLHUP != 0 && fds[0].revents & libc::POLLIN == 0 {
                std::thread::sleep(Duration::from_millis(10));
            }
            self.drain(buf, out);
        }
    }

    fn drain(&self, buf: &mut [u8], out: &mut Vec<Received>) -> usize {
        let mut n = 0;
        loop {
            let len = recv_msg(self.sock.as_raw_fd(), buf);
            if len == 0 {
                return n;
            }
            for r in buf[..len].chunks_exact(REC) {
                let sgid = Gid(r[0..16].try_into().unwrap());
                let dgid = Gid(r[16..32].try_into().unwrap());
                let pkey = u16::from_be_bytes([r[32], r[33]]);
                out.push(Received {
                    src: MadSource::roce_gsi(sgid, dgid, 1, pkey),
                    mad: r[36..].try_into().unwrap(),
                });
                n += 1;
            }
            self.stats
                .rx_datagrams
                .fetch_add((len / REC) as u64, Ordering::Relaxed);
        }
    }
}

// ------------------------------------------------------------ the forwarder

/// Routes every record of every message to its process and sends each
/// process's records on, batched, until every process has hung up. With
/// `track`, every MAD also goes through design B's connection tracker
/// (`ibcm::tracker`): a refused one is dropped, and when a process hangs
/// up the MADs the kernel would have sent for its connections go to their
/// peers. Exits 1 if the tracker is left with a connection or refused a
/// MAD.
fn forwarder(socks: Vec<OwnedFd>, gids: Vec<Gid>, listener: usize, track: bool) {
    let mut tracker = Tracker::new();
    let epoch = Instant::now();
    let now_ms = |e: Instant| e.elapsed().as_millis() as u64;
    let by_gid: HashMap<Gid, usize> = gids.iter().enumerate().map(|(i, g)| (*g, i)).collect();
    let listens: HashMap<u64, usize> = [(SERVICE, listener)].into_iter().collect();
    let mut buf = vec![0u8; PER_MSG * REC];
    let mut outs: Vec<Vec<u8>> = vec![Vec::with_capacity(PER_MSG * REC); socks.len()];
    let mut open = vec![true; socks.len()];
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let push = |outs: &mut Vec<Vec<u8>>, to: usize, r: &[u8]| {
        if outs[to].len() + REC > PER_MSG * REC {
            send_msg(socks[to].as_raw_fd(), &outs[to]);
            outs[to].clear();
        }
        outs[to].extend_from_slice(r);
    };
    while open.iter().any(|&o| o) {
        for (f, o) in fds.iter_mut().zip(&open) {
            f.fd = if *o { f.fd.abs() } else { -f.fd.abs() - 1 };
            f.revents = 0;
        }
        // SAFETY: our descriptors.
        if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) } < 0 {
            continue;
        }
        for i in 0..socks.len() {
            let rev = fds[i].revents;
            if rev == 0 {
                continue;
            }
            let mut any = false;
            loop {
                let len = recv_msg(socks[i].as_raw_fd(), &mut buf);
                if len == 0 {
                    break;
                }
                any = true;
                for r in buf[..len].chunks_exact(REC) {
                    let mad = &r[36..];
                    let attr = u16::from_be_bytes([mad[16], mad[17]]);
                    // A REQ goes to the listener of its service ID (CM
                    // data byte 8: MAD byte 32), the rest to their GID.
                    let to = if attr == 0x0010 {
                        let sid = u64::from_be_bytes(mad[32..40].try_into().unwrap());
                        listens.get(&sid).copied()
                    } else {
                        let dgid = Gid(r[16..32].try_into().unwrap());
                        by_gid.get(&dgid).copied()
                    };
                    let Some(to) = to else { continue };
                    if !open[to] {
                        // Nothing goes to a process that is gone; the
                        // tracker answers for it.
                        if track && let Some(answer) = tracker.answer_gone(i as Proc, mad) {
                            let mut a = Vec::with_capacity(REC);
                            put_rec(&mut a, &gids[to], &gids[i], 0xffff, &answer);
                            push(&mut outs, i, &a);
                        }
                        continue;
                    }
                    if track
                        && tracker.observe(i as Proc, to as Proc, mad, now_ms(epoch))
                            != Verdict::Pass
                    {
                        continue;
                    }
                    push(&mut outs, to, r);
                }
            }
            if !any && rev & (libc::POLLHUP | libc::POLLERR) != 0 {
                open[i] = false;
                if track {
                    for (to, mad) in tracker.process_gone(i as Proc, now_ms(epoch)) {
                        let to = to as usize;
                        if open[to] {
                            let mut r = Vec::with_capacity(REC);
                            put_rec(&mut r, &gids[i], &gids[to], 0xffff, &mad);
                            push(&mut outs, to, &r);
                        }
                    }
                }
            }
        }
        for (to, out) in outs.iter_mut().enumerate() {
            if !out.is_empty() {
                send_msg(socks[to].as_raw_fd(), out);
                out.clear();
            }
        }
    }
    if track && (!tracker.is_empty() || tracker.refused() > 0) {
        eprintln!(
            "forwarder: {} connection end(s) left, {} MAD(s) refused",
            tracker.len(),
            tracker.refused()
        );
        // SAFETY: the child ends here.
        unsafe { libc::_exit(1) };
    }
}

// ------------------------------------------------------------ the workload

/// At most C in flight: a count and its condition.
struct Gate {
    free: Mutex<usize>,
    cond: Condvar,
    done: AtomicUsize,
}

impl Gate {
    fn new(c: usize) -> Gate {
        Gate {
            free: Mutex::new(c),
            cond: Condvar::new(),
            done: AtomicUsize::new(0),
        }
    }
    /// Takes every free slot (at least one, at most `max`).
    fn acquire_up_to(&self, max: usize) -> usize {
        let mut f = self.free.lock().unwrap();
        while *f == 0 {
            f = self.cond.wait(f).unwrap();
        }
        let k = (*f).min(max);
        *f -= k;
        k
    }
    fn release(&self) {
        self.done.fetch_add(1, Ordering::SeqCst);
        *self.free.lock().unwrap() += 1;
        self.cond.notify_one();
    }
    fn wait_done(&self, n: usize) {
        let mut f = self.free.lock().unwrap();
        while self.done.load(Ordering::SeqCst) < n {
            f = self
                .cond
                .wait_timeout(f, Duration::from_millis(5))
                .unwrap()
                .0;
        }
    }
}

/// The server's REP, with the next of its QPNs (unique per server: the
/// peer's stale-connection check keys on them, as a real HCA's are).
fn rep_params(next_qpn: &AtomicUsize) -> RepParams {
    RepParams {
        qp_num: (next_qpn.fetch_add(1, Ordering::Relaxed) & 0xff_ffff) as u32,
        starting_psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        ..RepParams::default()
    }
}

/// The server's listener: a REP for each REQ, a DREP for each DREQ; an id
/// is destroyed when its timewait ends (or it fails).
fn serve(dev: &Arc<Device>) -> CmId {
    let next_qpn = AtomicUsize::new(1);
    let h: RustHandler = Arc::new(move |id: &CmId, ev: &Event| match ev.kind {
        EventType::ReqReceived => {
            let rep = rep_params(&next_qpn);
            i32::from(id.send_rep(&rep).is_err())
        }
        EventType::DreqReceived => {
            let _ = id.send_drep(&[]);
            0
        }
        EventType::TimewaitExit | EventType::RepError | EventType::RejReceived => 1,
        _ => 0,
    });
    let l = dev.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
    l.listen(SERVICE).unwrap();
    l
}

/// The client: N connects then N disconnects, C in flight. Returns the
/// two phases' seconds and the failures.
fn client(dev: &Arc<Device>, path: PathRec, n: usize, c: usize) -> (f64, f64, usize) {
    let gate = Arc::new(Gate::new(c));
    let failed = Arc::new(AtomicUsize::new(0));
    let h: RustHandler = {
        let (gate, failed) = (gate.clone(), failed.clone());
        Arc::new(move |id: &CmId, ev: &Event| match ev.kind {
            EventType::RepReceived => {
                if id.send_rtu(&[]).is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                gate.release();
                0
            }
            EventType::RejReceived | EventType::ReqError => {
                failed.fetch_add(1, Ordering::Relaxed);
                gate.release();
                1
            }
            EventType::DrepReceived | EventType::DreqError => {
                gate.release();
                1
            }
            _ => 0,
        })
    };
    let t0 = Instant::now();
    let ids = connect_all(dev, &h, path, n, &gate, &failed, |_| {});
    gate.wait_done(n);
    let connect = t0.elapsed().as_secs_f64();
    gate.done.store(0, Ordering::SeqCst);
    let t1 = Instant::now();
    let mut ids = ids.into_iter();
    while ids.len() > 0 {
        let k = gate.acquire_up_to(ids.len());
        dev.batch(|| {
            for id in ids.by_ref().take(k) {
                if id.send_dreq(&[]).is_err() {
                    gate.release();
                }
            }
        });
    }
    gate.wait_done(n);
    (
        connect,
        t1.elapsed().as_secs_f64(),
        failed.load(Ordering::Relaxed),
    )
}

/// Starts `n` connections with `h` as their handler, in bursts of the
/// gate's free slots, their MADs sent together (as `ibcm bench` does);
/// `after_burst` runs after each burst. Returns the ids.
fn connect_all(
    dev: &Arc<Device>,
    h: &RustHandler,
    path: PathRec,
    n: usize,
    gate: &Gate,
    failed: &AtomicUsize,
    mut after_burst: impl FnMut(&Gate),
) -> Vec<CmId> {
    let mut ids = Vec::with_capacity(n);
    let mut i = 0;
    while i < n {
        let k = gate.acquire_up_to(n - i);
        dev.batch(|| {
            for _ in 0..k {
                ids.push(connect_one(dev, h, path, i, gate, failed));
                i += 1;
            }
        });
        after_burst(gate);
    }
    ids
}

/// Creates connection `i`'s id and sends its REQ.
fn connect_one(
    dev: &Arc<Device>,
    h: &RustHandler,
    path: PathRec,
    i: usize,
    gate: &Gate,
    failed: &AtomicUsize,
) -> CmId {
    let id = dev
        .create_id(None, std::ptr::null_mut(), Some(h.clone()))
        .unwrap();
    let req = ReqParams {
        primary_path: path,
        service_id: SERVICE,
        qp_num: (i as u32 + 1) & 0xff_ffff,
        qp_type: qp_type::RC,
        starting_psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        retry_count: 7,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        ..ReqParams::default()
    };
    if id.send_req(&req).is_err() {
        failed.fetch_add(1, Ordering::Relaxed);
        gate.release();
    }
    id
}

fn opts() -> DeviceOptions {
    DeviceOptions {
        max_half_open: 0,
        ..DeviceOptions::default()
    }
}

/// Host `h` of `$FWD_NET` (three octets of a loopback /24; default
/// 127.0.61).
fn addr(h: usize) -> String {
    let net = std::env::var("FWD_NET").unwrap_or_else(|_| "127.0.61".into());
    format!("{net}.{}", h % 250 + 1)
}

fn gid(ip: &str) -> Gid {
    ip.parse::<std::net::IpAddr>().unwrap().into()
}

// ------------------------------------------------------------ processes

fn cpu(ru: &libc::rusage) -> f64 {
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn self_cpu() -> f64 {
    // SAFETY: an out struct of ours.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    cpu(&ru)
}

/// Forks `f` as a child process (which exits when `f` returns).
fn spawn(f: impl FnOnce()) -> libc::pid_t {
    // SAFETY: the child runs `f` and exits without unwinding into the
    // parent's state.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        f();
        unsafe { libc::_exit(0) };
    }
    pid
}

/// Waits for `pid`: its CPU seconds, and whether it exited with 0.
fn reap(pid: libc::pid_t) -> (f64, bool) {
    let mut st = 0;
    // SAFETY: out structs of ours.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::wait4(pid, &mut st, 0, &mut ru) };
    (cpu(&ru), libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0)
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut p = [0; 2];
    // SAFETY: out array of ours.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) }
}

fn write_all(fd: &OwnedFd, b: &[u8]) {
    // SAFETY: our pipe and buffer.
    unsafe { libc::write(fd.as_raw_fd(), b.as_ptr().cast(), b.len()) };
}

fn read_some(fd: &OwnedFd) -> Vec<u8> {
    let mut b = vec![0u8; 256];
    // SAFETY: our pipe and buffer.
    let r = unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) };
    b.truncate(r.max(0) as usize);
    b
}

fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    let mut p = [0; 2];
    // SAFETY: out array of ours.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            p.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0, "socketpair");
    for fd in p {
        let sz: libc::c_int = 4 << 20;
        // SAFETY: an int option on our socket.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&raw const sz).cast(),
                4,
            );
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&raw const sz).cast(),
                4,
            );
        }
    }
    unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) }
}

fn fwd_device(sock: OwnedFd, g: Gid, guid: u64) -> Arc<Device> {
    // SAFETY: plain syscall.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(efd >= 0);
    let t = FwdTransport {
        sock,
        wake: unsafe { OwnedFd::from_raw_fd(efd) },
        gid: g,
        guid,
        stats: TransportStats::default(),
    };
    Device::with_transport(Arc::new(t), opts())
}

struct Row {
    connect_s: f64,
    disconnect_s: f64,
    failed: usize,
    cpu_s: f64,
    fwd_cpu_s: f64,
}

/// A forwarder child between two new socket pairs, for the server (GID
/// `sg`) and the client (`cg`): its pid and the server's and client's
/// ends. The child closes its copies of those ends (fork copies them), so
/// it ends when both processes hang up.
fn spawn_forwarder(sg: Gid, cg: Gid, track: bool) -> (libc::pid_t, OwnedFd, OwnedFd) {
    let (s_mine, s_fwd) = seqpacket_pair();
    let (c_mine, c_fwd) = seqpacket_pair();
    let mine = [s_mine.as_raw_fd(), c_mine.as_raw_fd()];
    let pid = spawn(move || {
        // SAFETY: this child's copies, unused here.
        mine.iter().for_each(|&fd| unsafe {
            libc::close(fd);
        });
        forwarder(vec![s_fwd, c_fwd], vec![sg, cg], 0, track)
    });
    (pid, s_mine, c_mine)
}

/// Server and client in two child processes; `fwd`: over the forwarder
/// (a third), else each on its own `soft:` device.
fn two_processes(n: usize, c: usize, fwd: bool, track: bool, round: usize) -> Row {
    let (sip, cip) = (addr(50 + 2 * round), addr(51 + 2 * round));
    let (sg, cg) = (gid(&sip), gid(&cip));
    let (ready_r, ready_w) = pipe();
    let (stop_r, stop_w) = pipe();
    let (res_r, res_w) = pipe();
    let (mut fpid, mut s_sock, mut c_sock) = (None, None, None);
    if fwd {
        let (pid, s_mine, c_mine) = spawn_forwarder(sg, cg, track);
        fpid = Some(pid);
        s_sock = Some(s_mine);
        c_sock = Some(c_mine);
    }
    let c_raw = c_sock.as_ref().map(|c| c.as_raw_fd());
    let spid = spawn(|| {
        if let Some(fd) = c_raw {
            // SAFETY: this child's copy of the client's end, unused here.
            unsafe { libc::close(fd) };
        }
        let dev = match s_sock {
            Some(s) => fwd_device(s, sg, 0x0200_00ff_fe00_0001),
            None => Device::open_local(&format!("soft:{sip}"), opts()).unwrap(),
        };
        let l = serve(&dev);
        write_all(&ready_w, b"r");
        read_some(&stop_r);
        let _ = l.destroy();
        dev.close();
    });
    read_some(&ready_r);
    let cpid = spawn(|| {
        let dev = match c_sock {
            Some(s) => fwd_device(s, cg, 0x0200_00ff_fe00_0002),
            None => Device::open_local(&format!("soft:{cip}"), opts()).unwrap(),
        };
        let path = dev.init_path(1, sg).unwrap();
        let (a, b, f) = client(&dev, path, n, c);
        write_all(&res_w, format!("{a} {b} {f}").as_bytes());
        dev.close();
    });
    let res = String::from_utf8(read_some(&res_r)).unwrap();
    let mut it = res.split_whitespace();
    let connect_s: f64 = it.next().unwrap().parse().unwrap();
    let disconnect_s: f64 = it.next().unwrap().parse().unwrap();
    let failed: usize = it.next().unwrap().parse().unwrap();
    let (mut cpu_s, c_ok) = reap(cpid);
    write_all(&stop_w, b"s");
    let (s_cpu, s_ok) = reap(spid);
    cpu_s += s_cpu;
    let (fwd_cpu_s, f_ok) = fpid.map_or((0.0, true), reap);
    Row {
        connect_s,
        disconnect_s,
        failed: failed + usize::from(!c_ok) + usize::from(!s_ok) + usize::from(!f_ok),
        cpu_s: cpu_s + fwd_cpu_s,
        fwd_cpu_s,
    }
}

fn in_process(n: usize, c: usize, round: usize) -> Row {
    let cpu0 = self_cpu();
    let (sip, cip) = (addr(10 + 2 * round), addr(11 + 2 * round));
    let s = Device::open_local(&format!("soft:{sip}"), opts()).unwrap();
    let cl = Device::open_local(&format!("soft:{cip}"), opts()).unwrap();
    let l = serve(&s);
    let path = cl.init_path(1, gid(&sip)).unwrap();
    let (connect_s, disconnect_s, failed) = client(&cl, path, n, c);
    let _ = l.destroy();
    cl.close();
    s.close();
    Row {
        connect_s,
        disconnect_s,
        failed,
        cpu_s: self_cpu() - cpu0,
        fwd_cpu_s: 0.0,
    }
}

/// The server of the kill run: as `serve`, counting its open connections
/// (a REP sent, until a DREQ, REJ or REP timeout ends it); once that count
/// comes back to 0 it writes one byte to `closed`.
fn serve_counting(dev: &Arc<Device>, closed: OwnedFd) -> CmId {
    let open = AtomicUsize::new(0);
    let said = std::sync::atomic::AtomicBool::new(false);
    let next_qpn = AtomicUsize::new(1);
    let close = move |open: &AtomicUsize| {
        if open.fetch_sub(1, Ordering::SeqCst) == 1 && !said.swap(true, Ordering::SeqCst) {
            write_all(&closed, b"c");
        }
    };
    let h: RustHandler = Arc::new(move |id: &CmId, ev: &Event| match ev.kind {
        EventType::ReqReceived => {
            let rep = rep_params(&next_qpn);
            if id.send_rep(&rep).is_err() {
                return 1;
            }
            open.fetch_add(1, Ordering::SeqCst);
            0
        }
        EventType::DreqReceived => {
            let _ = id.send_drep(&[]);
            close(&open);
            0
        }
        EventType::RepError | EventType::RejReceived => {
            close(&open);
            1
        }
        EventType::TimewaitExit => 1,
        _ => 0,
    });
    let l = dev.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
    l.listen(SERVICE).unwrap();
    l
}

/// The client of the kill run: connects as `client` does, writes one byte
/// to `half` once half of them are done, and goes on until it is killed.
fn client_until_killed(dev: &Arc<Device>, path: PathRec, n: usize, c: usize, half: OwnedFd) {
    let gate = Arc::new(Gate::new(c));
    let failed = Arc::new(AtomicUsize::new(0));
    let h: RustHandler = {
        let gate = gate.clone();
        Arc::new(move |id: &CmId, ev: &Event| match ev.kind {
            EventType::RepReceived => {
                let _ = id.send_rtu(&[]);
                gate.release();
                0
            }
            EventType::RejReceived | EventType::ReqError => {
                gate.release();
                1
            }
            _ => 0,
        })
    };
    let mut said = false;
    let _ids = connect_all(dev, &h, path, n, &gate, &failed, |gate| {
        if !said && gate.done.load(Ordering::SeqCst) >= n / 2 {
            write_all(&half, b"h");
            said = true;
        }
    });
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Design B's answer for a dead process, end to end: the client is
/// SIGKILLed with half of its connections established and C in flight;
/// the forwarder's tracker sends the server what the kernel would (DREQs,
/// REJs). Returns the milliseconds from the kill until the server's last
/// open connection closed (`None`: not within 5 s) and whether the
/// forwarder's tracker ended empty with nothing refused.
fn kill_run(n: usize, c: usize, round: usize) -> (Option<f64>, bool) {
    let (sip, cip) = (addr(150 + 2 * round), addr(151 + 2 * round));
    let (sg, cg) = (gid(&sip), gid(&cip));
    let (ready_r, ready_w) = pipe();
    let (closed_r, closed_w) = pipe();
    let (half_r, half_w) = pipe();
    let (stop_r, stop_w) = pipe();
    let (fpid, s_mine, c_mine) = spawn_forwarder(sg, cg, true);
    let c_raw = c_mine.as_raw_fd();
    let spid = spawn(|| {
        // SAFETY: this child's copy of the client's end, unused here.
        unsafe { libc::close(c_raw) };
        let dev = fwd_device(s_mine, sg, 0x0200_00ff_fe00_0001);
        let l = serve_counting(&dev, closed_w);
        write_all(&ready_w, b"r");
        read_some(&stop_r);
        let _ = l.destroy();
        dev.close();
    });
    read_some(&ready_r);
    let cpid = spawn(|| {
        let dev = fwd_device(c_mine, cg, 0x0200_00ff_fe00_0002);
        let path = dev.init_path(1, sg).unwrap();
        client_until_killed(&dev, path, n, c, half_w);
    });
    read_some(&half_r);
    // SAFETY: our child.
    unsafe { libc::kill(cpid, libc::SIGKILL) };
    let t0 = Instant::now();
    reap(cpid);
    let mut p = libc::pollfd {
        fd: closed_r.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd of ours.
    let closed =
        (unsafe { libc::poll(&mut p, 1, 5000) } == 1).then(|| t0.elapsed().as_secs_f64() * 1e3);
    write_all(&stop_w, b"s");
    reap(spid);
    let (_, f_ok) = reap(fpid);
    (closed, f_ok)
}

fn main() {
    let a: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("N C ROUNDS"))
        .collect();
    let n = a.first().copied().unwrap_or(100_000);
    let c = a.get(1).copied().unwrap_or(256);
    let rounds = a.get(2).copied().unwrap_or(2);
    let only = std::env::var("FWD_SETUPS").unwrap_or_default();
    println!(
        "N = {n}, C = {c}; per connection: CPU of every process of the set-up (the forwarder's share)"
    );
    println!(
        "| round | set-up | connect /s | disconnect /s | CPU µs/conn | forwarder µs/conn | failed |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut load = String::new();
    let mut failures = 0;
    let mut kills: Vec<String> = Vec::new();
    for r in 0..rounds {
        for (k, name) in ["inproc", "udp2", "fwd", "fwdt"].iter().enumerate() {
            if !only.is_empty() && !only.split(',').any(|x| x == *name) {
                continue;
            }
            let row = match k {
                0 => in_process(n, c, r),
                1 => two_processes(n, c, false, false, r),
                2 => two_processes(n, c, true, false, r),
                _ => two_processes(n, c, true, true, r),
            };
            println!(
                "| {} | {name} | {:.0} | {:.0} | {:.1} | {:.1} | {} |",
                r + 1,
                n as f64 / row.connect_s,
                n as f64 / row.disconnect_s,
                row.cpu_s * 1e6 / n as f64,
                row.fwd_cpu_s * 1e6 / n as f64,
                row.failed
            );
            failures += row.failed;
        }
        if only.is_empty() || only.split(',').any(|x| x == "kill") {
            let (closed, ok) = kill_run(n, c, r);
            match closed {
                Some(ms) => kills.push(format!(
                    "round {}: the client SIGKILLed with half of {n} connected: the server's last \
                     connection closed {ms:.1} ms later (DREQs and REJs from the tracker); \
                     tracker {}",
                    r + 1,
                    if ok {
                        "empty, nothing refused"
                    } else {
                        "NOT empty or refused MADs"
                    }
                )),
                None => kills.push(format!(
                    "round {}: the server still had connections open 5 s after the kill",
                    r + 1
                )),
            }
            failures += usize::from(closed.is_none()) + usize::from(!ok);
        }
        load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    }
    for k in &kills {
        println!("kill: {k}");
    }
    println!("load: {}", load.trim());
    if failures > 0 {
        eprintln!(
            "forward_cost: {failures} failure(s) (failed connections, a kill run not answered)"
        );
        std::process::exit(1);
    }
}
