//! Capture of every CM MAD this process sends and receives, to a pcapng
//! file (`IBCM_PCAP=FILE`, `%p` in FILE = the process ID;
//! `ibcm_pcap_start` / `ibcm_pcap_stop`).
//!
//! * The hook: each transport (`fabric::udp`, `fabric::loopback`,
//!   `fabric::umad`) owns a [`Tap`] and, per MAD, tests [`active`] — one
//!   relaxed load of a static and a branch, the whole cost while no capture
//!   runs. Outbound MADs are recorded as they are handed to the socket /
//!   queue / umad file, inbound ones as they are accepted from it.
//! * Records: one Enhanced Packet Block per MAD with the real time (ns)
//!   and the direction (`epb_flags`), holding the synthetic RoCEv2 frame of
//!   [`super::writer::rocev2_frame`]: real addresses, real UDP source port
//!   and BTH for the software fabric; for the in-process fabric and umad,
//!   addresses from the GIDs (a LID-only InfiniBand end becomes `fe80::`
//!   + LID), source port 4791, PSN = the low 24 bits of the TID.
//! * One Interface Description Block per device (`if_name` = the device
//!   name), written before the device's first record.
//! * Records go into a memory buffer under a mutex (a short critical
//!   section: no I/O); a thread (`ibcm-pcap`) writes the buffer to the file
//!   every 100 ms or when it passes 256 KiB, and the file is completed on
//!   `ibcm_pcap_stop`, device close and process exit (`atexit`). The file
//!   holds whole blocks only, so it is readable at every moment.
//! * Size cap: the file never grows beyond the limit (the section header
//!   is always written); the record that would pass it ends the capture
//!   with one warning on stderr. A write error also ends it (one line) and
//!   is returned by `ibcm_pcap_stop`.
//! * `fork`: the child does not touch its parent's capture (records stop
//!   in it, its exit does not write or close the parent's file).

use super::Direction;
use super::writer;
use crate::engine::{Errno, errno};
use crate::log::{ERROR, WARN};
use crate::wire::Gid;
use crate::wire::roce::{self, Bth, Deth, GSI_PAYLOAD_LEN, IcrcInput, ROCEV2_UDP_PORT};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, Once};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// File size cap when none is given (`IBCM_PCAP_LIMIT`, `max_bytes` 0).
pub const DEFAULT_LIMIT: u64 = 256 << 20;
/// How often buffered records are written to the file.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);
/// Buffered bytes that make the writer thread write at once.
const FLUSH_AT: usize = 256 << 10;

/// Whether records are being taken (the hot-path test).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Capture number; 0 is never used, so a fresh [`Tap`] matches none.
static GENERATION: AtomicU32 = AtomicU32::new(0);
/// The process the capture state belongs to (0: none yet). A child made
/// by `fork` inherits the state but not the writer thread, and its locks
/// may have been held by threads it does not have: it leaves it alone.
static OWNER: AtomicU32 = AtomicU32::new(0);

fn inherited() -> bool {
    let o = OWNER.load(Ordering::Relaxed);
    o != 0 && o != crate::log::pid()
}

/// `pthread_atfork` child handler: records stop at once in the child.
extern "C" fn forked_child() {
    ACTIVE.store(false, Ordering::Relaxed);
}

/// What recorders touch: the buffer and its accounting.
struct Session {
    number: u32,
    limit: u64,
    /// Bytes in the file plus bytes buffered.
    used: u64,
    buf: Vec<u8>,
    next_if: u32,
    /// The limit was reached or a write failed: nothing more is taken.
    ended: bool,
    path: PathBuf,
}

/// What the writers (the thread, stop, close, exit) touch: the file.
struct Output {
    number: u32,
    file: File,
    /// The buffer swapped in for the one being written.
    spare: Vec<u8>,
    /// The first write error (errno).
    error: Option<i32>,
    writer: Option<JoinHandle<()>>,
}

