//! `Device`: a transport, its engine shards and threads; opening (with
//! `DeviceOptions`), ports and their C GID attribute objects, counters and
//! close.

use super::event_loop::Outputs;
use super::inner::CmIdInner;
use super::remote::Remote;
use super::shard::{Listeners, Shard};
use super::spec::open_transport;
use super::{lock, read};
use crate::abi::{IbGid, IbGidAttr};
use crate::engine::ids::IdLayout;
use crate::engine::{self, *};
use crate::fabric::Transport;
use crate::log::{ERROR, WARN};
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    /// The wait an MRA for a REP buys, in ms, at most (0 = as the MRA asks).
    pub mra_rep_wait_cap_ms: u64,
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
            mra_rep_wait_cap_ms: env(
                "IBCM_MRA_REP_WAIT_CAP_MS",
                defaults.mra_rep_wait_cap_ms as u32,
            ) as u64,
            rep_max_retries: env("IBCM_REP_MAX_RETRIES", defaults.rep_max_retries as u32).min(15)
                as u8,
            reject_off_path_req: env("IBCM_REJECT_OFF_PATH_REQ", 1) != 0,
        }
    }
}

/// A counter alone on its cache line.
#[derive(Default)]
#[repr(align(64))]
pub(super) struct PaddedCount(pub(super) AtomicUsize);

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

/// Told of every port table `Device::update_ports` installs (the CM
/// service pushes them to the processes it serves the device to).
pub type PortsHook = Box<dyn Fn(&Device, &Arc<Vec<PortInfo>>) + Send + Sync>;

pub struct Device {
    pub(super) name: String,
    pub(super) transport: Arc<dyn Transport>,
    /// Engine shards, each with the `CmIdInner`s of its ids.
    pub(super) shards: Vec<Mutex<Shard>>,
    /// Listening ids by handle, for the REQs of every shard.
    pub(super) listeners: Listeners,
    pub(super) shared: Arc<Shared>,
    epoch: Instant,
    pub(super) stop: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// When the event loop sleeps until (ns since epoch), for wake-ups.
    pub(super) sleep_until: AtomicU64,
    pub(super) timer_gen: AtomicU64,
    /// Wake-ups of the event loop by threads that armed a timer earlier
    /// than its sleep (`note_deadline`); a diagnostic the tests read.
    pub(super) timer_wakes: AtomicU64,
    /// Serialises listen/insert_listen/listener destroy (not on the
    /// message path).
    pub(super) listen_lock: Mutex<()>,
    /// Live ids per shard (summed by `live_ids()`): one cache line each,
    /// so threads creating and destroying ids on different shards do not
    /// share one counter.
    pub(super) live_ids: Box<[PaddedCount]>,
    /// Ids with events from API calls, delivered by the event loop.
    pub(super) deferred: Mutex<Vec<Arc<CmIdInner>>>,
    /// MADs waiting to be sent, in engine order.
    pub(super) outq: Mutex<Vec<Transmit>>,
    /// Set after MADs are queued on `outq`; lets a flush with nothing to
    /// send skip both device-wide locks (an API call that sends nothing,
    /// such as destroying an idle id, then touches no device lock).
    pub(super) outq_pending: std::sync::atomic::AtomicBool,
    pub(super) send_lock: Mutex<()>,
    /// GID attribute objects handed to C (`sgid_attr`): the last table is
    /// current; older ones (before a port change) stay alive with the
    /// device so pointers already given out remain valid.
    gid_attrs: std::sync::RwLock<Vec<GidAttrTable>>,
    ports: std::sync::RwLock<Arc<Vec<PortInfo>>>,
    /// Called after each port table install, in install order (the lock
    /// is held across the install and the calls).
    port_hooks: Mutex<Vec<PortsHook>>,
    node_guid: u64,
    /// Set for a device served by the host CM service: no shards or
    /// threads here, every id call is a request to the service.
    pub(super) remote: Option<Arc<Remote>>,
    /// The event loop has failed the outstanding requests of a lost
    /// transport (`Transport::lost`).
    pub(super) lost_seen: AtomicBool,
    /// Opened in forward mode (its engines here, the service forwarding
    /// their MADs: design B).
    forwarded: bool,
    /// The switch this device hands MADs to its process's other soft
    /// devices through (the host CM service's devices only).
    pub(super) switch: std::sync::OnceLock<Arc<super::switch::LocalSwitch>>,
    /// MADs other devices of the switch handed to this one.
    pub(super) inbound: Mutex<super::switch::Inbound>,
}

unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    /// Opens a device by name (`soft:…`, `loop:…`, an RDMA device): through
    /// the host CM service when `IBCM_SERVICE` says so (see `remote`),
    /// else in this process.
    pub fn open(name: &str, opts: DeviceOptions) -> Result<Arc<Device>, Errno> {
        if let Some(dev) = super::remote::open(name)? {
            return Ok(dev);
        }
        Ok(Device::with_transport(open_transport(name)?, opts))
    }

    /// Opens a device in this process whatever `IBCM_SERVICE` says (the
    /// service's own devices).
    pub fn open_local(name: &str, opts: DeviceOptions) -> Result<Arc<Device>, Errno> {
        Ok(Device::with_transport(open_transport(name)?, opts))
    }

    /// Opens a device through the CM service listening at `socket` in
    /// engine mode (design A: the service runs the device's engines),
    /// whatever `IBCM_SERVICE_MODE` says.
    pub fn open_served(name: &str, socket: &std::path::Path) -> Result<Arc<Device>, Errno> {
        super::remote::open_at(socket, name, false)
    }

    /// Opens a device through the CM service listening at `socket` in
    /// forward mode (design B: this process runs the device's engines, the
    /// service forwards their MADs), whatever `IBCM_SERVICE_MODE` says.
    pub fn open_forwarded(name: &str, socket: &std::path::Path) -> Result<Arc<Device>, Errno> {
        super::remote::open_at(socket, name, true)
    }

    /// Whether the host CM service serves this device, with its engines
    /// (`IBCM_SERVICE_MODE=engine`) or forwarding its MADs (`forward`):
    /// other processes may share it.
    pub fn is_served(&self) -> bool {
        self.remote.is_some() || self.forwarded
    }

    /// The service's counters of a served device (`None` in-process).
    pub fn service_stat(&self) -> Option<crate::ipc::Stat> {
        self.remote.as_ref()?.stat()
    }

    /// A device served by the CM service (its ports and GUID as the
    /// service reported them).
    pub(super) fn with_remote(remote: Arc<Remote>) -> Arc<Device> {
        let ports = remote.ports();
        let dev = Arc::new(Device::assemble(
            remote.clone(),
            Vec::new(),
            Arc::new(Shared::new(0, 0)),
            Box::new([]),
            ports,
            Some(remote),
        ));
        dev.fix_gid_attr_device();
        dev
    }

    /// A device's record with nothing running yet: the parts that differ
    /// between a device of this process and one served by the host's CM
    /// service (`remote`), the rest idle and empty.
    fn assemble(
        transport: Arc<dyn Transport>,
        shards: Vec<Mutex<Shard>>,
        shared: Arc<Shared>,
        live_ids: Box<[PaddedCount]>,
        ports: Vec<PortInfo>,
        remote: Option<Arc<Remote>>,
    ) -> Device {
        let forwarded = shared.host_listens.is_some();
        Device {
            name: transport.describe(),
            node_guid: transport.node_guid(),
            gid_attrs: std::sync::RwLock::new(vec![gid_attr_table(&ports, std::ptr::null_mut())]),
            ports: std::sync::RwLock::new(Arc::new(ports)),
            transport,
            shards,
            listeners: Listeners::new(),
            shared,
            epoch: Instant::now(),
            stop: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            sleep_until: AtomicU64::new(0),
            timer_gen: AtomicU64::new(0),
            timer_wakes: AtomicU64::new(0),
            listen_lock: Mutex::new(()),
            live_ids,
            deferred: Mutex::new(Vec::new()),
            outq: Mutex::new(Vec::new()),
            outq_pending: std::sync::atomic::AtomicBool::new(false),
            switch: std::sync::OnceLock::new(),
            inbound: Mutex::new(Default::default()),
            send_lock: Mutex::new(()),
            port_hooks: Mutex::new(Vec::new()),
            forwarded,
            remote,
            lost_seen: AtomicBool::new(false),
        }
    }

    fn fix_gid_attr_device(&self) {
        let me = self.c_ptr();
        for t in read(&self.gid_attrs).iter() {
            for (_, _, a) in t.iter() {
                unsafe { (*a.get()).device = me };
            }
        }
    }

    /// A device over any transport; starts its event-loop thread(s).
    pub fn with_transport(transport: Arc<dyn Transport>, opts: DeviceOptions) -> Arc<Device> {
        Device::with_engines(transport, opts, random_seed(), IdLayout::local, None)
    }

    /// A device over any transport whose comm IDs follow `layout` (given
    /// the shard bit count) keyed by `seed`, with the host's listen table
    /// `host_listens` when this device's is not it (design B's forwarded
    /// devices: `forward`).
    pub(super) fn with_engines(
        transport: Arc<dyn Transport>,
        opts: DeviceOptions,
        seed: u64,
        layout: impl FnOnce(u32) -> IdLayout,
        host_listens: Option<Arc<dyn crate::engine::shared::HostListens>>,
    ) -> Arc<Device> {
        let shard_bits = opts.shards.next_power_of_two().trailing_zeros().min(6);
        let mut shared = Shared::with_layout(seed, layout(shard_bits));
        shared.host_listens = host_listens;
        let shared = Arc::new(shared);
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
                cfg.mra_rep_wait_cap_ms = opts.mra_rep_wait_cap_ms;
                cfg.rep_max_retries = opts.rep_max_retries;
                cfg.reject_off_path_req = opts.reject_off_path_req;
                if let Some(d) = transport.ack_delay() {
                    cfg.ack_delay = d;
                }
                cfg.seed = seed ^ (i as u64).wrapping_mul(0x9e37_79b9);
                Mutex::new(Shard::new(Engine::new(cfg, shared.clone())))
            })
            .collect();
        let live_ids = (0..1u32 << shard_bits)
            .map(|_| PaddedCount::default())
            .collect();
        let dev = Arc::new(Device::assemble(
            transport, shards, shared, live_ids, ports, None,
        ));
        dev.fix_gid_attr_device();
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

    /// Installs a new port table (GID/P_Key/LID changes of a real device,
    /// or of a served one as the CM service pushes them): new GID
    /// attribute objects, every shard's engine, `ports()`; then the hooks
    /// of `on_ports_change`.
    pub fn update_ports(&self, ports: Vec<PortInfo>) {
        let hooks = lock(&self.port_hooks);
        let attrs = gid_attr_table(&ports, self.c_ptr());
        self.gid_attrs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(attrs);
        for s in &self.shards {
            lock(s).set_ports(ports.clone());
        }
        let ports = Arc::new(ports);
        *self.ports.write().unwrap_or_else(|e| e.into_inner()) = ports.clone();
        ibcm_log!(crate::log::INFO, "{}: port tables updated", self.name);
        for h in hooks.iter() {
            h(self, &ports);
        }
    }

    /// Calls `hook` after every later `update_ports`, with the tables it
    /// installed (already in `ports()`).
    pub fn on_ports_change(&self, hook: PortsHook) {
        lock(&self.port_hooks).push(hook);
    }

    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    /// Live ids (listeners and incoming ids included; of this process on
    /// a served device).
    pub fn live_ids(&self) -> usize {
        if let Some(r) = &self.remote {
            return r.ids();
        }
        self.live_ids
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .sum()
    }

    /// Counters of all shards.
    pub fn counters(&self) -> Counters {
        if let Some(r) = &self.remote {
            return r.stat().unwrap_or_default().cm;
        }
        let mut c = Counters::default();
        for s in &self.shards {
            c.merge(lock(s).counters());
        }
        c
    }

    /// The engine configuration (shard 0's; the shards differ only in
    /// their index and seed).
    pub fn engine_config(&self) -> EngineConfig {
        if self.remote.is_some() {
            return EngineConfig::new(self.node_guid, self.ports().to_vec());
        }
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
        if let Some(r) = &self.remote {
            return r.stat().map_or(0, |s| s.pending_timers as usize);
        }
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

    /// Gives the host CM service forwarding this device (forward mode)
    /// the process's CM counters as they stand, unasked
    /// (`fwd::LAST_STAT`): the service keeps them in the device's once
    /// the process is gone. Sent as the device closes and at process
    /// exit; nothing for other transports.
    pub fn send_last_counters(&self) {
        if self.remote.is_none() {
            self.transport
                .answer_stat(crate::ipc::fwd::LAST_STAT, &self.counters());
        }
    }

    /// Stops the event loop and destroys every remaining id (their
    /// protocol actions are sent). Called by `ibcm_close_device`.
    pub fn close(self: &Arc<Self>) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(r) = &self.remote {
            r.close();
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
                    e.destroy(h, 0);
                    // The object stays in the table: C may still hold its
                    // pointer (calls on it now fail), as before the close.
                    if let Some(sh) = e.id(h) {
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
        self.send_last_counters();
        self.transport.close();
    }

    pub(super) fn shard_of(&self, id: &CmIdInner) -> &Mutex<Shard> {
        &self.shards[id.shard as usize]
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
