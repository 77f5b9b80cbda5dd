//! The host CM service (`ibcm daemon`): one CM per host. It opens each
//! device once (the UDP port of a `soft:` address, the umad agent of an
//! HCA port) and runs its engines as any in-process `Device` does; every
//! process that opens the device through the service (`runtime::remote`)
//! gets a connection on the service socket whose ids live here.
//!
//! * A connection serves one device for one process. Each request is
//!   decoded by `ipc` (garbage is counted and answered `-EPROTO`, never
//!   trusted), checked against the connection's own id table (a process
//!   acts only on its ids: a handle of another connection is `-EINVAL`)
//!   and its limits (ids, listeners: `-ENOMEM`, counted), run on the
//!   device and answered with its errno. The service takes at most
//!   `max_connections` connections in all (a refused one is closed).
//! * Events of a connection's ids are encoded by the device's event loop
//!   into the connection's queue (never blocking the loop) and written by
//!   the connection's writer thread. A process that lets `max_events`
//!   events pile up is disconnected.
//! * When a connection ends (exit, crash, SIGKILL, or the process closed
//!   the device) its ids are destroyed at once, exactly as the kernel does
//!   for a dying process: established → DREQ, pending → REJ, listeners
//!   released. A device is closed with its last connection.
//! * rdma_cm's port spaces are one table for the host (`portspace`): a
//!   connection binds, listens on and releases ports of its own (ops
//!   `PORT_*`, no device needed), at most `max_ports`; ports below 1024
//!   need CAP_NET_BIND_SERVICE in the peer process's effective set. A
//!   connection's ports are released when it ends.

use crate::api::{
    CmId, Device, DeviceOptions, EventParam, EventType, LocalSwitch, PortInfo, QpAttr, RustHandler,
};
use crate::engine::ids::{FastMap, FastSet, FastState};
use crate::engine::{Errno, errno, qp_state};
use crate::forwarder::{Attached, Hub};
use crate::ipc::{
    self, Created, DeviceStat, Header, IdInfo, IdList, Opened, Public, QpAttrs, Reader, Refused,
    Stat, op, sock,
};
use crate::log::{INFO, WARN};
use crate::portspace::{self, PortTable};
use crate::wire::Gid;
use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// At most this many messages are read from a connection per wake-up
/// (the first blocking, the rest only if already queued).
const DRAIN: usize = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Limits per connection (one process's use of one device).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_ids: usize,
    pub max_listeners: usize,
    pub max_events: usize,
    /// Connections of all processes together.
    pub max_connections: usize,
    /// rdma_cm port bindings per connection.
    pub max_ports: usize,
}

impl Default for Limits {
    fn default() -> Self {
        let env = |k: &str, d: usize| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        Limits {
            max_ids: env("IBCM_SERVICE_MAX_IDS", 1 << 20),
            max_listeners: env("IBCM_SERVICE_MAX_LISTENERS", 4096),
            max_events: env("IBCM_SERVICE_MAX_EVENTS", 1 << 20),
            max_connections: env("IBCM_SERVICE_MAX_CONNECTIONS", 4096),
            max_ports: env("IBCM_SERVICE_MAX_PORTS", 16384),
        }
    }
}

/// How the service runs.
#[derive(Debug, Clone)]
pub struct Options {
    pub socket: PathBuf,
    /// Leave after this long without connections (`None`: run forever).
    pub idle_exit: Option<Duration>,
    pub limits: Limits,
}

/// A served device and the connections using it.
struct Served {
    dev: Arc<Device>,
    clients: usize,
    /// One-way calls on it refused (all its connections, past and live).
    refused: Arc<AtomicU64>,
}

/// The service: its devices by name.
pub struct Service {
    opts: Options,
    devices: Mutex<HashMap<String, Served>>,
    connections: AtomicUsize,
    last_active: Mutex<Instant>,
    next_conn: AtomicU64,
    /// Live connections, for `ibcm ids`.
    conns: Mutex<HashMap<u64, Weak<Conn>>>,
    /// rdma_cm's port spaces, host-wide; holders are connection ids.
    ports: Mutex<PortTable>,
    /// The soft devices served, handing each other MADs in memory.
    switch: Arc<LocalSwitch>,
    /// Connection threads running what a wake-up brought, and the
    /// connections whose records are held meanwhile (`hold`).
    holds: Mutex<Holds>,
    /// Binds (and listens) answered `EADDRINUSE` after `Conn::settle`
    /// ran out of time with the holder's connections still busy.
    settle_expired: AtomicU64,
    /// Devices served in design B (`IBCM_SERVICE_MODE=forward`): their
    /// processes run the engines, the hub switches their MADs. A device
    /// is served one way at a time (the hub is locked after `devices`).
    hub: Arc<Hub>,
}

/// See `Service::hold`.
#[derive(Default)]
struct Holds {
    active: usize,
    conns: Vec<Arc<Conn>>,
}

/// One of a connection's ids, with what `ibcm ids` shows beside its
/// public fields.
struct Entry {
    id: CmId,
    born: Instant,
    peer: Option<Gid>,
    /// Leased by `CREATE_IDS` and not used yet: the process has not
    /// created it as far as its user knows (not listed, not counted).
    /// The one-way calls run on it (sent with its events, so the process
    /// knows which of its own calls a snapshot has seen) are counted on
    /// the id itself (`CmId::with_oneway_calls`): an event needs no
    /// look-up here.
    pooled: bool,
    /// A listener marked with `op::QP_ATTRS_ON_REQ`: its connection REQs'
    /// events go with their QP attributes (`op::QP_ATTRS`).
    qp_attrs_on_req: bool,
}

impl Entry {
    fn new(id: CmId, peer: Option<Gid>) -> Entry {
        Entry {
            id,
            born: Instant::now(),
            peer,
            pooled: false,
            qp_attrs_on_req: false,
        }
    }
}

/// Events waiting for a connection's writer thread.
#[derive(Default)]
struct Outbox {
    q: VecDeque<Vec<u8>>,
    /// A thread (the writer, or one flushing what it held) is sending
    /// records it took from `q`: a new event must queue behind them.
    busy: bool,
}

/// One process's connection for one device.
struct Conn {
    id: u64,
    pid: i32,
    uid: u32,
    fd: OwnedFd,
    svc: Arc<Service>,
    /// The device's name as the service keys it (set by OPEN).
    name: Mutex<Option<String>>,
    dev: Mutex<Option<Arc<Device>>>,
    /// The device's count of refused one-way calls (set by OPEN).
    dev_refused: Mutex<Option<Arc<AtomicU64>>>,
    /// The port tables the OPEN reply carried, until that reply is sent.
    opened_ports: Mutex<Option<Arc<Vec<PortInfo>>>>,
    /// The port tables the process has last been sent (`None` until the
    /// OPEN reply is out: a `PORTS` record never precedes it).
    ports_sent: Mutex<Option<Arc<Vec<PortInfo>>>>,
    /// `ports_sent` is set: nothing to check after each message.
    ports_armed: AtomicBool,
    /// Keyed by handle; the keys are the service's own (a process only
    /// looks up what it names), so a fast hash is safe here.
    ids: Mutex<FastMap<u64, Entry>>,
    listeners: Mutex<FastSet<u64>>,
    out: Mutex<Outbox>,
    out_cv: Condvar,
    closed: AtomicBool,
    refusals: AtomicU64,
    bad: AtomicU64,
    oneway_refused: AtomicU64,
    /// The process asked for the QP attributes of its REPs
    /// (`op::QP_ATTRS_ON_REP`): pushed before each `REP_RECEIVED`.
    rep_attrs: AtomicBool,
    /// `QP_ATTRS` records pushed, `INIT_QP_ATTR` requests run (`Stat`).
    qp_attrs_pushed: AtomicU64,
    qp_attr_requests: AtomicU64,
    /// The secret of this connection's `PORT_TOKEN`: with it, another
    /// connection of the same process releases this one's port bindings
    /// (`PORT_RELEASE_BY`).
    port_secret: u64,
    /// Bytes of the messages read from the socket (added as the read
    /// returns, before `reading` clears) and bytes of those whose records
    /// have all run: a bind that conflicts with this process's binding
    /// waits for what had reached this connection (`Conn::settle`).
    rx: AtomicU64,
    ran: AtomicU64,
    /// A read of the socket (never blocking) is under way: what it took
    /// off the queue may not be in `rx` yet.
    reading: AtomicBool,
    /// This connection's thread is in `settle`: nobody waits for it (two
    /// connections never wait for each other).
    settling: AtomicBool,
    /// The handler all of this connection's ids share (built with the
    /// first): it keeps nothing of any one id (each event names its own),
    /// so an id costs a reference count, not a closure's allocation.
    events: std::sync::OnceLock<RustHandler>,
}

/// Binds the socket (`0660`, group `ibcm` if that group exists, else
/// owner only): after this, opens wait in the backlog until `run`. The
/// owner and mode are set before the socket listens, so no client can
/// connect while they are still the defaults.
pub fn bind(path: &Path) -> std::io::Result<OwnedFd> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    sock::listen(path, |path| {
        use std::os::unix::fs::PermissionsExt;
        let group = unsafe { libc::getgrnam(c"ibcm".as_ptr()) };
        let mode = if group.is_null() {
            0o600
        } else {
            let gid = unsafe { (*group).gr_gid };
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap_or_default();
            if unsafe { libc::chown(c.as_ptr(), u32::MAX, gid) } != 0 {
                ibcm_log!(WARN, "cannot give {} to group ibcm", path.display());
            }
            0o660
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    })
}

