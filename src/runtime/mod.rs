//! The runtime: devices, id objects, the per-device event loop and callback
//! delivery with the kernel's contract.
//!
//! * A [`Device`] owns a transport, one or more engine shards (each behind
//!   its own mutex, held only for a pure state-machine step — never across
//!   I/O or a callback) and an event-loop thread that receives MADs, runs
//!   timers and delivers callbacks.
//! * An id is a [`Shell`] whose first field is the C `struct ib_cm_id`, so
//!   the C pointer and the Rust object are the same address.
//! * Callbacks for one id are serialised and in order: events are queued on
//!   the id (under its shard lock, so in engine order) and delivered by one
//!   thread at a time. A handler may call any CM function on its id except
//!   destroy; a non-zero return destroys the id afterwards (`-ENOMEM` from
//!   REQ_RECEIVED without a REJ). `destroy` blocks until no callback for the
//!   id runs and none will; from the id's own callback it is refused.
//! * API calls run the engine step in the caller's thread and send the
//!   resulting MADs from there; the event loop is only woken when a new
//!   timer is earlier than the one it sleeps for.

use crate::abi::{IbCmHandler, IbCmId, IbGid, IbGidAttr};
use crate::engine::{self, *};
use crate::fabric::{Received, Transport, loopback::LoopbackTransport, udp::UdpTransport};
use crate::log::{DEBUG, ERROR, INFO, WARN};
use crate::wire::Gid;
use std::cell::{Cell, UnsafeCell};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A Rust event handler (the C handler lives in the `ib_cm_id`).
pub type RustHandler = Arc<dyn Fn(&CmId, &Event) -> i32 + Send + Sync>;

/// How a device is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    /// `soft:<ip>[:<port>]` — UDP software fabric.
    Soft { ip: IpAddr, port: u16 },
    /// `loop:<ip>` — in-process fabric.
    Loop { ip: IpAddr },
}

impl DeviceSpec {
    /// Parses a device name: `soft:IP`, `soft:IP:PORT`, `soft:[IPv6]:PORT`,
    /// `soft:IPv6`, `loop:IP`.
    pub fn parse(name: &str) -> Result<DeviceSpec, Errno> {
        let bad = || {
            ibcm_log!(
                WARN,
                "bad device name {name:?} (expected soft:<ip>[:<port>] or loop:<ip>)"
            );
            Errno::EINVAL
        };
        if let Some(rest) = name.strip_prefix("soft:") {
            if let Ok(sa) = rest.parse::<std::net::SocketAddr>() {
                return Ok(DeviceSpec::Soft {
                    ip: sa.ip(),
                    port: sa.port(),
                });
            }
            let ip = rest.trim_start_matches('[').trim_end_matches(']');
            let ip: IpAddr = ip.parse().map_err(|_| bad())?;
            Ok(DeviceSpec::Soft {
                ip,
                port: crate::wire::roce::ROCEV2_UDP_PORT,
            })
        } else if let Some(rest) = name.strip_prefix("loop:") {
            let ip: IpAddr = rest
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .map_err(|_| bad())?;
            Ok(DeviceSpec::Loop { ip })
        } else {
            Err(bad())
        }
    }
}

/// UDP port of `soft:<ip>@<device>` when none (or 4791, which the RoCE
/// device itself owns) is given.
pub const SOFT_VERBS_PORT: u16 = 4792;

/// Real devices: `<rdma device>` (CM over QP1 through ib_umad) and
/// `soft:<ip>[:<port>]@<rdma device>` (CM over the UDP fabric, everything
/// else from the device). `None` for soft/loop names.
fn open_verbs(name: &str) -> Result<Option<Arc<dyn Transport>>, Errno> {
    use crate::fabric::{umad, verbs};
    // RDMA device names are [A-Za-z0-9_.-]; anything else (soft:, loop:,
    // "bogus:1") is left to DeviceSpec::parse (-EINVAL for unknown schemes).
    let rdma_name = |n: &str| {
        !n.is_empty()
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    };
    if let Some(rest) = name.strip_prefix("soft:")
        && let Some((soft, dev)) = rest.rsplit_once('@')
    {
        let DeviceSpec::Soft { ip, mut port } = DeviceSpec::parse(&format!("soft:{soft}"))? else {
            return Err(Errno::EINVAL);
        };
        if port == crate::wire::roce::ROCEV2_UDP_PORT {
            port = SOFT_VERBS_PORT;
        }
        if !rdma_name(dev) {
            ibcm_log!(
                WARN,
                "bad device name {name:?}: {dev:?} is not an RDMA device name"
            );
            return Err(Errno::EINVAL);
        }
        let info = verbs::query(dev)?;
        let udp = UdpTransport::bind(ip, port).map_err(|e| {
            ibcm_log!(ERROR, "cannot open {name}: {ip} port {port}: {e}");
            Errno(e.raw_os_error().unwrap_or(errno::EIO))
        })?;
        return Ok(Some(Arc::new(umad::SoftVerbsTransport::new(udp, info))));
    }
    if !rdma_name(name) {
        return Ok(None);
    }
    let info = verbs::query(name)?;
    Ok(Some(Arc::new(umad::UmadTransport::open(&info)?)))
}