// Lock order: OUTPUT, then SESSION. Recorders take only SESSION.
static SESSION: Mutex<Option<Session>> = Mutex::new(None);
static OUTPUT: Mutex<Option<Output>> = Mutex::new(None);
/// Wakes the writer thread (paired with SESSION).
static WAKE: Condvar = Condvar::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a capture is taking records. Transports call the [`Tap`] only
/// when this is true.
#[inline(always)]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Starts capturing to `path` (created or truncated), the file capped at
/// `limit` bytes. `EBUSY` if a capture runs; an open error's errno.
pub fn start(path: &Path, limit: u64) -> Result<(), Errno> {
    if inherited() {
        return Err(Errno::EBUSY);
    }
    let mut out = lock(&OUTPUT);
    if out.is_some() {
        return Err(Errno::EBUSY);
    }
    let mut file = File::create(path).map_err(|e| Errno(e.raw_os_error().unwrap_or(errno::EIO)))?;
    let mut shb = Vec::new();
    writer::section_header(&mut shb, concat!("ibcm ", env!("CARGO_PKG_VERSION")));
    file.write_all(&shb)
        .map_err(|e| Errno(e.raw_os_error().unwrap_or(errno::EIO)))?;
    let number = GENERATION
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_add(1)
        .max(1);
    *lock(&SESSION) = Some(Session {
        number,
        limit,
        used: shb.len() as u64,
        buf: Vec::with_capacity(64 << 10),
        next_if: 0,
        ended: false,
        path: path.to_path_buf(),
    });
    let writer = match std::thread::Builder::new()
        .name("ibcm-pcap".into())
        .spawn(move || writer_thread(number))
    {
        Ok(h) => h,
        Err(e) => {
            *lock(&SESSION) = None;
            return Err(Errno(e.raw_os_error().unwrap_or(errno::ENOMEM)));
        }
    };
    *out = Some(Output {
        number,
        file,
        spare: Vec::with_capacity(64 << 10),
        error: None,
        writer: Some(writer),
    });
    OWNER.store(crate::log::pid(), Ordering::Relaxed);
    drop(out);
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(forked_child));
    });
    ACTIVE.store(true, Ordering::Release);
    crate::ibcm_log!(
        crate::log::INFO,
        "capturing CM MADs to {} (at most {limit} bytes)",
        path.display()
    );
    Ok(())
}

/// Stops the capture: writes what is buffered and closes the file.
/// `ENOENT` if none runs; the errno of the first failed write, if any.
pub fn stop() -> Result<(), Errno> {
    if inherited() {
        return Err(Errno::ENOENT);
    }
    let (writer, result) = {
        let mut guard = lock(&OUTPUT);
        let Some(mut out) = guard.take() else {
            return Err(Errno::ENOENT);
        };
        ACTIVE.store(false, Ordering::Release);
        OWNER.store(0, Ordering::Relaxed);
        let session = lock(&SESSION).take();
        WAKE.notify_all();
        if let Some(s) = session.filter(|s| s.number == out.number) {
            write_out(&mut out, &s.buf, &s.path);
        }
        let result = match out.error {
            Some(e) => Err(Errno(e)),
            None => Ok(()),
        };
        (out.writer.take(), result)
        // The file closes here, with OUTPUT still held: a new capture of
        // the same path cannot see it half-written.
    };
    if let Some(h) = writer
        && h.thread().id() != std::thread::current().id()
    {
        let _ = h.join();
    }
    result
}

/// Writes what is buffered now (device close).
pub fn flush() {
    if inherited() {
        return;
    }
    let mut guard = lock(&OUTPUT);
    if let Some(out) = guard.as_mut() {
        flush_output(out);
    }
}

/// Moves the buffer out under SESSION, writes it under OUTPUT only.
fn flush_output(out: &mut Output) {
    let path = {
        let mut s = lock(&SESSION);
        match s.as_mut() {
            Some(s) if s.number == out.number && !s.buf.is_empty() => {
                std::mem::swap(&mut s.buf, &mut out.spare);
                s.path.clone()
            }
            _ => return,
        }
    };
    let data = std::mem::take(&mut out.spare);
    write_out(out, &data, &path);
    out.spare = data;
    out.spare.clear();
}

fn write_out(out: &mut Output, data: &[u8], path: &Path) {
    if out.error.is_some() || data.is_empty() {
        return;
    }
    if let Err(e) = out.file.write_all(data) {
        out.error = Some(e.raw_os_error().unwrap_or(errno::EIO));
        ACTIVE.store(false, Ordering::Release);
        if let Some(s) = lock(&SESSION).as_mut().filter(|s| s.number == out.number) {
            s.ended = true;
            s.buf.clear();
        }
        crate::log::always(
            ERROR,
            format_args!(
                "CM MAD capture to {}: write failed: {e}; capture ended",
                path.display()
            ),
        );
    }
}

