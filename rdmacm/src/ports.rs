//! rdma_cm's port spaces: which (port space, address, port) an id holds,
//! ephemeral ports, `EADDRINUSE`, `RDMA_OPTION_ID_REUSEADDR`, `AFONLY`
//! and privileged ports. The space is *virtual*: no host socket is bound
//! on these numbers (perftest uses TCP 18515 and rdma_cm port 18515 at
//! once). [`PortSpace`] is the seam: [`ProcessPorts`] is one process's
//! space; a host-wide service can provide another implementation.

use ibcm::api::Errno;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// One binding's facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// Unspecified = wildcard.
    pub ip: IpAddr,
    pub reuse: bool,
    pub afonly: bool,
    pub listening: bool,
    /// Who holds it (the id's address).
    pub owner: usize,
}

/// A port space implementation.
pub trait PortSpace: Send + Sync {
    /// Binds `b` to `port` of `ps` (0: an ephemeral port); the port.
    fn bind(&self, ps: u16, port: u16, b: Binding) -> Result<u16, Errno>;
    /// Marks `owner`'s binding as listening; `EADDRINUSE` when another
    /// listener overlaps it.
    fn listen(&self, ps: u16, port: u16, owner: usize) -> Result<(), Errno>;
    /// Drops `owner`'s binding of `port`.
    fn release(&self, ps: u16, port: u16, owner: usize);
}

pub const EADDRINUSE: Errno = Errno(libc::EADDRINUSE);
pub const EACCES: Errno = Errno(libc::EACCES);

/// `CAP_NET_BIND_SERVICE` (linux/capability.h).
const CAP_NET_BIND_SERVICE: u32 = 10;

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
/// per process: every `rdma_resolve_addr` without a source binds an
/// ephemeral port, and reading the sysctl each time cost four system calls
/// per id (`cmtime` on the host, `strace -c`).
fn ephemeral_range() -> (u16, u16) {
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

/// Whether the process may bind ports below 1024 (CAP_NET_BIND_SERVICE in
/// the effective set).
pub fn may_bind_privileged() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_NET_BIND_SERVICE) != 0)
}

/// One process's port spaces.
#[derive(Default)]
pub struct ProcessPorts {
    map: Mutex<HashMap<(u16, u16), Vec<Binding>>>,
}

impl ProcessPorts {
    /// Where an ephemeral port search starts: a splitmix64 sequence seeded
    /// once per process from `getrandom` (the kernel picks ephemeral ports
    /// from its own generator too, not with a system call per bind; a
    /// `getrandom` per `rdma_resolve_addr` was one of its eight calls).
    fn random() -> u32 {
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
}

impl PortSpace for ProcessPorts {
    fn bind(&self, ps: u16, port: u16, b: Binding) -> Result<u16, Errno> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if port != 0 {
            if port < 1024 && !may_bind_privileged() {
                return Err(EACCES);
            }
            let list = map.entry((ps, port)).or_default();
            if list.iter().any(|o| !compatible(o, &b)) {
                return Err(EADDRINUSE);
            }
            list.push(b);
            return Ok(port);
        }
        let (lo, hi) = ephemeral_range();
        let n = (hi - lo) as u32 + 1;
        let start = Self::random() % n;
        for k in 0..n {
            let p = lo + ((start + k) % n) as u16;
            let list = map.entry((ps, p)).or_default();
            if list.is_empty() {
                list.push(b);
                return Ok(p);
            }
        }
        Err(EADDRINUSE)
    }

