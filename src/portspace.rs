//! rdma_cm's port spaces (docs/RDMACM.md, "Port spaces"): which
//! (port space, address, port) an rdma_cm id holds, ephemeral ports,
//! `EADDRINUSE`, `RDMA_OPTION_ID_REUSEADDR`, `AFONLY`. The space is
//! *virtual*: no host socket is bound on these numbers.
//!
//! * [`PortTable`] is the table and its rules (the kernel's
//!   `cma_check_port`/`cma_alloc_any_port`). Every binding belongs to a
//!   *holder* (a connection of the host CM service, or 0 for a process's
//!   own table) and, inside it, to an *owner* (the id's address in its
//!   process): a holder releases only its own bindings, and all of them at
//!   once when it goes.
//! * [`HostPorts`] is a process's client of the host CM service's table
//!   (`ipc` ops `PORT_BIND`, `PORT_LISTEN`, `PORT_RELEASE`): one table for
//!   every process of the host, as the kernel's. The service checks
//!   `CAP_NET_BIND_SERVICE` of the peer process for ports below 1024.

use crate::engine::Errno;
use crate::ipc::{self, Field, Header, Public, op, sock};
use crate::log::{ERROR, INFO, WARN};
use crate::runtime::{ServiceMode, ServiceWatch, service_mode, service_timeout};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

pub const EADDRINUSE: Errno = Errno(libc::EADDRINUSE);
pub const EACCES: Errno = Errno(libc::EACCES);

/// A service without `PORT_LEASE` answers it so.
pub const EOPNOTSUPP: Errno = Errno(crate::engine::errno::EOPNOTSUPP);

/// `CAP_NET_BIND_SERVICE` (linux/capability.h).
const CAP_NET_BIND_SERVICE: u32 = 10;

/// One binding's facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// Unspecified = wildcard.
    pub ip: IpAddr,
    pub reuse: bool,
    pub afonly: bool,
    pub listening: bool,
    /// Who holds it inside its holder (the id's address).
    pub owner: u64,
}

impl Binding {
    /// `owner`'s binding of `ip` with none of the options: no REUSEADDR,
    /// no AFONLY, not listening.
    pub fn plain(ip: IpAddr, owner: u64) -> Binding {
        Binding {
            ip,
            reuse: false,
            afonly: false,
            listening: false,
            owner,
        }
    }
}

/// Whether two bindings cover a common address.
fn overlap(a: &Binding, b: &Binding) -> bool {
    if a.ip.is_unspecified() || b.ip.is_unspecified() {
        // A wildcard of one family covers the other unless AFONLY.
        let same_family = a.ip.is_ipv4() == b.ip.is_ipv4();
        return same_family || !(a.afonly || b.afonly);
    }
    a.ip == b.ip
}

/// Whether `new` may be bound beside `old` (kernel `cma_check_port`):
/// overlapping bindings need REUSEADDR on both and no listener.
fn compatible(old: &Binding, new: &Binding) -> bool {
    !overlap(old, new) || (old.reuse && new.reuse && !old.listening)
}

/// The range ephemeral ports come from (`ip_local_port_range`), read once
/// per process: reading the sysctl for every ephemeral bind cost four
/// system calls per id (`cmtime` on the host, `strace -c`).
pub fn ephemeral_range() -> (u16, u16) {
    static RANGE: std::sync::OnceLock<(u16, u16)> = std::sync::OnceLock::new();
    *RANGE.get_or_init(read_ephemeral_range)
}

fn read_ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|v| v.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .filter(|(lo, hi)| lo <= hi && *lo > 0)
        .unwrap_or((32768, 60999))
}

/// Whether process `pid` (`None`: this one) has CAP_NET_BIND_SERVICE in
/// its effective set (`/proc/<pid>/status`); false when it cannot be read.
pub fn may_bind_privileged(pid: Option<i32>) -> bool {
    let path = match pid {
        None => "/proc/self/status".to_string(),
        Some(p) => format!("/proc/{p}/status"),
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_NET_BIND_SERVICE) != 0)
}

/// This process's pid, cached and reset in a forked child
/// ([`crate::log::pid`]), so a child never takes its parent's connection
/// for its own.
fn my_pid() -> u32 {
    crate::log::pid()
}

/// Where an ephemeral port search starts: a splitmix64 sequence seeded
/// once per process from `getrandom` (the kernel picks ephemeral ports
/// from its own generator too, not with a system call per bind; a
/// `getrandom` per `rdma_resolve_addr` was one of its eight calls).
fn random() -> u32 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: OnceLock<AtomicU64> = OnceLock::new();
    let st = STATE.get_or_init(|| {
        let mut v = 0u64;
        // SAFETY: getrandom writes at most 8 bytes into `v`.
        let n = unsafe { libc::getrandom((&raw mut v).cast(), 8, libc::GRND_NONBLOCK) };
        if n != 8 {
            v = u64::from(std::process::id()).wrapping_mul(0x9e37_79b9_7f4a_7c15)
                ^ std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
        }
        AtomicU64::new(v)
    });
    let mut z = st
        .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

/// A binding and its holder.
#[derive(Debug, Clone, Copy)]
struct Held {
    holder: u64,
    b: Binding,
    /// An ephemeral port reserved for the holder's next ephemeral bind
    /// (`PortTable::lease`), not bound yet: alone on its port, taken by
    /// the holder's next port-0 bind, revoked by anyone's explicit bind.
    lease: bool,
}

/// Most ports one `PORT_LEASE` reserves.
pub const MAX_LEASE: u32 = 64;

/// The port spaces: bindings by (port space, port).
#[derive(Default)]
pub struct PortTable {
    map: HashMap<(u16, u16), Vec<Held>>,
    /// Bindings and leased ports per holder.
    counts: HashMap<u64, usize>,
    /// Leased ports per (holder, port space).
    leases: HashMap<(u64, u16), Vec<u16>>,
}