fn writer_thread(number: u32) {
    loop {
        {
            let s = lock(&SESSION);
            let (s, _) = WAKE
                .wait_timeout_while(
                    s,
                    FLUSH_INTERVAL,
                    |s| matches!(s, Some(s) if s.number == number && s.buf.len() < FLUSH_AT),
                )
                .unwrap_or_else(|e| e.into_inner());
            if !matches!(&*s, Some(s) if s.number == number) {
                return;
            }
        }
        let mut guard = lock(&OUTPUT);
        match guard.as_mut() {
            Some(out) if out.number == number => flush_output(out),
            _ => return,
        }
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let _ = stop();
    });
}

/// Parses `IBCM_PCAP_LIMIT`: bytes, optionally with a K, M or G suffix
/// (powers of 1024).
pub fn parse_limit(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// Starts the capture `IBCM_PCAP` asks for, once per process (at the first
/// device open).
pub fn start_from_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Some(path) = std::env::var_os("IBCM_PCAP").filter(|p| !p.is_empty()) else {
            return;
        };
        let limit = match std::env::var("IBCM_PCAP_LIMIT") {
            Err(_) => DEFAULT_LIMIT,
            Ok(v) => parse_limit(&v).filter(|&n| n > 0).unwrap_or_else(|| {
                crate::log::always(
                    WARN,
                    format_args!(
                        "IBCM_PCAP_LIMIT={v:?} is not a positive byte count (e.g. 1000000, \
                         64M); using {DEFAULT_LIMIT}"
                    ),
                );
                DEFAULT_LIMIT
            }),
        };
        let path = with_pid(&path);
        match start(&path, limit) {
            Ok(()) => {}
            Err(Errno::EBUSY) => crate::log::always(
                WARN,
                format_args!(
                    "IBCM_PCAP={}: a capture started by ibcm_pcap_start() is running; \
                     not starting another",
                    path.display()
                ),
            ),
            Err(e) => crate::log::always(
                ERROR,
                format_args!(
                    "IBCM_PCAP={}: cannot capture: {}",
                    path.display(),
                    std::io::Error::from_raw_os_error(e.0)
                ),
            ),
        }
    });
}