/// Device options beyond the name.
#[derive(Debug, Clone)]
pub struct DeviceOptions {
    /// Engine shards (rounded up to a power of two).
    pub shards: u32,
    /// Event-loop threads receiving from the transport.
    pub threads: u32,
    /// Passive half-open connection cap per shard (0 = unlimited).
    pub max_half_open: u32,
    /// Half-open connections per source and shard (0 = no quota).
    pub max_half_open_per_source: u32,
    /// The passive side's wait for an RTU per try, in ms (0 = as the REQ asks).
    pub rep_timeout_cap_ms: u64,
    /// The passive side's REP (and DREQ) retries, at most.
    pub rep_max_retries: u8,
    /// Reject REQs whose path names another requester than their source.
    pub reject_off_path_req: bool,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        let env = |k: &str, d: u32| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let max_half_open = env("IBCM_MAX_HALF_OPEN", 65536);
        let defaults = EngineConfig::new(0, Vec::new());
        DeviceOptions {
            shards: env("IBCM_SHARDS", 1).max(1),
            threads: env("IBCM_THREADS", 1).max(1),
            max_half_open,
            max_half_open_per_source: env("IBCM_MAX_HALF_OPEN_PER_SOURCE", max_half_open / 4),
            rep_timeout_cap_ms: env(
                "IBCM_REP_TIMEOUT_CAP_MS",
                defaults.rep_timeout_cap_ms as u32,
            ) as u64,
            rep_max_retries: env("IBCM_REP_MAX_RETRIES", defaults.rep_max_retries as u32).min(15)
                as u8,
            reject_off_path_req: env("IBCM_REJECT_OFF_PATH_REQ", 1) != 0,
        }
    }
}

/// One id's delivery queue.
struct Delivery {
    queue: VecDeque<Item>,
    delivering: bool,
    destroyed: bool,
}

/// An event waiting for delivery; a REQ/SIDR_REQ event keeps its listener
/// alive until delivered (its `listen_id` points at it).
struct Item {
    ev: Event,
    /// Held, never read: keeps the listener (`listen_id`) alive.
    _listener: Option<Arc<Shell>>,
}

/// An id. `#[repr(C)]` with the C struct first: `*mut IbCmId` == `*const Shell`.
#[repr(C)]
pub struct Shell {
    c: UnsafeCell<IbCmId>,
    dev: Arc<Device>,
    shard: u32,
    handle: AtomicU64,
    rust_handler: Option<RustHandler>,
    dq: Mutex<Delivery>,
    cond: Condvar,
}

// The C struct is shared with C code by design; access is serialised by
// the shard lock (public fields) or owned by the consumer (handler/context).
unsafe impl Send for Shell {}
unsafe impl Sync for Shell {}

/// A Rust handle to an id (keeps the object alive; using it after destroy
/// gives `-EINVAL`).
#[derive(Clone)]
pub struct CmId(pub(crate) Arc<Shell>);

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CmId({:#010x})", self.local_id())
    }
}

thread_local! {
    /// The id whose callback this thread is running (null when none).
    static IN_CALLBACK: Cell<*const Shell> = const { Cell::new(std::ptr::null()) };
    /// The device whose event loop runs on this thread: MADs queued on that
    /// device while it handles a batch go out together when the batch is
    /// done (one `sendmmsg`) instead of one by one.
    static BATCH_DEV: Cell<*const Device> = const { Cell::new(std::ptr::null()) };
    /// Where this thread's next `create_id` goes (see there).
    static NEXT_SHARD: Cell<usize> = Cell::new(THREAD_SEQ.fetch_add(1, Ordering::Relaxed));
}

static THREAD_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A counter alone on its cache line.
#[derive(Default)]
#[repr(align(64))]
struct PaddedCount(AtomicUsize);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

/// One device's `struct ib_gid_attr` objects, by (port, GID index).
type GidAttrTable = Box<[(u8, u16, UnsafeCell<IbGidAttr>)]>;

fn gid_attr_table(ports: &[PortInfo], device: *mut c_void) -> GidAttrTable {
    let mut attrs = Vec::new();
    for p in ports {
        for (i, e) in p.gids.iter().enumerate() {
            let a = IbGidAttr {
                ndev: std::ptr::null_mut(),
                device,
                gid: IbGid::from_raw(e.gid.0),
                gid_type: e.gid_type as u32,
                index: i as u16,
                port_num: p.port_num as u32,
            };
            attrs.push((p.port_num, i as u16, UnsafeCell::new(a)));
        }
    }
    attrs.into_boxed_slice()
}

// ------------------------------------------------------------- registry

const REG_SHARDS: usize = 16;

/// Live ids by address, with their owner counts (a shared listener has one
/// owner per `ib_cm_insert_listen` caller). Lets the C layer reject NULL,
/// freed and foreign pointers without touching them. Sharded so calls on
/// different ids do not meet on one lock.
/// Keys are our own heap addresses, which a peer cannot choose, so a fast
/// hash is safe here.
type LiveMap = crate::engine::ids::FastMap<usize, u32>;

static LIVE: std::sync::LazyLock<[Mutex<LiveMap>; REG_SHARDS]> = std::sync::LazyLock::new(|| {
    std::array::from_fn(|i| {
        Mutex::new(LiveMap::with_hasher(crate::engine::ids::FastState::new(
            0x9e37_79b9_7f4a_7c15 ^ i as u64,
        )))
    })
});

fn live_shard(p: usize) -> &'static Mutex<LiveMap> {
    // Every bit of the address counts: ids of different threads come from
    // different malloc arenas whose low bits are often identical.
    let h = (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    &LIVE[(h >> 60) as usize % REG_SHARDS]
}

fn register(p: *const Shell) {
    *lock(live_shard(p as usize)).entry(p as usize).or_insert(0) += 1;
}

/// Drops one owner of `p`.
fn unregister(p: *const Shell) {
    let mut m = lock(live_shard(p as usize));
    if let Some(n) = m.get_mut(&(p as usize)) {
        *n -= 1;
        if *n == 0 {
            m.remove(&(p as usize));
        }
    }
}

/// The id at a C address, if it is a live ibcm id. Never dereferences an
/// address that is not registered.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn lookup(p: *mut IbCmId) -> Option<CmId> {
    if p.is_null() {
        return None;
    }
    let m = lock(live_shard(p as usize));
    // Registered under the lock: an owner reference exists, so it is alive.
    m.contains_key(&(p as usize))
        .then(|| unsafe { CmId::from_c(p) })
}