impl PortTable {
    /// Binds `b` for `holder` to `port` of `ps` (0: an ephemeral port);
    /// the port. `privileged`: the holder may take ports below 1024.
    pub fn bind(
        &mut self,
        holder: u64,
        ps: u16,
        port: u16,
        b: Binding,
        privileged: bool,
    ) -> Result<u16, Errno> {
        if port != 0 {
            if port < 1024 && !privileged {
                return Err(EACCES);
            }
            self.revoke(ps, port);
            let list = self.map.entry((ps, port)).or_default();
            if list.iter().any(|o| !compatible(&o.b, &b)) {
                return Err(EADDRINUSE);
            }
            list.push(Held {
                holder,
                b,
                lease: false,
            });
            *self.counts.entry(holder).or_default() += 1;
            return Ok(port);
        }
        // The holder's own leased ports first (already counted).
        if let Some(p) = self.take_lease(holder, ps) {
            self.map.insert(
                (ps, p),
                vec![Held {
                    holder,
                    b,
                    lease: false,
                }],
            );
            return Ok(p);
        }
        let p = self.vacant(ps).ok_or(EADDRINUSE)?;
        self.map.insert(
            (ps, p),
            vec![Held {
                holder,
                b,
                lease: false,
            }],
        );
        *self.counts.entry(holder).or_default() += 1;
        Ok(p)
    }

