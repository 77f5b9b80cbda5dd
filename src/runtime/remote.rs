//! A device served by the host CM service (`ibcm daemon`): the process
//! keeps its `CmIdInner`s, registry and callback delivery exactly as for an
//! in-process device; what an engine shard would do is a request on the
//! service socket (`ipc`), and the events the service pushes enter the
//! same delivery path. `IBCM_SERVICE` chooses: `auto` (the default: the
//! running service, else one started on demand, else in-process with a log
//! line), `off` (in-process: single-process use, the simulation tests),
//! `required` (the service or `-ENODEV`). `loop:` devices always stay
//! in-process.

use super::ServiceWatch;
use super::device::Device;
use super::inner::{CmIdInner, Item, RustHandler};
use super::lock;
use super::registry::register;
use crate::abi::IbCmHandler;
use crate::engine::ids::{FastMap, FastState};
use crate::engine::*;
use crate::fabric::{Received, Transport, TransportStats};
use crate::ipc::{
    self, Created, Header, Opened, Public, QpAttrs, Reader, Refused, Stat, WireEvent, Writer, op,
    sock,
};
use crate::log::{ERROR, INFO, WARN};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How devices are opened (`IBCM_SERVICE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    Auto,
    Required,
}

/// `IBCM_SERVICE` (unset or empty: `auto`; an unknown value is logged once
/// and taken as `auto`). This crate's own unit tests take unset as `off`:
/// they test the in-process engine and must not start services.
pub fn mode() -> Mode {
    match std::env::var("IBCM_SERVICE").as_deref() {
        Ok("auto") => Mode::Auto,
        Ok("required") => Mode::Required,
        Ok("off") => Mode::Off,
        Ok("") | Err(_) => DEFAULT,
        Ok(other) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                crate::log::always(
                    WARN,
                    format_args!("IBCM_SERVICE={other:?} is not off, auto or required: auto"),
                )
            });
            Mode::Auto
        }
    }
}

/// `IBCM_SERVICE_TIMEOUT_MS` unset: how long a round trip waits for the
/// service.
pub const DEFAULT_SERVICE_TIMEOUT: Duration = Duration::from_millis(5000);

thread_local! {
    /// This thread's current `Device::batch` held a one-way call of its
    /// own (`hold` with `urgent`), which the batch's end (`flush`) must
    /// send. Per thread, not per connection: a batch that held nothing
    /// (the reader's wake-up that ran no callback, say) never sends the
    /// records another thread's batch is still holding. A thread is in
    /// one batch at a time (`event_loop::in_batch`).
    static BATCH_HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Buffers of records this thread has sent, reused for the records it
    /// writes next (`rec_buf`): a one-way call costs no `malloc`/`free`
    /// in the steady state.
    static SPARE: std::cell::RefCell<ipc::Spares> =
        const { std::cell::RefCell::new(ipc::Spares::new(SPARE_MAX, REC_ROOM, SPARE_ROOM_MAX)) };
    /// The `BATCH` message this thread assembles (`send_held`).
    static BATCH_MSG: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Spare record buffers a thread keeps (at most).
const SPARE_MAX: usize = 64;
/// A fresh record buffer's room (`Header::record`'s), and the largest a
/// thread keeps for reuse (a lease's or a port table's record is not).
const REC_ROOM: usize = 128;
const SPARE_ROOM_MAX: usize = 1024;

/// A buffer for a record this thread writes: a spare one, or a new one
/// with `REC_ROOM`.
fn rec_buf() -> Vec<u8> {
    SPARE.with(|s| s.borrow_mut().take())
}

/// Keeps sent records' buffers for `rec_buf` (those of a record's size).
fn recycle(recs: impl IntoIterator<Item = Vec<u8>>) {
    SPARE.with(|s| s.borrow_mut().keep(recs))
}

/// How long a round trip to the service (an open, a call, a send that
/// finds the socket full) waits before the service is declared hung:
/// `IBCM_SERVICE_TIMEOUT_MS` (milliseconds, > 0; read once per process),
/// else [`DEFAULT_SERVICE_TIMEOUT`].
pub fn service_timeout() -> Duration {
    static T: OnceLock<Duration> = OnceLock::new();
    *T.get_or_init(|| match std::env::var("IBCM_SERVICE_TIMEOUT_MS") {
        Err(_) => DEFAULT_SERVICE_TIMEOUT,
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => {
                crate::log::always(
                    WARN,
                    format_args!(
                        "IBCM_SERVICE_TIMEOUT_MS={v:?} is not a number of milliseconds > 0: {} ms",
                        DEFAULT_SERVICE_TIMEOUT.as_millis()
                    ),
                );
                DEFAULT_SERVICE_TIMEOUT
            }
        },
    })
}

/// Round trips (and sends) of this process that the service did not
/// answer within [`service_timeout`]: each declared its connection broken.
static SERVICE_TIMEOUTS: AtomicU64 = AtomicU64::new(0);

/// How many times this process found the service hung
/// ([`service_timeout`] passed without an answer).
pub fn service_timeouts() -> u64 {
    SERVICE_TIMEOUTS.load(Ordering::Relaxed)
}

/// Counts one more [`service_timeouts`] (forward mode's transport).
pub(super) fn count_service_timeout() {
    SERVICE_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
}

/// What `/proc` says of the service process behind a silent connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Peer {
    /// No such process (or a zombie): it is gone.
    Gone,
    /// Stopped (`SIGSTOP`, a debugger).
    Stopped,
    /// There, not stopped: busy or deadlocked.
    Running,
    /// Not visible here (another PID namespace, no `/proc`).
    Unknown,
}

impl Peer {
    fn of(pid: i32) -> Peer {
        if pid <= 0 {
            return Peer::Unknown;
        }
        match sock::proc_stat(pid) {
            Err(_) if Path::new("/proc/self/stat").exists() => Peer::Gone,
            Err(_) => Peer::Unknown,
            Ok(st) => match st.state {
                None => Peer::Unknown,
                Some('T' | 't') => Peer::Stopped,
                Some('Z' | 'X' | 'x') => Peer::Gone,
                Some(_) => Peer::Running,
            },
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Peer::Gone => "gone",
            Peer::Stopped => "stopped",
            Peer::Running => "running but not answering",
            Peer::Unknown => "state unknown",
        }
    }
}

#[cfg(not(test))]
const DEFAULT: Mode = Mode::Auto;
#[cfg(test)]
const DEFAULT: Mode = Mode::Off;

/// One process's connection to the service for one device.
pub struct Remote {
    fd: OwnedFd,
    opened: Opened,
    stats: TransportStats,
    dev: OnceLock<Weak<Device>>,
    seq: AtomicU64,
    /// The service's pid (`SO_PEERCRED`; 0 when unknown), looked up in
    /// `/proc` when it does not answer.
    peer_pid: i32,
    /// `service_timeout()`: how long a round trip waits before it looks
    /// for progress (`busy::Watch`).
    timeout: Duration,
    /// Records received on this connection (events, replies): progress
    /// of the service for a caller still waiting for its own reply.
    records_in: AtomicU64,
    /// The socket's read side: who reads it, what was read and not yet
    /// handled, the replies waiting for their callers.
    rx: Mutex<Rx>,
    /// A reply arrived, or the socket is free to read.
    replied: Condvar,
    dead: AtomicBool,
    /// The reader thread has ended (after queueing the error events of a
    /// lost service): the delivery thread may end once the queue is empty.
    reader_done: AtomicBool,
    /// Live ids by service handle: the raw `Arc<CmIdInner>` an in-process
    /// shard's table holds (released by destroy).
    ids: Mutex<FastMap<u64, usize>>,
    /// Extra owners of listeners shared by `insert_listen`, by shell.
    shares: Mutex<FastMap<usize, u32>>,
    /// Ids with events to deliver, for the delivery thread.
    ready: Mutex<Ready>,
    /// Woken only when the delivery thread sleeps (`Ready::sleeping`).
    ready_cv: Condvar,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Ids the service leased (`CREATE_IDS`) not handed out yet.
    pool: Mutex<Vec<Created>>,
    /// Ids leased so far: the next lease asks for as many (at most
    /// `op::MAX_CREATE`), so a process that makes few ids leases few.
    leased: AtomicU64,
    /// One-way calls made inside a `Device::batch`, sent as one message
    /// when it ends (or before anything else this connection sends).
    out: Mutex<Vec<Vec<u8>>>,
    /// The QP attributes pushed for an id this process does not know yet
    /// (a marked listener's REQ: they come just before the event that
    /// creates the id), by handle: taken by that event. One at most — a
    /// newer one replaces it.
    req_attrs: Mutex<Option<(u64, Box<QpAttrs>)>>,
    /// This process has asked the service for the QP attributes of its
    /// REPs (`op::QP_ATTRS_ON_REP`, sent once: `want_rep_attrs`).
    rep_attrs: AtomicBool,
}

/// The read side of the service socket. One thread at a time reads it and
/// handles what it read (the *reading* token): the reader thread, or a
/// caller waiting for its reply while nobody else reads — in particular a
/// callback that the reader thread runs and that makes a round trip
/// (`init_qp_attr`, `listen`, a lease): the reader thread gives the token
/// up before it runs a callback, so the callback's own round trip reads its
/// reply itself instead of waiting for the thread that runs it.
struct Rx {
    /// A thread holds the token.
    reading: bool,
    /// Records read but not handled yet, in socket order (what one read
    /// brought: the messages queued on the socket, a `BATCH` unpacked):
    /// the next holder of the token handles them before it reads the
    /// socket again.
    backlog: Backlog,
    /// Replies by request number (`None` until it arrives).
    pending: FastMap<u64, Option<Vec<u8>>>,
    /// Threads waiting on `replied` (no wake-up syscall when none).
    waiting: usize,
}

/// The delivery thread's queue.
#[derive(Default)]
struct Ready {
    ids: VecDeque<Arc<CmIdInner>>,
    /// The delivery thread waits on `ready_cv` (set and cleared by it,
    /// under the lock): whoever queues an id wakes it only then — a futex
    /// call per queued id otherwise.
    sleeping: bool,
}

/// A `Device::batch` sends its one-way calls once this many are held.
const BATCH_RECORDS: usize = 128;

/// At most this many messages are read from the service socket per
/// wake-up (the first blocking, the rest only if already queued).
const DRAIN: usize = 64;

/// Records read from the service and not handled yet, in socket order:
/// the messages one wake-up read, received one after another into one
/// buffer kept for the connection's life, and where each record lies in
/// it (a `BATCH`'s records in place: no copy, no `Vec` per record). The
/// holder of the reading token takes it out of `Rx` to handle a record
/// and puts the rest back before giving the token up.
#[derive(Default)]
struct Backlog {
    /// Received bytes up to `used`; room for the next message after it
    /// (initialised once, when the buffer grows).
    bytes: Vec<u8>,
    used: usize,
    /// (start, length) of each record in `bytes`, oldest first.
    spans: VecDeque<(usize, usize)>,
}

impl Backlog {
    fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    fn len(&self) -> usize {
        self.spans.len()
    }

    /// The oldest record left (its bytes stay until the next message is
    /// received into an empty backlog).
    fn pop(&mut self) -> Option<&[u8]> {
        let (at, n) = self.spans.pop_front()?;
        Some(&self.bytes[at..at + n])
    }

    /// Room for the next message (`MAX_RECORD` bytes) after those kept:
    /// from the start when no record is left.
    fn room(&mut self) -> &mut [u8] {
        if self.spans.is_empty() {
            self.used = 0;
        }
        let end = self.used + ipc::MAX_RECORD;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        &mut self.bytes[self.used..end]
    }

    /// The message of `n` bytes just received into `room()` is kept: the
    /// message itself as one record, or the records of a `BATCH` (none of
    /// one that does not decode: dropped, logged).
    fn took(&mut self, n: usize) {
        let base = self.used;
        let msg = &self.bytes[base..base + n];
        match Header::parse(msg) {
            Ok((h, r)) if h.op == op::BATCH => {
                let body = n - r.remaining();
                let spans = &mut self.spans;
                let ok = ipc::unbatch_with(&msg[body..], |rec| {
                    let at = rec.as_ptr() as usize - msg.as_ptr() as usize;
                    spans.push_back((base + at, rec.len()));
                });
                if ok.is_err() {
                    ibcm_log!(WARN, "CM service: undecodable batch dropped");
                    return;
                }
            }
            Ok(_) => self.spans.push_back((base, n)),
            Err(_) => {
                ibcm_log!(WARN, "CM service: undecodable record dropped");
                return;
            }
        }
        self.used = base + n;
    }

    /// Keeps a message received elsewhere (`room` and `took`).
    #[cfg(test)]
    fn unpack(&mut self, msg: &[u8]) {
        self.room()[..msg.len()].copy_from_slice(msg);
        self.took(msg.len());
    }
}

unsafe impl Send for Remote {}
unsafe impl Sync for Remote {}

/// Opens `name` through the service if `IBCM_SERVICE` says so (`None`:
/// open it in-process).
pub(super) fn open(name: &str) -> Result<Option<Arc<Device>>, Errno> {
    let mode = mode();
    if mode == Mode::Off || name.starts_with("loop:") {
        return Ok(None);
    }
    let path = ipc::socket_path();
    let fd = match connect_service(&path, true) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            // A service is there but wedged: it still owns the host's
            // devices, so `auto` does not open a second CM in-process.
            crate::log::always(
                ERROR,
                format_args!(
                    "{name}: the CM service at {} is not answering ({e}; IBCM_SERVICE_TIMEOUT_MS){}",
                    path.display(),
                    if mode == Mode::Auto {
                        ": not opening in-process, the service owns the device"
                    } else {
                        ""
                    }
                ),
            );
            return Err(Errno(errno::ETIMEDOUT));
        }
        Err(e) if mode == Mode::Auto => {
            ibcm_log!(
                INFO,
                "{name}: no CM service at {} ({e}): opening in-process",
                path.display()
            );
            return Ok(None);
        }
        Err(e) => {
            crate::log::always(
                ERROR,
                format_args!(
                    "{name}: IBCM_SERVICE=required but no CM service at {}: {e}",
                    path.display()
                ),
            );
            return Err(Errno::ENODEV);
        }
    };
    if super::forward::forward_mode() {
        return super::forward::open(fd, name).map(Some);
    }
    Remote::open(fd, name).map(Some)
}

/// Opens `name` through the service listening at `path`, forwarding its
/// MADs (`forwarded`: the engines run here) or in engine mode (they run in
/// the service), with no start on demand, whatever `IBCM_SERVICE` and
/// `IBCM_SERVICE_MODE` say.
pub(super) fn open_at(path: &Path, name: &str, forwarded: bool) -> Result<Arc<Device>, Errno> {
    let fd = connect_service(path, false).map_err(|e| {
        if e.kind() == std::io::ErrorKind::TimedOut {
            crate::log::always(
                ERROR,
                format_args!(
                    "{name}: the CM service at {} is not answering ({e}; IBCM_SERVICE_TIMEOUT_MS)",
                    path.display()
                ),
            );
            return Errno(errno::ETIMEDOUT);
        }
        ibcm_log!(WARN, "{name}: no CM service at {}: {e}", path.display());
        Errno::ENODEV
    })?;
    if forwarded {
        super::forward::open(fd, name)
    } else {
        Remote::open(fd, name)
    }
}

/// A connection to the service at `path`, every wait bounded by
/// [`service_timeout`]: the `connect` (a service that stopped accepting
/// and whose backlog is full: `ErrorKind::TimedOut`, counted in
/// [`service_timeouts`] — the only error of that kind) and, with `start`,
/// a service started on demand when nobody listens there
/// ([`start_service`]). After a start, successful or not, it connects
/// again: a start that lost the race to another process's start fails
/// (`EADDRINUSE`) while that one listens, and is served by it.
pub(crate) fn connect_service(path: &Path, start: bool) -> std::io::Result<OwnedFd> {
    let bound = service_timeout();
    let connect = || {
        sock::connect_within(path, bound).inspect_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                SERVICE_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    match connect() {
        Ok(fd) => Ok(fd),
        Err(e) if !start => Err(e),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(e)
        }
        Err(_) => {
            let started = start_service(path);
            match (connect(), started) {
                (Ok(fd), _) => Ok(fd),
                (Err(e), Err(s)) if e.kind() != std::io::ErrorKind::TimedOut => Err(s),
                (Err(e), _) => Err(e),
            }
        }
    }
}

/// Starts `ibcm daemon` for `path` and waits until it listens: the binary
/// is `$IBCM_DAEMON`, else `ibcm` beside this library or program, else
/// `ibcm` on `PATH`. An on-demand service leaves after
/// `$IBCM_SERVICE_IDLE_EXIT` seconds (default 30) without clients.
///
/// The daemon detaches (exits, its forked service going on) once it
/// listens; the wait for that is bounded by [`service_timeout`], as a
/// period (`busy::Watch`: a daemon whose CPU time, or its forked
/// service's, grows is waited for another one, up to the ceiling). One
/// that has not detached by then (hung before listening) is killed with its
/// whole process group — it runs in a group of its own, and its service
/// process stays in it until it listens — and reaped, with a log line
/// naming its binary, pid and what `/proc` says it was doing; the start
/// fails (`ErrorKind::Other`: nobody listens, `auto` opens in-process).
pub(crate) fn start_service(path: &Path) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    let bin = daemon_binary();
    let idle = std::env::var("IBCM_SERVICE_IDLE_EXIT")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(30);
    ibcm_log!(INFO, "starting the CM service: {} daemon", bin.display());
    let bound = service_timeout();
    // Not the caller's preloads (a drop-in librdmacm.so.1, stdbuf's
    // library): the daemon is a program of its own.
    let mut child = std::process::Command::new(&bin)
        .env_remove("LD_PRELOAD")
        .args(["daemon", "--idle-exit", &idle.to_string(), "--socket"])
        .arg(path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()?;
    let pid = child.id() as i32;
    // SAFETY: the group is the child's own (`process_group(0)`), and the
    // child is not reaped yet: its pid (the group's id) is still ours.
    let kill_group = || unsafe { libc::kill(-pid, libc::SIGKILL) };
    // The bound is a period, as for every wait on the service: a daemon
    // that is working (its CPU time, or its forked service's, grows: a
    // slow start on a loaded or emulated CPU) is waited for another one,
    // up to the ceiling (`busy::Watch`).
    let mut watch = ServiceWatch::starting(pid);
    let status = loop {
        match wait_until(&mut child, watch.check_at()) {
            Ok(Some(status)) => break status,
            Err(e) => {
                kill_group();
                let _ = child.wait();
                return Err(e);
            }
            Ok(None) if watch.working(0, &bin.display().to_string(), "its start (detach)") => {}
            Ok(None) => {
                let doing = doing(pid);
                kill_group();
                let _ = child.wait();
                let what = format!(
                    "{} daemon (pid {pid}, {doing}) did not detach within {} ms (IBCM_SERVICE_TIMEOUT_MS{}): killed with its process group",
                    bin.display(),
                    bound.as_millis(),
                    watch.note()
                );
                crate::log::always(
                    WARN,
                    format_args!("the CM service at {} did not start: {what}", path.display()),
                );
                return Err(std::io::Error::other(what));
            }
        }
    };
    if !status.success() {
        return Err(std::io::Error::other(format!(
            "{} daemon exited with {status}",
            bin.display()
        )));
    }
    Ok(())
}

/// Waits for `child` to exit until `deadline`: its status, or `None` if it
/// is still running then. A pidfd (`pidfd_open`, Linux 5.3) is polled;
/// without one the child is looked at every few milliseconds.
fn wait_until(
    child: &mut std::process::Child,
    deadline: Instant,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    // SAFETY: a descriptor just opened, owned here only.
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd as libc::c_int) });
    let mut nap = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        match &pidfd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
                // Readable once the child has exited; EINTR just loops.
                unsafe { libc::poll(&mut p, 1, ms) };
            }
            None => {
                std::thread::sleep(nap.min(left));
                nap = (nap * 2).min(Duration::from_millis(20));
            }
        }
    }
}

/// What `/proc` says process `pid` is doing, for a log line: its state,
/// the kernel function it sleeps in, and its children (a daemon's service
/// process not yet listening).
fn doing(pid: i32) -> String {
    let state = match sock::proc_stat(pid).ok().and_then(|st| st.state) {
        Some('R') => "running",
        Some('S') => "sleeping",
        Some('D') => "in an uninterruptible wait",
        Some('T' | 't') => "stopped",
        Some('Z' | 'X' | 'x') => "exited",
        _ => "state unknown",
    };
    let mut s = state.to_string();
    if let Ok(w) = std::fs::read_to_string(format!("/proc/{pid}/wchan"))
        && !w.is_empty()
        && w != "0"
    {
        s.push_str(&format!(" in {w}"));
    }
    if let Ok(c) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        && !c.trim().is_empty()
    {
        s.push_str(&format!(", child process {}", c.trim()));
    }
    s
}

fn daemon_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("IBCM_DAEMON").filter(|p| !p.is_empty()) {
        return p.into();
    }
    // The directory of the object holding this code (libibcm.so, or the
    // program it is linked into).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = daemon_binary as *const c_void;
    let mut dirs = Vec::new();
    if unsafe { libc::dladdr(here, &mut info) } != 0 && !info.dli_fname.is_null() {
        let f = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
        if let Ok(f) = f.to_str()
            && let Some(d) = Path::new(f).parent()
        {
            dirs.push(d.to_path_buf());
        }
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(d) = exe.parent()
    {
        dirs.push(d.to_path_buf());
    }
    for d in dirs {
        for cand in [d.join("ibcm"), d.join("../bin/ibcm")] {
            if cand.is_file() {
                return cand;
            }
        }
    }
    PathBuf::from("ibcm")
}

fn public_of(p: &Public) -> crate::abi::IbCmId {
    crate::abi::IbCmId {
        cm_handler: None,
        context: std::ptr::null_mut(),
        device: std::ptr::null_mut(),
        service_id: p.service_id.to_be(),
        state: p.state,
        lap_state: p.lap_state,
        local_id: p.local_id.to_be(),
        remote_id: p.remote_id.to_be(),
        remote_cm_qpn: 1,
    }
}

impl CmIdInner {
    /// Mirrors the service's public fields of this id into the C struct,
    /// if this snapshot is newer than the last one applied (a call's reply
    /// can arrive after an event that was produced later) and was read
    /// after the service ran the `oneway` calls on the id this process
    /// sent (`None`: a snapshot that follows them all).
    pub(super) fn sync_remote(&self, p: &Public, oneway: Option<u64>) {
        // The check and the write under one lock: two newer snapshots
        // applied by two threads cannot interleave.
        let mut applied = lock(&self.remote_version);
        if p.version <= applied.version || oneway.is_some_and(|n| n < applied.oneway_sent) {
            return;
        }
        applied.version = p.version;
        if applied
            .qp_attrs
            .as_ref()
            .is_some_and(|a| a.public.version < p.version)
        {
            applied.qp_attrs = None;
        }
        let v = public_of(p);
        let c = self.c.get();
        unsafe {
            std::ptr::write_volatile(&mut (*c).state, v.state);
            std::ptr::write_volatile(&mut (*c).lap_state, v.lap_state);
            std::ptr::write_volatile(&mut (*c).remote_id, v.remote_id);
            std::ptr::write_volatile(&mut (*c).service_id, v.service_id);
        }
    }

    /// The attributes for `state` (INIT, RTR, RTS) the service pushed with
    /// the id's REP (`op::QP_ATTRS`): what `INIT_QP_ATTR` would answer,
    /// while the snapshot they came with is the newest applied and no call
    /// has moved the id from its state since. The RTS ones are the last a
    /// connection asks for: once they are taken the set is dropped.
    pub(super) fn pushed_qp_attr(&self, state: u32) -> Option<QpAttr> {
        let mut applied = lock(&self.remote_version);
        let a = applied.qp_attrs.as_deref()?;
        let c = unsafe { std::ptr::read_volatile(self.c.get()) };
        if a.public.version != applied.version
            || c.state != a.public.state
            || c.lap_state != a.public.lap_state
        {
            applied.qp_attrs = None;
            return None;
        }
        let attr = a.get(state)?;
        if state == qp_state::RTS {
            applied.qp_attrs = None;
        }
        Some(attr)
    }
}

impl Remote {
    fn open(fd: OwnedFd, name: &str) -> Result<Arc<Device>, Errno> {
        // Every blocking send and receive on this connection is bounded
        // (set once: no cost per call); a receive that times out with
        // nothing read just lets its reader look at its deadline again.
        let timeout = service_timeout();
        if let Err(e) = sock::set_timeouts(&fd, timeout, true) {
            ibcm_log!(WARN, "{name}: CM service socket: {e}");
            return Err(Errno::ENODEV);
        }
        let peer_pid = sock::peer(&fd).0;
        let mut w = Header {
            op: op::OPEN,
            seq: 1,
            handle: 0,
        }
        .record();
        w.put(&name.as_bytes().to_vec());
        // Each socket timeout is one period of the bound: the wait goes on
        // while the service makes progress (`busy::Watch`: nothing else
        // arrives before the open's reply, so its CPU time).
        let mut watch: Option<ServiceWatch> = None;
        let mut silent = |e: std::io::Error| {
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Some(Errno::ENODEV);
            }
            let w = watch.get_or_insert_with(|| ServiceWatch::late(peer_pid, 0));
            if w.working(0, name, "the open") {
                return None;
            }
            SERVICE_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
            let peer = Peer::of(peer_pid);
            crate::log::always(
                WARN,
                format_args!(
                    "{name}: the CM service (pid {peer_pid}, {}) did not answer the open within {} ms (IBCM_SERVICE_TIMEOUT_MS){}",
                    peer.describe(),
                    timeout.as_millis(),
                    w.note()
                ),
            );
            Some(if peer == Peer::Gone {
                Errno::ENODEV
            } else {
                Errno(errno::ETIMEDOUT)
            })
        };
        let w = w.into_bytes();
        while let Err(e) = sock::send(&fd, &w) {
            if let Some(e) = silent(e) {
                return Err(e);
            }
        }
        let mut buf = vec![0u8; ipc::MAX_RECORD];
        let n = loop {
            match sock::recv(&fd, &mut buf) {
                Ok(n) => break n,
                Err(e) => {
                    if let Some(e) = silent(e) {
                        return Err(e);
                    }
                }
            }
        };
        let (h, mut r) = Header::parse(&buf[..n]).map_err(|_| Errno::ENODEV)?;
        if h.op != op::REPLY | op::OPEN || h.seq != 1 {
            return Err(Errno::ENODEV);
        }
        let err: i32 = r.get().map_err(|_| Errno::ENODEV)?;
        let _: Public = r.get().map_err(|_| Errno::ENODEV)?;
        if err != 0 {
            ibcm_log!(WARN, "{name}: the CM service refused to open it: {err}");
            return Err(Errno(-err));
        }
        let opened: Opened = r.get().map_err(|_| Errno::ENODEV)?;
        let remote = Arc::new(Remote {
            fd,
            opened,
            stats: TransportStats::default(),
            dev: OnceLock::new(),
            seq: AtomicU64::new(2),
            peer_pid,
            timeout,
            records_in: AtomicU64::new(0),
            rx: Mutex::new(Rx {
                reading: false,
                backlog: Backlog::default(),
                pending: FastMap::with_hasher(FastState::new(1)),
                waiting: 0,
            }),
            replied: Condvar::new(),
            dead: AtomicBool::new(false),
            reader_done: AtomicBool::new(false),
            ids: Mutex::new(FastMap::with_hasher(FastState::new(2))),
            shares: Mutex::new(FastMap::with_hasher(FastState::new(3))),
            ready: Mutex::new(Ready::default()),
            ready_cv: Condvar::new(),
            threads: Mutex::new(Vec::new()),
            pool: Mutex::new(Vec::new()),
            leased: AtomicU64::new(0),
            out: Mutex::new(Vec::new()),
            req_attrs: Mutex::new(None),
            rep_attrs: AtomicBool::new(false),
        });
        let dev = Device::with_remote(remote.clone());
        let _ = remote.dev.set(Arc::downgrade(&dev));
        let mut t = lock(&remote.threads);
        let r = remote.clone();
        t.push(
            std::thread::Builder::new()
                .name("ibcm-svc-rx".into())
                .spawn(move || r.reader())
                .map_err(|_| Errno(errno::ENOMEM))?,
        );
        let r = remote.clone();
        t.push(
            std::thread::Builder::new()
                .name("ibcm-svc-cb".into())
                .spawn(move || r.deliverer())
                .map_err(|_| Errno(errno::ENOMEM))?,
        );
        drop(t);
        ibcm_log!(INFO, "{}: open through the CM service", dev.name());
        Ok(dev)
    }

    fn device(&self) -> Option<Arc<Device>> {
        self.dev.get()?.upgrade()
    }

    /// One request and its reply: the errno, the id's public fields and
    /// the result's reader input.
    fn call(
        &self,
        opc: u16,
        handle: u64,
        body: impl FnOnce(&mut Writer),
    ) -> Result<(Public, Vec<u8>), Errno> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(Errno::ENODEV);
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut w = Header {
            op: opc,
            seq,
            handle,
        }
        .record_in(rec_buf());
        body(&mut w);
        lock(&self.rx).pending.insert(seq, None);
        if self.send_now(w.into_bytes()).is_err() {
            lock(&self.rx).pending.remove(&seq);
            return Err(Errno::ENODEV);
        }
        // The wait is bounded (`hung`): each period of the bound without
        // the reply it looks for progress of the service (`busy::Watch`)
        // and goes on only if there was some. The clock is read in user
        // space (vDSO): no system call more than an unbounded wait.
        let mut watch = ServiceWatch::new(self.peer_pid, self.records());
        let mut rx = lock(&self.rx);
        let rec = loop {
            if let Some(Some(_)) = rx.pending.get(&seq) {
                break rx.pending.remove(&seq).flatten().expect("reply present");
            }
            if self.dead.load(Ordering::SeqCst) {
                rx.pending.remove(&seq);
                return Err(Errno::ENODEV);
            }
            let now = Instant::now();
            if now >= watch.check_at() {
                drop(rx);
                let what = format!("a call (op {opc})");
                let working = watch.working(self.records(), &self.describe(), &what);
                rx = lock(&self.rx);
                if working || matches!(rx.pending.get(&seq), Some(Some(_))) {
                    continue;
                }
                rx.pending.remove(&seq);
                drop(rx);
                return Err(self.hung(&what, &watch.note()));
            }
            if !rx.reading {
                // Nobody reads the socket (the reader thread may be
                // running the callback that makes this call): read it
                // here; events go to the delivery thread.
                rx.reading = true;
                drop(rx);
                self.read_for_reply();
                rx = lock(&self.rx);
                continue;
            }
            rx.waiting += 1;
            rx = match self.replied.wait_timeout(rx, watch.check_at() - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
            rx.waiting -= 1;
        };
        drop(rx);
        let bad = |_| Errno(errno::EPROTO);
        let (_, mut r) = Header::parse(&rec).map_err(bad)?;
        let err: i32 = r.get().map_err(bad)?;
        let public: Public = r.get().map_err(bad)?;
        if err != 0 {
            return Err(Errno(-err));
        }
        let rest = rec[rec.len() - r.remaining()..].to_vec();
        Ok((public, rest))
    }

    /// A call on an id: its public fields are refreshed from the reply.
    fn call_id(
        &self,
        sh: &CmIdInner,
        opc: u16,
        body: impl FnOnce(&mut Writer),
    ) -> Result<Vec<u8>, Errno> {
        // The service runs a connection's records in order: the reply
        // follows every one-way call sent before this one.
        let sent = lock(&sh.remote_version).oneway_sent;
        let (public, rest) = self.call(opc, sh.handle().0, body)?;
        sh.sync_remote(&public, Some(sent));
        Ok(rest)
    }

    /// A call whose errno the process decides (`Call::check` on its copy
    /// of the id's state, the engine's own checks): the id takes the
    /// state the engine will give it and the request goes without
    /// waiting — inside a `Device::batch` with the batch's others. If the
    /// service refuses it nevertheless (an event in flight changed the
    /// id), it says so with a `REFUSED` record (`on_refused`).
    pub(super) fn oneway(
        &self,
        sh: &CmIdInner,
        opc: u16,
        call: Call<'_>,
        body: impl FnOnce(&mut Writer),
    ) -> ApiResult {
        self.oneway_allowed(sh)?;
        let _order = lock(&sh.remote_call);
        {
            let mut s = lock(&sh.remote_version);
            let c = sh.c.get();
            let now = unsafe { std::ptr::read_volatile(&(*c).state) };
            let state = State::ALL.get(now as usize).copied().ok_or(Errno::EINVAL)?;
            let next = call.check(state, false)?;
            unsafe {
                std::ptr::write_volatile(&mut (*c).state, next as u32);
                if let Call::Req(p) = call {
                    std::ptr::write_volatile(&mut (*c).service_id, p.service_id.to_be());
                    std::ptr::write_volatile(&mut (*c).remote_id, 0);
                }
            }
            s.oneway_sent += 1;
        }
        self.send_oneway(sh, opc, body)
    }

    /// A one-way call may leave: the service is alive and the id is not
    /// destroyed.
    fn oneway_allowed(&self, sh: &CmIdInner) -> ApiResult {
        if self.dead.load(Ordering::SeqCst) {
            return Err(Errno::ENODEV);
        }
        if lock(&sh.dq).destroyed {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// Sends (or holds, inside a batch) one one-way record; the caller
    /// holds `sh.remote_call` and has counted it.
    fn send_oneway(&self, sh: &CmIdInner, opc: u16, body: impl FnOnce(&mut Writer)) -> ApiResult {
        let mut w = Header {
            op: opc | op::ONEWAY,
            seq: 0,
            handle: sh.handle().0,
        }
        .record_in(rec_buf());
        body(&mut w);
        self.send_or_hold(w.into_bytes())
            .map_err(|()| Errno::ENODEV)
    }

    /// `set_prepare_mra_on_report` through the service. On an IDLE id the
    /// mark matters only once a `LISTEN` or `SEND_REQ` of the id has
    /// reached the service, and both leave after it on this connection:
    /// the record is held (`hold`) and rides in the message of the next
    /// one instead of costing a message of its own. On an id past IDLE it
    /// leaves as any one-way call.
    pub(super) fn mra_on_report(&self, sh: &CmIdInner, on: bool) -> ApiResult {
        self.oneway_flag(sh, op::MRA_ON_REPORT, on)
    }

    /// `set_qp_attrs_on_req` through the service (`op::QP_ATTRS_ON_REQ`):
    /// sent as `mra_on_report` is (held on an IDLE id, to ride with its
    /// `LISTEN`).
    pub(super) fn qp_attrs_on_req(&self, sh: &CmIdInner, on: bool) -> ApiResult {
        if on {
            self.want_rep_attrs();
        }
        self.oneway_flag(sh, op::QP_ATTRS_ON_REQ, on)
    }

    /// This process moves QPs with the CM's attributes (it called
    /// `init_qp_attr`, marked a listener `QP_ATTRS_ON_REQ`, or said so
    /// with `CmId::want_qp_attrs_on_rep`: librdmacm's connect of an id
    /// with a QP): the first
    /// time, asks the service to push the QP attributes of its REPs from
    /// now on (`op::QP_ATTRS_ON_REP`). The record is held: it rides in
    /// the message of whatever this connection sends next (the
    /// `INIT_QP_ATTR` round trip that follows, the `LISTEN`, the next
    /// `SEND_REQ`), so the REPs of every REQ sent after it come with
    /// their attributes. Until then an id's `init_qp_attr` asks the
    /// service (a round trip, never a stale answer). A process that never
    /// calls it (`ibcm bench`) is pushed none.
    pub(super) fn want_rep_attrs(&self) {
        if self.rep_attrs.load(Ordering::Relaxed) || self.rep_attrs.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut w = Header {
            op: op::QP_ATTRS_ON_REP | op::ONEWAY,
            seq: 0,
            handle: 0,
        }
        .record_in(rec_buf());
        w.put(&true);
        // A lost connection fails the call that follows.
        let _ = self.hold(w.into_bytes(), false);
    }

    /// A one-way `bool` flag of an id (`MRA_ON_REPORT`, `QP_ATTRS_ON_REQ`).
    fn oneway_flag(&self, sh: &CmIdInner, opc: u16, on: bool) -> ApiResult {
        self.oneway_allowed(sh)?;
        let _order = lock(&sh.remote_call);
        lock(&sh.remote_version).oneway_sent += 1;
        let mut w = Header {
            op: opc | op::ONEWAY,
            seq: 0,
            handle: sh.handle().0,
        }
        .record_in(rec_buf());
        w.put(&on);
        let idle = unsafe { std::ptr::read_volatile(&(*sh.c.get()).state) } == State::Idle as u32;
        if idle {
            self.hold(w.into_bytes(), false)
        } else {
            self.send_or_hold(w.into_bytes())
        }
        .map_err(|()| Errno::ENODEV)
    }

    /// Sends `rec` now, or, inside a `Device::batch` on this thread, holds
    /// it with the batch's other records until the batch ends.
    fn send_or_hold(&self, rec: Vec<u8>) -> Result<(), ()> {
        let batching = self
            .dev
            .get()
            .is_some_and(|d| super::event_loop::in_batch(d.as_ptr()));
        if batching {
            self.hold(rec, true)
        } else {
            self.send_now(rec)
        }
    }

    /// Holds `rec` for this connection's next message: whatever is sent
    /// next (`send_now`, the end of a batch: `flush`) takes the held
    /// records first, in order, in one `BATCH` message.
    /// `urgent`: a batch's record, which its end sends (else a mark that
    /// waits for whatever the connection sends next).
    fn hold(&self, rec: Vec<u8>, urgent: bool) -> Result<(), ()> {
        let mut out = lock(&self.out);
        out.push(rec);
        if urgent {
            BATCH_HELD.with(|h| h.set(true));
        }
        if out.len() >= BATCH_RECORDS {
            return self.send_held(&mut out);
        }
        Ok(())
    }

    /// Sends a record behind the one-way calls a batch holds (so the
    /// service sees this connection's records in the order they were
    /// made).
    fn send_now(&self, rec: Vec<u8>) -> Result<(), ()> {
        let mut out = lock(&self.out);
        if out.is_empty() {
            drop(out);
            let r = self.send_one(&rec);
            recycle([rec]);
            return r;
        }
        out.push(rec);
        // Sent under the lock: a record made later cannot overtake them.
        let r = self.send_held(&mut out);
        drop(out);
        r
    }

    /// `send_now` of `rec` and `next` in one message (behind any held
    /// records).
    fn send_now_with(&self, rec: Vec<u8>, next: Vec<u8>) -> Result<(), ()> {
        let mut out = lock(&self.out);
        out.push(rec);
        out.push(next);
        let r = self.send_held(&mut out);
        drop(out);
        r
    }

    /// Sends the held records `out` (the connection's, under its lock),
    /// several per message (`op::BATCH`, assembled in this thread's
    /// reused buffer), and empties it: the records' buffers go to this
    /// thread's spares (`rec_buf`), `out` keeps its capacity — no
    /// allocation in the steady state.
    fn send_held(&self, out: &mut Vec<Vec<u8>>) -> Result<(), ()> {
        let mut msg = BATCH_MSG.with(|m| std::mem::take(&mut *m.borrow_mut()));
        let mut rest = &out[..];
        let mut r = Ok(());
        while !rest.is_empty() {
            let n = ipc::batch_into(rest, &mut msg);
            r = self.send_one(if n == 1 { &rest[0] } else { &msg[..] });
            if r.is_err() {
                break;
            }
            rest = &rest[n..];
        }
        BATCH_MSG.with(|m| *m.borrow_mut() = msg);
        recycle(out.drain(..));
        r
    }

    /// Sends one message. A send that finds the socket full for a whole
    /// period (`SO_SNDTIMEO`) sends again while the service makes progress
    /// (`busy::Watch`: it is reading, just behind), and declares it hung
    /// otherwise (a seqpacket send that timed out sent nothing).
    fn send_one(&self, m: &[u8]) -> Result<(), ()> {
        let mut watch: Option<ServiceWatch> = None;
        loop {
            match sock::send(&self.fd, m) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // The socket's timeout was the first period.
                    let w = watch
                        .get_or_insert_with(|| ServiceWatch::late(self.peer_pid, self.records()));
                    let what = "a send (its socket stayed full)";
                    if !self.dead.load(Ordering::SeqCst)
                        && w.working(self.records(), &self.describe(), what)
                    {
                        continue;
                    }
                    self.hung(what, &w.note());
                    return Err(());
                }
                Err(e) => {
                    self.send_failed(e);
                    return Err(());
                }
            }
        }
    }

    /// Records received on this connection so far.
    fn records(&self) -> u64 {
        self.records_in.load(Ordering::Relaxed)
    }

    /// A send failed: the service is gone, or did not take the record
    /// within the timeout (its socket stayed full: declared hung).
    fn send_failed(&self, e: std::io::Error) {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            self.hung("a send (its socket stayed full)", "");
        } else {
            self.mark_dead("send failed");
        }
    }

    /// The service did not answer `what` within the timeout: the
    /// connection is declared broken — counted, one log line saying what
    /// `/proc` shows of the service, the socket shut down (the reader
    /// thread then gives the ids waiting for an answer their error events
    /// and the service, when it runs again, destroys this connection's
    /// ids: nothing is left half-done on either side) — and later calls
    /// fail at once with `-ENODEV`. `ETIMEDOUT` for the caller (`ENODEV`
    /// when the service is gone).
    fn hung(&self, what: &str, note: &str) -> Errno {
        SERVICE_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
        let peer = Peer::of(self.peer_pid);
        if !self.dead.swap(true, Ordering::SeqCst) {
            crate::log::always(
                WARN,
                format_args!(
                    "{}: the CM service (pid {}, {}) did not answer {what} within {} ms (IBCM_SERVICE_TIMEOUT_MS){note}: connection declared broken, calls now fail with -ENODEV",
                    self.describe(),
                    self.peer_pid,
                    peer.describe(),
                    self.timeout.as_millis()
                ),
            );
        }
        sock::shutdown(&self.fd);
        self.mark_dead("no answer in time");
        if peer == Peer::Gone {
            Errno::ENODEV
        } else {
            Errno(errno::ETIMEDOUT)
        }
    }

    /// The end of a `Device::batch` on this thread: the one-way calls it
    /// held leave now (with whatever else is held before them: marks,
    /// other threads' calls); a batch that held none of its own sends
    /// nothing, so marks alone keep waiting and another thread's batch
    /// keeps its records until its own end (or the connection's next
    /// message).
    pub(super) fn flush(&self) {
        if !BATCH_HELD.with(|h| h.replace(false)) {
            return;
        }
        let mut out = lock(&self.out);
        if !out.is_empty() {
            let _ = self.send_held(&mut out);
        }
    }

    pub(super) fn call_unit(
        &self,
        sh: &CmIdInner,
        opc: u16,
        body: impl FnOnce(&mut Writer),
    ) -> ApiResult {
        self.call_id(sh, opc, body).map(|_| ())
    }

    pub(super) fn init_qp_attr(&self, sh: &CmIdInner, qp_state: u32) -> ApiResult<QpAttr> {
        self.want_rep_attrs();
        if let Some(a) = sh.pushed_qp_attr(qp_state) {
            return Ok(a);
        }
        let rest = self.call_id(sh, op::INIT_QP_ATTR, |w| {
            w.put(&qp_state);
        })?;
        Reader::new(&rest).get().map_err(|_| Errno(errno::EPROTO))
    }

    pub(super) fn state(&self, sh: &CmIdInner) -> Option<State> {
        let rest = self.call_id(sh, op::STATE, |_| ()).ok()?;
        Reader::new(&rest).get::<Option<State>>().ok().flatten()
    }

    /// The service's counters (`None` once the service is gone).
    pub(super) fn stat(&self) -> Option<Stat> {
        self.call(op::STAT, 0, |_| ())
            .ok()
            .and_then(|(_, rest)| Reader::new(&rest).get().ok())
    }

    pub(super) fn create_id(
        &self,
        dev: &Arc<Device>,
        handler: IbCmHandler,
        context: *mut c_void,
        rust_handler: Option<RustHandler>,
    ) -> Result<super::CmId, Errno> {
        let Created { handle: h, public } = self.lease()?;
        let shell = Arc::new(CmIdInner::new(
            dev.clone(),
            0,
            Handle(h),
            handler,
            context,
            rust_handler,
        ));
        shell.sync_remote(&public, None);
        let raw = Arc::into_raw(shell.clone());
        lock(&self.ids).insert(h, raw as usize);
        register(raw);
        Ok(super::CmId(shell))
    }

    /// An IDLE id of the service for `create_id`: from the ids leased
    /// before, else from a new lease (one round trip for many ids; its
    /// `-ENOMEM` is the service's id limit).
    fn lease(&self) -> Result<Created, Errno> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(Errno::ENODEV);
        }
        if let Some(c) = lock(&self.pool).pop() {
            return Ok(c);
        }
        let want = self
            .leased
            .load(Ordering::Relaxed)
            .clamp(1, op::MAX_CREATE as u64) as u32;
        let (_, rest) = self.call(op::CREATE_IDS, 0, |w| {
            w.put(&want);
        })?;
        let got: Box<[Created]> = Reader::new(&rest).get().map_err(|_| Errno(errno::EPROTO))?;
        let mut got = got.into_vec();
        if got.is_empty() || got.len() > want as usize {
            return Err(Errno(errno::EPROTO));
        }
        self.leased.fetch_add(got.len() as u64, Ordering::Relaxed);
        let first = got.remove(0);
        lock(&self.pool).extend(got.into_iter().rev());
        Ok(first)
    }

    /// `insert_listen` through the service: a listener of this process for
    /// `service_id` with the same handlers is shared (the service holds
    /// one listener; each sharer destroys its share).
    pub(super) fn insert_listen(
        &self,
        dev: &Arc<Device>,
        handler: IbCmHandler,
        service_id: u64,
        rust_handler: Option<RustHandler>,
    ) -> Result<super::CmId, Errno> {
        let same = |sh: &CmIdInner| {
            let c = unsafe { *sh.c.get() };
            c.cm_handler.map(|f| f as usize) == handler.map(|f| f as usize)
                && c.context.is_null()
                && match (&sh.rust_handler, &rust_handler) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    (None, None) => true,
                    _ => false,
                }
        };
        let existing: Vec<usize> = lock(&self.ids).values().copied().collect();
        for p in existing {
            let sh = unsafe { &*(p as *const CmIdInner) };
            let c = unsafe { *sh.c.get() };
            if c.state == State::Listen as u32 && u64::from_be(c.service_id) == service_id {
                if !same(sh) {
                    return Err(Errno::EINVAL);
                }
                *lock(&self.shares).entry(p).or_insert(0) += 1;
                register(p as *const CmIdInner);
                unsafe {
                    Arc::increment_strong_count(p as *const CmIdInner);
                    Arc::increment_strong_count(p as *const CmIdInner);
                    return Ok(super::CmId(Arc::from_raw(p as *const CmIdInner)));
                }
            }
        }
        let id = self.create_id(dev, handler, std::ptr::null_mut(), rust_handler)?;
        match id.listen(service_id) {
            Ok(()) => Ok(id),
            Err(e) => {
                let _ = id.destroy();
                Err(e)
            }
        }
    }

    /// The protocol destroy of an id. `false`: only a share was dropped.
    /// `port` (an rdma_cm binding's release, `PORT_RELEASE_BY`) leaves in
    /// the `DESTROY`'s message and is taken; it stays when nothing was
    /// sent (a share, a lost service, a failed send).
    pub(super) fn destroy(
        &self,
        sh: &CmIdInner,
        err: i32,
        port: &mut Option<crate::ipc::PortRelease>,
    ) -> bool {
        let p = sh as *const CmIdInner as usize;
        {
            let mut s = lock(&self.shares);
            if let Some(n) = s.get_mut(&p) {
                *n -= 1;
                if *n == 0 {
                    s.remove(&p);
                }
                return false;
            }
        }
        // Nobody waits for the reply: the service runs a connection's
        // records in order (a later call sees the id gone and its limits
        // counted), a destroy cannot fail for a live id, and this
        // process's side (no callback after return) is kept here. Inside
        // a `Device::batch` on this thread (the reader thread's wake-up,
        // where a callback's non-zero return destroys its id) it is held
        // with the batch's one-way calls and leaves when the batch ends
        // (`flush`), never later: about half the messages a process sent
        // at c=256 were such lone destroys (docs/SERVICE.md, "Round 12").
        // Elsewhere it is sent at once, taking held records with it. A
        // port release is never held: it rides in the same message, sent
        // at once (one send, one service thread woken per
        // `rdma_destroy_id`, the release run before another process's
        // bind can find the port taken: docs/SERVICE.md, "Destroy in one
        // message").
        if !self.dead.load(Ordering::SeqCst) {
            let mut w = Header {
                op: op::DESTROY,
                seq: 0,
                handle: sh.handle().0,
            }
            .record_in(rec_buf());
            w.put(&err);
            match port.take() {
                None => {
                    let _ = self.send_or_hold(w.into_bytes());
                }
                Some(rel) => {
                    if self.send_now_with(w.into_bytes(), rel.0.clone()).is_err() {
                        *port = Some(rel);
                    }
                }
            }
        }
        lock(&self.ids).remove(&sh.handle().0);
        true
    }

    fn mark_dead(&self, why: &str) {
        if !self.dead.swap(true, Ordering::SeqCst) {
            ibcm_log!(
                WARN,
                "CM service connection lost ({why}): calls now fail with -ENODEV"
            );
        }
        drop(lock(&self.rx));
        self.replied.notify_all();
        drop(lock(&self.ready));
        self.ready_cv.notify_all();
    }

    /// The service is gone: every id waiting for an answer gets the error
    /// event a timeout would give (`REQ_ERROR`, `REP_ERROR`, `DREQ_ERROR`,
    /// `SIDR_REQ_ERROR`, status `RESP_TIMEOUT_ERR`), so nobody waits for
    /// an answer that cannot come; later calls fail with `-ENODEV`.
    fn service_lost(&self, why: &str) {
        let live: Vec<usize> = lock(&self.ids).values().copied().collect();
        let mut failed = 0;
        for p in live {
            let sh = unsafe { &*(p as *const CmIdInner) };
            let state = unsafe { (*sh.c.get()).state };
            let kind = match State::ALL.get(state as usize) {
                Some(State::ReqSent | State::MraReqRcvd) => EventType::ReqError,
                Some(State::RepSent | State::MraRepRcvd) => EventType::RepError,
                Some(State::DreqSent) => EventType::DreqError,
                Some(State::SidrReqSent) => EventType::SidrReqError,
                _ => continue,
            };
            let sh = unsafe {
                Arc::increment_strong_count(p as *const CmIdInner);
                Arc::from_raw(p as *const CmIdInner)
            };
            let c = sh.c.get();
            unsafe { std::ptr::write_volatile(&mut (*c).state, State::Idle as u32) };
            lock(&sh.dq).queue.push_back(Item {
                ev: Event {
                    id: sh.handle(),
                    kind,
                    param: EventParam::SendStatus(WC_RESP_TIMEOUT_ERR),
                    local_id: 0,
                    mad: None,
                },
                listener: None,
            });
            lock(&self.ready).ids.push_back(sh);
            failed += 1;
        }
        if failed > 0 {
            ibcm_log!(
                WARN,
                "CM service gone: {failed} pending id(s) get an error event"
            );
        }
        self.mark_dead(why);
    }

    /// Sends a request whose reply nobody waits for (from the reader
    /// thread, which cannot wait for its own replies): sequence number 0,
    /// so the service sends none. Inside a batch it is held to the
    /// batch's end, as a callback's destroy is.
    fn send_detached(&self, opc: u16, handle: u64, body: impl FnOnce(&mut Writer)) {
        let mut w = Header {
            op: opc,
            seq: 0,
            handle,
        }
        .record_in(rec_buf());
        body(&mut w);
        let _ = self.send_or_hold(w.into_bytes());
    }

    fn reader(self: Arc<Self>) {
        loop {
            let backlog = {
                let mut rx = lock(&self.rx);
                while rx.reading {
                    rx.waiting += 1;
                    rx = self.replied.wait(rx).unwrap_or_else(|e| e.into_inner());
                    rx.waiting -= 1;
                }
                rx.reading = true;
                !rx.backlog.is_empty()
            };
            // The blocking read happens outside the batch below (which
            // holds the device): what one wake-up brings lands in the
            // backlog.
            if !backlog {
                match self.receive() {
                    Ok(()) => {}
                    Err(why) => {
                        self.service_lost(&why);
                        self.give_back();
                        break;
                    }
                }
            }
            match self.device() {
                // The callbacks of one wake-up's records run inside one
                // `Device::batch`: the one-way calls they make leave
                // together, as one `BATCH` message, when the last is done.
                Some(dev) => dev.batch(|| self.run_backlog()),
                None => self.run_backlog(),
            }
        }
        // A dead connection (a failed send) can be seen before the end of
        // the socket: the delivery thread waits for this, so the error
        // events `service_lost` queued are delivered.
        self.reader_done.store(true, Ordering::SeqCst);
        drop(lock(&self.ready));
        self.ready_cv.notify_all();
    }

    /// The reader thread, holding the reading token: handles the backlog's
    /// records in order, running their callbacks here, until the backlog
    /// is empty or a caller has taken the token (it handles the rest).
    fn run_backlog(&self) {
        let mut first = true;
        loop {
            let mut recs = {
                let mut rx = lock(&self.rx);
                if !first && rx.reading {
                    return;
                }
                if rx.backlog.is_empty() {
                    if first {
                        drop(rx);
                        self.give_back();
                    }
                    return;
                }
                rx.reading = true;
                std::mem::take(&mut rx.backlog)
            };
            first = false;
            let sh = recs.pop().and_then(|rec| self.dispatch(rec));
            // The rest goes back with the token (nobody else has touched
            // the backlog meanwhile: this thread held the token).
            self.give_back_with(recs);
            if let Some(sh) = sh {
                sh.deliver();
            }
        }
    }

    /// A caller waiting for its reply, holding the reading token: handles
    /// every record left from the last read, or, when none is, what one
    /// read of the socket brings, queueing the ids with events for the
    /// delivery thread in one go (one wake-up of it at most, one hand-over
    /// of the token), then gives the token back. `false`: the socket has
    /// ended (the service is lost, or the device was closed).
    fn read_for_reply(&self) -> bool {
        let mut recs = std::mem::take(&mut lock(&self.rx).backlog);
        if recs.is_empty() {
            lock(&self.rx).backlog = recs;
            if let Err(why) = self.receive() {
                self.service_lost(&why);
                self.give_back();
                return false;
            }
            recs = std::mem::take(&mut lock(&self.rx).backlog);
        }
        let mut ids = Vec::new();
        while let Some(rec) = recs.pop() {
            ids.extend(self.dispatch(rec));
        }
        if !ids.is_empty() {
            let mut q = lock(&self.ready);
            q.ids.extend(ids);
            let wake = q.sleeping;
            drop(q);
            if wake {
                self.ready_cv.notify_one();
            }
        }
        // The emptied buffers go back for the next read's records.
        self.give_back_with(recs);
        true
    }

    /// Reads what the service has sent: one message (blocking), then the
    /// messages already queued behind it without waiting (at most
    /// `DRAIN` in all), their records appended to the backlog in socket
    /// order (a `BATCH` unpacked). Records too broken to decode are
    /// dropped with a log line. `Err`: the socket has ended.
    fn receive(&self) -> Result<(), String> {
        let mut recs = std::mem::take(&mut lock(&self.rx).backlog);
        let before = recs.len();
        let r = match sock::recv(&self.fd, recs.room()) {
            Ok(0) => Err("the service closed it".to_string()),
            // The receive timeout (`SO_RCVTIMEO`) passed with nothing to
            // read: not an error by itself (an idle connection; a caller
            // reading for its reply looks at its own deadline).
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    && !self.dead.load(Ordering::SeqCst) =>
            {
                Ok(())
            }
            Err(e) => Err(e.to_string()),
            Ok(n) => {
                recs.took(n);
                // An error or the end seen here is seen again by the next
                // blocking read, after these records are handled.
                for _ in 1..DRAIN {
                    match sock::try_recv(&self.fd, recs.room()) {
                        Ok(Some(n)) if n > 0 => recs.took(n),
                        _ => break,
                    }
                }
                Ok(())
            }
        };
        self.records_in
            .fetch_add((recs.len() - before) as u64, Ordering::Relaxed);
        lock(&self.rx).backlog = recs;
        r
    }

    /// Gives the reading token back, waking whoever waits for it or for a
    /// reply.
    fn give_back(&self) {
        let mut rx = lock(&self.rx);
        rx.reading = false;
        let wake = rx.waiting > 0;
        drop(rx);
        if wake {
            self.replied.notify_all();
        }
    }

    /// `give_back` with the backlog the holder took out of `Rx` (what is
    /// left of it) put back under the same lock.
    fn give_back_with(&self, recs: Backlog) {
        let mut rx = lock(&self.rx);
        debug_assert!(
            rx.backlog.is_empty(),
            "the backlog changed without the token"
        );
        rx.backlog = recs;
        rx.reading = false;
        let wake = rx.waiting > 0;
        drop(rx);
        if wake {
            self.replied.notify_all();
        }
    }

    /// Hands one record from the service to its waiting caller (a reply)
    /// or its id's queue (an event, a refusal): the id to deliver, if any.
    fn dispatch(&self, rec: &[u8]) -> Option<Arc<CmIdInner>> {
        let Ok((h, r)) = Header::parse(rec) else {
            ibcm_log!(WARN, "CM service: undecodable record dropped");
            return None;
        };
        if h.op & op::REPLY != 0 {
            let mut rx = lock(&self.rx);
            if let Some(slot) = rx.pending.get_mut(&h.seq) {
                *slot = Some(rec.to_vec());
                let wake = rx.waiting > 0;
                drop(rx);
                if wake {
                    self.replied.notify_all();
                }
            }
            None
        } else if h.op == op::EVENT {
            self.on_event(h, r).unwrap_or_else(|e| {
                ibcm_log!(WARN, "CM service: event record dropped: {e}");
                None
            })
        } else if h.op == op::REFUSED {
            self.on_refused(h, r).unwrap_or_else(|e| {
                ibcm_log!(WARN, "CM service: refusal record dropped: {e}");
                None
            })
        } else if h.op == op::QP_ATTRS {
            if let Err(e) = self.on_qp_attrs(h, r) {
                ibcm_log!(WARN, "CM service: QP attributes record dropped: {e}");
            }
            None
        } else if h.op == op::PORTS {
            if let Err(e) = self.on_ports(h, r) {
                ibcm_log!(WARN, "CM service: port tables record dropped: {e}");
            }
            None
        } else {
            None
        }
    }

    /// The device's port tables changed in the service (a port event):
    /// installed as `Device::update_ports` does in-process (`ports()`, new
    /// `ib_gid_attr` objects, the older ones kept alive).
    fn on_ports(&self, h: Header, mut r: Reader<'_>) -> Result<(), Errno> {
        let ports: Box<[PortInfo]> = r.get()?;
        r.end()?;
        ipc::check_ports(h, &ports, &self.opened.ports)?;
        if let Some(dev) = self.device() {
            dev.update_ports(ports.into_vec());
        }
        Ok(())
    }

    /// A REP's QP attributes, pushed just before its event: kept on the id
    /// for `init_qp_attr` (`CmIdInner::pushed_qp_attr`). A REQ's come
    /// before the id exists here: kept for the event that creates it
    /// (`on_event`).
    fn on_qp_attrs(&self, h: Header, mut r: Reader<'_>) -> Result<(), Errno> {
        let a: QpAttrs = r.get()?;
        r.end()?;
        a.check()?;
        if let Some(sh) = self.shell(h.handle) {
            let mut applied = lock(&sh.remote_version);
            if a.public.version > applied.version {
                applied.qp_attrs = Some(Box::new(a));
            }
        } else {
            *lock(&self.req_attrs) = Some((h.handle, Box::new(a)));
        }
        Ok(())
    }

    /// A live id of this process by its handle.
    fn shell(&self, handle: u64) -> Option<Arc<CmIdInner>> {
        let ids = lock(&self.ids);
        let p = *ids.get(&handle)? as *const CmIdInner;
        unsafe {
            Arc::increment_strong_count(p);
            Some(Arc::from_raw(p))
        }
    }

    /// Queues an event the process makes itself on `sh`: the id to
    /// deliver.
    fn queue_own(&self, sh: Arc<CmIdInner>, kind: EventType, status: u32) -> Arc<CmIdInner> {
        lock(&sh.dq).queue.push_back(Item {
            ev: Event {
                id: sh.handle(),
                kind,
                param: EventParam::SendStatus(status),
                local_id: 0,
                mad: None,
            },
            listener: None,
        });
        sh
    }

    /// A one-way call the service refused: an event in flight had changed
    /// the id (or the service found what the process cannot check, such
    /// as a path's GID). The id takes the service's state; a call that
    /// waits for an answer the peer will now never send gets the error
    /// event the kernel gives when that answer does not come (`REQ_ERROR`,
    /// `REP_ERROR`, `DREQ_ERROR`, status `IB_WC_GENERAL_ERR`) if the id
    /// is still where the call found it; if the id moved on, the event
    /// that moved it was pushed before this record and tells the process.
    fn on_refused(&self, h: Header, mut r: Reader<'_>) -> Result<Option<Arc<CmIdInner>>, Errno> {
        let f: Refused = r.get()?;
        r.end()?;
        let Some(sh) = self.shell(h.handle) else {
            return Ok(None);
        };
        sh.sync_remote(&f.public, Some(h.seq));
        let state = State::ALL.get(f.public.state as usize).copied();
        let kind = match (f.op, state) {
            (op::SEND_REQ, Some(State::Idle)) => Some(EventType::ReqError),
            (op::SEND_REP, Some(State::ReqRcvd | State::MraReqSent)) => Some(EventType::RepError),
            (op::SEND_DREQ, Some(State::Established)) => Some(EventType::DreqError),
            _ => None,
        };
        ibcm_log!(
            WARN,
            "{}: id {:#010x}: the CM service refused a one-way call (op {}, {}); the id is {:?}{}",
            self.describe(),
            f.public.local_id,
            f.op,
            Errno(-f.err),
            state,
            kind.map_or(String::new(), |k| format!(": {k:?} delivered"))
        );
        Ok(kind.map(|kind| self.queue_own(sh, kind, WC_GENERAL_ERR)))
    }

    /// Queues a pushed event on its id (creating the id of a REQ): the id
    /// to deliver.
    fn on_event(&self, h: Header, mut r: Reader<'_>) -> Result<Option<Arc<CmIdInner>>, Errno> {
        let we: WireEvent = r.get()?;
        r.end()?;
        let mut ev = we.event;
        ev.id = Handle(h.handle);
        let take = |handle: u64| self.shell(handle);
        let (sh, listener) = match &mut ev.param {
            EventParam::Req(_) | EventParam::SidrReq(_) => {
                let Some(l) = take(we.listener) else {
                    // The listener was destroyed meanwhile: so is the
                    // request's id (a REJ to its requester).
                    self.send_detached(op::DESTROY, h.handle, |w| {
                        w.put(&-errno::ENOMEM);
                    });
                    return Ok(None);
                };
                let Some(dev) = self.device() else {
                    return Ok(None);
                };
                let lc = unsafe { *l.c.get() };
                let sh = Arc::new(CmIdInner::new(
                    dev,
                    0,
                    Handle(h.handle),
                    lc.cm_handler,
                    lc.context,
                    l.rust_handler.clone(),
                ));
                sh.sync_remote(&we.public, Some(h.seq));
                // The attributes pushed just before this event, if they
                // are of its snapshot.
                let attrs = lock(&self.req_attrs).take();
                if let Some((handle, a)) = attrs
                    && handle == h.handle
                    && matches!(ev.param, EventParam::Req(_))
                {
                    let mut applied = lock(&sh.remote_version);
                    if a.public.version == applied.version {
                        applied.qp_attrs = Some(a);
                    }
                }
                let raw = Arc::into_raw(sh.clone());
                lock(&self.ids).insert(h.handle, raw as usize);
                register(raw);
                (sh, Some(l))
            }
            _ => {
                let Some(sh) = take(h.handle) else {
                    return Ok(None);
                };
                sh.sync_remote(&we.public, Some(h.seq));
                (sh, None)
            }
        };
        lock(&sh.dq).queue.push_back(Item { ev, listener });
        Ok(Some(sh))
    }

    fn deliverer(self: Arc<Self>) {
        loop {
            let sh = {
                let mut q = lock(&self.ready);
                loop {
                    if let Some(sh) = q.ids.pop_front() {
                        break sh;
                    }
                    if self.dead.load(Ordering::SeqCst) && self.reader_done.load(Ordering::SeqCst) {
                        return;
                    }
                    q.sleeping = true;
                    q = self.ready_cv.wait(q).unwrap_or_else(|e| e.into_inner());
                    q.sleeping = false;
                }
            };
            sh.deliver();
        }
    }

    /// Closes the device: what the process left is destroyed by the
    /// service when the connection ends.
    pub(super) fn close(&self) {
        let left: Vec<usize> = lock(&self.ids).drain().map(|(_, p)| p).collect();
        if !left.is_empty() {
            ibcm_log!(
                WARN,
                "{}: closed with {} live id(s); the service destroys them",
                self.describe(),
                left.len()
            );
        }
        for p in &left {
            let sh = unsafe { &*(*p as *const CmIdInner) };
            let mut d = lock(&sh.dq);
            d.destroyed = true;
            d.queue.clear();
        }
        // Dead before the reader sees the end: a close is no lost service.
        self.dead.store(true, Ordering::SeqCst);
        sock::shutdown(&self.fd);
        self.mark_dead("closed");
        let me = std::thread::current().id();
        let threads: Vec<JoinHandle<()>> = lock(&self.threads).drain(..).collect();
        for t in threads {
            if t.thread().id() != me && t.join().is_err() {
                ibcm_log!(ERROR, "a CM service thread had panicked");
            }
        }
    }

    pub(super) fn ids(&self) -> usize {
        lock(&self.ids).len()
    }
}

/// The device's transport as far as the process sees it: ports and node
/// GUID from the service; MADs never pass through the process.
impl Transport for Remote {
    fn send(&self, _batch: &[Transmit]) {}
    fn recv(&self, timeout: Option<Duration>, _out: &mut Vec<Received>) -> std::io::Result<()> {
        // No event loop runs for a served device; sleep as asked.
        std::thread::sleep(timeout.map_or(Duration::from_millis(100), |t| {
            t.min(Duration::from_millis(100))
        }));
        Ok(())
    }
    fn wake(&self) {}
    fn ports(&self) -> Vec<PortInfo> {
        self.opened.ports.to_vec()
    }
    fn node_guid(&self) -> u64 {
        self.opened.node_guid
    }
    fn stats(&self) -> &TransportStats {
        &self.stats
    }
    fn describe(&self) -> String {
        String::from_utf8_lossy(&self.opened.name).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    use ipc::test_record as record;

    /// The backlog keeps a lone record and a `BATCH`'s records in place,
    /// in socket order, across messages; a truncated or garbage message
    /// adds no record (and no bytes: the next message takes its room), and
    /// nothing panics; once empty, the next message starts over at the
    /// buffer's start (no growth in the steady state).
    #[test]
    fn the_backlog_keeps_records_in_place_and_drops_broken_messages() {
        let mut b = Backlog::default();
        let (r1, r2, r3, r4) = (record(1, 40), record(2, 50), record(3, 60), record(4, 70));
        b.unpack(&r1);
        let m = ipc::batch(vec![r2.clone(), r3.clone()]).remove(0);
        b.unpack(&m);
        // Broken: a batch cut short, a batch with a nested batch, a record
        // shorter than a header.
        b.unpack(&m[..m.len() - 1]);
        let mut nested = m[..ipc::HEADER].to_vec();
        nested.extend_from_slice(&(m.len() as u32).to_le_bytes());
        nested.extend_from_slice(&m);
        b.unpack(&nested);
        b.unpack(&r1[..10]);
        b.unpack(&r4);
        assert_eq!(b.len(), 4);
        let used = b.used;
        assert_eq!(
            used,
            r1.len() + m.len() + r4.len(),
            "broken messages kept no bytes"
        );
        let mut got = Vec::new();
        while let Some(r) = b.pop() {
            got.push(r.to_vec());
        }
        assert_eq!(got, vec![r1.clone(), r2, r3, r4]);
        assert!(b.is_empty());
        let cap = b.bytes.len();
        b.unpack(&r1);
        assert_eq!(b.used, r1.len(), "an empty backlog starts over");
        assert_eq!(b.bytes.len(), cap);
        assert_eq!(b.pop(), Some(&r1[..]));
        // Garbage of every kind at every length: no panic, no record of it
        // (a valid header with any body is a record).
        let mut g = crate::testsupport::Junk(0x9e37_79b9_7f4a_7c15);
        for n in 1..400 {
            let junk = g.bytes(n);
            b.unpack(&junk);
            while let Some(r) = b.pop() {
                assert!(Header::parse(r).is_ok());
            }
        }
    }

    fn reply(fd: &OwnedFd, h: Header, body: impl FnOnce(&mut Writer)) {
        let mut w = Header {
            op: op::REPLY | h.op,
            seq: h.seq,
            handle: 0,
        }
        .record();
        w.put(&0i32).put(&Public::default());
        body(&mut w);
        sock::send(fd, &w.into_bytes()).expect("fake service: send");
    }

    /// A service that answers `OPEN` and `CREATE_IDS` (IDLE ids from
    /// handle 100 on) and hands every other message it receives to `tx`
    /// as the ops of its records, one `Vec` per message.
    fn fake_service(fd: OwnedFd, tx: mpsc::Sender<Vec<u16>>) {
        let mut buf = vec![0u8; ipc::MAX_RECORD];
        let mut next = 100u64;
        while let Ok(n) = sock::recv(&fd, &mut buf) {
            if n == 0 {
                return;
            }
            let msg = &buf[..n];
            let (h, mut r) = Header::parse(msg).expect("fake service: header");
            match h.op {
                op::OPEN => reply(&fd, h, |w| {
                    w.put(&Opened {
                        name: b"soft:fake".to_vec(),
                        node_guid: 1,
                        ports: Box::new([]),
                    });
                }),
                op::CREATE_IDS => {
                    let want: u32 = r.get().expect("fake service: count");
                    let ids: Box<[Created]> = (0..want)
                        .map(|i| Created {
                            handle: next + u64::from(i),
                            public: Public {
                                version: 1,
                                ..Public::default()
                            },
                        })
                        .collect();
                    next += u64::from(want);
                    reply(&fd, h, |w| {
                        w.put(&ids);
                    });
                }
                op::BATCH => {
                    let body = &msg[n - r.remaining()..];
                    let recs = ipc::unbatch(body).expect("fake service: batch");
                    let ops = recs
                        .iter()
                        .map(|rec| Header::parse(rec).expect("record").0.op)
                        .collect();
                    let _ = tx.send(ops);
                }
                other => {
                    let _ = tx.send(vec![other]);
                }
            }
        }
    }

    #[test]
    fn held_records_ride_in_the_connection_s_next_message() {
        let (ours, theirs) = crate::ipc::sock::pair();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || fake_service(theirs, tx));
        let dev = Remote::open(ours, "soft:fake").expect("open through the fake service");
        let next = || rx.recv_timeout(Duration::from_secs(5)).expect("a message");
        let quiet = |rx: &mpsc::Receiver<Vec<u16>>| rx.recv_timeout(Duration::from_millis(100));
        let oneway = |o: u16| o | op::ONEWAY;

        // An active id: the mark leaves with the REQ, in one message.
        let id = dev
            .create_id(None, std::ptr::null_mut(), None)
            .expect("create_id");
        id.set_prepare_mra_on_report(true).expect("mark");
        assert!(quiet(&rx).is_err(), "the mark of an IDLE id left alone");
        id.send_req(&ReqParams {
            service_id: 0x1234,
            qp_type: qp_type::RC,
            ..ReqParams::default()
        })
        .expect("send_req");
        assert_eq!(
            next(),
            vec![oneway(op::MRA_ON_REPORT), oneway(op::SEND_REQ)]
        );

        // Past IDLE the mark goes at once, on its own.
        id.set_prepare_mra_on_report(false).expect("unmark");
        assert_eq!(next(), vec![oneway(op::MRA_ON_REPORT)]);

        // A held mark goes ahead of whatever the connection sends next
        // (here another id's destroy), in order.
        let idle = dev
            .create_id(None, std::ptr::null_mut(), None)
            .expect("create_id");
        idle.set_prepare_mra_on_report(true).expect("mark");
        id.destroy().expect("destroy");
        assert_eq!(next(), vec![oneway(op::MRA_ON_REPORT), op::DESTROY]);
        idle.destroy().expect("destroy");
        assert_eq!(next(), vec![op::DESTROY]);

        // Inside a batch a destroy is held like the batch's one-way calls
        // (round 12): it leaves in order with them when the batch ends,
        // not before.
        let req = ReqParams {
            service_id: 0x1234,
            qp_type: qp_type::RC,
            ..ReqParams::default()
        };
        let (a, b) = (
            dev.create_id(None, std::ptr::null_mut(), None)
                .expect("create_id"),
            dev.create_id(None, std::ptr::null_mut(), None)
                .expect("create_id"),
        );
        dev.batch(|| {
            a.send_req(&req).expect("send_req");
            a.destroy().expect("destroy");
            assert!(quiet(&rx).is_err(), "a destroy left before the batch's end");
            b.send_req(&req).expect("send_req");
        });
        assert_eq!(
            next(),
            vec![oneway(op::SEND_REQ), op::DESTROY, oneway(op::SEND_REQ)]
        );
        // A batch holding only a destroy sends it at its end: nothing else
        // needs to follow.
        dev.batch(|| b.destroy().expect("destroy"));
        assert_eq!(next(), vec![op::DESTROY]);
        assert_eq!(dev.live_ids(), 0);
    }

    /// A callback's non-zero return destroys its id on the reader thread,
    /// inside the wake-up's batch: the `DESTROY` is held there and leaves
    /// when the batch ends, even though the process sends nothing after.
    #[test]
    fn a_callback_s_destroy_leaves_at_the_end_of_the_reader_s_batch() {
        let (ours, theirs) = crate::ipc::sock::pair();
        let (tx, rx) = mpsc::channel();
        let fd = theirs.try_clone().expect("fake service: dup");
        std::thread::spawn(move || fake_service(theirs, tx));
        let dev = Remote::open(ours, "soft:fake").expect("open through the fake service");
        let next = || rx.recv_timeout(Duration::from_secs(5)).expect("a message");
        let done: RustHandler = Arc::new(|_: &crate::runtime::CmId, _: &Event| 1);
        let id = dev
            .create_id(None, std::ptr::null_mut(), Some(done))
            .expect("create_id");
        let h = id.handle();
        drop(id);
        event(&fd, h, EventType::DrepReceived);
        assert_eq!(next(), vec![op::DESTROY]);
        assert_eq!(dev.live_ids(), 0);
    }

    /// `rdma_destroy_id` through the service: the port binding's release
    /// leaves in the `DESTROY`'s message (one send per destroy), behind
    /// the records held before it; a release that cannot leave (the id
    /// already destroyed) comes back to the caller.
    #[test]
    fn a_destroy_carries_its_port_release_in_one_message() {
        let (ours, theirs) = crate::ipc::sock::pair();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || fake_service(theirs, tx));
        let dev = Remote::open(ours, "soft:fake").expect("open through the fake service");
        let next = || rx.recv_timeout(Duration::from_secs(5)).expect("a message");
        let release = || {
            let mut w = Header {
                op: op::PORT_RELEASE_BY,
                seq: 0,
                handle: 0,
            }
            .record();
            w.put(&7u64)
                .put(&9u64)
                .put(&0x106u16)
                .put(&7471u16)
                .put(&1u64);
            crate::ipc::PortRelease(w.into_bytes())
        };
        let id = dev
            .create_id(None, std::ptr::null_mut(), None)
            .expect("create_id");
        let (r, back) = id.destroy_releasing(release());
        assert_eq!(r, Ok(()));
        assert!(back.is_none(), "the release did not leave");
        assert_eq!(next(), vec![op::DESTROY, op::PORT_RELEASE_BY]);
        let (r, back) = id.destroy_releasing(release());
        assert_eq!(r, Err(Errno::EINVAL));
        assert!(back.is_some(), "a refused destroy kept the release");

        // Inside a batch, behind the held records, in the same message.
        let b = dev
            .create_id(None, std::ptr::null_mut(), None)
            .expect("create_id");
        let req = ReqParams {
            service_id: 0x1234,
            qp_type: qp_type::RC,
            ..ReqParams::default()
        };
        dev.batch(|| {
            b.send_req(&req).expect("send_req");
            assert!(b.destroy_releasing(release()).1.is_none());
            assert_eq!(
                next(),
                vec![op::SEND_REQ | op::ONEWAY, op::DESTROY, op::PORT_RELEASE_BY]
            );
        });
    }

    /// The event record the service pushes for `handle`.
    fn event(fd: &OwnedFd, handle: u64, kind: EventType) {
        let mut w = Header {
            op: op::EVENT,
            seq: 0,
            handle,
        }
        .record();
        w.put(&WireEvent {
            public: Public::default(),
            listener: 0,
            event: Event {
                id: Handle(handle),
                kind,
                param: EventParam::None,
                local_id: 0,
                mad: None,
            },
        });
        sock::send(fd, &w.into_bytes()).expect("fake service: send");
    }

    /// A callback on the reader thread that makes a round trip reads the
    /// socket itself; an event it reads for another id goes to the
    /// delivery thread, which sleeps and must be woken (it is woken only
    /// when it sleeps: `Ready::sleeping`).
    #[test]
    fn an_event_a_waiting_caller_reads_wakes_the_delivery_thread() {
        let (ours, theirs) = crate::ipc::sock::pair();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; ipc::MAX_RECORD];
            let mut next = 100u64;
            while let Ok(n) = sock::recv(&theirs, &mut buf) {
                if n == 0 {
                    return;
                }
                let (h, _) = Header::parse(&buf[..n]).expect("fake service: header");
                match h.op {
                    op::OPEN => reply(&theirs, h, |w| {
                        w.put(&Opened {
                            name: b"soft:fake".to_vec(),
                            node_guid: 1,
                            ports: Box::new([]),
                        });
                    }),
                    // Ids 100 and 101 are made by the test, then 100 sends a
                    // REQ: the event that runs 100's callback.
                    o if o == op::SEND_REQ | op::ONEWAY => {
                        event(&theirs, 100, EventType::RepReceived);
                    }
                    op::CREATE_IDS => {
                        // The lease 100's callback asks for is answered
                        // behind an event for 101.
                        if next == 102 {
                            event(&theirs, 101, EventType::DreqReceived);
                        }
                        let ids: Box<[Created]> = Box::new([Created {
                            handle: next,
                            public: Public::default(),
                        }]);
                        next += 1;
                        reply(&theirs, h, |w| {
                            w.put(&ids);
                        });
                    }
                    _ => {}
                }
            }
        });
        let dev = Remote::open(ours, "soft:fake").expect("open through the fake service");
        let (tx, rx) = mpsc::channel::<(u64, bool)>();
        let on_reader = tx.clone();
        let a: RustHandler = Arc::new(move |id: &crate::runtime::CmId, _: &Event| {
            // A round trip from the reader thread: a lease.
            let made = id.device().create_id(None, std::ptr::null_mut(), None);
            let _ = on_reader.send((id.handle(), made.is_ok()));
            0
        });
        let b: RustHandler = Arc::new(move |id: &crate::runtime::CmId, _: &Event| {
            let _ = tx.send((id.handle(), true));
            0
        });
        let id_a = dev
            .create_id(None, std::ptr::null_mut(), Some(a))
            .expect("create_id");
        let id_b = dev
            .create_id(None, std::ptr::null_mut(), Some(b))
            .expect("create_id");
        id_a.send_req(&ReqParams {
            service_id: 0x1234,
            qp_type: qp_type::RC,
            ..ReqParams::default()
        })
        .expect("send_req");
        let mut seen = Vec::new();
        for _ in 0..2 {
            seen.push(
                rx.recv_timeout(Duration::from_secs(5))
                    .expect("both callbacks ran (the delivery thread was woken)"),
            );
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![(100, true), (101, true)]);
        assert_eq!((id_a.handle(), id_b.handle()), (100, 101));
    }
}