/// The C `listen_id` of a REQ_RECEIVED or SIDR_REQ_RECEIVED event (the
/// listener the request matched; null for other events). Valid while the
/// event's callback runs: a queued request event holds its listener.
pub fn listen_id(ev: &Event) -> *mut IbCmId {
    // The engine's user token of an id is its `Shell`, whose first member
    // is the C struct.
    match &ev.param {
        EventParam::Req(p) => p.listen_user as *mut IbCmId,
        EventParam::SidrReq(p) => p.listen_user as *mut IbCmId,
        _ => std::ptr::null_mut(),
    }
}

/// What one engine step produced, handled after the shard lock is released.
#[derive(Default)]
struct Outputs {
    deliver: Vec<Arc<Shell>>,
    foreign: Vec<Foreign>,
}

pub struct Device {
    name: String,
    transport: Arc<dyn Transport>,
    shards: Vec<Mutex<Engine>>,
    shared: Arc<Shared>,
    epoch: Instant,
    stop: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// When the event loop sleeps until (ns since epoch), for wake-ups.
    sleep_until: AtomicU64,
    timer_gen: AtomicU64,
    /// Serialises listen/insert_listen/listener destroy (not on the
    /// message path).
    listen_lock: Mutex<()>,
    /// Live ids per shard (summed by `live_ids()`): one cache line each,
    /// so threads creating and destroying ids on different shards do not
    /// share one counter.
    live_ids: Box<[PaddedCount]>,
    /// Ids with events from API calls, delivered by the event loop.
    deferred: Mutex<Vec<Arc<Shell>>>,
    /// MADs waiting to be sent, in engine order.
    outq: Mutex<Vec<Transmit>>,
    /// Set after MADs are queued on `outq`; lets a flush with nothing to
    /// send skip both device-wide locks (an API call that sends nothing,
    /// such as destroying an idle id, then touches no device lock).
    outq_pending: std::sync::atomic::AtomicBool,
    send_lock: Mutex<()>,
    /// GID attribute objects handed to C (`sgid_attr`): the last table is
    /// current; older ones (before a port change) stay alive with the
    /// device so pointers already given out remain valid.
    gid_attrs: std::sync::RwLock<Vec<GidAttrTable>>,
    ports: std::sync::RwLock<Arc<Vec<PortInfo>>>,
    node_guid: u64,
}

unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    /// Opens a device by name (`soft:…`, `loop:…`).
    pub fn open(name: &str, opts: DeviceOptions) -> Result<Arc<Device>, Errno> {
        if let Some(t) = open_verbs(name)? {
            return Ok(Device::with_transport(t, opts));
        }
        let spec = DeviceSpec::parse(name)?;
        let transport: Arc<dyn Transport> = match &spec {
            DeviceSpec::Soft { ip, port } => match UdpTransport::bind(*ip, *port) {
                Ok(t) => Arc::new(t),
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(errno::EIO);
                    ibcm_log!(ERROR, "cannot open {name}: {e}");
                    return Err(Errno(errno));
                }
            },
            DeviceSpec::Loop { ip } => {
                let gid = Gid::from(*ip);
                let guid = crate::fabric::soft_node_guid(ip, 0);
                match LoopbackTransport::new(gid, guid) {
                    Ok(t) => Arc::new(t),
                    Err(_) => {
                        ibcm_log!(ERROR, "cannot open {name}: address in use");
                        return Err(Errno(errno::EADDRINUSE));
                    }
                }
            }
        };
        Ok(Device::with_transport(transport, opts))
    }

    /// A device over any transport; starts its event-loop thread(s).
    pub fn with_transport(transport: Arc<dyn Transport>, opts: DeviceOptions) -> Arc<Device> {
        let shard_bits = opts.shards.next_power_of_two().trailing_zeros().min(6);
        let seed = random_seed();
        let shared = Arc::new(Shared::new(seed, shard_bits));
        let ports = transport.ports();
        let node_guid = transport.node_guid();
        let hi_tid = ((seed >> 32) as u32 & 0xffff).max(1);
        let shards = (0..1u32 << shard_bits)
            .map(|i| {
                let mut cfg = EngineConfig::new(node_guid, ports.clone());
                cfg.shard = i;
                cfg.hi_tid = hi_tid;
                cfg.max_half_open = opts.max_half_open;
                cfg.max_half_open_per_source = opts.max_half_open_per_source;
                cfg.rep_timeout_cap_ms = opts.rep_timeout_cap_ms;
                cfg.rep_max_retries = opts.rep_max_retries;
                cfg.reject_off_path_req = opts.reject_off_path_req;
                if let Some(d) = transport.ack_delay() {
                    cfg.ack_delay = d;
                }
                cfg.seed = seed ^ (i as u64).wrapping_mul(0x9e37_79b9);
                Mutex::new(Engine::new(cfg, shared.clone()))
            })
            .collect();
        let attrs = gid_attr_table(&ports, std::ptr::null_mut());
        let dev = Arc::new(Device {
            name: transport.describe(),
            transport,
            shards,
            shared,
            epoch: Instant::now(),
            stop: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            sleep_until: AtomicU64::new(0),
            timer_gen: AtomicU64::new(0),
            listen_lock: Mutex::new(()),
            live_ids: (0..1u32 << shard_bits)
                .map(|_| PaddedCount::default())
                .collect(),
            deferred: Mutex::new(Vec::new()),
            outq: Mutex::new(Vec::new()),
            outq_pending: std::sync::atomic::AtomicBool::new(false),
            send_lock: Mutex::new(()),
            gid_attrs: std::sync::RwLock::new(vec![attrs]),
            ports: std::sync::RwLock::new(Arc::new(ports)),
            node_guid,
        });
        let me = dev.c_ptr();
        for t in read(&dev.gid_attrs).iter() {
            for (_, _, a) in t.iter() {
                unsafe { (*a.get()).device = me };
            }
        }
        let mut threads = lock(&dev.threads);
        if dev.transport.watches_ports() {
            let d = dev.clone();
            let h = std::thread::Builder::new()
                .name("ibcm-ports".into())
                .spawn(move || {
                    while !d.stop.load(Ordering::SeqCst) {
                        if let Some(p) = d.transport.port_change(Duration::from_millis(200)) {
                            d.update_ports(p);
                        }
                    }
                })
                .expect("spawn ibcm port watcher");
            threads.push(h);
        }
        for t in 0..opts.threads.max(1) {
            let d = dev.clone();
            let h = std::thread::Builder::new()
                .name(format!("ibcm-{t}"))
                .spawn(move || d.event_loop())
                .expect("spawn ibcm event loop");
            threads.push(h);
        }
        drop(threads);
        ibcm_log!(
            crate::log::INFO,
            "{}: open, {} shard(s), node GUID {:#018x}",
            dev.name,
            dev.shards.len(),
            node_guid
        );
        dev
    }

    /// The `struct ib_device *` C code sees for this device.
    pub fn c_ptr(&self) -> *mut c_void {
        self as *const Device as *mut c_void
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn node_guid(&self) -> u64 {
        self.node_guid
    }

    /// The ports as they are now (real devices change on port events).
    pub fn ports(&self) -> Arc<Vec<PortInfo>> {
        read(&self.ports).clone()
    }

    /// Installs a new port table (GID/P_Key/LID changes of a real device):
    /// new GID attribute objects, every shard's engine, `ports()`.
    pub fn update_ports(&self, ports: Vec<PortInfo>) {
        let attrs = gid_attr_table(&ports, self.c_ptr());
        self.gid_attrs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(attrs);
        for s in &self.shards {
            lock(s).set_ports(ports.clone());
        }
        *self.ports.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(ports);
        ibcm_log!(crate::log::INFO, "{}: port tables updated", self.name);
    }

    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    /// Live ids (listeners and incoming ids included).
    pub fn live_ids(&self) -> usize {
        self.live_ids
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .sum()
    }

    /// Counters of all shards.
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for s in &self.shards {
            c.merge(lock(s).counters());
        }
        c
    }

    /// The engine configuration (shard 0's; the shards differ only in
    /// their index and seed).
    pub fn engine_config(&self) -> EngineConfig {
        lock(&self.shards[0]).config().clone()
    }

    /// Half-open sources and eviction-queue entries, all shards.
    pub fn admission_sizes(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(a, b), s| {
            let (x, y) = lock(s).admission_sizes();
            (a + x, b + y)
        })
    }

    /// Passive connections counted against `max_half_open`, all shards.
    pub fn half_open(&self) -> usize {
        self.shards
            .iter()
            .map(|s| lock(s).half_open() as usize)
            .sum()
    }

    /// Pending timers of all shards.
    pub fn timer_count(&self) -> usize {
        self.shards.iter().map(|s| lock(s).timer_count()).sum()
    }

    pub fn now(&self) -> Time {
        Time(self.epoch.elapsed().as_nanos() as u64)
    }

    /// The GID attribute object of (port, index), if any.
    pub fn gid_attr(&self, port: u8, index: u16) -> Option<*const IbGidAttr> {
        read(&self.gid_attrs)
            .last()?
            .iter()
            .find(|(p, i, _)| *p == port && *i == index)
            .map(|(_, _, a)| a.get() as *const IbGidAttr)
    }

    /// Stops the event loop and destroys every remaining id (their
    /// protocol actions are sent). Called by `ibcm_close_device`.
    pub fn close(self: &Arc<Self>) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        // Destroy what the consumer left behind.
        let mut leftovers = 0;
        for (i, s) in self.shards.iter().enumerate() {
            let mut out = Outputs::default();
            {
                let mut e = lock(s);
                for h in e.handles() {
                    leftovers += 1;
                    let user = e.info(h).map(|c| c.user).unwrap_or(0);
                    e.destroy(h, 0);
                    if user != 0 {
                        let sh = unsafe { &*(user as *const Shell) };
                        let mut d = lock(&sh.dq);
                        d.destroyed = true;
                        d.queue.clear();
                    }
                }
                self.drain(i as u32, &mut e, &mut out);
            }
            self.flush();
        }
        if leftovers > 0 {
            ibcm_log!(
                WARN,
                "{}: closed with {leftovers} live id(s); destroyed them",
                self.name
            );
        }
        let me = std::thread::current().id();
        let threads: Vec<JoinHandle<()>> = lock(&self.threads).drain(..).collect();
        // Several loop threads may share one wake-up: repeat it until each
        // has seen the stop flag.
        let started = Instant::now();
        while threads
            .iter()
            .any(|t| t.thread().id() != me && !t.is_finished())
            && started.elapsed() < Duration::from_secs(10)
        {
            self.transport.wake();
            std::thread::sleep(Duration::from_micros(200));
        }
        for t in threads {
            if t.thread().id() != me && t.join().is_err() {
                ibcm_log!(ERROR, "{}: an event loop thread had panicked", self.name);
            }
        }
    }

    fn shard_of(&self, shell: &Shell) -> &Mutex<Engine> {
        &self.shards[shell.shard as usize]
    }

    /// Takes everything an engine produced. Runs under the shard lock.
    fn drain(&self, shard: u32, e: &mut Engine, out: &mut Outputs) {
        // Queued on the device in engine order while the shard lock is
        // held, so MADs of one id can never overtake each other.
        if e.has_transmits() {
            e.take_transmits(&mut lock(&self.outq));
            self.outq_pending.store(true, Ordering::SeqCst);
        }
        while let Some(c) = e.poll_change() {
            if c.user != 0 {
                let sh = unsafe { &*(c.user as *const Shell) };
                // A REQ's new id starts with its listener's user token
                // until `shell_for_event` gives it its own shell: never let
                // the new id's fields overwrite the listener's.
                if sh.handle() == c.id {
                    sh.sync_public(&c);
                }
            }
        }
        while let Some(ev) = e.poll_event() {
            if let Some(sh) = self.shell_for_event(shard, e, &ev) {
                let listener = match &ev.param {
                    EventParam::Req(p) => Some(p.listen_user),
                    EventParam::SidrReq(p) => Some(p.listen_user),
                    _ => None,
                }
                .map(|u| unsafe {
                    // The listener is alive: destroying it crosses every
                    // shard lock (see `destroy`), and we hold ours.
                    Arc::increment_strong_count(u as *const Shell);
                    Arc::from_raw(u as *const Shell)
                });
                lock(&sh.dq).queue.push_back(Item {
                    ev,
                    _listener: listener,
                });
                out.deliver.push(sh);
            }
        }
        while let Some(f) = e.poll_foreign() {
            out.foreign.push(f);
        }
        while let Some(n) = e.poll_notice() {
            ibcm_log!(INFO, "{}: {n}", self.name);
        }
    }

    /// The shell an event is for; creates the shell of a new incoming id
    /// (REQ/SIDR_REQ), inheriting the listener's handler and context.
    fn shell_for_event(&self, shard: u32, e: &mut Engine, ev: &Event) -> Option<Arc<Shell>> {
        let listen_user = match &ev.param {
            EventParam::Req(p) => Some(p.listen_user),
            EventParam::SidrReq(p) => Some(p.listen_user),
            _ => None,
        };
        if let Some(lu) = listen_user {
            let listener = unsafe { &*(lu as *const Shell) };
            let lc = unsafe { *listener.c.get() };
            let shell = Arc::new(Shell::new(
                listener.dev.clone(),
                shard,
                ev.id,
                lc.cm_handler,
                lc.context,
                listener.rust_handler.clone(),
            ));
            if let Some(c) = e.info(ev.id) {
                shell.sync_public(&c);
            }
            // One reference for the engine's user token / the consumer,
            // released by destroy.
            let raw = Arc::into_raw(shell.clone());
            if let Err(err) = e.set_user(ev.id, raw as u64) {
                // The event's id is gone: nothing to deliver to.
                ibcm_log!(ERROR, "{}: new id {:#x}: {err}", self.name, ev.id.0);
                drop(unsafe { Arc::from_raw(raw) });
                return None;
            }
            register(raw);
            self.live_ids[shard as usize]
                .0
                .fetch_add(1, Ordering::Relaxed);
            return Some(shell);
        }
        // An event queued in the same engine step as the REQ that created
        // its id (a REJ/DREQ right behind the REQ in one received batch)
        // carries the user token the id had then: its listener's. Use the
        // id's own shell, given above; never deliver it to the listener.
        let user = match e.info(ev.id) {
            Some(c) if c.user != 0 => c.user,
            _ => ev.user,
        };
        if user == 0 {
            return None;
        }
        let p = user as *const Shell;
        if unsafe { (*p).handle() } != ev.id {
            ibcm_log!(
                DEBUG,
                "{}: event {} for id {:#x} has no shell of its own yet: dropped",
                self.name,
                ev.kind.name(),
                ev.id.0
            );
            return None;
        }
        unsafe {
            Arc::increment_strong_count(p);
            Some(Arc::from_raw(p))
        }
    }

    /// Sends, delivers and forwards what a step produced (no locks held).
    fn finish(&self, out: Outputs) {
        self.finish_with(out, false)
    }

    /// As `finish`; with `defer` the callbacks run on the event loop, not in
    /// the calling thread (API calls: a consumer calling `ib_cm_notify` with
    /// its own locks held must not be re-entered).
    fn finish_with(&self, out: Outputs, defer: bool) {
        if !std::ptr::eq(BATCH_DEV.with(|d| d.get()), self) {
            self.flush();
        }
        for f in out.foreign {
            let Foreign::SendDreq { shard, local_id } = f;
            let mut o = Outputs::default();
            if let Some(s) = self.shards.get(shard as usize) {
                let mut e = lock(s);
                let now = self.now();
                e.dreq_stale_local(now, local_id);
                self.drain(shard, &mut e, &mut o);
                self.note_deadline(&e);
            }
            self.finish_with(o, defer);
        }
        if defer {
            if !out.deliver.is_empty() {
                lock(&self.deferred).extend(out.deliver);
                self.transport.wake();
            }
        } else {
            for sh in out.deliver {
                sh.deliver();
            }
        }
    }

    /// Wakes the event loop if `e` now has a timer earlier than its sleep.
    fn note_deadline(&self, e: &Engine) {
        if let Some(d) = e.poll_timeout() {
            self.timer_gen.fetch_add(1, Ordering::SeqCst);
            if d.0 < self.sleep_until.load(Ordering::SeqCst) {
                self.transport.wake();
            }
        }
    }

    fn event_loop(self: Arc<Self>) {
        let mut batch: Vec<Received> = Vec::with_capacity(256);
        BATCH_DEV.with(|d| d.set(Arc::as_ptr(&self)));
        while !self.stop.load(Ordering::SeqCst) {
            // Callbacks for events that API calls produced.
            let deferred = std::mem::take(&mut *lock(&self.deferred));
            for sh in deferred {
                sh.deliver();
            }
            // Timers due.
            let now = self.now();
            for (i, s) in self.shards.iter().enumerate() {
                let mut out = Outputs::default();
                {
                    let mut e = lock(s);
                    if e.poll_timeout().is_some_and(|d| d <= now) {
                        e.handle_timeout(now);
                        self.drain(i as u32, &mut e, &mut out);
                    }
                }
                self.finish(out);
            }
            // Everything this thread produced goes out before it sleeps.
            self.flush();
            // Sleep until the next deadline or a MAD.
            self.sleep_until.store(0, Ordering::SeqCst);
            let gen0 = self.timer_gen.load(Ordering::SeqCst);
            let next = self
                .shards
                .iter()
                .filter_map(|s| lock(s).poll_timeout())
                .min();
            self.sleep_until
                .store(next.map_or(u64::MAX, |t| t.0), Ordering::SeqCst);
            let timeout = if self.timer_gen.load(Ordering::SeqCst) != gen0
                || !lock(&self.deferred).is_empty()
            {
                Some(Duration::ZERO)
            } else {
                next.map(|t| Duration::from_nanos(t.0.saturating_sub(self.now().0)))
            };
            batch.clear();
            if let Err(e) = self.transport.recv(timeout, &mut batch) {
                ibcm_log!(ERROR, "{}: receive failed: {e}", self.name);
                std::thread::sleep(Duration::from_millis(10));
            }
            self.sleep_until.store(0, Ordering::SeqCst);
            if self.stop.load(Ordering::SeqCst) {
                break;
            }
            if !batch.is_empty() {
                self.process(&batch);
            }
        }
        self.flush();
        BATCH_DEV.with(|d| d.set(std::ptr::null()));
    }

    /// Runs `f` with this thread's outgoing MADs held back, then sends them
    /// all at once (one `sendmmsg` per 64 on the UDP fabric). For a thread
    /// that starts many connections or disconnects in a row: each API call
    /// otherwise sends its MAD immediately, one system call each. Order per
    /// id is kept; nested calls flush at the outermost.
    pub fn batch<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        struct Restore<'a>(&'a Device, *const Device);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                BATCH_DEV.with(|d| d.set(self.1));
                if !std::ptr::eq(self.1, self.0) {
                    self.0.flush();
                }
            }
        }
        let prev = BATCH_DEV.with(|d| d.replace(Arc::as_ptr(self)));
        let _restore = Restore(self, prev);
        f()
    }

    /// Sends every queued MAD, in queue order. The send lock makes batches
    /// taken by different threads leave in the order they were taken.
    fn flush(&self) {
        // Whoever queued MADs flushes after queueing them (or at the end of
        // its batch), so a clear flag means someone else already took them.
        if !self.outq_pending.load(Ordering::SeqCst)
            || !self.outq_pending.swap(false, Ordering::SeqCst)
        {
            return;
        }
        let _g = lock(&self.send_lock);
        let batch = std::mem::take(&mut *lock(&self.outq));
        if !batch.is_empty() {
            self.transport.send(&batch);
            let mut q = lock(&self.outq);
            if q.is_empty() && q.capacity() < batch.capacity() {
                let mut b = batch;
                b.clear();
                *q = b;
            }
        }
    }

    /// Hands received MADs to their shards.
    pub(crate) fn process(&self, batch: &[Received]) {
        let n = self.shards.len() as u64;
        let now = self.now();
        // Group consecutive MADs per shard to take each lock once.
        let mut idx = 0;
        while idx < batch.len() {
            let shard_of = |r: &Received| match route(&self.shared, &r.mad, &r.src) {
                Ok(s) => s as usize,
                Err(h) => (h % n) as usize,
            };
            let s = shard_of(&batch[idx]);
            let mut out = Outputs::default();
            {
                let mut e = lock(&self.shards[s]);
                while idx < batch.len() && shard_of(&batch[idx]) == s {
                    let r = &batch[idx];
                    if let Err(d) = e.handle_mad(now, &r.src, &r.mad) {
                        ibcm_log!(DEBUG, "{}: MAD from {} dropped: {d}", self.name, r.src.sgid);
                    }
                    idx += 1;
                }
                self.drain(s as u32, &mut e, &mut out);
            }
            self.finish(out);
        }
    }

    // ------------------------------------------------------------ id API

    /// `ib_create_cm_id`. `handler` and `context` are the C `struct
    /// ib_cm_id` members of that name: stored for C code to read and
    /// inherited by the ids of REQs a listener accepts. Events go to
    /// `rust_handler` only (none: events are dropped); the C layer passes
    /// one that builds the C event and calls the id's `cm_handler`.
    pub fn create_id(
        self: &Arc<Self>,
        handler: IbCmHandler,
        context: *mut c_void,
        rust_handler: Option<RustHandler>,
    ) -> Result<CmId, Errno> {
        if self.stop.load(Ordering::SeqCst) {
            return Err(Errno::ENODEV);
        }
        // Spread new ids over the shards: round robin per thread, each
        // thread starting at a different shard, so one creating thread
        // still uses every shard and two rarely wait for one lock.
        // A shard whose lock is busy is skipped for the next free one.
        let n = self.shards.len();
        let first = NEXT_SHARD.with(|c| {
            let v = c.get();
            c.set(v.wrapping_add(1));
            v % n
        });
        let (shard, mut e) = (0..n)
            .find_map(|k| {
                let s = (first + k) % n;
                match self.shards[s].try_lock() {
                    Ok(g) => Some((s, g)),
                    Err(std::sync::TryLockError::Poisoned(p)) => Some((s, p.into_inner())),
                    Err(std::sync::TryLockError::WouldBlock) => None,
                }
            })
            .unwrap_or_else(|| (first, lock(&self.shards[first])));
        let shard = shard as u32;
        let h = e.create_id(0)?;
        let shell = Arc::new(Shell::new(
            self.clone(),
            shard,
            h,
            handler,
            context,
            rust_handler,
        ));
        let raw = Arc::into_raw(shell.clone());
        e.set_user(h, raw as u64)?;
        register(raw);
        if let Some(c) = e.info(h) {
            shell.sync_public(&c);
        }
        self.live_ids[shard as usize]
            .0
            .fetch_add(1, Ordering::Relaxed);
        Ok(CmId(shell))
    }

    /// `ib_cm_insert_listen`: an existing compatible listener (same handler,
    /// NULL context) is shared; each caller must destroy it once.
    pub fn insert_listen(
        self: &Arc<Self>,
        handler: IbCmHandler,
        service_id: u64,
        rust_handler: Option<RustHandler>,
    ) -> Result<CmId, Errno> {
        let _g = lock(&self.listen_lock);
        let key = handler.map_or(0, |f| f as usize as u64)
            ^ rust_handler
                .as_ref()
                .map_or(0, |h| Arc::as_ptr(h) as *const u8 as usize as u64);
        if let Some(entry) = self.shared.listen_lookup(service_id) {
            if entry.share_key != Some(key) {
                return Err(Errno::EINVAL);
            }
            let p = entry.user as *const Shell;
            let sh = unsafe { &*p };
            if unsafe { !(*sh.c.get()).context.is_null() } {
                return Err(Errno::EINVAL);
            }
            lock(&self.shards[entry.shard as usize])
                .share_listener(Handle(entry.local_id as u64))?;
            register(p);
            // One reference for the new sharer (released by its destroy),
            // one for the returned handle.
            unsafe {
                Arc::increment_strong_count(p);
                Arc::increment_strong_count(p);
                return Ok(CmId(Arc::from_raw(p)));
            }
        }
        let id = self.create_id(handler, std::ptr::null_mut(), rust_handler)?;
        let r = {
            let mut e = lock(&self.shards[id.0.shard as usize]);
            let r = e.listen_keyed(id.0.handle(), service_id, Some(key));
            if let Some(c) = e.info(id.0.handle()) {
                id.0.sync_public(&c);
            }
            r
        };
        match r {
            Ok(()) => Ok(id),
            Err(e) => {
                if let Err(d) = id.destroy() {
                    ibcm_log!(
                        WARN,
                        "{}: destroying the id of a failed listen: {d}",
                        self.name
                    );
                }
                Err(e)
            }
        }
    }
}