impl Service {
    pub fn new(opts: Options) -> Arc<Service> {
        let (listeners, ids) = (opts.limits.max_listeners, opts.limits.max_ids);
        Arc::new(Service {
            opts,
            devices: Mutex::new(HashMap::new()),
            connections: AtomicUsize::new(0),
            last_active: Mutex::new(Instant::now()),
            next_conn: AtomicU64::new(1),
            conns: Mutex::new(HashMap::new()),
            ports: Mutex::new(PortTable::default()),
            switch: LocalSwitch::new(),
            holds: Mutex::default(),
            settle_expired: AtomicU64::new(0),
            hub: Hub::new(listeners, ids),
        })
    }

    /// Accepts connections on `listener` (from `bind`) until the idle
    /// limit, if any, runs out.
    /// rdma_cm ports in the host's table: bindings and leased ports of
    /// every process, and the leased ones among them.
    pub fn rdma_ports(&self) -> (usize, usize) {
        let t = lock(&self.ports);
        (t.len(), t.leased_total())
    }

    /// Port binds and listens answered `EADDRINUSE` because the holder's
    /// connections were still busy when `SETTLE_MAX` ran out (a process
    /// flooding its connections cannot hold another's bind longer).
    pub fn settle_expired(&self) -> u64 {
        self.settle_expired.load(Ordering::Relaxed)
    }