    fn listen(&self, ps: u16, port: u16, owner: usize) -> Result<(), Errno> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let list = map.get_mut(&(ps, port)).ok_or(Errno::EINVAL)?;
        let me = *list
            .iter()
            .find(|b| b.owner == owner)
            .ok_or(Errno::EINVAL)?;
        if list
            .iter()
            .any(|o| o.owner != owner && overlap(o, &me) && (o.listening || !(o.reuse && me.reuse)))
        {
            return Err(EADDRINUSE);
        }
        for b in list.iter_mut().filter(|b| b.owner == owner) {
            b.listening = true;
        }
        Ok(())
    }

    fn release(&self, ps: u16, port: u16, owner: usize) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(list) = map.get_mut(&(ps, port)) {
            list.retain(|b| b.owner != owner);
            if list.is_empty() {
                map.remove(&(ps, port));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(ip: &str, reuse: bool, owner: usize) -> Binding {
        Binding {
            ip: ip.parse().unwrap(),
            reuse,
            afonly: false,
            listening: false,
            owner,
        }
    }

    #[test]
    fn ephemeral_starts_spread_without_a_syscall_each() {
        // 64 draws over a 28,232-port range: all different (a stuck or
        // constant generator would repeat), and not all in one half.
        let (lo, hi) = (32768u32, 60999u32);
        let n = hi - lo + 1;
        let v: Vec<u32> = (0..64).map(|_| ProcessPorts::random() % n).collect();
        let mut u = v.clone();
        u.sort_unstable();
        u.dedup();
        assert_eq!(u.len(), v.len(), "{v:?}");
        assert!(
            v.iter().any(|&x| x < n / 2) && v.iter().any(|&x| x >= n / 2),
            "{v:?}"
        );
    }

    #[test]
    fn conflicts_reuse_and_ephemeral() {
        let ps = ProcessPorts::default();
        assert_eq!(ps.bind(0x106, 7471, b("10.0.0.1", false, 1)), Ok(7471));
        // Same address, or a wildcard over it: in use.
        assert_eq!(
            ps.bind(0x106, 7471, b("10.0.0.1", false, 2)),
            Err(EADDRINUSE)
        );
        assert_eq!(
            ps.bind(0x106, 7471, b("0.0.0.0", false, 2)),
            Err(EADDRINUSE)
        );
        assert_eq!(ps.bind(0x106, 7471, b("::", false, 2)), Err(EADDRINUSE));
        // Another address, another port space: free.
        assert_eq!(ps.bind(0x106, 7471, b("10.0.0.2", false, 3)), Ok(7471));
        assert_eq!(ps.bind(0x111, 7471, b("10.0.0.1", false, 4)), Ok(7471));
        // REUSEADDR on both: allowed until one listens.
        assert_eq!(ps.bind(0x106, 9000, b("10.0.0.1", true, 5)), Ok(9000));
        assert_eq!(ps.bind(0x106, 9000, b("10.0.0.1", true, 6)), Ok(9000));
        assert_eq!(ps.listen(0x106, 9000, 5), Ok(()));
        assert_eq!(ps.listen(0x106, 9000, 6), Err(EADDRINUSE));
        assert_eq!(
            ps.bind(0x106, 9000, b("10.0.0.1", true, 7)),
            Err(EADDRINUSE)
        );
        ps.release(0x106, 9000, 5);
        assert_eq!(ps.listen(0x106, 9000, 6), Ok(()));
        // Ephemeral ports are distinct and in the range.
        let (lo, hi) = ephemeral_range();
        let p1 = ps.bind(0x106, 0, b("10.0.0.1", false, 8)).unwrap();
        let p2 = ps.bind(0x106, 0, b("10.0.0.1", false, 9)).unwrap();
        assert_ne!(p1, p2);
        assert!((lo..=hi).contains(&p1) && (lo..=hi).contains(&p2));
        ps.release(0x106, 7471, 1);
        assert_eq!(
            ps.bind(0x106, 7471, b("0.0.0.0", false, 2)),
            Err(EADDRINUSE)
        );
        ps.release(0x106, 7471, 3);
        assert_eq!(ps.bind(0x106, 7471, b("0.0.0.0", false, 2)), Ok(7471));
        // AFONLY keeps an IPv6 wildcard off IPv4.
        let mut v6 = b("::", false, 10);
        v6.afonly = true;
        assert_eq!(ps.bind(0x106, 7000, b("10.0.0.1", false, 11)), Ok(7000));
        assert_eq!(ps.bind(0x106, 7000, v6), Ok(7000));
        if !may_bind_privileged() {
            assert_eq!(ps.bind(0x106, 80, b("10.0.0.1", false, 12)), Err(EACCES));
        }
    }
}