impl Shell {
    fn new(
        dev: Arc<Device>,
        shard: u32,
        h: Handle,
        handler: IbCmHandler,
        context: *mut c_void,
        rust_handler: Option<RustHandler>,
    ) -> Shell {
        let devp = dev.c_ptr();
        Shell {
            c: UnsafeCell::new(IbCmId {
                cm_handler: handler,
                context,
                device: devp,
                service_id: 0,
                state: 0,
                lap_state: 0,
                local_id: (h.0 as u32).to_be(),
                remote_id: 0,
                remote_cm_qpn: 1,
            }),
            dev,
            shard,
            handle: AtomicU64::new(h.0),
            rust_handler,
            dq: Mutex::new(Delivery {
                queue: VecDeque::new(),
                delivering: false,
                destroyed: false,
            }),
            cond: Condvar::new(),
        }
    }

    fn handle(&self) -> Handle {
        Handle(self.handle.load(Ordering::Relaxed))
    }

    /// Mirrors the engine's public fields into the C struct.
    fn sync_public(&self, c: &Change) {
        let p = self.c.get();
        unsafe {
            std::ptr::write_volatile(&mut (*p).state, c.state as u32);
            std::ptr::write_volatile(&mut (*p).lap_state, c.lap_state as u32);
            std::ptr::write_volatile(&mut (*p).remote_id, c.remote_id.to_be());
            std::ptr::write_volatile(&mut (*p).service_id, c.service_id.to_be());
            std::ptr::write_volatile(&mut (*p).local_id, (c.id.0 as u32).to_be());
        }
    }

