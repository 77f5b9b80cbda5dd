//! Design B of the host CM service, the service's side
//! (`IBCM_SERVICE_MODE=forward`; docs/SERVICE.md, "Design B"): the
//! service owns each forwarded device's transport; the processes that
//! opened it run its engines (`runtime::forward`) and the service's
//! [`Hub`] switches their MADs. One hub serves every forwarded device of
//! the service, under one lock, with one connection tracker.
//!
//! * **Routing.** A REQ or SIDR_REQ goes to the process holding its
//!   service ID in its device's listen table (none: to the device's first
//!   process, whose engine answers REJ `INVALID_SERVICE_ID` or SIDR_REP
//!   `UNSUPPORTED` and counts the request, as the kernel's CM does; the
//!   hub answers so itself only when no process is left); every other MAD to the process its receiver comm ID names
//!   (`engine::ids::forward_owner`: the process slot is inside the ID); a
//!   REJ that names its connection by the sender's CA GUID goes to every
//!   process of the device.
//! * **No wire between the service's own devices.** A process's MAD for
//!   one of its device's GIDs (or its LID), or for the address and UDP
//!   port of another forwarded soft device, goes straight to the
//!   receiving process. A live capture records a MAD between two soft
//!   devices once, on the sender's tap, as the frame it replaces.
//! * **Tracking.** Every MAD passes the connection tracker (`tracker`)
//!   once. A process's MAD that speaks for a comm ID the process does not
//!   own, or from a GID its device does not have, is dropped, counted and
//!   logged; one from the wire passes whatever the tracker says (the
//!   process's engine judges it, as in-process).
//! * **A process that goes** (exit, crash, SIGKILL: its connection
//!   closes): its listens are released, its slot is free again (last in
//!   line), and the tracker's MADs for its connections leave at once —
//!   DREQs for established ones, REJs for pending ones, as the kernel
//!   sends for a dying process; later MADs to it are answered for it. A
//!   device is closed with its last process.
//! * **Never blocked by a process.** MADs to a process leave without
//!   waiting while its socket has room; when it is full they queue for
//!   the process's writer thread, which waits for room. A process that
//!   lets `MAX_BACKLOG` messages pile up loses the next ones (dropped and
//!   counted, as a congested wire drops them: the CM retransmits).
//! * **Limits.** 128 processes per device (`ids::FORWARD_PROC_BITS`; the
//!   next open gets `-EUSERS`), 16 of them per process id, the service's
//!   listener limit per process (`-ENOMEM`) and its id limit as the
//!   connection ends tracked per process (a REQ or REP beyond it is
//!   dropped and counted; a REQ or REP must carry a comm ID of its
//!   sender's slot), 65,536 wire peers tracked (beyond them, peers share
//!   one tracker name).

use crate::engine::ids::{
    FORWARD_PROC_BITS, FastMap, FastState, IdCodec, PeerMap, PeerState, forward_owner, splitmix64,
};
use crate::engine::{Errno, MadDest, MadSource, PortInfo, Transmit};
use crate::fabric::{Received, Transport, TransportStats};
use crate::ipc::{self, FwdOpened, IdInfo, Opened, fwd, sock};
use crate::log::{INFO, WARN};
use crate::tracker::{Proc, Tracker, Verdict};
use crate::wire::{Gid, attr, peek};
use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Process slots per device.
pub const MAX_PROCS: usize = 1 << FORWARD_PROC_BITS;
/// Slots one process may hold on one device (each open of the device
/// takes one): no process takes every slot of a device.
const MAX_SLOTS_PER_PID: usize = 16;
/// Tracker names of wire peers start here (below: device << 7 | slot).
const WIRE_BASE: Proc = 1 << 31;
/// Wire peers tracked by name at most.
const MAX_WIRE_PEERS: usize = 1 << 16;
/// Messages queued for one process's writer at most.
const MAX_BACKLOG: usize = 4096;
/// How long the tracker keeps closed ends and answers for a dead
/// process (longer than a CM's retries of one message).
const KEEP_MS: u64 = 60_000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

macro_rules! fwd_counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// A forwarded device's counters (live).
        #[derive(Debug, Default)]
        pub struct FwdStats {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        impl FwdStats {
            /// Each counter's name and value.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

fwd_counters! {
    /// MADs from the wire handed to a process.
    wire_in,
    /// MADs of processes sent on the wire.
    wire_out,
    /// MADs handed to a process of the service's devices without the wire.
    local,
    /// Processes' MADs the tracker refused (a comm ID not theirs).
    refused,
    /// Processes' MADs from a GID or port the device does not have.
    spoofed,
    /// MADs that name no process (no such slot, garbage).
    unroutable,
    /// Requests no listener took, answered REJ/SIDR_REP by the hub.
    no_listener,
    /// MADs answered for a process that is gone.
    answered_gone,
    /// MADs sent for processes that went (DREQ, REJ).
    sent_for_gone,
    /// MADs dropped because their process's socket was full.
    dropped_full,
    /// Records of processes that did not decode.
    bad_records,
    /// Listen claims refused (`-EBUSY`, `-ENOMEM`).
    claims_refused,
    /// REQs and REPs for a QP another process's connection holds
    /// (answered REJ `STALE_CONN`; that process sends its DREQ).
    stale,
}

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Messages for a process that its socket had no room for, and whether
/// the process is gone (its writer then ends).
#[derive(Default)]
struct Backlog {
    q: Mutex<(VecDeque<Vec<u8>>, bool)>,
    cv: Condvar,
}

/// One process on a device.
struct ProcEnt {
    /// Our copy of its connection, for sending.
    tx: Arc<OwnedFd>,
    backlog: Arc<Backlog>,
    pid: i32,
    listens: usize,
    /// Records waiting for this wake-up's end.
    out: Vec<u8>,
    logged: u32,
    /// Its `FWD_OPEN` answer went out: records may follow (until then
    /// they wait in `out`: the answer must be the first message).
    ready: bool,
    /// Its CM counters as it last gave them (`fwd::STAT`, asked by
    /// `ibcm stat` or sent as it leaves): added to the device's once it
    /// is gone.
    last_cm: Option<Box<crate::engine::Counters>>,
}

/// A forwarded device.
struct Dev {
    key: String,
    transport: Arc<dyn Transport>,
    ports: Vec<PortInfo>,
    soft: Option<(Gid, u16)>,
    id_key: u64,
    codec: IdCodec,
    procs: Vec<Option<ProcEnt>>,
    free: VecDeque<u32>,
    /// Opens of each slot so far (the next one's generation base).
    opens: Vec<u32>,
    /// Service ID → (slot, when claimed in ms) (IDs the device's
    /// processes choose).
    listens: FastMap<u64, (u32, u64)>,
    stats: Arc<FwdStats>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The port event thread of a real device.
    watcher: Option<std::thread::JoinHandle<()>>,
    /// MADs for the wire, sent after the lock is let go.
    tx: Vec<Transmit>,
    /// No process left, a close asked of a thread of its own (the wire
    /// thread, once no DREQ waits to go again for a dead process's
    /// connection: `Tracker::due`). An attach clears it.
    close_asked: bool,
    /// The CM counters of its processes gone (as each last gave them),
    /// so that the device's do not drop when one leaves.
    gone_cm: crate::engine::Counters,
}

/// A wire peer as the tracker names it: the device, the port, our GID,
/// its GID or LID.
type PeerKey = (u32, u8, Gid, Gid, u16);

struct State {
    devs: Vec<Option<Dev>>,
    by_key: HashMap<String, u32>,
    /// The service's own soft devices (a handful of keys: the seeded fast
    /// hash, as `runtime::switch`), looked up for every MAD.
    by_soft: FastMap<(Gid, u16), u32>,
    /// Devices being closed (their transport not released yet): an open
    /// of the same name waits.
    closing: Vec<String>,
    tracker: Tracker,
    wire: Vec<(u32, MadDest)>,
    wire_ix: PeerMap<PeerKey, u32>,
    /// Processes with records in `out`, devices with MADs in `tx`.
    dirty: Vec<Proc>,
    dirty_tx: Vec<u32>,
    last_expire: u64,
}

impl State {
    /// The first port of the device of process `p`.
    fn first_port(&self, p: Proc) -> Option<&PortInfo> {
        self.devs.get(split(p).0 as usize)?.as_ref()?.ports.first()
    }

    /// The GID tracker name `p` stands for: a wire peer's, or the first of
    /// its process's device.
    fn gid_of(&self, p: Proc) -> Option<Gid> {
        if p >= WIRE_BASE {
            self.wire.get((p - WIRE_BASE) as usize).map(|w| w.1.dgid)
        } else {
            self.first_port(p)?.gids.first().map(|g| g.gid)
        }
    }
}

/// Where a MAD goes in its device.
enum Target {
    Proc(u32),
    NoListener,
    Every,
    Nowhere,
}

/// Who sent the MAD being routed, and where its answers go.
#[derive(Clone, Copy)]
enum Sender {
    /// A process (its tracker name) and the source its answers carry.
    Proc(Proc, MadSource),
    /// The wire of a device: the peer's tracker name and where answers go.
    Wire(Proc, u32, MadDest),
}

impl Sender {
    fn name(&self) -> Proc {
        match self {
            Sender::Proc(p, _) | Sender::Wire(p, _, _) => *p,
        }
    }
}

fn pname(dev: u32, slot: u32) -> Proc {
    dev << FORWARD_PROC_BITS | slot
}

fn split(p: Proc) -> (u32, u32) {
    (p >> FORWARD_PROC_BITS, p & (MAX_PROCS as u32 - 1))
}

/// Whether tracker name `p` is a process of device `dev` (not a wire peer).
fn of_dev(p: Proc, dev: u32) -> bool {
    p < WIRE_BASE && split(p).0 == dev
}

/// The source a MAD's answer carries back: the GIDs swapped.
fn swapped(s: &MadSource) -> MadSource {
    MadSource {
        sgid: s.dgid,
        dgid: s.sgid,
        ..*s
    }
}

fn random_key() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: an 8-byte buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    splitmix64(u64::from_ne_bytes(b) ^ if n == 8 { 0 } else { t })
}

fn table_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0xf0d_u64)
}