/// `path` with every `%p` replaced by the process ID, so processes that
/// share an `IBCM_PCAP` value write separate files.
pub fn with_pid(path: &std::ffi::OsStr) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let b = path.as_bytes();
    let pid = std::process::id().to_string();
    let mut out = Vec::with_capacity(b.len() + 8);
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"%p") {
            out.extend_from_slice(pid.as_bytes());
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// One device's connection to the capture.
pub struct Tap {
    name: String,
    /// `generation << 32 | interface id` of the IDB written for this
    /// device in the current capture (written under SESSION).
    iface: AtomicU64,
}

impl Tap {
    /// A tap for the device called `name` (the IDB's `if_name`). Starts
    /// the `IBCM_PCAP` capture if the environment asks for one.
    pub fn new(name: impl Into<String>) -> Tap {
        start_from_env();
        Tap {
            name: name.into(),
            iface: AtomicU64::new(0),
        }
    }

    /// Records a framed GSI datagram (UDP payload: BTH, DETH, MAD, ICRC;
    /// the ICRC is recomputed for the frame) from `src` (UDP source port
    /// `sport`) to `dst`.
    #[cold]
    #[inline(never)]
    pub fn gsi(&self, dir: Direction, src: &Gid, dst: &Gid, sport: u16, payload: &[u8]) {
        let Ok(p) = <&[u8; GSI_PAYLOAD_LEN]>::try_from(payload) else {
            return;
        };
        let ts = now_nanos();
        let frame = writer::rocev2_frame(src, dst, sport, p);
        self.write(dir, ts, frame.as_bytes());
    }

    /// Records a MAD that has no RoCEv2 framing of its own (in-process
    /// fabric, umad): BTH with `pkey` and PSN = TID & 0xFFFFFF, standard
    /// GSI DETH, UDP source port 4791.
    #[cold]
    #[inline(never)]
    pub fn mad(&self, dir: Direction, src: &Gid, dst: &Gid, pkey: u16, mad: &[u8; 256]) {
        let ts = now_nanos();
        let tid_low = u32::from_be_bytes([mad[12], mad[13], mad[14], mad[15]]);
        let mut bth = Bth::gsi(tid_low & 0xff_ffff);
        bth.pkey = pkey;
        let mut p = [0u8; GSI_PAYLOAD_LEN];
        // The ICRC is recomputed by `rocev2_frame` for the real headers.
        let placeholder = IcrcInput::linux_ipv4(
            [0, 0, 0, 0].into(),
            [0, 0, 0, 0].into(),
            ROCEV2_UDP_PORT,
            ROCEV2_UDP_PORT,
        );
        roce::emit_udp_payload(&bth, &Deth::GSI, mad, placeholder, &mut p);
        let frame = writer::rocev2_frame(src, dst, ROCEV2_UDP_PORT, &p);
        self.write(dir, ts, frame.as_bytes());
    }

    fn write(&self, dir: Direction, ts: u64, frame: &[u8]) {
        // (A forked child never gets here: its ACTIVE is cleared at fork.)
        let mut guard = lock(&SESSION);
        let Some(s) = guard.as_mut() else {
            return;
        };
        if s.ended {
            return;
        }
        let cached = self.iface.load(Ordering::Relaxed);
        let iface = if (cached >> 32) as u32 == s.number {
            cached as u32
        } else {
            let mark = s.buf.len();
            writer::interface_description(&mut s.buf, &self.name);
            if !s.account(mark) {
                return;
            }
            let id = s.next_if;
            s.next_if += 1;
            self.iface
                .store(((s.number as u64) << 32) | id as u64, Ordering::Relaxed);
            id
        };
        let mark = s.buf.len();
        writer::enhanced_packet(&mut s.buf, iface, ts, frame, Some(dir));
        if s.account(mark) && s.buf.len() >= FLUSH_AT {
            WAKE.notify_all();
        }
    }
}

impl Drop for Tap {
    /// A closing device's records reach the file now.
    fn drop(&mut self) {
        let cached = self.iface.load(Ordering::Relaxed);
        if cached != 0 && (cached >> 32) as u32 == GENERATION.load(Ordering::Relaxed) {
            flush();
        }
    }
}

impl Session {
    /// Counts the bytes appended since `mark`; if they would take the file
    /// past the limit, removes them, ends the capture (one warning) and
    /// returns false.
    fn account(&mut self, mark: usize) -> bool {
        let n = (self.buf.len() - mark) as u64;
        if self.used + n <= self.limit {
            self.used += n;
            return true;
        }
        self.buf.truncate(mark);
        self.ended = true;
        ACTIVE.store(false, Ordering::Release);
        WAKE.notify_all();
        crate::log::always(
            WARN,
            format_args!(
                "CM MAD capture to {}: size limit of {} bytes reached; later MADs are not \
                 recorded (IBCM_PCAP_LIMIT / ibcm_pcap_start max_bytes)",
                self.path.display(),
                self.limit
            ),
        );
        false
    }
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse() {
        assert_eq!(parse_limit("1000"), Some(1000));
        assert_eq!(parse_limit(" 64M "), Some(64 << 20));
        assert_eq!(parse_limit("2k"), Some(2048));
        assert_eq!(parse_limit("1G"), Some(1 << 30));
        assert_eq!(parse_limit("x"), None);
        assert_eq!(parse_limit(""), None);
        assert_eq!(parse_limit("-1"), None);
        assert_eq!(parse_limit("99999999999999999999G"), None);
    }

    #[test]
    fn pid_in_paths() {
        let pid = std::process::id();
        assert_eq!(
            with_pid("/tmp/cm-%p.pcapng".as_ref()),
            PathBuf::from(format!("/tmp/cm-{pid}.pcapng"))
        );
        assert_eq!(
            with_pid("a%pb%p".as_ref()),
            PathBuf::from(format!("a{pid}b{pid}"))
        );
        assert_eq!(with_pid("plain%".as_ref()), PathBuf::from("plain%"));
    }

    #[test]
    fn lid_gids() {
        assert_eq!(Gid::from_lid(0x1234).to_string(), "fe80::1234");
    }
}