    /// Delivers queued events unless another thread is already doing so.
    fn deliver(self: &Arc<Self>) {
        {
            let mut d = lock(&self.dq);
            if d.delivering || d.destroyed || d.queue.is_empty() {
                return;
            }
            d.delivering = true;
        }
        loop {
            let item = {
                let mut d = lock(&self.dq);
                match (d.destroyed, d.queue.pop_front()) {
                    (false, Some(item)) => item,
                    _ => {
                        d.delivering = false;
                        // Idle ids keep no queue memory (a million
                        // established ids would otherwise each hold one).
                        d.queue = VecDeque::new();
                        drop(d);
                        self.cond.notify_all();
                        return;
                    }
                }
            };
            let kind = item.ev.kind;
            let prev = IN_CALLBACK.with(|c| c.replace(Arc::as_ptr(self)));
            let ret =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.call_handler(&item)))
                    .unwrap_or_else(|_| {
                        ibcm_log!(
                            ERROR,
                            "handler panicked on {}; destroying the id",
                            kind.name()
                        );
                        -errno::EIO
                    });
            IN_CALLBACK.with(|c| c.set(prev));
            drop(item);
            if ret != 0 {
                ibcm_log!(
                    DEBUG,
                    "handler returned {ret} for {}: destroying the id",
                    kind.name()
                );
                self.destroy_inner(ret, true);
                let mut d = lock(&self.dq);
                d.delivering = false;
                d.queue = VecDeque::new();
                drop(d);
                self.cond.notify_all();
                return;
            }
        }
    }

    fn call_handler(self: &Arc<Self>, item: &Item) -> i32 {
        match &self.rust_handler {
            Some(h) => h(&CmId(self.clone()), &item.ev),
            None => 0,
        }
    }

    /// Protocol destroy + release. `from_deliverer`: called by the thread
    /// that delivers this id's events (non-zero handler return).
    fn destroy_inner(self: &Arc<Self>, err: i32, from_deliverer: bool) {
        let dev = &self.dev;
        let is_listener;
        let gone;
        let mut out = Outputs::default();
        {
            let mut e = lock(dev.shard_of(self));
            is_listener = e.state(self.handle()) == Some(State::Listen);
            gone = e.destroy(self.handle(), err);
            dev.drain(self.shard, &mut e, &mut out);
        }
        dev.finish(out);
        if !gone {
            // A shared listener other users still hold: drop our share.
            if is_listener {
                unregister(Arc::as_ptr(self));
                unsafe { Arc::decrement_strong_count(Arc::as_ptr(self)) };
            }
            return;
        }
        if is_listener {
            // Barrier: after this no shard can still hold the listener's
            // table entry without having taken a reference.
            for s in &dev.shards {
                drop(lock(s));
            }
        }
        {
            let mut d = lock(&self.dq);
            d.destroyed = true;
            d.queue.clear();
            if !from_deliverer {
                while d.delivering {
                    d = self.cond.wait(d).unwrap_or_else(|e| e.into_inner());
                }
            }
        }
        dev.live_ids[self.shard as usize]
            .0
            .fetch_sub(1, Ordering::Relaxed);
        unregister(Arc::as_ptr(self));
        // Release the reference the engine's user token stood for.
        unsafe { Arc::decrement_strong_count(Arc::as_ptr(self)) };
    }
}