/// See the module documentation.
pub struct Hub {
    st: Mutex<State>,
    closed_cv: Condvar,
    epoch: Instant,
    max_listens: usize,
    /// Tracked connection ends per process at most.
    max_ends: usize,
    /// `ibcm ids` and `ibcm stat` answers being gathered.
    asks: Mutex<HashMap<AskKey, Gathered>>,
    asks_cv: Condvar,
    ask_seq: AtomicU64,
}

/// An `ibcm ids` or `ibcm stat` question to one process: (device, slot,
/// seq).
type AskKey = (u32, u32, u64);

/// A process's answer so far.
#[derive(Default)]
struct Gathered {
    ids: Vec<IdInfo>,
    cm: Option<Box<crate::engine::Counters>>,
    done: bool,
}

/// How long `ibcm ids` waits for the processes' own lists (a process
/// that does not answer in time, its event loop busy in a callback or the
/// process stopped, is shown as the service knows it).
const IDS_WAIT: Duration = Duration::from_millis(500);
/// Ids a process may report at most.
const IDS_MAX: usize = 1 << 16;
/// Bytes held for a process whose open has not been answered yet.
const NOT_READY_MAX: usize = 1 << 20;

/// A forwarded device as `ibcm stat` shows it.
pub struct FwdDevice {
    pub key: String,
    pub processes: usize,
    /// Open connection ends of its processes (the tracker's).
    pub ends: usize,
    pub transport: crate::fabric::TransportCounters,
    pub stats: Arc<FwdStats>,
    /// The CM counters of its processes (those that answered), summed.
    pub cm: crate::engine::Counters,
}

/// What `FWD_OPEN` answers, and the device and slot the process got.
pub struct Attached {
    pub dev: u32,
    pub slot: u32,
    pub opened: FwdOpened,
}

impl Hub {
    pub fn new(max_listens: usize, max_ends: usize) -> Arc<Hub> {
        Arc::new(Hub {
            st: Mutex::new(State {
                devs: Vec::new(),
                by_key: HashMap::new(),
                by_soft: FastMap::with_hasher(FastState::new(table_seed())),
                closing: Vec::new(),
                tracker: Tracker::new(),
                wire: Vec::new(),
                wire_ix: PeerMap::with_hasher(PeerState::new(table_seed())),
                dirty: Vec::new(),
                dirty_tx: Vec::new(),
                last_expire: 0,
            }),
            closed_cv: Condvar::new(),
            epoch: Instant::now(),
            max_listens,
            max_ends,
            asks: Mutex::new(HashMap::new()),
            asks_cv: Condvar::new(),
            ask_seq: AtomicU64::new(1),
        })
    }

    /// Asks every process of every forwarded device for its ids and
    /// waits (at most [`IDS_WAIT`]) for the answers: (device, slot) →
    /// its ids, for those that answered in full.
    fn ask_ids(&self) -> HashMap<(u32, u32), Vec<IdInfo>> {
        self.ask_all(fwd::put_ids_ask)
            .into_iter()
            .map(|(k, g)| (k, g.ids))
            .collect()
    }

    /// The CM counters of each forwarded device: the sum of its
    /// processes' that answered within [`IDS_WAIT`] (one that did not
    /// counts as it last answered) and of its processes gone (device
    /// index →).
    fn ask_counters(&self) -> HashMap<u32, crate::engine::Counters> {
        let mut answers = self.ask_all(fwd::put_stat_ask);
        let st = lock(&self.st);
        let mut out: HashMap<u32, crate::engine::Counters> = HashMap::new();
        for (dev, d) in st.devs.iter().enumerate() {
            let Some(d) = d else { continue };
            let c = out.entry(dev as u32).or_default();
            c.merge(&d.gone_cm);
            for (slot, p) in d.procs.iter().enumerate() {
                let Some(p) = p else { continue };
                let now = answers
                    .remove(&(dev as u32, slot as u32))
                    .and_then(|g| g.cm);
                if let Some(pc) = now.as_deref().or(p.last_cm.as_deref()) {
                    c.merge(pc);
                }
            }
        }
        out
    }

