//! What one process <-> service message costs, and what a shared-memory
//! ring would save (docs/SERVICE.md, "Round 10").
//!
//! Two processes (a `fork`), each message 256 bytes, compared over:
//!
//! * `socket`: a Unix `SOCK_SEQPACKET` socket pair (the service's
//!   transport today): one `send` per message, one `recv` per message.
//! * `ring`: a single-producer/single-consumer ring in a shared mapping
//!   (what a memfd passed over the socket would give), the reader
//!   publishing a "sleeping" flag before it waits on a futex and the
//!   writer making the `FUTEX_WAKE` system call only when that flag is set.
//!
//! Three patterns:
//!
//! * `pingpong`: one message in flight, each answered (one in flight
//!   through the service: every message finds its reader asleep);
//! * `burst`: the writer sends `BURST` messages, then works `GAP_US` µs
//!   on its own (a spin), and again: the reader sleeps between bursts, as
//!   the service's and the processes' threads do at 256 in flight when
//!   neither core is saturated;
//! * `stream`: the writer sends without pause (the reader never sleeps
//!   for long: the ring's best case).
//!
//! For each: wall time per message, CPU per message of both sides
//! together (`getrusage`; the writer's own work between bursts taken
//! out, a ring writer's wait for room on a full ring left in), and both
//! sides' voluntary context switches (sleeps) per message.
//!
//! `cargo run --release --example hop_cost [messages]`; `HOP_SPIN_US=N`
//! makes a ring reader poll an empty ring N µs before it sleeps.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

const MSG: usize = 256;
const SLOTS: usize = 256;
const BURST: usize = 8;
const GAP_US: u64 = 20;

/// The shared ring: indices, the reader's sleeping flag (also its futex
/// word), and the slots.
#[repr(C)]
struct Ring {
    head: AtomicU64,
    _pad0: [u64; 7],
    tail: AtomicU64,
    _pad1: [u64; 7],
    sleeping: AtomicU32,
    _pad2: [u32; 15],
    slots: [[u8; MSG]; SLOTS],
}

fn futex(word: &AtomicU32, op: i32, val: u32) {
    // SAFETY: `word` lives in a mapping shared by both processes for the
    // whole run; FUTEX_WAIT/FUTEX_WAKE (not _PRIVATE) work across them.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            val,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

impl Ring {
    fn map() -> &'static Ring {
        // SAFETY: a fresh anonymous shared mapping, zeroed by the kernel
        // (all-zero is a valid empty ring), never unmapped.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Ring>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED, "mmap");
            &*(p as *const Ring)
        }
    }

    fn slot(&self, i: u64) -> *mut u8 {
        self.slots[(i % SLOTS as u64) as usize].as_ptr() as *mut u8
    }

    /// Writes one message; waits (spinning) while the ring is full. A
    /// sleeping reader is woken by `bell`.
    fn send(&self, msg: &[u8; MSG], bell: Bell) {
        let h = self.head.load(Ordering::Relaxed);
        while h - self.tail.load(Ordering::Acquire) >= SLOTS as u64 {
            std::hint::spin_loop();
        }
        // SAFETY: slot `h` is the writer's until `head` passes it.
        unsafe { std::ptr::copy_nonoverlapping(msg.as_ptr(), self.slot(h), MSG) };
        self.head.store(h + 1, Ordering::SeqCst);
        // Store `head`, then load `sleeping` (both SeqCst): either the
        // reader sees the new head before it sleeps, or the writer sees it
        // sleeping and wakes it.
        if self.sleeping.swap(0, Ordering::SeqCst) == 1 {
            match bell {
                Bell::Futex => futex(&self.sleeping, libc::FUTEX_WAKE, 1),
                Bell::Socket(p, c) => {
                    let fd = if CHILD.load(Ordering::Relaxed) { c } else { p };
                    // SAFETY: one byte from a valid buffer on an open socket.
                    let n = unsafe { libc::send(fd, [1u8].as_ptr().cast(), 1, 0) };
                    assert_eq!(n, 1, "send (doorbell)");
                }
            }
        }
    }

    /// Reads one message into `out`, sleeping (on the futex, or in a
    /// `recv` of the doorbell socket) when empty.
    fn recv(&self, out: &mut [u8; MSG], bell: Bell) {
        let t = self.tail.load(Ordering::Relaxed);
        let spin = spin_before_sleep();
        let mut spun_since: Option<Instant> = None;
        loop {
            if self.head.load(Ordering::Acquire) != t {
                break;
            }
            if !spin.is_zero() {
                let since = *spun_since.get_or_insert_with(Instant::now);
                if since.elapsed() < spin {
                    std::hint::spin_loop();
                    continue;
                }
            }
            self.sleeping.store(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.head.load(Ordering::SeqCst) != t {
                self.sleeping.store(0, Ordering::SeqCst);
                break;
            }
            match bell {
                Bell::Futex => futex(&self.sleeping, libc::FUTEX_WAIT, 1),
                Bell::Socket(p, c) => {
                    let fd = if CHILD.load(Ordering::Relaxed) { c } else { p };
                    let mut b = [0u8; 1];
                    // SAFETY: a valid one-byte buffer on an open socket. A
                    // stale byte (a wake the reader did not need) only
                    // makes this return early: the loop checks again.
                    let n = unsafe { libc::recv(fd, b.as_mut_ptr().cast(), 1, 0) };
                    assert_eq!(n, 1, "recv (doorbell)");
                }
            }
        }
        // SAFETY: slot `t` is the reader's until `tail` passes it.
        unsafe { std::ptr::copy_nonoverlapping(self.slot(t), out.as_mut_ptr(), MSG) };
        self.tail.store(t + 1, Ordering::Release);
    }
}