impl CmId {
    /// From a C pointer; the caller guarantees it came from this library
    /// and was not destroyed.
    ///
    /// # Safety
    /// `p` must be a live `ib_cm_id` created by ibcm.
    pub unsafe fn from_c(p: *mut IbCmId) -> CmId {
        let s = p as *const Shell;
        unsafe {
            Arc::increment_strong_count(s);
            CmId(Arc::from_raw(s))
        }
    }

    /// The C pointer of this id.
    pub fn c_ptr(&self) -> *mut IbCmId {
        self.0.c.get()
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.0.dev
    }

    pub fn local_id(&self) -> u32 {
        self.0.handle().0 as u32
    }

    /// The public `ib_cm_id` fields as last synchronised.
    pub fn public(&self) -> IbCmId {
        unsafe { std::ptr::read_volatile(self.0.c.get()) }
    }

    pub fn state(&self) -> Option<State> {
        let dev = &self.0.dev;
        lock(dev.shard_of(&self.0)).state(self.0.handle())
    }

    /// Runs an engine call on this id, then sends and delivers its results.
    fn with_engine<R>(
        &self,
        f: impl FnOnce(&mut Engine, Time, Handle) -> ApiResult<R>,
    ) -> ApiResult<R> {
        let dev = &self.0.dev;
        if dev.stop.load(Ordering::SeqCst) {
            return Err(Errno::ENODEV);
        }
        let mut out = Outputs::default();
        let r = {
            let mut e = lock(dev.shard_of(&self.0));
            let now = dev.now();
            let r = f(&mut e, now, self.0.handle());
            dev.drain(self.0.shard, &mut e, &mut out);
            dev.note_deadline(&e);
            r
        };
        dev.finish_with(out, true);
        r
    }