    /// Puts a question (`put`) to every process of every forwarded device
    /// and waits (at most [`IDS_WAIT`]) for the answers: (device, slot)
    /// → its answer, for those that answered in full.
    fn ask_all(&self, put: fn(&mut Vec<u8>, u64)) -> HashMap<(u32, u32), Gathered> {
        let seq = self.ask_seq.fetch_add(1, Ordering::Relaxed);
        let mut keys = Vec::new();
        {
            let mut guard = lock(&self.st);
            let st = &mut *guard;
            let mut asks = lock(&self.asks);
            for dev in 0..st.devs.len() as u32 {
                for slot in 0..MAX_PROCS as u32 {
                    let Some(e) = st.devs[dev as usize]
                        .as_mut()
                        .and_then(|d| d.procs[slot as usize].as_mut())
                    else {
                        continue;
                    };
                    if e.out.is_empty() {
                        st.dirty.push(pname(dev, slot));
                    }
                    put(&mut e.out, seq);
                    asks.insert((dev, slot, seq), Gathered::default());
                    keys.push((dev, slot, seq));
                }
            }
            drop(asks);
            let out = self.finish(st);
            drop(guard);
            send_out(out);
        }
        let end = Instant::now() + IDS_WAIT;
        let mut asks = lock(&self.asks);
        while keys.iter().any(|k| asks.get(k).is_some_and(|a| !a.done)) {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            asks = self
                .asks_cv
                .wait_timeout(asks, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        keys.iter()
            .filter_map(|k| {
                let g = asks.remove(k)?;
                g.done.then_some(((k.0, k.1), g))
            })
            .collect()
    }

    /// A process's answer to `STAT_ASK` `seq`.
    fn stat_answered(&self, st: &mut State, dev: u32, slot: u32, seq: u64, body: &[u8]) {
        let Ok(c) = fwd::stat(body) else {
            return self.refuse(
                st,
                pname(dev, slot),
                "a STAT record that does not decode",
                |s| &s.bad_records,
            );
        };
        if let Some(p) = st
            .devs
            .get_mut(dev as usize)
            .and_then(Option::as_mut)
            .and_then(|d| d.procs[slot as usize].as_mut())
        {
            p.last_cm = Some(Box::new(c.clone()));
        }
        if seq == fwd::LAST_STAT {
            return;
        }
        let mut asks = lock(&self.asks);
        if let Some(a) = asks.get_mut(&(dev, slot, seq))
            && !a.done
        {
            a.cm = Some(Box::new(c));
            a.done = true;
            self.asks_cv.notify_all();
        }
    }

    /// A part of a process's answer to `IDS_ASK` `seq`.
    fn ids_answered(&self, st: &mut State, dev: u32, slot: u32, seq: u64, last: bool, body: &[u8]) {
        let Ok(rows) = fwd::ids(body) else {
            return self.refuse(
                st,
                pname(dev, slot),
                "an IDS record that does not decode",
                |s| &s.bad_records,
            );
        };
        let mut asks = lock(&self.asks);
        // An answer nobody asked for (late, or forged) is dropped.
        if let Some(a) = asks.get_mut(&(dev, slot, seq))
            && !a.done
        {
            let room = IDS_MAX.saturating_sub(a.ids.len());
            a.ids.extend(rows.into_iter().take(room));
            if last {
                a.done = true;
                self.asks_cv.notify_all();
            }
        }
    }

    /// Whether the device of service key `key` is forwarded.
    pub fn has(&self, key: &str) -> bool {
        lock(&self.st).by_key.contains_key(key)
    }

    /// Open ends of connections the tracker follows.
    pub fn tracked(&self) -> usize {
        lock(&self.st).tracker.len()
    }

    /// Each forwarded device: its key, its processes, the open connection
    /// ends of its processes the tracker follows, its transport's counters
    /// and its own.
    pub fn devices(&self) -> Vec<FwdDevice> {
        let mut cm = self.ask_counters();
        let st = lock(&self.st);
        st.devs
            .iter()
            .enumerate()
            .filter_map(|(i, d)| Some((i as u32, d.as_ref()?)))
            .map(|(i, d)| FwdDevice {
                key: d.key.clone(),
                processes: d.procs.iter().flatten().count(),
                ends: st.tracker.len_of(|p| of_dev(p, i)),
                transport: d.transport.stats().snapshot(),
                stats: d.stats.clone(),
                cm: cm.remove(&i).unwrap_or_default(),
            })
            .collect()
    }

    /// What `ibcm ids` shows of the forwarded devices: every id of each
    /// process, as the process lists it when asked (`fwd::IDS_ASK`); for a
    /// process that does not answer within [`IDS_WAIT`], what the service
    /// knows: its listens, and each open connection end as the tracker
    /// follows it: an active end from its REQ, a passive one from the REQ
    /// it was handed (`REQ_RCVD`, local comm ID 0 until it answers), none
    /// for an id that never sent or received a MAD. The peer is the remote
    /// GID, or the device's own for a peer on the service's devices.
    pub fn ids(&self) -> Vec<IdInfo> {
        use crate::engine::State;
        use crate::tracker::EndState;
        let answered = self.ask_ids();
        let now = self.now_ms();
        let st = lock(&self.st);
        let mut out = Vec::new();
        for (dev, d) in st.devs.iter().enumerate() {
            let Some(d) = d else { continue };
            let dev = dev as u32;
            let pid = |slot: u32| d.procs[slot as usize].as_ref().map_or(0, |p| p.pid);
            // The processes that answered: their own lists.
            let said = |p: Proc| p < WIRE_BASE && answered.contains_key(&split(p));
            for slot in 0..MAX_PROCS as u32 {
                if let Some(rows) = answered.get(&(dev, slot)) {
                    out.extend(rows.iter().map(|r| IdInfo {
                        pid: pid(slot),
                        device: d.key.clone().into_bytes(),
                        ..r.clone()
                    }));
                }
            }
            let own = st.gid_of(pname(dev, 0));
            let mut listens: Vec<(&u64, &(u32, u64))> = d.listens.iter().collect();
            listens.sort_by_key(|(_, (_, born))| *born);
            for (&sid, &(slot, born)) in listens {
                if said(pname(dev, slot)) {
                    continue;
                }
                out.push(IdInfo {
                    pid: pid(slot),
                    device: d.key.clone().into_bytes(),
                    state: State::Listen as u32,
                    local_id: 0,
                    remote_id: 0,
                    service_id: sid,
                    peer: None,
                    age_ms: now.saturating_sub(born),
                });
            }
            let here = |p: Proc| of_dev(p, dev);
            let gid_of = |p: Proc| st.gid_of(p).or(own.filter(|_| p < WIRE_BASE));
            // A REQ delivered to a process and not answered yet: its end
            // there is REQ_RCVD (its comm ID unknown until it answers).
            let mut asked = st
                .tracker
                .ends_of(|p| !here(p))
                .into_iter()
                .chain(st.tracker.ends_of(here))
                .filter(|e| e.state == EndState::ReqSent && here(e.peer_proc) && !said(e.peer_proc))
                .collect::<Vec<_>>();
            asked.sort_by_key(|e| e.born_ms);
            for e in asked {
                out.push(IdInfo {
                    pid: pid(split(e.peer_proc).1),
                    device: d.key.clone().into_bytes(),
                    state: State::ReqRcvd as u32,
                    local_id: 0,
                    remote_id: e.comm,
                    service_id: e.service_id,
                    peer: gid_of(e.proc),
                    age_ms: now.saturating_sub(e.born_ms),
                });
            }
            let mut ends = st.tracker.ends_of(|p| here(p) && !said(p));
            ends.sort_by_key(|e| e.born_ms);
            for e in ends {
                let state = match e.state {
                    EndState::ReqSent => State::ReqSent,
                    EndState::RepRcvd => State::RepRcvd,
                    EndState::RepSent => State::RepSent,
                    EndState::Established => State::Established,
                    EndState::DreqSent => State::DreqSent,
                    EndState::DreqRcvd => State::DreqRcvd,
                    EndState::Closed => continue,
                };
                let peer = gid_of(e.peer_proc);
                out.push(IdInfo {
                    pid: pid(split(e.proc).1),
                    device: d.key.clone().into_bytes(),
                    state: state as u32,
                    local_id: e.comm,
                    remote_id: e.peer_comm,
                    service_id: e.service_id,
                    peer,
                    age_ms: now.saturating_sub(e.born_ms),
                });
            }
        }
        out
    }

    /// Attaches the process on `fd` to device `name` (service key `key`),
    /// opening the device if it is not forwarded yet: `-EUSERS` when
    /// every slot of the device is taken, the transport's errno when it
    /// cannot be opened.
    pub fn attach(
        self: &Arc<Self>,
        key: &str,
        name: &str,
        fd: &OwnedFd,
        pid: i32,
    ) -> Result<Attached, Errno> {
        self.attach_with(key, || crate::runtime::open_transport(name), fd, pid)
    }

    /// `attach`, with the transport `open` gives when the device is not
    /// forwarded yet.
    pub fn attach_with(
        self: &Arc<Self>,
        key: &str,
        open: impl FnOnce() -> Result<Arc<dyn Transport>, Errno>,
        fd: &OwnedFd,
        pid: i32,
    ) -> Result<Attached, Errno> {
        let tx = Arc::new(fd.try_clone().map_err(|_| Errno(libc::EMFILE))?);
        let mut st = lock(&self.st);
        while st.closing.iter().any(|k| k == key) {
            st = self.closed_cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let dev = match st.by_key.get(key) {
            Some(&d) => d,
            None => self.open_dev(&mut st, key, open()?)?,
        };
        let d = st.devs[dev as usize].as_mut().expect("listed device");
        let mine = d.procs.iter().flatten().filter(|p| p.pid == pid).count();
        if mine >= MAX_SLOTS_PER_PID {
            ibcm_log!(
                WARN,
                "{key}: process {pid} holds {mine} slots of the device already: -EUSERS"
            );
            return Err(Errno(libc::EUSERS));
        }
        let Some(slot) = d.free.pop_front() else {
            ibcm_log!(
                WARN,
                "{key}: process {pid}: {MAX_PROCS} processes use the device already: -EUSERS"
            );
            let empty = d.procs.iter().all(Option::is_none);
            drop(st);
            if empty {
                self.close_dev(dev);
            }
            return Err(Errno(libc::EUSERS));
        };
        d.opens[slot as usize] += 1;
        d.close_asked = false;
        let gen_base = d.opens[slot as usize].wrapping_mul(0x9e37_79b9) >> 25;
        let backlog = Arc::new(Backlog::default());
        let (w, b) = (tx.clone(), backlog.clone());
        let writer = std::thread::Builder::new()
            .name(format!("ibcmd-fw{slot}"))
            .spawn(move || writer(&w, &b));
        if writer.is_err() {
            d.free.push_front(slot);
            return Err(Errno::ENOMEM);
        }
        d.procs[slot as usize] = Some(ProcEnt {
            tx,
            backlog,
            pid,
            listens: 0,
            out: Vec::new(),
            logged: 0,
            ready: false,
            last_cm: None,
        });
        let opened = FwdOpened {
            opened: Opened {
                name: d.transport.describe().into_bytes(),
                node_guid: d.transport.node_guid(),
                ports: d.ports.clone().into_boxed_slice(),
            },
            id_key: d.id_key,
            proc_slot: slot,
            gen_base,
        };
        ibcm_log!(INFO, "{key}: process {pid} attached (slot {slot})");
        Ok(Attached { dev, slot, opened })
    }

    fn open_dev(
        self: &Arc<Self>,
        st: &mut State,
        key: &str,
        transport: Arc<dyn Transport>,
    ) -> Result<u32, Errno> {
        let dev = match st.devs.iter().position(Option::is_none) {
            Some(i) => i as u32,
            None => {
                st.devs.push(None);
                st.devs.len() as u32 - 1
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (me, t, s) = (self.clone(), transport.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("ibcmd-fwd".into())
            .spawn(move || me.wire_loop(dev, &t, &s))
            .map_err(|_| Errno::ENOMEM)?;
        let watcher = if transport.watches_ports() {
            let (me, t, s) = (self.clone(), transport.clone(), stop.clone());
            let w = std::thread::Builder::new()
                .name("ibcmd-fwd-ports".into())
                .spawn(move || me.port_loop(dev, &t, &s));
            match w {
                Ok(w) => Some(w),
                Err(_) => {
                    stop.store(true, Ordering::SeqCst);
                    transport.wake();
                    return Err(Errno::ENOMEM);
                }
            }
        } else {
            None
        };
        let id_key = random_key();
        let soft = transport.soft_addr();
        if let Some(a) = soft {
            st.by_soft.insert(a, dev);
        }
        ibcm_log!(INFO, "forwarding {key} ({})", transport.describe());
        st.devs[dev as usize] = Some(Dev {
            key: key.to_string(),
            ports: transport.ports(),
            transport,
            soft,
            id_key,
            codec: IdCodec::new(id_key),
            procs: (0..MAX_PROCS).map(|_| None).collect(),
            free: (0..MAX_PROCS as u32).collect(),
            opens: vec![0; MAX_PROCS],
            listens: FastMap::with_hasher(FastState::new(id_key)),
            stats: Arc::default(),
            stop,
            thread: Some(thread),
            watcher,
            tx: Vec::new(),
            close_asked: false,
            gone_cm: crate::engine::Counters::default(),
        });
        st.by_key.insert(key.to_string(), dev);
        Ok(dev)
    }

    /// Closes a device with no process (its wire thread joined without
    /// the lock; an open of the same key waits for the end).
    fn close_dev(&self, dev: u32) {
        let d = {
            let mut st = lock(&self.st);
            // A process that attached since the last one left keeps it.
            let in_use = st
                .devs
                .get(dev as usize)
                .and_then(Option::as_ref)
                .is_none_or(|d| d.procs.iter().any(Option::is_some));
            if in_use {
                return;
            }
            let Some(d) = st.devs.get_mut(dev as usize).and_then(Option::take) else {
                return;
            };
            st.by_key.remove(&d.key);
            if let Some(a) = d.soft {
                st.by_soft.remove(&a);
            }
            st.closing.push(d.key.clone());
            // Under the lock: its threads see it before the index can be
            // another device's.
            d.stop.store(true, Ordering::SeqCst);
            d
        };
        d.transport.wake();
        for t in [d.thread, d.watcher].into_iter().flatten() {
            if t.join().is_err() {
                ibcm_log!(WARN, "{}: a forwarder thread had panicked", d.key);
            }
        }
        let s: Vec<String> = d
            .stats
            .fields()
            .into_iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        ibcm_log!(
            INFO,
            "{}: last process gone, closed ({})",
            d.key,
            s.join(", ")
        );
        drop(d.transport);
        lock(&self.st).closing.retain(|k| *k != d.key);
        self.closed_cv.notify_all();
    }

    /// The `FWD_OPEN` answer of (`dev`, `slot`) went out: what was queued
    /// for the process meanwhile (a port push, a question of `ibcm stat`)
    /// follows it.
    pub fn ready(&self, dev: u32, slot: u32) {
        let mut st = lock(&self.st);
        if let Some(d) = st.devs.get_mut(dev as usize).and_then(Option::as_mut)
            && let Some(p) = d.procs[slot as usize].as_mut()
        {
            p.ready = true;
            flush(d, slot);
        }
    }

    /// Reads the process's records until its connection closes.
    pub fn serve(&self, dev: u32, slot: u32, fd: &OwnedFd) {
        // Every message queued at a wake-up (up to `sock::RECV_MANY`) in
        // one `recvmmsg`, read without the lock.
        let mut bufs: Vec<Vec<u8>> = (0..sock::RECV_MANY)
            .map(|_| vec![0u8; ipc::MAX_RECORD])
            .collect();
        let mut lens = [0usize; sock::RECV_MANY];
        while sock::wait_readable(fd).is_ok() {
            let (got, end) = match sock::try_recv_many(fd, &mut bufs, &mut lens) {
                // A zero length is the process gone; what came before it
                // is still its.
                Ok(n) => match lens[..n].iter().position(|&l| l == 0) {
                    Some(i) => (i, true),
                    None => (n, false),
                },
                Err(_) => (0, true),
            };
            if got > 0 {
                let now = self.now_ms();
                let mut st = lock(&self.st);
                for (b, &n) in bufs.iter().zip(&lens[..got]) {
                    self.on_proc_msg(&mut st, dev, slot, &b[..n], now);
                }
                let out = self.finish(&mut st);
                drop(st);
                send_out(out);
            }
            if end {
                return;
            }
        }
    }

    /// The process of (`dev`, `slot`) is gone: its listens go, and the
    /// MADs the kernel's CM would send for its connections leave now.
    /// The device closes with its last process, or, when a DREQ of the
    /// dead process may have to go again (`Tracker::due`), once that is
    /// settled, by its wire thread.
    pub fn detach(self: &Arc<Self>, dev: u32, slot: u32) {
        let now = self.now_ms();
        let mut st = lock(&self.st);
        let Some(d) = st.devs.get_mut(dev as usize).and_then(Option::as_mut) else {
            return;
        };
        let Some(p) = d.procs[slot as usize].take() else {
            return;
        };
        {
            let mut q = lock(&p.backlog.q);
            q.1 = true;
            q.0.clear();
        }
        p.backlog.cv.notify_all();
        d.free.push_back(slot);
        d.listens.retain(|_, o| o.0 != slot);
        if let Some(c) = &p.last_cm {
            d.gone_cm.merge(c);
        }
        let empty = d.procs.iter().all(Option::is_none);
        let stats = d.stats.clone();
        let key = d.key.clone();
        let answers = st.tracker.process_gone(pname(dev, slot), now);
        let n = answers.len();
        for (to, mad) in answers {
            inc(&stats.sent_for_gone);
            self.for_gone(&mut st, pname(dev, slot), to, &mad);
        }
        let waiting = st.tracker.awaiting(|q| q == pname(dev, slot));
        let keep = empty && st.tracker.awaiting(|q| of_dev(q, dev));
        let out = self.finish(&mut st);
        drop(st);
        send_out(out);
        ibcm_log!(
            INFO,
            "{key}: process {} (slot {slot}) gone: {n} MAD(s) sent for its connections{}",
            p.pid,
            if waiting {
                "; its DREQ(s) go again if no DREP comes in their wait"
            } else {
                ""
            }
        );
        if empty && !keep {
            self.close_dev(dev);
        }
    }

    /// The wire thread's share of the tracker's clock: the DREQs due again
    /// for dead processes of `dev` go out, and a device with no process
    /// left and nothing more to wait for is closed (by a thread of its
    /// own: `close_dev` joins this one).
    fn tick(self: &Arc<Self>, st: &mut State, dev: u32, now: u64) {
        for (dead, to, mad) in st.tracker.due(now, |q| of_dev(q, dev)) {
            if let Some(d) = st.devs.get(dev as usize).and_then(Option::as_ref) {
                inc(&d.stats.sent_for_gone);
                ibcm_log!(
                    INFO,
                    "{}: no DREP in its wait: the DREQ of a gone process (slot {}) sent again",
                    d.key,
                    split(dead).1
                );
            }
            self.for_gone(st, dead, to, &mad);
        }
        let waiting = st.tracker.awaiting(|q| of_dev(q, dev));
        let Some(d) = st.devs.get_mut(dev as usize).and_then(Option::as_mut) else {
            return;
        };
        if d.close_asked || waiting || d.procs.iter().any(Option::is_some) {
            return;
        }
        d.close_asked = true;
        let me = self.clone();
        let closer = std::thread::Builder::new()
            .name("ibcmd-fwd-close".into())
            .spawn(move || me.close_dev(dev));
        if closer.is_err() {
            // Asked again at the next tick.
            d.close_asked = false;
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn wire_loop(self: &Arc<Self>, dev: u32, transport: &Arc<dyn Transport>, stop: &AtomicBool) {
        let mut batch = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            batch.clear();
            if let Err(e) = transport.recv(Some(Duration::from_millis(250)), &mut batch) {
                ibcm_log!(WARN, "{}: receive: {e}", transport.describe());
                std::thread::sleep(Duration::from_millis(10));
            }
            let now = self.now_ms();
            let mut st = lock(&self.st);
            if stop.load(Ordering::SeqCst) {
                return;
            }
            for r in &batch {
                self.on_wire_mad(&mut st, dev, r, now);
            }
            if now >= st.last_expire + 1000 {
                st.last_expire = now;
                st.tracker.expire(now, KEEP_MS);
            }
            self.tick(&mut st, dev, now);
            let out = self.finish(&mut st);
            drop(st);
            send_out(out);
        }
    }

    /// A real device's port events: the new tables go to every process of
    /// the device (`fwd::PORTS`), which installs them as in-process
    /// (`Device::update_ports`); later opens get them in their answer.
    fn port_loop(&self, dev: u32, transport: &Arc<dyn Transport>, stop: &AtomicBool) {
        while !stop.load(Ordering::SeqCst) {
            let Some(ports) = transport.port_change(Duration::from_millis(200)) else {
                continue;
            };
            let mut st = lock(&self.st);
            if stop.load(Ordering::SeqCst) {
                return;
            }
            self.push_ports(&mut st, dev, ports);
            let out = self.finish(&mut st);
            drop(st);
            send_out(out);
        }
    }

    fn push_ports(&self, st: &mut State, dev: u32, ports: Vec<PortInfo>) {
        let Some(d) = st.devs.get_mut(dev as usize).and_then(Option::as_mut) else {
            return;
        };
        let mut rec = Vec::new();
        if !fwd::put_ports(&mut rec, &ports) {
            ibcm_log!(
                WARN,
                "{}: port tables too large for one record: not pushed",
                d.key
            );
            return;
        }
        ibcm_log!(
            INFO,
            "{}: port tables changed: pushed to its processes",
            d.key
        );
        d.ports = ports;
        for slot in 0..MAX_PROCS as u32 {
            if let Some(e) = d.procs[slot as usize].as_mut() {
                if e.out.is_empty() {
                    st.dirty.push(pname(dev, slot));
                }
                e.out.extend_from_slice(&rec);
            }
        }
    }

    /// Sends what each process got (without waiting); the wire's MADs of
    /// each device, to send once the lock is let go.
    fn finish(&self, st: &mut State) -> Vec<(Arc<dyn Transport>, Vec<Transmit>)> {
        for p in std::mem::take(&mut st.dirty) {
            let (dev, slot) = split(p);
            if let Some(d) = st.devs[dev as usize].as_mut() {
                flush(d, slot);
            }
        }
        let mut out = Vec::new();
        for dev in std::mem::take(&mut st.dirty_tx) {
            if let Some(d) = st.devs[dev as usize].as_mut()
                && !d.tx.is_empty()
            {
                d.stats
                    .wire_out
                    .fetch_add(d.tx.len() as u64, Ordering::Relaxed);
                out.push((d.transport.clone(), std::mem::take(&mut d.tx)));
            }
        }
        out
    }

    /// Queues a MAD record for process `p`.
    fn deliver(&self, st: &mut State, p: Proc, src: &MadSource, mad: &[u8; 256]) {
        let (dev, slot) = split(p);
        let Some(d) = st.devs.get_mut(dev as usize).and_then(Option::as_mut) else {
            return;
        };
        let Some(e) = d.procs[slot as usize].as_mut() else {
            return;
        };
        if e.out.is_empty() {
            st.dirty.push(p);
        }
        fwd::put_source(&mut e.out, src, mad);
        if e.out.len() + fwd::MAD_REC > fwd::PER_MSG * fwd::MAD_REC {
            flush(d, slot);
        }
    }

    fn wire_send(&self, st: &mut State, dev: u32, dest: MadDest, mad: &[u8; 256]) {
        if let Some(d) = st.devs.get_mut(dev as usize).and_then(Option::as_mut) {
            if d.tx.is_empty() {
                st.dirty_tx.push(dev);
            }
            d.tx.push(Transmit { dest, mad: *mad });
        }
    }

    /// An answer to the sender of the MAD being routed.
    fn answer(&self, st: &mut State, from: &Sender, mad: &[u8; 256]) {
        match *from {
            Sender::Proc(p, back) => self.deliver(st, p, &back, mad),
            Sender::Wire(_, dev, back) => self.wire_send(st, dev, back, mad),
        }
    }

    /// A MAD the tracker made for a dead process `dead`, to `to`.
    fn for_gone(&self, st: &mut State, dead: Proc, to: Proc, mad: &[u8; 256]) {
        if to >= WIRE_BASE {
            if let Some(&(dev, d)) = st.wire.get((to - WIRE_BASE) as usize) {
                self.wire_send(st, dev, d, mad);
            }
            return;
        }
        let (Some(from), Some(at)) = (st.first_port(dead), st.first_port(to)) else {
            return;
        };
        let gid = |p: &PortInfo| p.gids.first().map(|g| g.gid).unwrap_or_default();
        let src = MadSource {
            port: at.port_num,
            sgid: gid(from),
            dgid: gid(at),
            has_grh: at.is_roce,
            slid: from.lid,
            dlid_path_bits: 0,
            sl: 0,
            src_qp: 1,
            pkey: 0xffff,
            hop_limit: if at.is_roce { 64 } else { 0 },
            traffic_class: 0,
            flow_label: 0,
        };
        self.deliver(st, to, &src, mad);
    }

    /// The tracker's name of a wire peer (made on first sight).
    fn wire_proc(st: &mut State, key: PeerKey, dest: MadDest) -> Proc {
        if let Some(&i) = st.wire_ix.get(&key) {
            st.wire[i as usize].1 = dest;
            return WIRE_BASE + i;
        }
        if st.wire.len() >= MAX_WIRE_PEERS {
            return WIRE_BASE + MAX_WIRE_PEERS as u32;
        }
        let i = st.wire.len() as u32;
        st.wire.push((key.0, dest));
        st.wire_ix.insert(key, i);
        WIRE_BASE + i
    }

    fn route(d: &Dev, mad: &[u8; 256]) -> Target {
        match peek::attr_id(mad) {
            Some(attr::REQ) | Some(attr::SIDR_REQ) => {
                let sid = u64::from_be_bytes(mad[32..40].try_into().expect("8 bytes"));
                match d.listens.get(&sid) {
                    Some(&(s, _)) => Target::Proc(s),
                    // No listener: the device's first process answers it
                    // (REJ 8, SIDR_REP UNSUPPORTED) and counts it, as the
                    // kernel's CM counts what reaches the device.
                    None => d
                        .procs
                        .iter()
                        .position(Option::is_some)
                        .map_or(Target::NoListener, |s| Target::Proc(s as u32)),
                }
            }
            _ => match peek::addressing(mad) {
                Some(peek::Addressing::Receiver(id)) => Target::Proc(forward_owner(&d.codec, id)),
                Some(peek::Addressing::Sender { .. }) => Target::Every,
                _ => Target::Nowhere,
            },
        }
    }

    /// Hands `mad` (from `from`) to its process on device `dev`, arriving
    /// there with source `src`.
    #[allow(clippy::too_many_arguments)]
    fn to_device(
        &self,
        st: &mut State,
        dev: u32,
        from: &Sender,
        src: &MadSource,
        mad: &[u8; 256],
        now: u64,
    ) {
        let Some(d) = st.devs.get(dev as usize).and_then(Option::as_ref) else {
            return;
        };
        let stats = d.stats.clone();
        let counter = match from {
            Sender::Proc(..) => &stats.local,
            Sender::Wire(..) => &stats.wire_in,
        };
        match Self::route(d, mad) {
            Target::Proc(q) if d.procs[q as usize].is_some() => {
                let to = pname(dev, q);
                if let Some(old) = st.tracker.stale_holder(from.name(), to, mad, |p| {
                    p < WIRE_BASE && st.first_port(p).is_some()
                }) {
                    return self.stale(st, from, to, old, mad, &stats);
                }
                if let Verdict::Refuse(why) = st.tracker.observe(from.name(), to, mad, now)
                    && let Sender::Proc(p, _) = from
                {
                    return self.refuse(st, *p, why, |s| &s.refused);
                }
                inc(counter);
                self.deliver(st, to, src, mad);
            }
            Target::Proc(q) => {
                // For a process gone: what its CM would answer. A process
                // is held to its own comm IDs first (the wire is not: its
                // MADs are answered as the kernel's CM answers strays).
                if let Sender::Proc(p, _) = from
                    && let Verdict::Refuse(why) = st.tracker.observe(*p, pname(dev, q), mad, now)
                {
                    return self.refuse(st, *p, why, |s| &s.refused);
                }
                self.answer_gone(st, from, mad, &stats);
            }
            Target::NoListener => match Tracker::no_listener(mad) {
                Some(a) => {
                    inc(&stats.no_listener);
                    self.answer(st, from, &a);
                }
                None => inc(&stats.unroutable),
            },
            Target::Every => {
                let live: Vec<u32> = (0..MAX_PROCS as u32)
                    .filter(|&q| d.procs[q as usize].is_some() && pname(dev, q) != from.name())
                    .collect();
                for q in live {
                    inc(counter);
                    self.deliver(st, pname(dev, q), src, mad);
                }
            }
            Target::Nowhere => inc(&stats.unroutable),
        }
    }

    /// A REQ or REP for `to` that names a QP process `old.0`'s connection
    /// holds (`Tracker::stale_holder`): as the kernel's one CM per host,
    /// REJ `STALE_CONN` to its sender (the MAD dropped) and the old
    /// connection's DREQ, which its process sends (`fwd::STALE`).
    fn stale(
        &self,
        st: &mut State,
        from: &Sender,
        to: Proc,
        (old, guid, qpn): (Proc, u64, u32),
        mad: &[u8; 256],
        stats: &FwdStats,
    ) {
        inc(&stats.stale);
        if let Some(rej) = Tracker::stale_rej(mad) {
            self.answer(st, from, &rej);
        }
        let (dev, slot) = split(old);
        if let Some(d) = st.devs.get_mut(dev as usize).and_then(Option::as_mut)
            && let Some(e) = d.procs[slot as usize].as_mut()
        {
            if e.out.is_empty() {
                st.dirty.push(old);
            }
            fwd::put_stale(&mut e.out, guid, qpn);
            ibcm_log!(
                INFO,
                "{}: a REQ or REP for slot {} names QP {qpn:#x} of CA {guid:#018x}, which process {} (slot {slot}) holds: REJ(STALE_CONN) to its sender, DREQ to the old connection",
                d.key,
                split(to).1,
                e.pid
            );
        }
    }

    fn answer_gone(&self, st: &mut State, from: &Sender, mad: &[u8; 256], stats: &FwdStats) {
        match st.tracker.answer_gone(from.name(), mad) {
            Some(a) => {
                inc(&stats.answered_gone);
                self.answer(st, from, &a);
            }
            None => inc(&stats.unroutable),
        }
    }

    fn refuse(&self, st: &mut State, p: Proc, why: &str, c: impl Fn(&FwdStats) -> &AtomicU64) {
        let (dev, slot) = split(p);
        let Some(d) = st.devs.get_mut(dev as usize).and_then(Option::as_mut) else {
            return;
        };
        inc(c(&d.stats));
        if let Some(e) = d.procs[slot as usize].as_mut()
            && e.logged < 5
        {
            e.logged += 1;
            ibcm_log!(
                WARN,
                "{}: process {} (slot {slot}): a MAD dropped: {why}",
                d.key,
                e.pid
            );
        }
    }

    /// One message of process (`dev`, `slot`).
    fn on_proc_msg(&self, st: &mut State, dev: u32, slot: u32, msg: &[u8], now: u64) {
        let p = pname(dev, slot);
        for r in fwd::records(msg) {
            match r {
                Ok(fwd::Rec::Mad(a, m)) => self.mad_from_proc(st, dev, slot, &fwd::dest(a), m, now),
                Ok(fwd::Rec::Listen { seq, service_id }) => {
                    let err = self.claim(st, dev, slot, service_id);
                    if let Some(e) = st.devs[dev as usize]
                        .as_mut()
                        .and_then(|d| d.procs[slot as usize].as_mut())
                    {
                        if e.out.is_empty() {
                            st.dirty.push(p);
                        }
                        fwd::put_listened(&mut e.out, seq, err);
                    }
                }
                Ok(fwd::Rec::Unlisten { service_id }) => {
                    if let Some(d) = st.devs[dev as usize].as_mut()
                        && d.listens.get(&service_id).is_some_and(|l| l.0 == slot)
                    {
                        d.listens.remove(&service_id);
                        if let Some(e) = d.procs[slot as usize].as_mut() {
                            e.listens -= 1;
                        }
                    }
                }
                Ok(fwd::Rec::Ids { seq, last, body }) => {
                    self.ids_answered(st, dev, slot, seq, last, body)
                }
                Ok(fwd::Rec::Stat { seq, body }) => self.stat_answered(st, dev, slot, seq, body),
                Ok(fwd::Rec::Listened { .. })
                | Ok(fwd::Rec::Ports(_))
                | Ok(fwd::Rec::Stale { .. })
                | Ok(fwd::Rec::IdsAsk { .. })
                | Ok(fwd::Rec::StatAsk { .. })
                | Err(()) => {
                    self.refuse(
                        st,
                        p,
                        "a record that does not decode (the rest of its message too)",
                        |s| &s.bad_records,
                    );
                    return;
                }
            }
        }
    }

    fn claim(&self, st: &mut State, dev: u32, slot: u32, service_id: u64) -> i32 {
        let Some(d) = st.devs.get_mut(dev as usize).and_then(Option::as_mut) else {
            return -libc::ENODEV;
        };
        match d.listens.get(&service_id) {
            Some(&(o, _)) if o == slot => return 0,
            Some(&(o, _)) => {
                inc(&d.stats.claims_refused);
                let other = d.procs[o as usize].as_ref().map_or(0, |p| p.pid);
                ibcm_log!(
                    INFO,
                    "{}: slot {slot}: service ID {service_id:#x} is process {other}'s: -EBUSY",
                    d.key
                );
                return -libc::EBUSY;
            }
            None => {}
        }
        let Some(e) = d.procs[slot as usize].as_mut() else {
            return -libc::ENODEV;
        };
        if e.listens >= self.max_listens {
            inc(&d.stats.claims_refused);
            ibcm_log!(
                WARN,
                "{}: process {}: {} listeners already: -ENOMEM",
                d.key,
                e.pid,
                self.max_listens
            );
            return -libc::ENOMEM;
        }
        e.listens += 1;
        d.listens.insert(service_id, (slot, self.now_ms()));
        0
    }

    fn mad_from_proc(
        &self,
        st: &mut State,
        dev: u32,
        slot: u32,
        dst: &MadDest,
        m: &[u8; 256],
        now: u64,
    ) {
        let p = pname(dev, slot);
        let Some(d) = st.devs.get(dev as usize).and_then(Option::as_ref) else {
            return;
        };
        let Some(port) = d.ports.iter().find(|x| x.port_num == dst.port) else {
            return self.refuse(st, p, "no such port", |s| &s.spoofed);
        };
        if dst.has_grh && !port.gids.iter().any(|g| g.gid == dst.sgid) {
            return self.refuse(st, p, "its source GID is not the device's", |s| &s.spoofed);
        }
        // A REQ or REP starts a tracked end under its local comm ID: it
        // must be one of the process's own, and the process's ends are
        // capped (the service's id limit per process).
        if matches!(peek::attr_id(m), Some(attr::REQ) | Some(attr::REP)) {
            let local = u32::from_be_bytes(m[24..28].try_into().expect("4 bytes"));
            if forward_owner(&d.codec, local) != slot {
                return self.refuse(st, p, "a REQ or REP with another process's comm ID", |s| {
                    &s.refused
                });
            }
            if st.tracker.count_of(p) >= self.max_ends {
                return self.refuse(
                    st,
                    p,
                    "the process's tracked connections are at the limit (IBCM_SERVICE_MAX_IDS)",
                    |s| &s.refused,
                );
            }
        }
        let local = if dst.has_grh {
            port.gids.iter().any(|g| g.gid == dst.dgid)
        } else {
            port.lid != 0 && dst.dlid == port.lid
        };
        if local {
            let src = MadSource::delivered(dst, port.lid);
            let from = Sender::Proc(p, swapped(&src));
            return self.to_device(st, dev, &from, &src, m, now);
        }
        // Another soft device of the service: through the switch.
        if let Some((sgid, udp)) = d.soft
            && let Some(&to) = st.by_soft.get(&(dst.dgid, udp))
        {
            if crate::capture::live::active()
                && let Some(tap) = d.transport.tap()
            {
                tap.mad(
                    crate::capture::Direction::Outbound,
                    &sgid,
                    &dst.dgid,
                    dst.pkey,
                    m,
                );
            }
            TransportStats::inc(&d.transport.stats().tx_datagrams);
            if let Some(t) = st.devs[to as usize].as_ref() {
                TransportStats::inc(&t.transport.stats().rx_datagrams);
            }
            let src = MadSource::roce_gsi(sgid, dst.dgid, 1, dst.pkey);
            let from = Sender::Proc(p, swapped(&src));
            return self.to_device(st, to, &from, &src, m, now);
        }
        let key = (
            dev,
            dst.port,
            dst.sgid,
            if dst.has_grh {
                dst.dgid
            } else {
                Gid::default()
            },
            dst.dlid,
        );
        let w = Self::wire_proc(st, key, *dst);
        if let Verdict::Refuse(why) = st.tracker.observe(p, w, m, now) {
            return self.refuse(st, p, why, |s| &s.refused);
        }
        self.wire_send(st, dev, *dst, m);
    }

    fn on_wire_mad(&self, st: &mut State, dev: u32, r: &Received, now: u64) {
        let s = &r.src;
        let back = MadDest::reply_to(s);
        let key = (
            dev,
            s.port,
            s.dgid,
            if s.has_grh { s.sgid } else { Gid::default() },
            s.slid,
        );
        let w = Self::wire_proc(st, key, back);
        self.to_device(st, dev, &Sender::Wire(w, dev, back), s, &r.mad, now);
    }
}

/// Sends the wire's MADs gathered under the lock.
fn send_out(out: Vec<(Arc<dyn Transport>, Vec<Transmit>)>) {
    for (t, tx) in out {
        t.send(&tx);
    }
}

/// Sends process `slot`'s records now, or queues them for its writer.
fn flush(d: &mut Dev, slot: u32) {
    let Some(p) = d.procs[slot as usize].as_mut() else {
        return;
    };
    if p.out.is_empty() {
        return;
    }
    if !p.ready {
        // Held for the open's answer (`Hub::ready`); a process whose
        // answer never goes out gets nothing, at most this much held.
        if p.out.len() > NOT_READY_MAX {
            d.stats.dropped_full.fetch_add(1, Ordering::Relaxed);
            p.out.clear();
        }
        return;
    }
    let mut q = lock(&p.backlog.q);
    if q.0.is_empty() {
        match sock::try_send(&p.tx, &p.out) {
            // Sent, or the process is gone (its reader sees the hang-up).
            Ok(true) | Err(_) => {
                p.out.clear();
                return;
            }
            Ok(false) => {}
        }
    }
    if q.0.len() >= MAX_BACKLOG {
        let n = fwd::records(&p.out).count() as u64;
        d.stats.dropped_full.fetch_add(n, Ordering::Relaxed);
        if p.logged < 5 {
            p.logged += 1;
            ibcm_log!(
                WARN,
                "{}: process {} does not read its socket ({MAX_BACKLOG} messages queued): {n} record(s) dropped",
                d.key,
                p.pid
            );
        }
        p.out.clear();
        return;
    }
    q.0.push_back(std::mem::take(&mut p.out));
    drop(q);
    p.backlog.cv.notify_one();
}

/// A process's writer: sends, waiting for room, what its socket had no
/// room for, in order, until the process is gone.
fn writer(fd: &OwnedFd, b: &Backlog) {
    loop {
        let msg = {
            let mut q = lock(&b.q);
            loop {
                if q.1 {
                    return;
                }
                if let Some(m) = q.0.front() {
                    break m.clone();
                }
                q = b.cv.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        let mut p = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(fd),
            events: libc::POLLOUT,
            revents: 0,
        };
        loop {
            match sock::try_send(fd, &msg) {
                Ok(true) => break,
                Ok(false) => {
                    // SAFETY: one valid pollfd; woken by room or hang-up.
                    unsafe { libc::poll(&mut p, 1, 200) };
                    if lock(&b.q).1 {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
        lock(&b.q).0.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::TransportStats;

    /// A device whose port events the test makes.
    struct PortsOnly {
        stats: TransportStats,
        next: Mutex<Option<Vec<PortInfo>>>,
    }

    impl Transport for PortsOnly {
        fn send(&self, _: &[Transmit]) {}
        fn recv(&self, t: Option<Duration>, _: &mut Vec<Received>) -> std::io::Result<()> {
            std::thread::sleep(
                t.unwrap_or(Duration::from_millis(10))
                    .min(Duration::from_millis(10)),
            );
            Ok(())
        }
        fn wake(&self) {}
        fn ports(&self) -> Vec<PortInfo> {
            vec![PortInfo::roce(1, "10.1.0.1".parse().unwrap())]
        }
        fn node_guid(&self) -> u64 {
            0x0200_00ff_fe00_0001
        }
        fn watches_ports(&self) -> bool {
            true
        }
        fn port_change(&self, t: Duration) -> Option<Vec<PortInfo>> {
            let p = lock(&self.next).take();
            if p.is_none() {
                std::thread::sleep(t.min(Duration::from_millis(5)));
            }
            p
        }
        fn stats(&self) -> &TransportStats {
            &self.stats
        }
        fn describe(&self) -> String {
            "ports-only".into()
        }
    }

    /// A port event of a forwarded device reaches each of its processes
    /// as a `PORTS` record, and a later open gets the new tables.
    #[test]
    fn port_events_reach_every_process_and_later_opens() {
        let hub = Hub::new(8, 1000);
        let t = Arc::new(PortsOnly {
            stats: TransportStats::default(),
            next: Mutex::new(None),
        });
        let (a, a_peer) = sock::pair();
        let (b, b_peer) = sock::pair();
        let tt: Arc<dyn Transport> = t.clone();
        let first = hub.attach_with("dev", || Ok(tt), &a, 1).unwrap();
        let second = hub
            .attach_with("dev", || panic!("opened twice"), &b, 2)
            .unwrap();
        assert_eq!((first.slot, second.slot), (0, 1));
        hub.ready(0, first.slot);
        let mut table = t.ports();
        table[0].gids.push(crate::engine::GidEntry {
            gid: "10.1.0.2".parse().unwrap(),
            gid_type: crate::engine::GidType::RoceV2,
        });
        *lock(&t.next) = Some(table.clone());
        // The second process's open is not answered yet: nothing reaches
        // it before (its answer must be its first message), all after.
        sock::set_timeouts(&b_peer, Duration::from_millis(400), true).unwrap();
        let mut buf = vec![0u8; ipc::MAX_RECORD];
        assert!(
            sock::recv(&b_peer, &mut buf).is_err(),
            "a record before the open's answer"
        );
        hub.ready(0, second.slot);
        for peer in [&a_peer, &b_peer] {
            sock::set_timeouts(peer, Duration::from_secs(5), true).unwrap();
            let mut buf = vec![0u8; ipc::MAX_RECORD];
            let n = sock::recv(peer, &mut buf).expect("a PORTS record");
            let recs: Vec<_> = fwd::records(&buf[..n]).collect();
            assert_eq!(recs.len(), 1);
            match recs[0] {
                Ok(fwd::Rec::Ports(p)) => assert_eq!(fwd::ports(p).unwrap(), table),
                ref other => panic!("{other:?}"),
            }
        }
        let (c, _c_peer) = sock::pair();
        let third = hub
            .attach_with("dev", || panic!("opened twice"), &c, 3)
            .unwrap();
        assert_eq!(&*third.opened.opened.ports, &table[..]);
        for (slot, _) in [(0, a), (1, b), (2, c)] {
            hub.detach(0, slot);
        }
        assert!(!hub.has("dev"), "closed with its last process");
    }
}
