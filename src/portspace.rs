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
use crate::runtime::{ServiceMode, service_mode};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Mutex;

pub const EADDRINUSE: Errno = Errno(libc::EADDRINUSE);
pub const EACCES: Errno = Errno(libc::EACCES);

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
}

/// The port spaces: bindings by (port space, port).
#[derive(Default)]
pub struct PortTable {
    map: HashMap<(u16, u16), Vec<Held>>,
    /// Bindings per holder.
    counts: HashMap<u64, usize>,
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
            let list = self.map.entry((ps, port)).or_default();
            if list.iter().any(|o| !compatible(&o.b, &b)) {
                return Err(EADDRINUSE);
            }
            list.push(Held { holder, b });
            *self.counts.entry(holder).or_default() += 1;
            return Ok(port);
        }
        let (lo, hi) = ephemeral_range();
        let n = (hi - lo) as u32 + 1;
        let start = random() % n;
        for k in 0..n {
            let p = lo + ((start + k) % n) as u16;
            if let std::collections::hash_map::Entry::Vacant(v) = self.map.entry((ps, p)) {
                v.insert(vec![Held { holder, b }]);
                *self.counts.entry(holder).or_default() += 1;
                return Ok(p);
            }
        }
        Err(EADDRINUSE)
    }

    /// Marks `owner`'s binding as listening; `EADDRINUSE` when another
    /// binding overlapping it listens or does not share it (REUSEADDR).
    pub fn listen(&mut self, holder: u64, ps: u16, port: u16, owner: u64) -> Result<(), Errno> {
        let list = self.map.get_mut(&(ps, port)).ok_or(Errno::EINVAL)?;
        let mine = |h: &Held| h.holder == holder && h.b.owner == owner;
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
            list.retain(|h| !(h.holder == holder && h.b.owner == owner));
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

/// How long a port request waits for the service before giving up on it
/// (the connection is then dropped: its bindings go with it).
const REPLY_TIMEOUT_MS: i64 = 10_000;

/// This process's connection to the host CM service's port table.
struct Link {
    fd: OwnedFd,
    /// The process that connected (a forked child opens its own link).
    pid: u32,
    seq: u64,
}

/// A process's client of the host-wide port table in the CM service.
pub struct HostPorts {
    path: PathBuf,
    mode: ServiceMode,
    link: Mutex<Option<Link>>,
}

impl HostPorts {
    /// The service's port table, as `IBCM_SERVICE` says: `off` → `None`
    /// (the process keeps its own table); `auto` → the running service, or
    /// one started on demand, else `None` with a log line; `required` →
    /// the service or `-ENODEV`.
    pub fn connect() -> Result<Option<HostPorts>, Errno> {
        let mode = service_mode();
        if mode == ServiceMode::Off {
            return Ok(None);
        }
        let hp = HostPorts {
            path: ipc::socket_path(),
            mode,
            link: Mutex::new(None),
        };
        let mut l = hp.link.lock().unwrap_or_else(|p| p.into_inner());
        match hp.open_link() {
            Ok(link) => *l = Some(link),
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
        drop(l);
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
            link: Mutex::new(None),
        };
        let link = hp.open_link().map_err(|_| Errno::ENODEV)?;
        *hp.link.lock().unwrap_or_else(|p| p.into_inner()) = Some(link);
        Ok(hp)
    }

    fn open_link(&self) -> std::io::Result<Link> {
        let fd = match sock::connect(&self.path) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => return Err(e),
            Err(e) if self.mode != ServiceMode::Auto => return Err(e),
            Err(_) => {
                crate::runtime::start_service(&self.path)?;
                sock::connect(&self.path)?
            }
        };
        let tv = libc::timeval {
            tv_sec: REPLY_TIMEOUT_MS / 1000,
            tv_usec: 0,
        };
        // SAFETY: a valid socket and a timeval of the size given.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        Ok(Link {
            fd,
            pid: std::process::id(),
            seq: 1,
        })
    }

    /// One request; its reply's body (`wait`: false sends it without a
    /// reply, as a release nobody waits for).
    fn call(
        &self,
        opc: u16,
        body: impl Fn(&mut ipc::Writer),
        wait: bool,
    ) -> Result<Vec<u8>, Errno> {
        let mut l = self.link.lock().unwrap_or_else(|p| p.into_inner());
        if l.as_ref().is_some_and(|k| k.pid != std::process::id()) {
            // A forked child: the parent's connection is the parent's.
            *l = None;
        }
        if l.is_none() {
            match self.open_link() {
                Ok(k) => *l = Some(k),
                Err(e) => {
                    ibcm_log!(
                        WARN,
                        "rdma_cm ports: no CM service at {}: {e}",
                        self.path.display()
                    );
                    return Err(Errno::ENODEV);
                }
            }
        }
        let link = l.as_mut().expect("a link");
        let seq = if wait {
            link.seq += 1;
            link.seq
        } else {
            0
        };
        let mut w = Header {
            op: opc,
            seq,
            handle: 0,
        }
        .record();
        body(&mut w);
        let lost = |l: &mut Option<Link>, why: &str| {
            ibcm_log!(
                WARN,
                "rdma_cm ports: the CM service connection failed: {why}"
            );
            *l = None;
            Errno::ENODEV
        };
        if let Err(e) = sock::send(&link.fd, &w.into_bytes()) {
            return Err(lost(&mut l, &e.to_string()));
        }
        if !wait {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; 512];
        let n = match sock::recv(&link.fd, &mut buf) {
            Ok(0) => return Err(lost(&mut l, "closed by the service")),
            Ok(n) => n,
            Err(e) => return Err(lost(&mut l, &e.to_string())),
        };
        let parsed = Header::parse(&buf[..n]).and_then(|(h, mut r)| {
            if h.op != op::REPLY | opc || h.seq != seq {
                return Err(Errno(crate::engine::errno::EPROTO));
            }
            let err: i32 = r.get()?;
            let _: Public = r.get()?;
            Ok((err, buf[n - r.remaining()..n].to_vec()))
        });
        match parsed {
            Ok((0, body)) => Ok(body),
            Ok((err, _)) => Err(Errno(-err)),
            Err(_) => Err(lost(&mut l, "a reply that does not decode")),
        }
    }

    /// Binds `b` to `port` of `ps` (0: ephemeral) in the host's table.
    pub fn bind(&self, ps: u16, port: u16, b: Binding) -> Result<u16, Errno> {
        let body = self.call(op::PORT_BIND, |w| put_bind(w, ps, port, &b), true)?;
        ipc::Reader::new(&body)
            .get::<u16>()
            .map_err(|_| Errno(crate::engine::errno::EPROTO))
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

    fn b(ip: &str, reuse: bool, owner: u64) -> Binding {
        Binding {
            ip: ip.parse().unwrap(),
            reuse,
            afonly: false,
            listening: false,
            owner,
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
