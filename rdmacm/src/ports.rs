//! rdma_cm's port spaces: which (port space, address, port) an id holds,
//! ephemeral ports, `EADDRINUSE`, `RDMA_OPTION_ID_REUSEADDR`, `AFONLY`
//! and privileged ports. The space is *virtual*: no host socket is bound
//! on these numbers (perftest uses TCP 18515 and rdma_cm port 18515 at
//! once). [`PortSpace`] is the seam, with two implementations, chosen once
//! per process by [`space`]:
//!
//! * [`ServicePorts`] — the host's one table in the CM service
//!   (`ibcm::portspace::HostPorts`), whenever the process's devices are
//!   served by it (`IBCM_SERVICE` `auto` with a service running or
//!   startable, or `required`): a port bound by one process is
//!   `EADDRINUSE` for every other, and a process's ports are released when
//!   it exits or dies (the service sees its connection close);
//! * [`ProcessPorts`] — the process's own table (`IBCM_SERVICE=off`, or
//!   `auto` without a service): the in-process mode, one process per
//!   address.
//!
//! The rules themselves (the kernel's `cma_check_port`) are
//! `ibcm::portspace::PortTable`'s, for both.

use ibcm::api::Errno;
use ibcm::log::ERROR;
use ibcm::portspace::{self as host, HostPorts, PortTable};
use std::sync::Mutex;

/// One binding's facts: the host table's own type, the owner an id's
/// address (`IdPriv::port_owner`).
pub use ibcm::portspace::Binding;

/// A port space implementation.
pub trait PortSpace: Send + Sync {
    /// Binds `b` to `port` of `ps` (0: an ephemeral port); the port.
    fn bind(&self, ps: u16, port: u16, b: Binding) -> Result<u16, Errno>;
    /// Marks `owner`'s binding as listening; `EADDRINUSE` when another
    /// listener overlaps it.
    fn listen(&self, ps: u16, port: u16, owner: u64) -> Result<(), Errno>;
    /// Drops `owner`'s binding of `port`.
    fn release(&self, ps: u16, port: u16, owner: u64);
    /// The release of `owner`'s (answered) binding as a record to ride in
    /// the message of the id's `DESTROY` (`CmId::destroy_releasing`);
    /// `None`: release it with `release`.
    fn release_ticket(&self, _ps: u16, _port: u16, _owner: u64) -> Option<host::PortRelease> {
        None
    }
    /// An ephemeral bind whose port comes later, to `done` on another
    /// thread (`rdma_resolve_addr`'s implicit bind through the service):
    /// `None` when this space binds at once (the caller uses `bind`).
    fn bind_pipelined(
        &self,
        _ps: u16,
        _b: Binding,
        _done: host::Done,
    ) -> Option<Result<(), Errno>> {
        None
    }
    /// The wait for the answer of the pipelined bind just made, under the
    /// busy-service rule (`rdma_resolve_addr` with `timeout_ms` ≤ 0):
    /// `None` when this space has no service to watch.
    fn bind_watch(&self) -> Option<host::BindWatch> {
        None
    }
}

pub const EADDRINUSE: Errno = host::EADDRINUSE;
pub const EACCES: Errno = host::EACCES;

/// Whether this process may bind ports below 1024 (CAP_NET_BIND_SERVICE
/// in the effective set).
pub fn may_bind_privileged() -> bool {
    host::may_bind_privileged(None)
}

/// One process's port spaces.
#[derive(Default)]
pub struct ProcessPorts {
    table: Mutex<PortTable>,
}

impl ProcessPorts {
    fn table(&self) -> std::sync::MutexGuard<'_, PortTable> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PortSpace for ProcessPorts {
    fn bind(&self, ps: u16, port: u16, b: Binding) -> Result<u16, Errno> {
        let privileged = port != 0 && port < 1024 && may_bind_privileged();
        self.table().bind(0, ps, port, b, privileged)
    }

    fn listen(&self, ps: u16, port: u16, owner: u64) -> Result<(), Errno> {
        self.table().listen(0, ps, port, owner)
    }

    fn release(&self, ps: u16, port: u16, owner: u64) {
        self.table().release(0, ps, port, owner)
    }
}

/// The host's port spaces, in the CM service.
pub struct ServicePorts(pub HostPorts);

impl PortSpace for ServicePorts {
    fn bind(&self, ps: u16, port: u16, b: Binding) -> Result<u16, Errno> {
        self.0.bind(ps, port, b)
    }

    fn listen(&self, ps: u16, port: u16, owner: u64) -> Result<(), Errno> {
        self.0.listen(ps, port, owner)
    }

    fn release(&self, ps: u16, port: u16, owner: u64) {
        self.0.release(ps, port, owner)
    }

    fn release_ticket(&self, ps: u16, port: u16, owner: u64) -> Option<host::PortRelease> {
        self.0.release_ticket(ps, port, owner)
    }

    fn bind_pipelined(&self, ps: u16, b: Binding, done: host::Done) -> Option<Result<(), Errno>> {
        match self.0.bind_pipelined(ps, b, done) {
            // A service without leases: the caller binds and waits.
            Err(host::EOPNOTSUPP) => None,
            r => Some(r),
        }
    }

    fn bind_watch(&self) -> Option<host::BindWatch> {
        self.0.bind_watch()
    }
}

/// A port space every call of which fails with `-ENODEV`:
/// `IBCM_SERVICE=required` without a service (the devices would fail too).
struct NoPorts;

impl PortSpace for NoPorts {
    fn bind(&self, _: u16, _: u16, _: Binding) -> Result<u16, Errno> {
        Err(Errno::ENODEV)
    }
    fn listen(&self, _: u16, _: u16, _: u64) -> Result<(), Errno> {
        Err(Errno::ENODEV)
    }
    fn release(&self, _: u16, _: u16, _: u64) {}
}

/// The process's port space, chosen at its first use (module doc).
pub fn space() -> &'static dyn PortSpace {
    crate::fork::globals()
        .ports
        .get_or_init(|| match HostPorts::connect() {
            Ok(Some(h)) => Box::new(ServicePorts(h)),
            Ok(None) => Box::new(ProcessPorts::default()),
            Err(e) => {
                ibcm::log::always(
                    ERROR,
                    format_args!("librdmacm (ibcm): no port space without the CM service: {e}"),
                );
                Box::new(NoPorts)
            }
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(ip: &str, reuse: bool, owner: u64) -> Binding {
        Binding {
            reuse,
            ..Binding::plain(ip.parse().unwrap(), owner)
        }
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
        let (lo, hi) = host::ephemeral_range();
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