/// Set in the forked reader: which end of a socket pair is ours.
static CHILD: AtomicBool = AtomicBool::new(false);

/// How a writer wakes a sleeping ring reader.
#[derive(Clone, Copy)]
enum Bell {
    /// `FUTEX_WAKE` on the reader's flag.
    Futex,
    /// One byte on a socket pair (parent's end, child's end) that the
    /// reader blocks in `recv` on: the socket's wake-up (a "sync" one,
    /// which does not preempt the writer), and what an existing poll loop
    /// would see.
    Socket(i32, i32),
}

/// One direction of a transport.
#[derive(Clone, Copy)]
enum Link {
    /// The parent's end, the child's end.
    Socket(i32, i32),
    Ring(&'static Ring, Bell),
}

impl Link {
    fn send(self, msg: &[u8; MSG]) {
        match self {
            Link::Socket(p, c) => {
                let fd = if CHILD.load(Ordering::Relaxed) { c } else { p };
                // SAFETY: a valid buffer of MSG bytes on an open socket.
                let n = unsafe { libc::send(fd, msg.as_ptr().cast(), MSG, 0) };
                assert_eq!(n, MSG as isize, "send");
            }
            Link::Ring(r, bell) => r.send(msg, bell),
        }
    }
    fn recv(self, out: &mut [u8; MSG]) {
        match self {
            Link::Socket(p, c) => {
                let fd = if CHILD.load(Ordering::Relaxed) { c } else { p };
                // SAFETY: a valid buffer of MSG bytes on an open socket.
                let n = unsafe { libc::recv(fd, out.as_mut_ptr().cast(), MSG, 0) };
                assert_eq!(n, MSG as isize, "recv");
            }
            Link::Ring(r, bell) => r.recv(out, bell),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Pattern {
    PingPong,
    Burst,
    Stream,
}

fn cpu_us(who: i32) -> (f64, i64) {
    // SAFETY: an all-zero rusage is valid output space.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (us(u.ru_utime) + us(u.ru_stime), u.ru_nvcsw)
}

/// How long a ring reader polls an empty ring before it sleeps
/// (`HOP_SPIN_US`, default 0: sleeps at once).
fn spin_before_sleep() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        Duration::from_micros(
            std::env::var("HOP_SPIN_US")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        )
    })
}

/// This process's CPU time (user and system).
fn process_cpu() -> Duration {
    // SAFETY: an all-zero timespec is valid output space.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Works (spins) until this process has used `d` of CPU; returns the CPU
/// used, so it can be taken out of the writer's figure.
fn spin_for(d: Duration) -> Duration {
    let start = process_cpu();
    loop {
        for _ in 0..64 {
            std::hint::spin_loop();
        }
        let used = process_cpu() - start;
        if used >= d {
            return used;
        }
    }
}

/// Runs `n` messages of `pattern` from this process (writer) to a forked
/// reader over `fwd`, acknowledged over `back`. Prints one line.
fn run(name: &str, pattern: Pattern, n: usize, fwd: Link, back: Link) {
    // SAFETY: the program is single-threaded here; the child only uses
    // the links and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    let mut buf = [0u8; MSG];
    if pid == 0 {
        CHILD.store(true, Ordering::Relaxed);
        for i in 0..n {
            fwd.recv(&mut buf);
            if pattern == Pattern::PingPong || i + 1 == n {
                back.send(&buf);
            }
        }
        // SAFETY: leaves the child at once (no destructors, no atexit).
        unsafe { libc::_exit(0) };
    }
    let (cpu0, cs0) = cpu_us(libc::RUSAGE_SELF);
    let (kid0, csw0) = cpu_us(libc::RUSAGE_CHILDREN);
    let start = Instant::now();
    let mut spun = Duration::ZERO;
    let mut spun_cpu = Duration::ZERO;
    for i in 0..n {
        buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
        fwd.send(&buf);
        match pattern {
            Pattern::PingPong => back.recv(&mut buf),
            Pattern::Burst if (i + 1) % BURST == 0 => {
                let t = Instant::now();
                spun_cpu += spin_for(Duration::from_micros(GAP_US));
                spun += t.elapsed();
            }
            _ => {}
        }
    }
    if pattern != Pattern::PingPong {
        back.recv(&mut buf);
    }
    let wall = start.elapsed();
    let (cpu1, cs1) = cpu_us(libc::RUSAGE_SELF);
    let csw_self = cs1 - cs0;
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let (kid1, csw1) = cpu_us(libc::RUSAGE_CHILDREN);
    let (child_cpu, child_csw) = (kid1 - kid0, csw1 - csw0);
    let msgs = if pattern == Pattern::PingPong {
        2 * n
    } else {
        n
    };
    let writer = cpu1 - cpu0 - spun_cpu.as_secs_f64() * 1e6;
    let both = (writer + child_cpu) / msgs as f64;
    println!(
        "{name:7} {:9} wall {:6.2} us/msg  cpu (both sides) {:5.2} us/msg  sleeps {:4.2}/msg",
        match pattern {
            Pattern::PingPong => "pingpong",
            Pattern::Burst => "burst",
            Pattern::Stream => "stream",
        },
        (wall.as_secs_f64() * 1e6 - spun.as_secs_f64() * 1e6) / msgs as f64,
        both,
        (child_csw + csw_self) as f64 / msgs as f64,
    );
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50_000);
    for pattern in [Pattern::PingPong, Pattern::Burst, Pattern::Stream] {
        let mut fds = [0i32; 2];
        // SAFETY: a valid array of two descriptors.
        let rc =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) };
        assert_eq!(rc, 0, "socketpair");
        // SAFETY: both were just opened and are owned here only.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // One seqpacket pair carries both directions: the parent uses
        // `a`, the child `b`.
        let sock = Link::Socket(a.as_raw_fd(), b.as_raw_fd());
        run("socket", pattern, n, sock, sock);
        run(
            "ring",
            pattern,
            n,
            Link::Ring(Ring::map(), Bell::Futex),
            Link::Ring(Ring::map(), Bell::Futex),
        );
        let mut fds = [0i32; 2];
        // SAFETY: a valid array of two descriptors.
        let rc =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) };
        assert_eq!(rc, 0, "socketpair");
        // SAFETY: both were just opened and are owned here only.
        let (c, d) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Each direction has its own doorbell pair (a byte for the other
        // direction's reader must not wake this one).
        let bell_fwd = Bell::Socket(c.as_raw_fd(), d.as_raw_fd());
        let mut fds = [0i32; 2];
        // SAFETY: as above.
        let rc =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) };
        assert_eq!(rc, 0, "socketpair");
        // SAFETY: as above.
        let (e, f) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let bell_back = Bell::Socket(f.as_raw_fd(), e.as_raw_fd());
        run(
            "ring+sk",
            pattern,
            n,
            Link::Ring(Ring::map(), bell_fwd),
            Link::Ring(Ring::map(), bell_back),
        );
    }
}