    pub fn run(self: &Arc<Self>, listener: OwnedFd) -> std::io::Result<()> {
        ibcm_log!(
            INFO,
            "CM service listening on {}",
            self.opts.socket.display()
        );
        let listener = Arc::new(listener);
        if let Some(idle) = self.opts.idle_exit {
            let me = self.clone();
            let l = listener.clone();
            std::thread::Builder::new()
                .name("ibcmd-idle".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(Duration::from_millis(500));
                        if me.connections.load(Ordering::SeqCst) == 0
                            && lock(&me.last_active).elapsed() >= idle
                        {
                            ibcm_log!(INFO, "CM service idle for {idle:?}: leaving");
                            let _ = std::fs::remove_file(&me.opts.socket);
                            sock::shutdown(&l);
                            return;
                        }
                    }
                })?;
        }
        loop {
            let fd = match sock::accept(&listener) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(()),
                Err(e) => {
                    ibcm_log!(WARN, "accept: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let (pid, uid) = sock::peer(&fd);
            if self.connections.load(Ordering::SeqCst) >= self.opts.limits.max_connections {
                ibcm_log!(
                    WARN,
                    "process {pid}: {} connections already: refused",
                    self.opts.limits.max_connections
                );
                continue;
            }
            self.connections.fetch_add(1, Ordering::SeqCst);
            let conn = Arc::new(Conn {
                id: self.next_conn.fetch_add(1, Ordering::Relaxed),
                pid,
                uid,
                fd,
                svc: self.clone(),
                name: Mutex::new(None),
                dev: Mutex::new(None),
                dev_refused: Mutex::new(None),
                opened_ports: Mutex::new(None),
                ports_sent: Mutex::new(None),
                ports_armed: AtomicBool::new(false),
                ids: Mutex::new(FastMap::with_hasher(FastState::new(conn_seed()))),
                listeners: Mutex::new(FastSet::with_hasher(FastState::new(conn_seed()))),
                out: Mutex::new(Outbox::default()),
                out_cv: Condvar::new(),
                closed: AtomicBool::new(false),
                refusals: AtomicU64::new(0),
                bad: AtomicU64::new(0),
                oneway_refused: AtomicU64::new(0),
                rep_attrs: AtomicBool::new(false),
                qp_attrs_pushed: AtomicU64::new(0),
                qp_attr_requests: AtomicU64::new(0),
                port_secret: secret(),
                rx: AtomicU64::new(0),
                ran: AtomicU64::new(0),
                reading: AtomicBool::new(false),
                settling: AtomicBool::new(false),
                events: std::sync::OnceLock::new(),
            });
            lock(&self.conns).insert(conn.id, Arc::downgrade(&conn));
            let c = conn.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("ibcmd-c{}", conn.id))
                .spawn(move || c.serve());
            if let Err(e) = spawned {
                ibcm_log!(WARN, "no thread for a connection: {e}");
                lock(&self.conns).remove(&conn.id);
                self.connections.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// The device served under `name` (as a process names it), if a
    /// process has it open.
    /// Runs `f` (a connection thread running what one wake-up brought)
    /// holding the records pushed to processes: a connection's leave
    /// together, as `BATCH` messages, when a hold ends (`Conn::flush_held`)
    /// instead of one send each. Whatever thread pushes them — the
    /// engine that produces an event for a process is run by whichever
    /// thread gets to the device first: the connection thread that sent
    /// it a MAD through the switch, or the device's event loop. Order is
    /// kept: held records sit in their connection's queue and whatever
    /// is pushed later queues behind them; a hold's end flushes every
    /// connection held so far, so a record waits at most for the end of
    /// the holds running when it was pushed.
    fn hold<R>(&self, f: impl FnOnce() -> R) -> R {
        struct End<'a>(&'a Service);
        impl Drop for End<'_> {
            fn drop(&mut self) {
                let conns = {
                    let mut h = lock(&self.0.holds);
                    h.active -= 1;
                    std::mem::take(&mut h.conns)
                };
                for c in conns {
                    c.flush_held();
                }
            }
        }
        lock(&self.holds).active += 1;
        let _end = End(self);
        f()
    }

    /// Runs `f` (a wait of a thread inside a `hold`: `Conn::settle`) as
    /// if this thread's hold had ended: the records held so far leave
    /// now, and those pushed meanwhile are not held for this thread; the
    /// hold resumes after `f`.
    fn unhold<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Again<'a>(&'a Service, bool);
        impl Drop for Again<'_> {
            fn drop(&mut self) {
                if self.1 {
                    lock(&self.0.holds).active += 1;
                }
            }
        }
        let (held, conns) = {
            let mut h = lock(&self.holds);
            let held = h.active > 0;
            if held {
                h.active -= 1;
            }
            (held, std::mem::take(&mut h.conns))
        };
        for c in conns {
            c.flush_held();
        }
        let _again = Again(self, held);
        f()
    }

    pub fn device(&self, name: &str) -> Option<Arc<Device>> {
        lock(&self.devices)
            .get(&canonical(name))
            .map(|s| s.dev.clone())
    }

    /// Opens (or shares) a device by name.
    fn open(self: &Arc<Self>, name: &str) -> Result<(String, Arc<Device>, Arc<AtomicU64>), Errno> {
        let key = canonical(name);
        let mut devs = lock(&self.devices);
        if let Some(s) = devs.get_mut(&key) {
            s.clients += 1;
            return Ok((key, s.dev.clone(), s.refused.clone()));
        }
        if self.hub.has(&key) {
            ibcm_log!(
                WARN,
                "{key}: forwarded to processes that run its engines (IBCM_SERVICE_MODE=forward): an engine-mode open is -EBUSY until they close it"
            );
            return Err(Errno::EBUSY);
        }
        // The service's own devices are in-process, whatever IBCM_SERVICE
        // says in its environment.
        let dev = Device::open_local(name, DeviceOptions::default())?;
        self.switch.join(&dev);
        // Port events (a GID added later) reach the processes too.
        let me = Arc::downgrade(self);
        dev.on_ports_change(Box::new(move |dev, ports| {
            if let Some(svc) = me.upgrade() {
                svc.push_ports(dev, ports);
            }
        }));
        ibcm_log!(INFO, "serving {key}");
        let refused = Arc::new(AtomicU64::new(0));
        devs.insert(
            key.clone(),
            Served {
                dev: dev.clone(),
                clients: 1,
                refused: refused.clone(),
            },
        );
        Ok((key, dev, refused))
    }

    /// Sends `dev`'s new port tables to every connection that has it open.
    fn push_ports(&self, dev: &Device, ports: &Arc<Vec<PortInfo>>) {
        let users: Vec<Arc<Conn>> = self
            .live_conns()
            .into_iter()
            .filter(|c| {
                lock(&c.dev)
                    .as_ref()
                    .is_some_and(|d| std::ptr::eq(Arc::as_ptr(d), dev))
            })
            .collect();
        for c in &users {
            c.send_ports(ports);
        }
        if !users.is_empty() {
            ibcm_log!(
                INFO,
                "{}: new port tables sent to {} process(es)",
                dev.name(),
                users.len()
            );
        }
    }

    fn live_conns(&self) -> Vec<Arc<Conn>> {
        lock(&self.conns)
            .values()
            .filter_map(|w| w.upgrade())
            .collect()
    }

    /// Ids leased to processes of `dev` and not used yet (the device's
    /// engine counts them; its users do not know them).
    fn pooled(&self, dev: &Arc<Device>) -> u64 {
        self.live_conns()
            .iter()
            .filter(|c| lock(&c.dev).as_ref().is_some_and(|d| Arc::ptr_eq(d, dev)))
            .map(|c| c.pooled())
            .sum()
    }

    /// Every id of every connection, oldest connection first.
    fn all_ids(&self) -> Vec<IdInfo> {
        let mut conns: Vec<(u64, Arc<Conn>)> = lock(&self.conns)
            .iter()
            .filter_map(|(k, w)| Some((*k, w.upgrade()?)))
            .collect();
        conns.sort_by_key(|(k, _)| *k);
        let mut out = Vec::new();
        for (_, c) in conns {
            let device = lock(&c.name).clone().unwrap_or_default().into_bytes();
            let mut ids: Vec<IdInfo> = lock(&c.ids)
                .values()
                .filter(|e| !e.pooled)
                .map(|e| {
                    let p = public(&e.id);
                    IdInfo {
                        pid: c.pid,
                        device: device.clone(),
                        state: p.state,
                        local_id: p.local_id,
                        remote_id: p.remote_id,
                        service_id: p.service_id,
                        peer: e.peer,
                        age_ms: e.born.elapsed().as_millis() as u64,
                    }
                })
                .collect();
            ids.sort_by_key(|i| std::cmp::Reverse(i.age_ms));
            out.extend(ids);
        }
        // Design B's devices: listens and connection ends (the hub's).
        out.extend(self.hub.ids());
        out
    }

    /// Every served device's counters (at most 48: one record).
    fn device_stats(&self) -> Vec<DeviceStat> {
        let devs: Vec<(String, usize, Arc<Device>, u64)> = lock(&self.devices)
            .iter()
            .map(|(k, s)| {
                let refused = s.refused.load(Ordering::Relaxed);
                (k.clone(), s.clients, s.dev.clone(), refused)
            })
            .collect();
        let mut out: Vec<DeviceStat> = devs
            .into_iter()
            .take(48)
            .map(|(name, clients, dev, oneway_refused)| {
                let c = dev.all_counters();
                DeviceStat {
                    name: name.into_bytes(),
                    clients: clients as u64,
                    ids: c.live_ids.saturating_sub(self.pooled(&dev)),
                    pending_timers: c.pending_timers,
                    cm: c.cm,
                    transport: c.transport,
                    oneway_refused,
                }
            })
            .collect();
        // Design B's devices: the processes run the engines, so the CM
        // counters are theirs, summed (those that answered the hub's
        // question); `ids` counts the connection ends the hub tracks,
        // `oneway_refused` the MADs and records it refused.
        out.extend(self.hub.devices().into_iter().take(48).map(|f| {
            let st = &f.stats;
            let refused = [&st.refused, &st.spoofed, &st.bad_records]
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum();
            DeviceStat {
                name: format!("{} (forwarded)", f.key).into_bytes(),
                clients: f.processes as u64,
                ids: f.ends as u64,
                pending_timers: 0,
                cm: f.cm,
                transport: f.transport,
                oneway_refused: refused,
            }
        }));
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Waits (at most 2 s) until the other connections of process `pid`
    /// whose peer is gone have destroyed their ids: a dead process's rdma_cm
    /// ports are released only after its listeners, as the kernel releases
    /// an id's port in its destroy (a process binding the port at once
    /// would otherwise find the service ID still listened on: `EBUSY`).
    /// The connections of a live process are not waited for. A process
    /// that is exiting closes its sockets one after the other, so its
    /// other connections count as dying while it exits (`exiting`), even
    /// before their peer is seen gone: the port connection's end may come
    /// first, while the device connection that holds the listeners is
    /// still open.
    fn wait_dying(&self, me: u64, pid: i32) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(2) {
            let dying = lock(&self.conns)
                .iter()
                .filter(|(k, _)| **k != me)
                .filter_map(|(_, w)| w.upgrade())
                .any(|c| {
                    c.pid == pid
                        && (c.closed.load(Ordering::SeqCst) || peer_gone(&c.fd) || exiting(pid))
                });
            if !dying {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        ibcm_log!(WARN, "process {pid}: its connections outlived it by 2 s");
    }

    /// Design B: attaches the process on `fd` to device `name` in the
    /// hub (`-EBUSY` while the device is served with its engines here).
    fn attach_forward(&self, name: &str, fd: &OwnedFd, pid: i32) -> Result<Attached, Errno> {
        let key = canonical(name);
        let devs = lock(&self.devices);
        if devs.contains_key(&key) {
            ibcm_log!(
                WARN,
                "{key}: served with its engines in the service (IBCM_SERVICE_MODE=engine): a forward open is -EBUSY until those processes close it"
            );
            return Err(Errno::EBUSY);
        }
        self.hub.attach(&key, name, fd, pid)
    }

    fn release(&self, key: &str) {
        let mut devs = lock(&self.devices);
        let last = devs.get_mut(key).is_some_and(|s| {
            s.clients -= 1;
            s.clients == 0
        });
        if last && let Some(s) = devs.remove(key) {
            // Closed under the lock: an open of the same name waits for
            // the transport to be released instead of finding it bound.
            ibcm_log!(INFO, "{key}: last process gone, closing it");
            self.switch.leave(&s.dev);
            s.dev.close();
        }
    }
}

/// The key of a device name: `soft:` addresses with their port spelled
/// out, so `soft:10.0.0.1` and `soft:10.0.0.1:4791` are one device.
fn canonical(name: &str) -> String {
    // Only `soft:` names are addresses (parsing another logs it as a bad
    // name: an RDMA device's `rxe0` is not one).
    if !name.contains('@')
        && name.starts_with("soft:")
        && let Ok(crate::api::DeviceSpec::Soft { ip, port }) = crate::api::DeviceSpec::parse(name)
    {
        return format!("soft:{}", std::net::SocketAddr::new(ip, port));
    }
    name.to_string()
}

/// A snapshot of an id's public fields, numbered: the read and the number
/// are taken under one lock, so a later number never carries an older
/// state (`Public::version`).
fn public(id: &CmId) -> Public {
    static SNAPSHOTS: std::sync::Mutex<u64> = std::sync::Mutex::new(0);
    let mut n = SNAPSHOTS.lock().unwrap_or_else(|p| p.into_inner());
    *n += 1;
    let c = id.public();
    Public {
        state: c.state,
        lap_state: c.lap_state,
        local_id: u32::from_be(c.local_id),
        remote_id: u32::from_be(c.remote_id),
        service_id: u64::from_be(c.service_id),
        version: *n,
    }
}

/// `INIT_QP_ATTR`'s answers for INIT, RTR and RTS (`op::QP_ATTRS`); none
/// if the engine refuses one.
fn qp_attrs(id: &CmId) -> Option<(QpAttr, QpAttr, QpAttr)> {
    Some((
        id.init_qp_attr(qp_state::INIT).ok()?,
        id.init_qp_attr(qp_state::RTR).ok()?,
        id.init_qp_attr(qp_state::RTS).ok()?,
    ))
}

/// Event records' buffers a thread keeps for reuse (at most this many).
const SPARE_MAX: usize = 256;

thread_local! {
    /// Buffers of records this thread has sent, reused for the records
    /// it encodes next: an event costs no `malloc`/`free` in the steady
    /// state (the thread that runs an engine is the one whose hold sends
    /// the events it produced).
    static SPARE: std::cell::RefCell<ipc::Spares> = const {
        std::cell::RefCell::new(ipc::Spares::new(SPARE_MAX, ipc::EVENT_RECORD, 2 * ipc::EVENT_RECORD))
    };
}

/// A buffer for an event record (room for `ipc::EVENT_RECORD`).
fn event_buf() -> Vec<u8> {
    SPARE.with(|s| s.borrow_mut().take())
}

/// Keeps sent records' buffers for `event_buf` (those of an event's size).
fn recycle(recs: impl IntoIterator<Item = Vec<u8>>) {
    SPARE.with(|s| s.borrow_mut().keep(recs))
}

/// Sends `recs` as `BATCH` messages (a lone record as it is) while the
/// socket has room, each from the records in place (`sock::try_send_batch`:
/// iovecs, no copy): how many were sent, always a leading run of them
/// (`Err` when the socket failed).
fn send_batches(fd: &OwnedFd, recs: &[Vec<u8>]) -> std::io::Result<usize> {
    let mut sent = 0;
    while sent < recs.len() {
        match sock::try_send_batch(fd, &recs[sent..])? {
            Some(n) => sent += n,
            None => break,
        }
    }
    Ok(sent)
}

/// The id's public fields and how many one-way calls on it had run when
/// they were read (read under the id's call lock: never while a call
/// runs).
fn snapshot(id: &CmId) -> (u64, Public) {
    id.with_oneway_calls(|n| (*n, public(id)))
}

impl Conn {
    /// Whether the connection's first record is a `FWD_OPEN` (read
    /// without taking it; waits for it).
    fn forward_first(&self) -> bool {
        if sock::wait_readable(&self.fd).is_err() {
            return false;
        }
        let mut h = [0u8; ipc::HEADER];
        // SAFETY: our socket, a buffer of its length.
        let n = unsafe {
            libc::recv(
                std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                h.as_mut_ptr().cast(),
                h.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n >= 2 && u16::from_le_bytes([h[0], h[1]]) == op::FWD_OPEN
    }

    /// Design B: answers the `FWD_OPEN` and forwards the process's MADs
    /// until its connection closes.
    fn serve_forward(self: &Arc<Self>) {
        let mut buf = vec![0u8; ipc::MAX_RECORD];
        let Ok(n) = sock::recv(&self.fd, &mut buf) else {
            return;
        };
        let Ok((h, mut r)) = Header::parse(&buf[..n]) else {
            self.bad.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let name = r
            .get::<Vec<u8>>()
            .ok()
            .filter(|_| r.end().is_ok())
            .and_then(|n| String::from_utf8(n).ok());
        let Some(name) = name else {
            self.bad.fetch_add(1, Ordering::Relaxed);
            ibcm_log!(
                WARN,
                "process {}: a forward open that does not decode: -EPROTO",
                self.pid
            );
            let _ = sock::send(
                &self.fd,
                &ipc::reply(h, -errno::EPROTO, Public::default(), |_| ()),
            );
            return;
        };
        let a = match self
            .may_bind(&name)
            .and_then(|()| self.svc.attach_forward(&name, &self.fd, self.pid))
        {
            Ok(a) => a,
            Err(e) => {
                let _ = sock::send(&self.fd, &ipc::reply(h, neg(e), Public::default(), |_| ()));
                return;
            }
        };
        let reply = ipc::reply(h, 0, Public::default(), |w| {
            w.put(&a.opened);
        });
        if sock::send(&self.fd, &reply).is_ok() {
            self.svc.hub.ready(a.dev, a.slot);
            self.svc.hub.serve(a.dev, a.slot, &self.fd);
        }
        self.svc.hub.detach(a.dev, a.slot);
    }

    /// The service may run as root: it binds a UDP port below 1024 only
    /// for a root process (`soft:` names only: an RDMA device name has no
    /// port), in either mode.
    fn may_bind(&self, name: &str) -> Result<(), Errno> {
        if name.starts_with("soft:")
            && let Ok(crate::api::DeviceSpec::Soft { port, .. }) =
                crate::api::DeviceSpec::parse(name.split('@').next().unwrap_or(""))
            && port < 1024
            && self.uid != 0
        {
            ibcm_log!(WARN, "process {}: {name}: port {port} needs root", self.pid);
            return Err(Errno(errno::EPERM));
        }
        Ok(())
    }

    fn serve(self: Arc<Self>) {
        if self.forward_first() {
            self.serve_forward();
            self.closed.store(true, Ordering::SeqCst);
            *lock(&self.svc.last_active) = Instant::now();
            lock(&self.svc.conns).remove(&self.id);
            self.svc.connections.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let w = self.clone();
        let writer = std::thread::Builder::new()
            .name(format!("ibcmd-w{}", self.id))
            .spawn(move || w.writer());
        // The wake-ups' read buffers (`sock::RECV_MANY`).
        let mut slots = Vec::new();
        if writer.is_ok() {
            // The thread waits in `poll`, not in a read: a read (which
            // takes messages off the queue) is never blocked, so one under
            // way ends soon (`reading`, `settle`).
            while sock::wait_readable(&self.fd).is_ok() {
                if self.closed.load(Ordering::SeqCst) {
                    break;
                }
                let (replies, end) = self.wakeup(&mut slots);
                if ipc::batch(replies)
                    .iter()
                    .any(|m| sock::send(&self.fd, m).is_err())
                    || end
                {
                    break;
                }
                if !self.ports_armed.load(Ordering::Relaxed) {
                    self.arm_ports();
                }
            }
        }
        self.closed.store(true, Ordering::SeqCst);
        self.out_cv.notify_all();
        self.cleanup();
        if let Ok(w) = writer {
            let _ = w.join();
        }
        *lock(&self.svc.last_active) = Instant::now();
        lock(&self.svc.conns).remove(&self.id);
        self.svc.connections.fetch_sub(1, Ordering::SeqCst);
    }

    /// After the OPEN reply is sent: from now on port table changes are
    /// pushed, and one made since the reply's tables were read is sent now.
    /// (The device's hook installs `ports()` before it calls `send_ports`,
    /// and both compare under `ports_sent`: each change is sent once,
    /// in order, after the reply.)
    fn arm_ports(self: &Arc<Self>) {
        let Some(opened) = lock(&self.opened_ports).take() else {
            return;
        };
        *lock(&self.ports_sent) = Some(opened);
        self.ports_armed.store(true, Ordering::Relaxed);
        let dev = lock(&self.dev).clone();
        if let Some(dev) = dev {
            self.send_ports(&dev.ports());
        }
    }

    /// Pushes `ports` (a `PORTS` record) unless the process has them.
    fn send_ports(self: &Arc<Self>, ports: &Arc<Vec<PortInfo>>) {
        let mut sent = lock(&self.ports_sent);
        match sent.as_ref() {
            Some(prev) if **prev != **ports => {}
            _ => return,
        }
        *sent = Some(ports.clone());
        let mut w = Header {
            op: op::PORTS,
            seq: 0,
            handle: 0,
        }
        .record();
        w.put(&ports.to_vec().into_boxed_slice());
        self.push(w.into_bytes());
    }

    /// Destroys what the process left: as the kernel does for a process
    /// that dies holding ids.
    fn cleanup(&self) {
        // Gone, or alive and closing this connection only (a device's, or
        // its port connection: a client that declared the service hung).
        let gone = || exiting(self.pid);
        let closed = || {
            if lock(&self.dev).is_some() {
                "closed its device connection"
            } else {
                "closed its port connection"
            }
        };
        let ids: Vec<CmId> = lock(&self.ids).drain().map(|(_, e)| e.id).collect();
        if !ids.is_empty() {
            ibcm_log!(
                INFO,
                "process {} {}: destroying its {} id(s)",
                self.pid,
                if gone() { "gone" } else { closed() },
                ids.len()
            );
        }
        for id in ids {
            let _ = id.destroy();
        }
        lock(&self.listeners).clear();
        if lock(&self.svc.ports).held_by(self.id) > 0 {
            self.svc.wait_dying(self.id, self.pid);
        }
        let ports = lock(&self.svc.ports).release_holder(self.id);
        if ports > 0 {
            ibcm_log!(
                INFO,
                "process {} {}: its {ports} rdma_cm port(s) released",
                self.pid,
                if gone() { "gone" } else { closed() }
            );
        }
        *lock(&self.dev) = None;
        if let Some(key) = lock(&self.name).take() {
            self.svc.release(&key);
        }
    }

    fn writer(&self) {
        loop {
            let batch: Vec<Vec<u8>> = {
                let mut o = lock(&self.out);
                // Another thread sending what it took wakes this one
                // when it is done if more is queued.
                while (o.q.is_empty() || o.busy) && !self.closed.load(Ordering::SeqCst) {
                    o = self.out_cv.wait(o).unwrap_or_else(|e| e.into_inner());
                }
                if self.closed.load(Ordering::SeqCst) {
                    return;
                }
                o.busy = true;
                o.q.drain(..).collect()
            };
            for rec in ipc::batch(batch) {
                if sock::send(&self.fd, &rec).is_err() {
                    self.disconnect();
                    return;
                }
            }
            lock(&self.out).busy = false;
        }
    }

    /// The end of a `hold` that queued records here: they leave from this
    /// thread as `BATCH` messages if the socket has room (no wake-up of
    /// the writer); what does not fit, and what others queued meanwhile,
    /// is left to the writer. A writer already sending takes them all.
    fn flush_held(&self) {
        let mut o = lock(&self.out);
        if o.busy || o.q.is_empty() {
            return;
        }
        o.busy = true;
        let mut recs: Vec<Vec<u8>> = o.q.drain(..).collect();
        drop(o);
        let Ok(sent) = send_batches(&self.fd, &recs) else {
            self.disconnect();
            return;
        };
        let mut o = lock(&self.out);
        // Unsent records go back in front of those queued meanwhile.
        recycle(recs.drain(..sent));
        for r in recs.into_iter().rev() {
            o.q.push_front(r);
        }
        o.busy = false;
        let more = !o.q.is_empty();
        drop(o);
        if more {
            self.out_cv.notify_one();
        }
    }

    /// Ends the connection from the service's side (the reader sees EOF
    /// and cleans up).
    fn disconnect(&self) {
        self.closed.store(true, Ordering::SeqCst);
        sock::shutdown(&self.fd);
        self.out_cv.notify_all();
    }

    /// The handler of this connection's ids (one, shared: see `events`).
    fn handler(self: &Arc<Self>) -> RustHandler {
        self.events.get_or_init(|| self.new_handler()).clone()
    }

    /// Builds the handler of this connection's ids: encode, queue, return.
    /// It holds the connection weakly (the connection holds it).
    fn new_handler(self: &Arc<Self>) -> RustHandler {
        let me: Weak<Conn> = Arc::downgrade(self);
        Arc::new(move |id, ev| {
            let listener = match &ev.param {
                EventParam::Req(p) => Some(p.listen_id.0),
                EventParam::SidrReq(p) => Some(p.listen_id.0),
                _ => None,
            };
            // A request for a listener whose process is going: its new id
            // is destroyed at once (nobody would ever destroy it).
            let gone = if listener.is_some() {
                -errno::ENOMEM
            } else {
                0
            };
            let Some(c) = me.upgrade() else { return gone };
            if c.closed.load(Ordering::SeqCst) {
                return gone;
            }
            // The QP attributes of a REQ of a marked listener (an
            // rdma_cm one, whose accept moves the QP to RTS before the
            // REP) or of a REP of a process that asked for them
            // (`QP_ATTRS_ON_REP`) go before the event: the process moves
            // its QP with them instead of three round trips. A process
            // that never asked (it moves no QP through the CM) costs no
            // `init_qp_attr`, encode or decode per REP.
            let mut with_attrs =
                ev.kind == EventType::RepReceived && c.rep_attrs.load(Ordering::Relaxed);
            if let Some(l) = listener {
                let mut ids = lock(&c.ids);
                with_attrs = matches!(ev.param, EventParam::Req(_))
                    && ids.get(&l).is_some_and(|e| e.qp_attrs_on_req);
                if ids.len() >= c.svc.opts.limits.max_ids {
                    drop(ids);
                    c.refusals.fetch_add(1, Ordering::Relaxed);
                    ibcm_log!(WARN, "process {}: id limit reached: request refused", c.pid);
                    return -errno::ENOMEM;
                }
                let peer = match &ev.param {
                    // The REQ's path as the passive side sees it: the
                    // requester is its destination.
                    EventParam::Req(p) => Some(p.primary_path.dgid),
                    _ => None,
                };
                ids.insert(id.handle(), Entry::new(id.clone(), peer));
            }
            let attrs = if with_attrs { qp_attrs(id) } else { None };
            let (calls, public) = snapshot(id);
            if let Some((init, rtr, rts)) = attrs {
                // In a reused event buffer: the record (fixed size, under
                // `ipc::EVENT_RECORD`) costs no malloc, no growth, no free.
                let mut w = Header {
                    op: op::QP_ATTRS,
                    seq: calls,
                    handle: ev.id.0,
                }
                .record_in(event_buf());
                w.put(&QpAttrs {
                    public,
                    init,
                    rtr,
                    rts,
                });
                c.qp_attrs_pushed.fetch_add(1, Ordering::Relaxed);
                c.push(w.into_bytes());
            }
            let mut w = Header {
                op: op::EVENT,
                seq: calls,
                handle: ev.id.0,
            }
            .record_in(event_buf());
            ipc::put_event(&mut w, &public, listener.unwrap_or(0), ev);
            c.push(w.into_bytes());
            0
        })
    }

    /// Queues a record pushed to the process (an event, a refusal) behind
    /// those already queued, in the order they are pushed. While a
    /// connection thread runs a `Service::hold`, it stays queued (the
    /// writer not woken) until a hold ends.
    fn push(self: &Arc<Self>, rec: Vec<u8>) {
        // Held across the queueing: a hold cannot end between the check
        // and the record entering the queue (it would stay there unsent).
        let mut holds = lock(&self.svc.holds);
        let holding = holds.active > 0;
        let _holds = if holding {
            if !holds.conns.iter().any(|c| Arc::ptr_eq(c, self)) {
                holds.conns.push(self.clone());
            }
            Some(holds)
        } else {
            drop(holds);
            None
        };
        let mut o = lock(&self.out);
        // Nothing queued before it: sent from this thread without
        // waiting (no hop through the writer thread); a full socket
        // buffer queues it for the writer, which may block.
        if !holding && o.q.is_empty() && !o.busy {
            match sock::try_send(&self.fd, &rec) {
                Ok(true) => {
                    drop(o);
                    recycle([rec]);
                    return;
                }
                Ok(false) => {}
                Err(_) => {
                    drop(o);
                    self.disconnect();
                    return;
                }
            }
        }
        if o.q.len() >= self.svc.opts.limits.max_events {
            drop(o);
            self.refusals.fetch_add(1, Ordering::Relaxed);
            ibcm_log!(
                WARN,
                "process {}: {} events not read: disconnecting it",
                self.pid,
                self.svc.opts.limits.max_events
            );
            self.disconnect();
            return;
        }
        o.q.push_back(rec);
        drop(o);
        if !holding {
            self.out_cv.notify_one();
        }
    }

    /// Leased ids not used yet.
    fn pooled(&self) -> u64 {
        lock(&self.ids).values().filter(|e| e.pooled).count() as u64
    }

    /// Runs what one wake-up brings: the messages queued (at most
    /// `DRAIN`, `sock::RECV_MANY` per `recvmmsg`, read without waiting); the
    /// replies to send, and whether the connection ended (the peer gone,
    /// a failed read) behind them. The MADs their records make leave
    /// together when all have run (one `sendmmsg`, one run of a switched
    /// peer's engine), and so do the events they produce for each
    /// process (`hold`: one `BATCH` message per connection). Each read's
    /// bytes are counted in `rx` before `reading` clears, each message's
    /// in `ran` once its records have run (`settle`).
    fn wakeup(self: &Arc<Self>, slots: &mut Vec<Vec<u8>>) -> (Vec<Vec<u8>>, bool) {
        self.svc.hold(|| {
            let dev = lock(&self.dev).clone();
            let held = dev.clone();
            let mut run = || {
                let mut replies = Vec::new();
                let mut end = false;
                let mut read = 0;
                let mut lens = [0usize; sock::RECV_MANY];
                if slots.is_empty() {
                    slots.resize_with(sock::RECV_MANY, || vec![0u8; ipc::MAX_RECORD]);
                }
                'drain: while read < DRAIN && !self.closed.load(Ordering::SeqCst) {
                    let want = sock::RECV_MANY.min(DRAIN - read);
                    self.reading.store(true, Ordering::SeqCst);
                    let got = sock::try_recv_many(&self.fd, &mut slots[..want], &mut lens);
                    if let Ok(g) = got {
                        let bytes: usize = lens[..g].iter().sum();
                        self.rx.fetch_add(bytes as u64, Ordering::Relaxed);
                    }
                    self.reading.store(false, Ordering::SeqCst);
                    let got = match got {
                        Ok(g) => g,
                        Err(_) => {
                            end = true;
                            break;
                        }
                    };
                    read += got;
                    for (slot, &m) in slots.iter().zip(&lens[..got]) {
                        if m == 0 {
                            end = true;
                            break 'drain;
                        }
                        self.records(&slot[..m], &mut replies, held.as_ref());
                        self.ran.fetch_add(m as u64, Ordering::Release);
                    }
                    if got < want {
                        break;
                    }
                }
                (replies, end)
            };
            match dev {
                Some(dev) => dev.batch(run),
                None => run(),
            }
        })
    }

    /// Runs the records of one message (in place: no copy, no `Vec` of
    /// a `BATCH`'s records), their replies appended to `replies`.
    /// `dev` is the device as the wake-up began (none before OPEN: then
    /// each request reads it).
    fn records(
        self: &Arc<Self>,
        msg: &[u8],
        replies: &mut Vec<Vec<u8>>,
        dev: Option<&Arc<Device>>,
    ) {
        if let Ok((h, r)) = Header::parse(msg)
            && h.op == op::BATCH
        {
            let body = &msg[msg.len() - r.remaining()..];
            if ipc::unbatch_with(body, |rec| replies.extend(self.request(rec, dev))).is_err() {
                self.bad.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        replies.extend(self.request(msg, dev));
    }

    /// A one-way call the service refused: counted, logged and pushed to
    /// the process behind the events produced before it.
    fn refuse(self: &Arc<Self>, h: Header, err: Errno) {
        self.oneway_refused.fetch_add(1, Ordering::Relaxed);
        if let Some(d) = lock(&self.dev_refused).as_ref() {
            d.fetch_add(1, Ordering::Relaxed);
        }
        let id = lock(&self.ids).get(&h.handle).map(|e| e.id.clone());
        let (calls, public) = match &id {
            Some(id) => snapshot(id),
            None => (0, Public::default()),
        };
        ibcm_log!(
            WARN,
            "process {}: one-way call {} on id {:#x} refused ({err}): the id is {}",
            self.pid,
            op_name(h.op),
            h.handle,
            crate::engine::State::ALL
                .get(public.state as usize)
                .map_or("gone".to_string(), |s| format!("{s:?}"))
        );
        let mut w = Header {
            op: op::REFUSED,
            seq: calls,
            handle: h.handle,
        }
        .record();
        w.put(&Refused {
            op: h.op,
            err: neg(err),
            public,
        });
        self.push(w.into_bytes());
    }

    /// Decodes and runs one request; the reply to send (none for a record
    /// too broken to answer).
    fn request(self: &Arc<Self>, rec: &[u8], dev: Option<&Arc<Device>>) -> Option<Vec<u8>> {
        let Ok((h, mut r)) = Header::parse(rec) else {
            self.bad.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let oneway = h.op & op::ONEWAY != 0;
        let base = h.op & !op::ONEWAY;
        if !op::known(base) || (oneway && !op::oneway(base)) {
            self.bad.fetch_add(1, Ordering::Relaxed);
            return Some(ipc::reply(h, -errno::EOPNOTSUPP, Public::default(), |_| ()));
        }
        if oneway {
            let h = Header { op: base, ..h };
            // One look-up: the id (in use from now on, if leased).
            let found = lock(&self.ids).get_mut(&h.handle).map(|e| {
                e.pooled = false;
                e.id.clone()
            });
            let res = match found {
                // Counted as run whatever the result (the process counts
                // what it sent), under the lock snapshots take.
                Some(id) => id.with_oneway_calls(|n| {
                    let res = self.run(h, &mut r, Some(&id), dev);
                    *n += 1;
                    res
                }),
                None => self.run(h, &mut r, None, dev),
            };
            if let Err(e) = res {
                if e == Errno(errno::EPROTO) {
                    self.bad.fetch_add(1, Ordering::Relaxed);
                }
                self.refuse(h, e);
            }
            return None;
        }
        let res = self.run(h, &mut r, None, dev);
        if h.seq == 0 {
            // Nobody waits for it (a refusal is counted like any other).
            return None;
        }
        let (err, public, body) = match res {
            Ok((p, b)) => (0, p, b),
            Err(e) => {
                if e == Errno(errno::EPROTO) {
                    self.bad.fetch_add(1, Ordering::Relaxed);
                }
                (neg(e), Public::default(), Vec::new())
            }
        };
        Some(ipc::reply(h, err, public, |w| w.0.extend_from_slice(&body)))
    }

    /// Runs one request; `found` is its id when the caller has looked it
    /// up already (a one-way call: nobody reads its reply, so no snapshot
    /// of the id is taken for one); `dev` the device if the caller has it.
    fn run(
        self: &Arc<Self>,
        h: Header,
        r: &mut Reader<'_>,
        found: Option<&CmId>,
        dev: Option<&Arc<Device>>,
    ) -> Result<(Public, Vec<u8>), Errno> {
        let oneway = found.is_some();
        let proto = Errno(errno::EPROTO);
        let mut out = ipc::Writer(Vec::new());
        if h.op == op::OPEN {
            let name: Vec<u8> = r.get()?;
            r.end()?;
            if lock(&self.dev).is_some() {
                return Err(Errno::EINVAL);
            }
            let name = String::from_utf8(name).map_err(|_| Errno::EINVAL)?;
            self.may_bind(&name)?;
            let (key, dev, refused) = self.svc.open(&name)?;
            *lock(&self.dev_refused) = Some(refused);
            let ports = dev.ports();
            out.put(&Opened {
                name: dev.name().as_bytes().to_vec(),
                node_guid: dev.node_guid(),
                ports: ports.to_vec().into_boxed_slice(),
            });
            *lock(&self.opened_ports) = Some(ports);
            *lock(&self.name) = Some(key);
            *lock(&self.dev) = Some(dev);
            return Ok((Public::default(), out.0));
        }
        match h.op {
            op::IDS => {
                let first: u32 = r.get()?;
                r.end()?;
                let all = self.svc.all_ids();
                let ids: Vec<IdInfo> = all
                    .iter()
                    .skip(first as usize)
                    .take(ipc::IDS_PER_PAGE)
                    .cloned()
                    .collect();
                out.put(&IdList {
                    total: all.len() as u32,
                    first,
                    ids: ids.into_boxed_slice(),
                });
                return Ok((Public::default(), out.0));
            }
            op::HOST_STAT => {
                r.end()?;
                out.put(&self.svc.device_stats().into_boxed_slice());
                return Ok((Public::default(), out.0));
            }
            op::QP_ATTRS_ON_REP => {
                let on: bool = r.get()?;
                r.end()?;
                self.rep_attrs.store(on, Ordering::Relaxed);
                return Ok((Public::default(), out.0));
            }
            op::PORT_BIND
            | op::PORT_LISTEN
            | op::PORT_RELEASE
            | op::PORT_LEASE
            | op::PORT_TOKEN
            | op::PORT_RELEASE_BY => {
                return self.port_op(h.op, r).map(|body| (Public::default(), body));
            }
            _ => {}
        }
        let opened;
        let dev = match dev {
            Some(d) => d,
            None => {
                opened = lock(&self.dev).clone().ok_or(Errno::ENODEV)?;
                &opened
            }
        };
        match h.op {
            op::CREATE_ID => {
                r.end()?;
                if lock(&self.ids).len() >= self.svc.opts.limits.max_ids {
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                    return Err(Errno(errno::ENOMEM));
                }
                let id = dev.create_id(None, std::ptr::null_mut(), Some(self.handler()))?;
                let hd = id.handle();
                let p = public(&id);
                lock(&self.ids).insert(hd, Entry::new(id, None));
                out.put(&hd);
                return Ok((p, out.0));
            }
            op::CREATE_IDS => {
                let count: u32 = r.get()?;
                r.end()?;
                if !(1..=op::MAX_CREATE).contains(&count) {
                    return Err(Errno::EINVAL);
                }
                let room = self
                    .svc
                    .opts
                    .limits
                    .max_ids
                    .saturating_sub(lock(&self.ids).len());
                if room == 0 {
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                    return Err(Errno(errno::ENOMEM));
                }
                let mut leased = Vec::new();
                for _ in 0..room.min(count as usize) {
                    let id = match dev.create_id(None, std::ptr::null_mut(), Some(self.handler())) {
                        Ok(id) => id,
                        Err(e) if leased.is_empty() => return Err(e),
                        Err(_) => break,
                    };
                    let handle = id.handle();
                    leased.push(Created {
                        handle,
                        public: public(&id),
                    });
                    let mut e = Entry::new(id, None);
                    e.pooled = true;
                    lock(&self.ids).insert(handle, e);
                }
                out.put(&leased.into_boxed_slice());
                return Ok((Public::default(), out.0));
            }
            op::STAT => {
                r.end()?;
                let c = dev.all_counters();
                let clients = lock(&self.svc.devices)
                    .values()
                    .find(|s| Arc::ptr_eq(&s.dev, dev))
                    .map_or(0, |s| s.clients as u64);
                let mine = lock(&self.ids).values().filter(|e| !e.pooled).count();
                out.put(&Stat {
                    cm: c.cm,
                    transport: c.transport,
                    live_ids: mine as u64,
                    device_ids: c.live_ids.saturating_sub(self.svc.pooled(dev)),
                    pending_timers: c.pending_timers,
                    clients,
                    limit_refusals: self.refusals.load(Ordering::Relaxed),
                    bad_records: self.bad.load(Ordering::Relaxed),
                    oneway_refused: self.oneway_refused.load(Ordering::Relaxed),
                    qp_attrs_pushed: self.qp_attrs_pushed.load(Ordering::Relaxed),
                    qp_attr_requests: self.qp_attr_requests.load(Ordering::Relaxed),
                });
                return Ok((Public::default(), out.0));
            }
            _ => {}
        }
        // Calls on one of this connection's ids (a leased one is in use
        // from its first call on).
        let looked;
        let id = match found {
            Some(id) => id,
            None => {
                looked = lock(&self.ids)
                    .get_mut(&h.handle)
                    .map(|e| {
                        e.pooled = false;
                        e.id.clone()
                    })
                    .ok_or(Errno::EINVAL)?;
                &looked
            }
        };
        match h.op {
            op::LISTEN => {
                let sid: u64 = r.get()?;
                r.end()?;
                if lock(&self.listeners).len() >= self.svc.opts.limits.max_listeners {
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                    return Err(Errno(errno::ENOMEM));
                }
                id.listen(sid)?;
                lock(&self.listeners).insert(h.handle);
            }
            op::SEND_REQ => {
                let p: crate::api::ReqParams = r.get()?;
                r.end()?;
                id.send_req(&p)?;
                if let Some(e) = lock(&self.ids).get_mut(&h.handle) {
                    e.peer = Some(p.primary_path.dgid);
                }
            }
            op::SEND_REP => {
                let p = r.get()?;
                r.end()?;
                id.send_rep(&p)?
            }
            op::SEND_RTU | op::SEND_DREQ | op::SEND_DREP => {
                let pd: Vec<u8> = r.get()?;
                r.end()?;
                match h.op {
                    op::SEND_RTU => id.send_rtu(&pd)?,
                    op::SEND_DREQ => id.send_dreq(&pd)?,
                    _ => id.send_drep(&pd)?,
                }
            }
            op::SEND_REJ => {
                let reason: u32 = r.get()?;
                let ari: Vec<u8> = r.get()?;
                let pd: Vec<u8> = r.get()?;
                r.end()?;
                id.send_rej(reason, &ari, &pd)?
            }
            op::PREPARE_MRA => {
                r.end()?;
                id.prepare_mra()?
            }
            op::MRA_ON_REPORT => {
                let on: bool = r.get()?;
                r.end()?;
                id.set_prepare_mra_on_report(on)?
            }
            op::QP_ATTRS_ON_REQ => {
                let on: bool = r.get()?;
                r.end()?;
                if let Some(e) = lock(&self.ids).get_mut(&h.handle) {
                    e.qp_attrs_on_req = on;
                }
            }
            op::NOTIFY => {
                let ev: u32 = r.get()?;
                r.end()?;
                id.notify(ev)?
            }
            op::INIT_QP_ATTR => {
                let s: u32 = r.get()?;
                r.end()?;
                self.qp_attr_requests.fetch_add(1, Ordering::Relaxed);
                out.put(&id.init_qp_attr(s)?);
            }
            op::SIDR_REQ => {
                let p: crate::api::SidrReqParams = r.get()?;
                r.end()?;
                id.send_sidr_req(&p)?;
                if let Some(e) = lock(&self.ids).get_mut(&h.handle) {
                    e.peer = Some(p.path.dgid);
                }
            }
            op::SIDR_REP => {
                let p = r.get()?;
                r.end()?;
                id.send_sidr_rep(&p)?
            }
            op::STATE => {
                r.end()?;
                out.put(&id.state());
            }
            op::DESTROY => {
                let err: i32 = r.get()?;
                r.end()?;
                let p = if oneway {
                    Public::default()
                } else {
                    public(id)
                };
                lock(&self.ids).remove(&h.handle);
                lock(&self.listeners).remove(&h.handle);
                id.destroy_with(err)?;
                return Ok((p, out.0));
            }
            _ => return Err(proto),
        }
        if oneway {
            return Ok((Public::default(), out.0));
        }
        Ok((public(id), out.0))
    }
}

impl Conn {
    /// `PORT_BIND`, `PORT_LISTEN`, `PORT_RELEASE`, `PORT_LEASE`,
    /// `PORT_TOKEN`, `PORT_RELEASE_BY` on the host's table.
    fn port_op(&self, opc: u16, r: &mut Reader<'_>) -> Result<Vec<u8>, Errno> {
        let mut out = ipc::Writer(Vec::new());
        match opc {
            op::PORT_BIND => {
                let (ps, port, b) = portspace::get_bind(r)?;
                let t = lock(&self.svc.ports);
                // An ephemeral bind taking a leased port adds no port.
                let full = t.held_by(self.id) >= self.svc.opts.limits.max_ports
                    && (port != 0 || t.leased(self.id, ps) == 0);
                drop(t);
                if full {
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                    ibcm_log!(
                        WARN,
                        "process {}: {} rdma_cm ports held: bind refused",
                        self.pid,
                        self.svc.opts.limits.max_ports
                    );
                    return Err(Errno(errno::ENOMEM));
                }
                // The peer's capability, read outside the table's lock.
                let privileged =
                    port != 0 && port < 1024 && portspace::may_bind_privileged(Some(self.pid));
                // The table's lock is not held past this statement.
                let first = lock(&self.svc.ports).bind(self.id, ps, port, b, privileged);
                let got = match first {
                    Err(e) if e == portspace::EADDRINUSE && port != 0 => {
                        let holders = lock(&self.svc.ports).bind_blockers(ps, port, &b);
                        let settled = self.settle(&holders);
                        let again = lock(&self.svc.ports).bind(self.id, ps, port, b, privileged);
                        self.settle_outcome(settled, &again, port);
                        again?
                    }
                    r => r?,
                };
                out.put(&got);
            }
            op::PORT_LEASE => {
                let (ps, want) = portspace::get_lease(r)?;
                let mut t = lock(&self.svc.ports);
                let room = self
                    .svc
                    .opts
                    .limits
                    .max_ports
                    .saturating_sub(t.held_by(self.id));
                if room == 0 {
                    drop(t);
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                    return Err(Errno(errno::ENOMEM));
                }
                let got = t.lease(self.id, ps, want.min(room as u32))?;
                out.put(&got.into_boxed_slice());
            }
            op::PORT_LISTEN => {
                let (ps, port, owner) = portspace::get_owner(r)?;
                let first = lock(&self.svc.ports).listen(self.id, ps, port, owner);
                match first {
                    Err(e) if e == portspace::EADDRINUSE => {
                        let holders =
                            lock(&self.svc.ports).listen_blockers(self.id, ps, port, owner);
                        let settled = self.settle(&holders);
                        let again = lock(&self.svc.ports).listen(self.id, ps, port, owner);
                        self.settle_outcome(settled, &again, port);
                        again?
                    }
                    r => r?,
                }
            }
            op::PORT_TOKEN => {
                r.end()?;
                out.put(&self.id).put(&self.port_secret);
            }
            op::PORT_RELEASE_BY => {
                let (holder, secret, ps, port, owner) = portspace::get_release_by(r)?;
                // Only a live connection of this same process, named with
                // its secret: a process never releases another's port.
                let theirs = lock(&self.svc.conns).get(&holder).and_then(Weak::upgrade);
                let same = theirs.as_ref().is_some_and(|c| {
                    c.port_secret == secret && c.pid == self.pid && c.uid == self.uid
                });
                drop(theirs);
                if !same {
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                    ibcm_log!(
                        WARN,
                        "process {}: a port release for connection {holder}, not one of its own: refused",
                        self.pid
                    );
                    return Err(Errno(errno::EPERM));
                }
                lock(&self.svc.ports).release(holder, ps, port, owner);
            }
            _ => {
                let (ps, port, owner) = portspace::get_owner(r)?;
                lock(&self.svc.ports).release(self.id, ps, port, owner);
            }
        }
        Ok(out.0)
    }
}

/// The longest a port bind (or listen) waits in `Conn::settle` for the
/// holder's connections (less if `IBCM_SERVICE_TIMEOUT_MS` is less).
pub const SETTLE_MAX: Duration = Duration::from_millis(200);

impl Conn {
    /// A bind (or listen) of this connection conflicts with bindings of
    /// `holders` (connection ids): before it is answered, every
    /// connection of their processes (same `SO_PEERCRED` pid: the port
    /// connection and the device connections a `PORT_RELEASE_BY` rides
    /// on) runs what it had received by now — a release the holder sent
    /// before this bind arrived (its `rdma_destroy_id` returned) is then
    /// run, as the kernel's would be. Per connection the target is its
    /// queued bytes (`SIOCINQ`, read first) plus what its thread has read
    /// (`rx`, read once no read is under way); it is met when `ran`
    /// reaches it, or when the connection is idle (nothing queued,
    /// nothing read and not run: a target counted twice by a read between
    /// the two looks ends there), closed, or itself settling. Never this
    /// connection itself (its earlier messages have run: this thread ran
    /// them), never while holding a lock, at most `SETTLE_MAX`. Whether
    /// every target was met.
    fn settle(&self, holders: &[u64]) -> bool {
        let others: Vec<Arc<Conn>> = {
            let conns = lock(&self.svc.conns);
            let pids: Vec<i32> = holders
                .iter()
                .filter(|h| **h != self.id)
                .filter_map(|h| conns.get(h).and_then(Weak::upgrade))
                .map(|c| c.pid)
                .collect();
            if pids.is_empty() {
                return true;
            }
            conns
                .iter()
                .filter(|(k, _)| **k != self.id)
                .filter_map(|(_, w)| w.upgrade())
                .filter(|c| pids.contains(&c.pid))
                .collect()
        };
        // Set before the others' flags are read (both SeqCst): of two
        // connections settling against each other at least one sees the
        // other's flag and does not wait for it.
        self.settling.store(true, Ordering::SeqCst);
        let met = self.svc.unhold(|| self.settle_on(others));
        self.settling.store(false, Ordering::SeqCst);
        met
    }

    /// `settle`'s wait for `others` (outside any hold).
    fn settle_on(&self, others: Vec<Arc<Conn>>) -> bool {
        let limit = SETTLE_MAX.min(crate::api::service_timeout());
        let t = Instant::now();
        let mut spins = 0u32;
        let mut pause = || {
            spins += 1;
            if spins < 16 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        };
        let mut targets: Vec<(Arc<Conn>, u64)> = Vec::with_capacity(others.len());
        let mut met = true;
        for c in others {
            let Ok(q) = sock::queued(&c.fd) else {
                continue;
            };
            // A read under way may have taken queued bytes not yet in `rx`.
            // One look decides: a flag seen clear and then seen set by a
            // second look (the next read began) is not a wait run out.
            loop {
                if !c.reading.load(Ordering::SeqCst) {
                    let target = c.rx.load(Ordering::Acquire) + q as u64;
                    targets.push((c, target));
                    break;
                }
                if t.elapsed() >= limit {
                    met = false;
                    break;
                }
                pause();
            }
        }
        loop {
            targets.retain(|(c, target)| !c.settled(*target));
            if targets.is_empty() || t.elapsed() >= limit {
                break;
            }
            pause();
        }
        met && targets.is_empty()
    }

    /// `settle`'s test for this connection: what it had received by
    /// `target` has run, or it has nothing left to run, or it is closed or
    /// settling itself.
    fn settled(&self, target: u64) -> bool {
        if self.ran.load(Ordering::Acquire) >= target
            || self.closed.load(Ordering::SeqCst)
            || self.settling.load(Ordering::SeqCst)
        {
            return true;
        }
        // Idle: nothing queued, then no read under way, then all it read
        // has run (in this order: a read between two looks is seen).
        sock::queued(&self.fd).is_ok_and(|q| q == 0)
            && !self.reading.load(Ordering::SeqCst)
            && self.ran.load(Ordering::Acquire) == self.rx.load(Ordering::Acquire)
    }

    /// After `settle` and the retry: a retry still `EADDRINUSE` after a
    /// settle that ran out of time is counted and logged.
    fn settle_outcome<T>(&self, settled: bool, again: &Result<T, Errno>, port: u16) {
        if !settled && matches!(again, Err(e) if *e == portspace::EADDRINUSE) {
            self.svc.settle_expired.fetch_add(1, Ordering::Relaxed);
            ibcm_log!(
                WARN,
                "process {}: port {port}: the holder's connections still busy after {} ms: EADDRINUSE",
                self.pid,
                SETTLE_MAX.min(crate::api::service_timeout()).as_millis()
            );
        }
    }
}

/// Whether the process at the other end of `fd` has closed it.
fn peer_gone(fd: &OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0
}

/// Process `pid` is exiting or gone (`/proc/PID/stat`: no such process, a
/// zombie, or `PF_EXITING` in its flags — set when the kernel starts
/// tearing it down, before it closes its files).
fn exiting(pid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    if pid <= 0 {
        // A peer outside the service's PID namespace: nothing to read.
        return false;
    }
    match sock::proc_stat(pid) {
        Err(_) => true,
        Ok(sock::ProcStat {
            state: Some(s),
            flags: Some(flags),
            ..
        }) => s == 'Z' || s == 'X' || flags & PF_EXITING != 0,
        Ok(_) => false,
    }
}

/// A request op's name, for logs.
fn op_name(opc: u16) -> &'static str {
    match opc {
        op::SEND_REQ => "send_req",
        op::SEND_REP => "send_rep",
        op::SEND_RTU => "send_rtu",
        op::SEND_DREQ => "send_dreq",
        op::SEND_DREP => "send_drep",
        op::SEND_REJ => "send_rej",
        _ => "request",
    }
}

/// A seed for a connection's tables: the clock and a counter, so two
/// connections (and two runs) hash differently.
fn conn_seed() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ N
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A connection's `PORT_TOKEN` secret (`getrandom`; the clock and a
/// counter if it fails — the pid and uid checks stand regardless).
fn secret() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&raw mut v).cast(), 8, libc::GRND_NONBLOCK) };
    if n != 8 {
        v = conn_seed().wrapping_mul(0xbf58_476d_1ce4_e5b9);
    }
    v
}

/// An errno as the protocol carries it (negative).
fn neg(e: Errno) -> i32 {
    -e.0.abs()
}

/// One request on a connection of its own, for the host-wide queries:
/// the connect, the send and the reply each bounded by
/// `IBCM_SERVICE_TIMEOUT_MS` (`ErrorKind::TimedOut`).
fn query(socket: &Path, opc: u16, body: &[u8]) -> std::io::Result<Vec<u8>> {
    let bound = crate::api::service_timeout();
    let fd = sock::connect_within(socket, bound)?;
    sock::set_timeouts(&fd, bound, true)?;
    let mut w = Header {
        op: opc,
        seq: 1,
        handle: 0,
    }
    .record();
    w.0.extend_from_slice(body);
    let silent = |e: std::io::Error| {
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return e;
        }
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the service did not answer within {} ms (IBCM_SERVICE_TIMEOUT_MS)",
                bound.as_millis()
            ),
        )
    };
    sock::send(&fd, &w.into_bytes()).map_err(silent)?;
    let mut buf = vec![0u8; ipc::MAX_RECORD];
    let n = sock::recv(&fd, &mut buf).map_err(silent)?;
    let bad = |e: Errno| std::io::Error::other(format!("bad reply from the service: {e}"));
    let (h, mut r) = Header::parse(&buf[..n]).map_err(bad)?;
    if h.op != op::REPLY | opc {
        return Err(std::io::Error::other(
            "the service answered another request",
        ));
    }
    let err: i32 = r.get().map_err(bad)?;
    let _: Public = r.get().map_err(bad)?;
    if err != 0 {
        return Err(std::io::Error::from_raw_os_error(-err));
    }
    Ok(buf[n - r.remaining()..n].to_vec())
}