    /// The holders of the bindings that make `bind`'s explicit bind of
    /// `b` to `port` of `ps` fail with `EADDRINUSE` (none when it would
    /// not; a lease never blocks: the bind revokes it).
    pub fn bind_blockers(&self, ps: u16, port: u16, b: &Binding) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .map
            .get(&(ps, port))
            .into_iter()
            .flatten()
            .filter(|o| !o.lease && !compatible(&o.b, b))
            .map(|o| o.holder)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The holders of the bindings that make `listen` of `holder`'s
    /// `owner` binding fail with `EADDRINUSE` (none when it would not).
    pub fn listen_blockers(&self, holder: u64, ps: u16, port: u16, owner: u64) -> Vec<u64> {
        let Some(list) = self.map.get(&(ps, port)) else {
            return Vec::new();
        };
        let mine = |h: &Held| h.holder == holder && !h.lease && h.b.owner == owner;
        let Some(me) = list.iter().find(|h| mine(h)).map(|h| h.b) else {
            return Vec::new();
        };
        let mut v: Vec<u64> = list
            .iter()
            .filter(|o| {
                !mine(o)
                    && !o.lease
                    && overlap(&o.b, &me)
                    && (o.b.listening || !(o.b.reuse && me.reuse))
            })
            .map(|o| o.holder)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// A port of `ps` nobody binds or leases, from a random start in the
    /// ephemeral range.
    fn vacant(&self, ps: u16) -> Option<u16> {
        let (lo, hi) = ephemeral_range();
        let n = (hi - lo) as u32 + 1;
        let start = random() % n;
        (0..n)
            .map(|k| lo + ((start + k) % n) as u16)
            .find(|p| !self.map.contains_key(&(ps, *p)))
    }

    /// Reserves up to `want` vacant ephemeral ports of `ps` for `holder`'s
    /// next ephemeral binds (`PORT_LEASE`: the process then binds them
    /// without waiting for the service); the ports. `EADDRINUSE` when the
    /// range has no vacant port (the error an ephemeral bind gives).
    pub fn lease(&mut self, holder: u64, ps: u16, want: u32) -> Result<Vec<u16>, Errno> {
        let mut got = Vec::new();
        while (got.len() as u32) < want {
            let Some(p) = self.vacant(ps) else { break };
            self.map.insert(
                (ps, p),
                vec![Held {
                    holder,
                    b: Binding::plain(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0),
                    lease: true,
                }],
            );
            self.leases.entry((holder, ps)).or_default().push(p);
            *self.counts.entry(holder).or_default() += 1;
            got.push(p);
        }
        if got.is_empty() {
            return Err(EADDRINUSE);
        }
        Ok(got)
    }

    /// Leased ports not bound yet, of every holder.
    pub fn leased_total(&self) -> usize {
        self.leases.values().map(Vec::len).sum()
    }

    /// Ports of `ps` leased to `holder` and not bound yet.
    pub fn leased(&self, holder: u64, ps: u16) -> usize {
        self.leases.get(&(holder, ps)).map_or(0, Vec::len)
    }

    /// The next port leased to `holder` in `ps`, its lease ended (the
    /// caller binds it; it stays counted).
    fn take_lease(&mut self, holder: u64, ps: u16) -> Option<u16> {
        let v = self.leases.get_mut(&(holder, ps))?;
        let p = v.pop()?;
        if v.is_empty() {
            self.leases.remove(&(holder, ps));
        }
        self.map.remove(&(ps, p));
        Some(p)
    }

    /// An explicit bind of `port`: a lease on it ends (the port is free to
    /// the kernel's rules; the holder's next ephemeral bind takes another).
    fn revoke(&mut self, ps: u16, port: u16) {
        let Some(list) = self.map.get(&(ps, port)) else {
            return;
        };
        let Some(h) = list.iter().find(|h| h.lease).map(|h| h.holder) else {
            return;
        };
        self.map.remove(&(ps, port));
        if let Some(v) = self.leases.get_mut(&(h, ps)) {
            v.retain(|p| *p != port);
            if v.is_empty() {
                self.leases.remove(&(h, ps));
            }
        }
        self.uncount(h, 1);
    }

    /// Marks `owner`'s binding as listening; `EADDRINUSE` when another
    /// binding overlapping it listens or does not share it (REUSEADDR).
    pub fn listen(&mut self, holder: u64, ps: u16, port: u16, owner: u64) -> Result<(), Errno> {
        let list = self.map.get_mut(&(ps, port)).ok_or(Errno::EINVAL)?;
        let mine = |h: &Held| h.holder == holder && !h.lease && h.b.owner == owner;
        let me = list.iter().find(|h| mine(h)).ok_or(Errno::EINVAL)?.b;
        if list
            .iter()
            .any(|o| !mine(o) && overlap(&o.b, &me) && (o.b.listening || !(o.b.reuse && me.reuse)))
        {
            return Err(EADDRINUSE);
        }
        for h in list.iter_mut().filter(|h| mine(h)) {
            h.b.listening = true;
        }
        Ok(())
    }

    /// Drops `owner`'s binding of `port` (nothing if it has none).
    pub fn release(&mut self, holder: u64, ps: u16, port: u16, owner: u64) {
        if let Some(list) = self.map.get_mut(&(ps, port)) {
            let before = list.len();
            list.retain(|h| !(h.holder == holder && !h.lease && h.b.owner == owner));
            let gone = before - list.len();
            if list.is_empty() {
                self.map.remove(&(ps, port));
            }
            self.uncount(holder, gone);
        }
    }

    /// Drops every binding of `holder` (a process gone); how many.
    pub fn release_holder(&mut self, holder: u64) -> usize {
        if self.counts.get(&holder).is_none_or(|n| *n == 0) {
            self.counts.remove(&holder);
            return 0;
        }
        let mut gone = 0;
        self.map.retain(|_, list| {
            let before = list.len();
            list.retain(|h| h.holder != holder);
            gone += before - list.len();
            !list.is_empty()
        });
        self.counts.remove(&holder);
        self.leases.retain(|(h, _), _| *h != holder);
        gone
    }

    /// Bindings `holder` has.
    pub fn held_by(&self, holder: u64) -> usize {
        self.counts.get(&holder).copied().unwrap_or(0)
    }

    /// Bindings of every holder.
    pub fn len(&self) -> usize {
        self.counts.values().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn uncount(&mut self, holder: u64, n: usize) {
        if n == 0 {
            return;
        }
        if let Some(c) = self.counts.get_mut(&holder) {
            *c = c.saturating_sub(n);
            if *c == 0 {
                self.counts.remove(&holder);
            }
        }
    }
}

impl Field for IpAddr {
    fn put(&self, w: &mut ipc::Writer) {
        match self {
            IpAddr::V4(a) => {
                4u8.put(w);
                a.octets().put(w);
            }
            IpAddr::V6(a) => {
                6u8.put(w);
                a.octets().put(w);
            }
        }
    }
    fn get(r: &mut ipc::Reader<'_>) -> Result<Self, Errno> {
        match u8::get(r)? {
            4 => Ok(IpAddr::from(<[u8; 4]>::get(r)?)),
            6 => Ok(IpAddr::from(<[u8; 16]>::get(r)?)),
            _ => Err(Errno(crate::engine::errno::EPROTO)),
        }
    }
}

/// The body of `PORT_BIND`.
pub fn put_bind(w: &mut ipc::Writer, ps: u16, port: u16, b: &Binding) {
    w.put(&ps)
        .put(&port)
        .put(&b.ip)
        .put(&b.reuse)
        .put(&b.afonly)
        .put(&b.owner);
}

/// Decodes a `PORT_BIND` body: port space, port, binding (not listening).
pub fn get_bind(r: &mut ipc::Reader<'_>) -> Result<(u16, u16, Binding), Errno> {
    let ps = r.get()?;
    let port = r.get()?;
    let b = Binding {
        ip: r.get()?,
        reuse: r.get()?,
        afonly: r.get()?,
        listening: false,
        owner: r.get()?,
    };
    r.end()?;
    Ok((ps, port, b))
}

/// Decodes a `PORT_LISTEN` or `PORT_RELEASE` body: port space, port, owner.
pub fn get_owner(r: &mut ipc::Reader<'_>) -> Result<(u16, u16, u64), Errno> {
    let v = (r.get()?, r.get()?, r.get()?);
    r.end()?;
    Ok(v)
}

/// Decodes a `PORT_RELEASE_BY` body: holder, secret, port space, port,
/// owner.
pub fn get_release_by(r: &mut ipc::Reader<'_>) -> Result<(u64, u64, u16, u16, u64), Errno> {
    let v = (r.get()?, r.get()?, r.get()?, r.get()?, r.get()?);
    r.end()?;
    Ok(v)
}

pub use crate::ipc::PortRelease;

/// Decodes a `PORT_LEASE` body: port space, count (1..=`MAX_LEASE`).
pub fn get_lease(r: &mut ipc::Reader<'_>) -> Result<(u16, u32), Errno> {
    let ps: u16 = r.get()?;
    let want: u32 = r.get()?;
    r.end()?;
    if !(1..=MAX_LEASE).contains(&want) {
        return Err(Errno::EINVAL);
    }
    Ok((ps, want))
}

/// What a pipelined bind runs when its port is known (on the link's reader
/// thread): the port, or the bind's error.
pub type Done = Box<dyn FnOnce(Result<u16, Errno>) + Send>;

/// A caller's wait for its reply.
#[derive(Default)]
struct Slot {
    v: Mutex<Option<Result<Vec<u8>, Errno>>>,
    cv: Condvar,
}

/// Who waits for a reply.
enum Waiter {
    /// A caller blocked in `HostPorts::call`.
    Sync(Arc<Slot>),
    /// A pipelined bind (`HostPorts::bind_pipelined`).
    Async(Done),
    /// The link's `PORT_TOKEN`, asked as it opens (the reader thread
    /// keeps the answer in `Link::token`).
    Token,
}

impl Waiter {
    /// Hands `r` (a reply's body, or the error) over.
    fn finish(self, r: Result<Vec<u8>, Errno>) {
        match self {
            Waiter::Sync(slot) => {
                *lock(&slot.v) = Some(r);
                slot.cv.notify_all();
            }
            Waiter::Token => {}
            Waiter::Async(done) => done(r.and_then(|body| {
                ipc::Reader::new(&body)
                    .get::<u16>()
                    .map_err(|_| Errno(crate::engine::errno::EPROTO))
            })),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// This process's connection to the host CM service's port table. One
/// reader thread per connection takes the replies: a caller of a round
/// trip waits for its own, a pipelined bind's runs its `Done`.
struct Link {
    fd: Arc<OwnedFd>,
    /// The service's pid (`SO_PEERCRED`; 0 when unknown) and the messages
    /// received on this connection: a waiting call's view of the
    /// service's progress (`ServiceWatch`).
    peer: i32,
    received: Arc<std::sync::atomic::AtomicU64>,
    /// The process that connected (a forked child opens its own link).
    pid: u32,
    /// Which connection this is (the reader thread serves only its own).
    generation: u64,
    seq: u64,
    pending: HashMap<u64, Waiter>,
    /// Records not sent yet: pipelined binds made while earlier ones are
    /// unanswered, and the one-way records made after them (kept in
    /// order). They leave as one message when the last answer comes, or
    /// before the next round trip.
    held: Vec<Vec<u8>>,
    /// Pipelined binds among `held`.
    held_binds: usize,
    /// Pipelined binds sent and not answered yet.
    inflight: usize,
    /// Ports leased per port space and not bound yet, as far as this
    /// process counts (the service's count can be lower: another
    /// process's explicit bind revokes a leased port).
    credits: HashMap<u16, u32>,
    /// Ephemeral binds made so far: the next lease asks for as many.
    used: u32,
    /// This connection's `PORT_TOKEN` (holder, secret), once answered;
    /// `None` from a service without it.
    token: Option<(u64, u64)>,
}

impl Link {
    /// Sends `recs` (several as one `BATCH` message).
    fn send(&self, recs: Vec<Vec<u8>>) -> std::io::Result<()> {
        ipc::batch(recs)
            .iter()
            .try_for_each(|m| sock::send(&self.fd, m))
    }

    /// The held records and `rec`, sent now.
    fn send_all(&mut self, rec: Option<Vec<u8>>) -> std::io::Result<()> {
        let mut recs = std::mem::take(&mut self.held);
        self.inflight += std::mem::take(&mut self.held_binds);
        recs.extend(rec);
        if recs.is_empty() {
            return Ok(());
        }
        self.send(recs)
    }
}

/// The link is gone: it goes from `l` and its waiters are returned (to be
/// told `ENODEV` outside the lock).
fn drop_link(l: &mut Option<Link>, why: &str) -> Vec<Waiter> {
    ibcm_log!(
        WARN,
        "rdma_cm ports: the CM service connection failed: {why}"
    );
    l.take()
        .map(|k| {
            // Ended now, not when its reader thread lets go of it (never,
            // behind a hung service): the service releases its bindings
            // when it runs again, the reader thread ends.
            sock::shutdown(&k.fd);
            k.pending.into_values().collect()
        })
        .unwrap_or_default()
}

fn fail(waiters: Vec<Waiter>) {
    for w in waiters {
        w.finish(Err(Errno::ENODEV));
    }
}

/// A record: header (`seq` 0: nobody waits for its reply) and body.
fn record(opc: u16, seq: u64, body: impl FnOnce(&mut ipc::Writer)) -> Vec<u8> {
    let mut w = Header {
        op: opc,
        seq,
        handle: 0,
    }
    .record();
    body(&mut w);
    w.into_bytes()
}

/// One pipelined bind's wait on the service (`HostPorts::bind_watch`).
pub struct BindWatch {
    watch: ServiceWatch,
    received: Arc<std::sync::atomic::AtomicU64>,
}

impl BindWatch {
    /// When to look for progress next (the end of the current period).
    pub fn check_at(&self) -> std::time::Instant {
        self.watch.check_at()
    }

    /// At `check_at` without the answer: true — the service made progress
    /// (or this is the first look at its CPU time), wait to the next
    /// `check_at`; false — give up (`note` says why): it is stopped, made
    /// no progress for a period, or reached `IBCM_SERVICE_BUSY_MAX_MS`.
    /// `who` and `what` name the wait in its one log line.
    pub fn working(&mut self, who: &str, what: &str) -> bool {
        let n = self.received.load(std::sync::atomic::Ordering::Relaxed);
        self.watch.working(n, who, what)
    }

    /// Why the wait gave up, for its log line (empty after one plain
    /// period).
    pub fn note(&self) -> String {
        self.watch.note()
    }
}

/// A process's client of the host-wide port table in the CM service.
pub struct HostPorts {
    path: PathBuf,
    mode: ServiceMode,
    link: Arc<Mutex<Option<Link>>>,
    /// The service answered `PORT_LEASE` `-EOPNOTSUPP`.
    no_leases: std::sync::atomic::AtomicBool,
}

impl HostPorts {
    /// The service's port table, as `IBCM_SERVICE` says: `off` → `None`
    /// (the process keeps its own table); `auto` → the running service, or
    /// one started on demand, else `None` with a log line; `required` →
    /// the service or `-ENODEV`. A service that does not accept the
    /// connection within the service timeout is still the host's port
    /// table (a log line, and its calls fail with `ETIMEDOUT` until it
    /// accepts), in either mode.
    pub fn connect() -> Result<Option<HostPorts>, Errno> {
        let mode = service_mode();
        if mode == ServiceMode::Off {
            return Ok(None);
        }
        let hp = HostPorts {
            path: ipc::socket_path(),
            mode,
            link: Arc::new(Mutex::new(None)),
            no_leases: Default::default(),
        };
        let opened = {
            let mut l = lock(&hp.link);
            hp.open_link(&mut l)
        };
        match opened {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                // A wedged service still holds the host's ports: `auto`
                // does not take a port space of its own beside it. Its
                // table stays this process's: each call opens the link
                // again (bounded: `ETIMEDOUT` until the service accepts).
                crate::log::always(
                    ERROR,
                    format_args!(
                        "rdma_cm ports: the CM service at {} is not answering ({e}; IBCM_SERVICE_TIMEOUT_MS): not using a port space of this process's own, the service holds the host's ports",
                        hp.path.display()
                    ),
                );
                return Ok(Some(hp));
            }
            Err(e) if mode == ServiceMode::Auto => {
                ibcm_log!(
                    INFO,
                    "rdma_cm ports: no CM service at {} ({e}): this process's own port space",
                    hp.path.display()
                );
                return Ok(None);
            }
            Err(e) => {
                crate::log::always(
                    ERROR,
                    format_args!(
                        "rdma_cm ports: IBCM_SERVICE=required but no CM service at {}: {e}",
                        hp.path.display()
                    ),
                );
                return Err(Errno::ENODEV);
            }
        }
        // A service older than the port ops answers -EOPNOTSUPP; a
        // listen of nothing is -EINVAL from one that has them.
        match hp.listen(0, 0, 0) {
            Err(Errno(libc::EINVAL)) => {}
            r => {
                let what = format!(
                    "the CM service at {} has no port table ({r:?})",
                    hp.path.display()
                );
                if mode == ServiceMode::Auto {
                    crate::log::always(
                        WARN,
                        format_args!("rdma_cm ports: {what}: this process's own port space"),
                    );
                    return Ok(None);
                }
                crate::log::always(ERROR, format_args!("rdma_cm ports: {what}"));
                return Err(Errno::ENODEV);
            }
        }
        ibcm_log!(
            INFO,
            "rdma_cm ports: host-wide, in the CM service at {}",
            hp.path.display()
        );
        Ok(Some(hp))
    }

    /// A client of the service at `path` (no start on demand).
    pub fn connect_at(path: impl Into<PathBuf>) -> Result<HostPorts, Errno> {
        let hp = HostPorts {
            path: path.into(),
            mode: ServiceMode::Required,
            link: Arc::new(Mutex::new(None)),
            no_leases: Default::default(),
        };
        hp.open_link(&mut lock(&hp.link)).map_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                Errno(libc::ETIMEDOUT)
            } else {
                Errno::ENODEV
            }
        })?;
        Ok(hp)
    }

    /// Opens the link and starts its reader thread.
    fn open_link(&self, l: &mut Option<Link>) -> std::io::Result<()> {
        static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        // Bounded (a wedged service: `TimedOut`), and started on demand
        // under `auto` only.
        let fd = crate::runtime::connect_service(&self.path, self.mode == ServiceMode::Auto)?;
        // A send to a service that stopped reading fails after the
        // timeout instead of blocking (set once per connection).
        sock::set_timeouts(&fd, service_timeout(), false)?;
        let peer = sock::peer(&fd).0;
        let fd = Arc::new(fd);
        let generation = GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let received = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (shared, rfd, count) = (self.link.clone(), fd.clone(), received.clone());
        std::thread::Builder::new()
            .name("ibcm-ports".into())
            .spawn(move || reader(&shared, &rfd, generation, &count))?;
        *l = Some(Link {
            fd,
            peer,
            received,
            pid: my_pid(),
            generation,
            seq: 1,
            pending: HashMap::new(),
            held: Vec::new(),
            held_binds: 0,
            inflight: 0,
            credits: HashMap::new(),
            used: 0,
            token: None,
        });
        // The token, without waiting (this may run on the reader thread):
        // the answer comes before that of any round trip made after this,
        // such as `connect`'s probe.
        let link = l.as_mut().expect("just set");
        link.seq += 1;
        let seq = link.seq;
        link.pending.insert(seq, Waiter::Token);
        if let Err(e) = link.send(vec![record(op::PORT_TOKEN, seq, |_| ())]) {
            link.pending.remove(&seq);
            return Err(e);
        }
        Ok(())
    }

    /// The link, (re)opened if needed.
    fn ensure<'a>(&self, l: &'a mut Option<Link>) -> Result<&'a mut Link, Errno> {
        if l.as_ref().is_some_and(|k| k.pid != my_pid()) {
            // A forked child: the parent's connection (and its reader
            // thread, its waiters, its leases) are the parent's. The
            // parent's reader thread does not exist here and never drops
            // its reference to the socket: closed by hand, or the child
            // would keep the parent's connection (and its ports) open
            // after the parent is gone.
            if let Some(k) = l.take() {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&*k.fd);
                drop(k);
                // SAFETY: this process's copy of the socket; the only
                // other reference is the absent thread's, never dropped.
                unsafe { libc::close(fd) };
            }
        }
        if l.is_none()
            && let Err(e) = self.open_link(l)
        {
            if e.kind() == std::io::ErrorKind::TimedOut {
                crate::log::always(
                    ERROR,
                    format_args!(
                        "rdma_cm ports: the CM service at {} is not answering ({e}; IBCM_SERVICE_TIMEOUT_MS)",
                        self.path.display()
                    ),
                );
                return Err(Errno(libc::ETIMEDOUT));
            }
            ibcm_log!(
                WARN,
                "rdma_cm ports: no CM service at {}: {e}",
                self.path.display()
            );
            return Err(Errno::ENODEV);
        }
        Ok(l.as_mut().expect("a link"))
    }

    /// One request; its reply's body (`wait`: false sends it without a
    /// reply, as a release nobody waits for — behind any held records).
    fn call(
        &self,
        opc: u16,
        body: impl FnOnce(&mut ipc::Writer),
        wait: bool,
    ) -> Result<Vec<u8>, Errno> {
        let mut l = lock(&self.link);
        let link = self.ensure(&mut l)?;
        if !wait {
            let rec = record(opc, 0, body);
            if !link.held.is_empty() {
                link.held.push(rec);
                return Ok(Vec::new());
            }
            if let Err(e) = link.send(vec![rec]) {
                let w = drop_link(&mut l, &e.to_string());
                drop(l);
                fail(w);
                return Err(Errno::ENODEV);
            }
            return Ok(Vec::new());
        }
        link.seq += 1;
        let seq = link.seq;
        let generation = link.generation;
        let (peer, received) = (link.peer, link.received.clone());
        let slot = Arc::new(Slot::default());
        link.pending.insert(seq, Waiter::Sync(slot.clone()));
        if let Err(e) = link.send_all(Some(record(opc, seq, body))) {
            let w = drop_link(&mut l, &e.to_string());
            drop(l);
            fail(w);
            return Err(Errno::ENODEV);
        }
        drop(l);
        // A service that does not answer within `service_timeout()`
        // (`IBCM_SERVICE_TIMEOUT_MS`) and shows no progress
        // (`ServiceWatch`: messages arriving, its CPU time growing), or
        // that is still working without answering at `service_busy_max()`,
        // is given up on: the connection is dropped (the service releases
        // its bindings when it sees the end), this call fails with
        // `ETIMEDOUT`, the others waiting on it with `ENODEV`, and the next
        // call opens a new connection.
        let count = || received.load(std::sync::atomic::Ordering::Relaxed);
        let mut watch = ServiceWatch::new(peer, count());
        let mut v = lock(&slot.v);
        loop {
            if let Some(r) = v.take() {
                return r;
            }
            let now = std::time::Instant::now();
            if now >= watch.check_at() {
                drop(v);
                let working = watch.working(count(), "rdma_cm ports", &format!("op {opc}"));
                v = lock(&slot.v);
                if working || v.is_some() {
                    continue;
                }
                break;
            }
            v = slot
                .cv
                .wait_timeout(v, watch.check_at() - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(v);
        let mut l = lock(&self.link);
        if let Some(k) = l.as_mut().filter(|k| k.generation == generation) {
            // This call's own wait ends with `ETIMEDOUT`, not the others'
            // `ENODEV`.
            k.pending.remove(&seq);
            let why = format!(
                "no reply within {} ms (IBCM_SERVICE_TIMEOUT_MS){}",
                service_timeout().as_millis(),
                watch.note()
            );
            crate::log::always(
                WARN,
                format_args!(
                    "rdma_cm ports: the CM service at {} is hung: {why}",
                    self.path.display()
                ),
            );
            let w = drop_link(&mut l, &why);
            drop(l);
            fail(w);
        }
        let r = lock(&slot.v).take();
        r.unwrap_or(Err(Errno(crate::engine::errno::ETIMEDOUT)))
    }

    /// Binds `b` to `port` of `ps` (0: ephemeral) in the host's table.
    pub fn bind(&self, ps: u16, port: u16, b: Binding) -> Result<u16, Errno> {
        if port == 0 {
            // The service binds a leased port first.
            let mut l = lock(&self.link);
            if let Ok(link) = self.ensure(&mut l) {
                link.used = link.used.saturating_add(1);
                if let Some(c) = link.credits.get_mut(&ps) {
                    *c = c.saturating_sub(1);
                }
            }
        }
        let body = self.call(op::PORT_BIND, |w| put_bind(w, ps, port, &b), true)?;
        ipc::Reader::new(&body)
            .get::<u16>()
            .map_err(|_| Errno(crate::engine::errno::EPROTO))
    }

    /// An ephemeral bind of `b` in `ps` without waiting for the service:
    /// the port comes to `done` on the link's reader thread. It binds a
    /// port leased to this connection (`PORT_LEASE`, a round trip when
    /// none is left, sized by the ephemeral binds made so far): the
    /// lease's errors (`EADDRINUSE` when the range is full, `ENOMEM` at
    /// the service's limit) are returned here, as a bind's would be, so
    /// `done` sees an error only when the lease was revoked and the range
    /// has filled since, or when the service is lost (`ENODEV`). While
    /// earlier pipelined binds are unanswered the request is held and
    /// leaves with the others held when the last answer comes.
    ///
    /// `-EOPNOTSUPP`: the service has no leases (older than them; asked
    /// once), the caller binds with `bind`.
    pub fn bind_pipelined(&self, ps: u16, b: Binding, done: Done) -> Result<(), Errno> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.no_leases.load(Relaxed) {
            return Err(EOPNOTSUPP);
        }
        let mut l = lock(&self.link);
        for _ in 0..2 {
            let link = self.ensure(&mut l)?;
            if link.credits.get(&ps).copied().unwrap_or(0) > 0 {
                break;
            }
            let want = link.used.clamp(1, MAX_LEASE);
            let generation = link.generation;
            drop(l);
            let body = self.call(
                op::PORT_LEASE,
                |w| {
                    w.put(&ps).put(&want);
                },
                true,
            );
            if body == Err(EOPNOTSUPP) {
                ibcm_log!(
                    INFO,
                    "rdma_cm ports: the CM service at {} leases no ports: rdma_resolve_addr waits for its port",
                    self.path.display()
                );
                self.no_leases.store(true, Relaxed);
            }
            let got = ipc::Reader::new(&body?)
                .get::<Box<[u16]>>()
                .map_err(|_| Errno(crate::engine::errno::EPROTO))?
                .len() as u32;
            if got == 0 || got > want {
                return Err(Errno(crate::engine::errno::EPROTO));
            }
            l = lock(&self.link);
            // A link lost meanwhile took the lease with it: lease again.
            if let Some(k) = l.as_mut().filter(|k| k.generation == generation) {
                *k.credits.entry(ps).or_default() += got;
            }
        }
        let link = self.ensure(&mut l)?;
        let Some(c) = link.credits.get_mut(&ps).filter(|c| **c > 0) else {
            return Err(Errno::ENODEV);
        };
        *c -= 1;
        link.used = link.used.saturating_add(1);
        link.seq += 1;
        let seq = link.seq;
        link.pending.insert(seq, Waiter::Async(done));
        let rec = record(op::PORT_BIND, seq, |w| put_bind(w, ps, 0, &b));
        if link.inflight > 0 || !link.held.is_empty() {
            link.held.push(rec);
            link.held_binds += 1;
            return Ok(());
        }
        link.inflight += 1;
        if let Err(e) = link.send(vec![rec]) {
            // Nothing was bound: the caller gets the error, not `done`.
            link.pending.remove(&seq);
            let w = drop_link(&mut l, &e.to_string());
            drop(l);
            fail(w);
            return Err(Errno::ENODEV);
        }
        Ok(())
    }

    /// A wait for the answer of a pipelined bind made just now
    /// (`rdma_resolve_addr` with `timeout_ms` ≤ 0): the busy-service rule
    /// of a round trip (`ServiceWatch`: it goes on per
    /// `IBCM_SERVICE_TIMEOUT_MS` period while replies arrive on this
    /// connection or the service's CPU time grows, up to
    /// `IBCM_SERVICE_BUSY_MAX_MS`), for a caller that keeps the deadline
    /// itself. `None` without a link.
    pub fn bind_watch(&self) -> Option<BindWatch> {
        let l = lock(&self.link);
        let link = l.as_ref()?;
        let received = link.received.clone();
        let watch = ServiceWatch::new(
            link.peer,
            received.load(std::sync::atomic::Ordering::Relaxed),
        );
        Some(BindWatch { watch, received })
    }

    /// Marks `owner`'s binding as listening.
    pub fn listen(&self, ps: u16, port: u16, owner: u64) -> Result<(), Errno> {
        self.call(
            op::PORT_LISTEN,
            |w| {
                w.put(&ps).put(&port).put(&owner);
            },
            true,
        )
        .map(drop)
    }

    /// The release of `owner`'s binding as a record for a device's
    /// connection, to leave in the message of the id's `DESTROY`: `None`
    /// (release it with `release`) while this link has no token (a
    /// service without `PORT_TOKEN`, or its answer not in yet), or holds
    /// records that must reach the service first (pipelined binds and what
    /// queued behind them), or is a forked parent's. The caller's binding
    /// must be answered (a bind the service has run): the device's
    /// connection does not wait for this one's records.
    pub fn release_ticket(&self, ps: u16, port: u16, owner: u64) -> Option<PortRelease> {
        let l = lock(&self.link);
        let link = l.as_ref()?;
        let (holder, secret) = link.token?;
        if !link.held.is_empty() || link.pid != my_pid() {
            return None;
        }
        drop(l);
        Some(PortRelease(record(op::PORT_RELEASE_BY, 0, |w| {
            w.put(&holder).put(&secret).put(&ps).put(&port).put(&owner);
        })))
    }

    /// Drops `owner`'s binding (without waiting: the service handles this
    /// connection's requests in order, so a later bind sees it gone).
    pub fn release(&self, ps: u16, port: u16, owner: u64) {
        let _ = self.call(
            op::PORT_RELEASE,
            |w| {
                w.put(&ps).put(&port).put(&owner);
            },
            false,
        );
    }
}