    pub fn listen(&self, service_id: u64) -> ApiResult {
        let _g = lock(&self.0.dev.listen_lock);
        self.with_engine(|e, _, h| e.listen(h, service_id))
    }

    pub fn send_req(&self, p: &ReqParams) -> ApiResult {
        self.with_engine(|e, now, h| e.send_req(now, h, p))
    }

    pub fn send_rep(&self, p: &RepParams) -> ApiResult {
        self.with_engine(|e, now, h| e.send_rep(now, h, p))
    }

    pub fn send_rtu(&self, pdata: &[u8]) -> ApiResult {
        self.with_engine(|e, _, h| e.send_rtu(h, pdata))
    }

    pub fn send_dreq(&self, pdata: &[u8]) -> ApiResult {
        self.with_engine(|e, now, h| e.send_dreq(now, h, pdata))
    }

    pub fn send_drep(&self, pdata: &[u8]) -> ApiResult {
        self.with_engine(|e, now, h| e.send_drep(now, h, pdata))
    }

    pub fn send_rej(&self, reason: u32, ari: &[u8], pdata: &[u8]) -> ApiResult {
        self.with_engine(|e, now, h| e.send_rej(now, h, reason, ari, pdata))
    }

    pub fn prepare_mra(&self) -> ApiResult {
        self.with_engine(|e, _, h| e.prepare_mra(h))
    }

    pub fn notify(&self, event: u32) -> ApiResult {
        self.with_engine(|e, _, h| e.notify(h, event))
    }

    pub fn init_qp_attr(&self, qp_state: u32) -> ApiResult<QpAttr> {
        self.with_engine(|e, _, h| e.init_qp_attr(h, qp_state))
    }

    pub fn send_sidr_req(&self, p: &SidrReqParams) -> ApiResult {
        self.with_engine(|e, now, h| e.send_sidr_req(now, h, p))
    }

    pub fn send_sidr_rep(&self, p: &SidrRepParams) -> ApiResult {
        self.with_engine(|e, _, h| e.send_sidr_rep(h, p))
    }

    /// `ib_destroy_cm_id`: blocks until no callback for this id runs; from
    /// the id's own callback it is refused (returns `-EBUSY`).
    pub fn destroy(&self) -> ApiResult {
        let me = Arc::as_ptr(&self.0);
        if IN_CALLBACK.with(|c| c.get()) == me {
            ibcm_log!(
                ERROR,
                "ib_destroy_cm_id({:#010x}) called from its own callback: refused (return non-zero from the handler to destroy it)",
                self.local_id()
            );
            return Err(Errno::EBUSY);
        }
        if lock(&self.0.dq).destroyed {
            return Err(Errno::EINVAL);
        }
        self.0.destroy_inner(0, false);
        Ok(())
    }

    pub fn is_destroyed(&self) -> bool {
        lock(&self.0.dq).destroyed
    }
}

fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    let n = unsafe { libc::getrandom(b.as_mut_ptr() as *mut c_void, 8, 0) };
    let mut s = u64::from_ne_bytes(b);
    if n != 8 {
        s ^= std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
    }
    s ^ (std::process::id() as u64) << 32 ^ engine::ids::splitmix64(&s as *const u64 as u64)
}