/// Every id on the host, from the service at `socket` (`ibcm ids`).
pub fn query_ids(socket: &Path) -> std::io::Result<Vec<IdInfo>> {
    let mut out = Vec::new();
    loop {
        let rest = query(socket, op::IDS, &(out.len() as u32).to_le_bytes())?;
        let page: IdList = Reader::new(&rest)
            .get()
            .map_err(|e| std::io::Error::other(format!("bad id list: {e}")))?;
        let n = page.ids.len();
        out.extend(page.ids.into_vec());
        if n == 0 || out.len() >= page.total as usize {
            return Ok(out);
        }
    }
}

/// Every served device's counters, from the service at `socket` (`ibcm stat`).
pub fn query_stat(socket: &Path) -> std::io::Result<Vec<DeviceStat>> {
    let rest = query(socket, op::HOST_STAT, &[])?;
    let v: Box<[DeviceStat]> = Reader::new(&rest)
        .get()
        .map_err(|e| std::io::Error::other(format!("bad device list: {e}")))?;
    Ok(v.into_vec())
}

#[cfg(test)]
mod tests {
    use super::exiting;

    /// Held records leave as `BATCH` messages built from iovecs over the
    /// records (`send_batches`): across a socket that fills again and
    /// again (`EAGAIN`: the rest is kept and sent later, as
    /// `flush_held` does), every record arrives once, whole, in order;
    /// a message never holds more records than its iovecs allow, and its
    /// bytes are what `ipc::batch_one` makes.
    #[test]
    fn held_records_leave_once_each_in_order_across_a_full_socket() {
        use crate::ipc::{self, Header, op, sock};
        use std::os::fd::AsRawFd;
        let rec = |i: u64| {
            let mut w = Header {
                op: op::EVENT,
                seq: i,
                handle: !i,
            }
            .record();
            w.0.extend((0..(i * 37 % 700)).map(|k| (i + k) as u8));
            w.into_bytes()
        };
        // The message of a lone record is the record; of many, a BATCH
        // capped at `BATCH_IOVECS` records.
        let (a, b) = sock::pair();
        let mut buf = vec![0u8; ipc::MAX_RECORD];
        let tiny: Vec<Vec<u8>> = (0..1200).map(|i| rec(i * 700)).collect();
        for n in [1, 2, 1200] {
            let got = sock::try_send_batch(&a, &tiny[..n]).unwrap();
            assert_eq!(got, Some(n.min(sock::BATCH_IOVECS)));
            let m = sock::recv(&b, &mut buf).unwrap();
            let want = ipc::batch_one(&tiny[..n.min(sock::BATCH_IOVECS)]).1;
            assert!(buf[..m] == want[..], "{n} records: not batch_one's bytes");
        }
        // A small send buffer: the socket fills every few messages.
        let (a, b) = sock::pair();
        let small: libc::c_int = 96 * 1024;
        // SAFETY: a valid socket and option value.
        let r = unsafe {
            libc::setsockopt(
                a.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                &small as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0);
        let recs: Vec<Vec<u8>> = (0..3000).map(rec).collect();
        let mut got: Vec<Vec<u8>> = Vec::new();
        let (mut at, mut full, mut msgs, mut stalled) = (0, 0, 0, 0);
        let mut bufs: Vec<Vec<u8>> = vec![vec![0u8; ipc::MAX_RECORD]];
        let mut lens = [0usize; 1];
        while got.len() < recs.len() {
            // Bursts of uneven size, as holds end.
            let end = (at + 1 + (at * 7919) % 300).min(recs.len());
            let sent = super::send_batches(&a, &recs[at..end]).unwrap();
            if at + sent < end {
                full += 1;
            }
            at += sent;
            let n = sock::try_recv_many(&b, &mut bufs, &mut lens).unwrap();
            // Nothing sent and nothing queued: records were lost.
            stalled = if sent == 0 && n == 0 { stalled + 1 } else { 0 };
            assert!(
                stalled < 100,
                "stalled with {} of {} records arrived",
                got.len(),
                recs.len()
            );
            for (m, &l) in bufs.iter().zip(&lens[..n]) {
                msgs += 1;
                let (h, r) = Header::parse(&m[..l]).unwrap();
                if h.op == op::BATCH {
                    let body = &m[l - r.remaining()..l];
                    let k = ipc::unbatch_with(body, |rec| got.push(rec.to_vec())).unwrap();
                    assert!(k <= sock::BATCH_IOVECS);
                } else {
                    got.push(m[..l].to_vec());
                }
            }
        }
        assert_eq!(at, recs.len());
        assert!(full > 0, "the socket never filled");
        assert!(msgs < recs.len(), "no record was batched");
        assert_eq!(got.len(), recs.len());
        for (i, (g, r)) in got.iter().zip(&recs).enumerate() {
            assert!(g == r, "record {i} is not the {i}th sent");
        }
    }

    /// A live process is not exiting; an exited one not yet reaped (a
    /// zombie) and one gone altogether are.
    #[test]
    fn exiting_tells_a_dead_process_from_a_live_one() {
        assert!(!exiting(std::process::id() as i32));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let t = std::time::Instant::now();
        while !exiting(pid) && t.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            exiting(pid),
            "the exited child (a zombie) is not seen exiting"
        );
        child.wait().unwrap();
        assert!(exiting(pid), "a reaped child is not seen gone");
    }
}