impl Drop for HostPorts {
    /// The connection ends (its reader thread holds the socket too): the
    /// service releases its bindings and leases.
    fn drop(&mut self) {
        let mut l = lock(&self.link);
        // (Not in a forked child: the socket is the parent's too, and a
        // shutdown would end the parent's connection.)
        if let Some(k) = l.take().filter(|k| k.pid == my_pid()) {
            // SAFETY: shutdown of a socket this value owns a reference to.
            unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(&*k.fd), libc::SHUT_RDWR) };
        }
    }
}

/// The reader thread of link `generation`: replies to their waiters; when
/// the last pipelined bind is answered, the held records leave.
fn reader(
    shared: &Mutex<Option<Link>>,
    fd: &OwnedFd,
    generation: u64,
    received: &std::sync::atomic::AtomicU64,
) {
    let mut buf = vec![0u8; ipc::MAX_RECORD];
    loop {
        let why = match sock::recv(fd, &mut buf) {
            Ok(0) => Some("closed by the service".to_string()),
            Ok(n) => {
                received.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let msg = &buf[..n];
                let recs: Result<Vec<&[u8]>, Errno> = match Header::parse(msg) {
                    Ok((h, r)) if h.op == op::BATCH => ipc::unbatch(&msg[n - r.remaining()..]),
                    Ok(_) => Ok(vec![msg]),
                    Err(e) => Err(e),
                };
                let mut done = Vec::new();
                let mut l = lock(shared);
                let Some(link) = l.as_mut().filter(|k| k.generation == generation) else {
                    return;
                };
                let mut bad = recs.is_err();
                for rec in recs.unwrap_or_default() {
                    match reply(rec).map(|(seq, r)| (link.pending.remove(&seq), r)) {
                        Ok((Some(Waiter::Token), r)) => {
                            // An older service: no token, two messages
                            // per destroy as before.
                            link.token = r.ok().and_then(|body| {
                                let mut rd = ipc::Reader::new(&body);
                                let v = (rd.get().ok()?, rd.get().ok()?);
                                rd.end().ok()?;
                                Some(v)
                            });
                        }
                        Ok((Some(w), r)) => {
                            if matches!(w, Waiter::Async(_)) {
                                link.inflight = link.inflight.saturating_sub(1);
                            }
                            done.push((w, r));
                        }
                        _ => bad = true,
                    }
                }
                let mut lost = Vec::new();
                if bad {
                    lost = drop_link(&mut l, "a reply that does not decode");
                } else if link.inflight == 0
                    && !link.held.is_empty()
                    && let Err(e) = link.send_all(None)
                {
                    lost = drop_link(&mut l, &e.to_string());
                }
                drop(l);
                for (w, r) in done {
                    w.finish(r);
                }
                if !lost.is_empty() || bad {
                    fail(lost);
                    return;
                }
                None
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = why {
            let mut l = lock(shared);
            if l.as_ref().is_some_and(|k| k.generation == generation) {
                let w = drop_link(&mut l, &why);
                drop(l);
                fail(w);
            }
            return;
        }
    }
}

/// A reply record's seq and result (its body, or the errno it carries).
fn reply(rec: &[u8]) -> Result<(u64, Result<Vec<u8>, Errno>), Errno> {
    let (h, mut r) = Header::parse(rec)?;
    if h.op & op::REPLY == 0 {
        return Err(Errno(crate::engine::errno::EPROTO));
    }
    let err: i32 = r.get()?;
    let _: Public = r.get()?;
    let res = if err == 0 {
        Ok(rec[rec.len() - r.remaining()..].to_vec())
    } else {
        Err(Errno(-err))
    };
    Ok((h.seq, res))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ephemeral_starts_spread_without_a_syscall_each() {
        // 64 draws: all different as drawn (a stuck or constant generator
        // would repeat; 64 honest 32-bit draws collide with probability
        // ~5e-7, where reduced to the 28,232-port range first they would
        // collide ~7 % of the time), and reduced to the range not all in
        // one half.
        let (lo, hi) = (32768u32, 60999u32);
        let n = hi - lo + 1;
        let raw: Vec<u32> = (0..64).map(|_| random()).collect();
        let mut u = raw.clone();
        u.sort_unstable();
        u.dedup();
        assert_eq!(u.len(), raw.len(), "{raw:?}");
        let v: Vec<u32> = raw.iter().map(|&x| x % n).collect();
        assert!(
            v.iter().any(|&x| x < n / 2) && v.iter().any(|&x| x >= n / 2),
            "{v:?}"
        );
    }

    /// The holders `bind_blockers` and `listen_blockers` name are those
    /// whose bindings make the call fail: none where it succeeds, never
    /// a compatible (REUSEADDR) binding or a lease.
    #[test]
    fn blockers_are_the_holders_that_make_a_bind_or_listen_fail() {
        let mut t = PortTable::default();
        t.bind(1, 0x106, 7000, b("10.0.0.1", true, 1), false)
            .unwrap();
        t.bind(2, 0x106, 7000, b("10.0.0.1", true, 2), false)
            .unwrap();
        t.bind(3, 0x106, 7000, b("10.0.0.2", false, 3), false)
            .unwrap();
        // REUSEADDR over the two: compatible, nothing blocks.
        assert!(
            t.bind_blockers(0x106, 7000, &b("10.0.0.1", true, 4))
                .is_empty()
        );
        // Without REUSEADDR: both holders on 10.0.0.1 (each once).
        let one = b("10.0.0.1", false, 4);
        assert_eq!(t.bind_blockers(0x106, 7000, &one), vec![1, 2]);
        assert_eq!(t.bind(4, 0x106, 7000, one, false), Err(EADDRINUSE));
        // A wildcard overlaps all three.
        assert_eq!(
            t.bind_blockers(0x106, 7000, &b("0.0.0.0", false, 4)),
            vec![1, 2, 3]
        );
        // Another port space, another port: free.
        assert!(t.bind_blockers(0x111, 7000, &one).is_empty());
        assert!(t.bind_blockers(0x106, 7001, &one).is_empty());
        // Holder 1 listens: holder 2 (sharing its address) cannot.
        t.listen(1, 0x106, 7000, 1).unwrap();
        assert_eq!(t.listen_blockers(2, 0x106, 7000, 2), vec![1]);
        assert_eq!(t.listen(2, 0x106, 7000, 2), Err(EADDRINUSE));
        // Holder 3 (its own address) can: nothing blocks it.
        assert!(t.listen_blockers(3, 0x106, 7000, 3).is_empty());
        // Released, holder 1 blocks nobody.
        t.release(1, 0x106, 7000, 1);
        assert!(t.listen_blockers(2, 0x106, 7000, 2).is_empty());
        assert_eq!(t.bind_blockers(0x106, 7000, &one), vec![2]);
        // A lease never blocks (an explicit bind revokes it).
        let leased = t.lease(5, 0x106, 1).unwrap()[0];
        assert!(t.bind_blockers(0x106, leased, &one).is_empty());
        assert_eq!(t.bind(4, 0x106, leased, one, false), Ok(leased));
    }

    fn b(ip: &str, reuse: bool, owner: u64) -> Binding {
        Binding {
            reuse,
            ..Binding::plain(ip.parse().unwrap(), owner)
        }
    }

    /// Holders are kept apart: the same owner value in two holders is two
    /// bindings, a release touches only the holder's own, and a holder's
    /// going frees all of its ports.
    #[test]
    fn holders_conflict_and_release_apart() {
        let mut t = PortTable::default();
        assert_eq!(
            t.bind(1, 0x106, 7471, b("10.0.0.1", false, 5), false),
            Ok(7471)
        );
        assert_eq!(
            t.bind(2, 0x106, 7471, b("10.0.0.1", false, 5), false),
            Err(EADDRINUSE)
        );
        // Holder 2 cannot release holder 1's binding of the same owner.
        t.release(2, 0x106, 7471, 5);
        assert_eq!(
            t.bind(2, 0x106, 7471, b("0.0.0.0", false, 6), false),
            Err(EADDRINUSE)
        );
        assert_eq!(t.listen(2, 0x106, 7471, 5), Err(Errno::EINVAL));
        assert_eq!(t.listen(1, 0x106, 7471, 5), Ok(()));
        let e = t.bind(1, 0x106, 0, b("10.0.0.1", false, 7), false).unwrap();
        assert_eq!(t.held_by(1), 2);
        assert_eq!(t.release_holder(1), 2);
        assert_eq!(t.held_by(1), 0);
        assert!(t.is_empty());
        assert_eq!(
            t.bind(2, 0x106, 7471, b("0.0.0.0", false, 6), false),
            Ok(7471)
        );
        assert_eq!(t.bind(2, 0x106, e, b("10.0.0.1", false, 8), false), Ok(e));
        assert_eq!(t.len(), 2);
        // Privileged ports only for a privileged holder; a refusal leaves
        // nothing behind.
        assert_eq!(
            t.bind(3, 0x106, 80, b("10.0.0.1", false, 1), false),
            Err(EACCES)
        );
        assert_eq!(t.bind(3, 0x106, 80, b("10.0.0.1", false, 1), true), Ok(80));
        assert_eq!(t.bind(3, 0x106, 81, b("10.0.0.9", false, 1), true), Ok(81));
        assert_eq!(
            t.bind(4, 0x106, 81, b("10.0.0.9", false, 1), true),
            Err(EADDRINUSE)
        );
        assert_eq!(t.release_holder(4), 0);
        assert_eq!(t.release_holder(3), 2);
        assert_eq!(t.len(), 2);
    }

    /// Leased ports: taken by the holder's ephemeral binds (first), never
    /// by another's, revoked by anyone's explicit bind, counted, and gone
    /// with the holder.
    #[test]
    fn leases_are_the_holder_s_next_ephemeral_ports_until_bound_explicitly() {
        let mut t = PortTable::default();
        let (lo, hi) = ephemeral_range();
        let leased = t.lease(1, 0x106, 3).unwrap();
        assert_eq!(leased.len(), 3);
        assert!(leased.iter().all(|p| (lo..=hi).contains(p)));
        assert_eq!(
            (t.leased(1, 0x106), t.leased(1, 0x111), t.held_by(1)),
            (3, 0, 3)
        );
        // Another holder's explicit bind of a leased port succeeds (the
        // kernel has nobody on it) and ends that lease.
        let a = leased[0];
        assert_eq!(t.bind(2, 0x106, a, b("10.0.0.1", false, 9), false), Ok(a));
        assert_eq!((t.leased(1, 0x106), t.held_by(1)), (2, 2));
        // The holder's ephemeral binds take its other leased ports, adding
        // none to its count; then fresh ones.
        let mut got: Vec<u16> = (0..2)
            .map(|o| t.bind(1, 0x106, 0, b("0.0.0.0", false, o), false).unwrap())
            .collect();
        got.sort_unstable();
        let mut rest = leased[1..].to_vec();
        rest.sort_unstable();
        assert_eq!(got, rest);
        assert_eq!((t.leased(1, 0x106), t.held_by(1)), (0, 2));
        let fresh = t.bind(1, 0x106, 0, b("0.0.0.0", false, 3), false).unwrap();
        assert!(!leased.contains(&fresh));
        assert_eq!(t.held_by(1), 3);
        // A leased port is bound, so an explicit bind over it is refused now.
        assert_eq!(
            t.bind(2, 0x106, leased[1], b("10.0.0.1", false, 9), false),
            Err(EADDRINUSE)
        );
        // A release by owner never touches a lease; the holder's end does.
        t.lease(1, 0x106, 2).unwrap();
        t.release(1, 0x106, leased[1], 1);
        t.release(1, 0x106, leased[1], 0);
        assert_eq!(t.leased(1, 0x106), 2);
        assert_eq!(t.leased_total(), 2);
        assert_eq!(t.release_holder(1), 4);
        assert_eq!((t.leased(1, 0x106), t.leased_total(), t.len()), (0, 0, 1));
        // Leases fill the range: others' ephemeral binds find no port, the
        // holder's still do, and an explicit bind still gets its port.
        let n = (hi - lo) as usize;
        let mut all = Vec::new();
        while let Ok(v) = t.lease(3, 0x106, MAX_LEASE) {
            all.extend(v);
        }
        assert_eq!(all.len(), n, "every vacant port leased (one is bound)");
        assert_eq!(t.lease(4, 0x106, 1), Err(EADDRINUSE));
        assert_eq!(
            t.bind(4, 0x106, 0, b("10.0.0.1", false, 1), false),
            Err(EADDRINUSE)
        );
        assert!(t.bind(3, 0x106, 0, b("10.0.0.1", false, 1), false).is_ok());
        assert_eq!(
            t.bind(4, 0x106, all[5], b("10.0.0.1", false, 1), false),
            Ok(all[5])
        );
        assert_eq!(t.leased(3, 0x106), n - 2);
    }

    #[test]
    fn addresses_round_trip_on_the_wire() {
        for ip in ["10.1.2.3", "::", "fd00::7"] {
            let bd = Binding {
                ip: ip.parse().unwrap(),
                reuse: true,
                afonly: true,
                listening: false,
                owner: 0xdead_beef,
            };
            let mut w = ipc::Writer(Vec::new());
            put_bind(&mut w, 0x106, 18515, &bd);
            let bytes = w.into_bytes();
            assert_eq!(
                get_bind(&mut ipc::Reader::new(&bytes)),
                Ok((0x106, 18515, bd))
            );
            for n in 0..bytes.len() {
                assert!(get_bind(&mut ipc::Reader::new(&bytes[..n])).is_err());
            }
        }
        let mut bad = vec![5u8];
        bad.extend_from_slice(&[0; 16]);
        assert!(ipc::Reader::new(&bad).get::<IpAddr>().is_err());
    }
}
