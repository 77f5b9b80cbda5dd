//! Device names: `DeviceSpec` (`soft:…`, `loop:…`), the rules for RDMA
//! device names (`mlx5_0`, `soft:IP@rxe0`) and opening the transport a
//! name stands for.

use crate::engine::{Errno, errno};
use crate::fabric::{Transport, loopback::LoopbackTransport, udp::UdpTransport};
use crate::log::{ERROR, WARN};
use crate::wire::Gid;
use std::net::IpAddr;
use std::sync::Arc;

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
        let (info, watcher) = verbs::open_watched(dev)?;
        let udp = UdpTransport::bind(ip, port).map_err(|e| {
            ibcm_log!(ERROR, "cannot open {name}: {ip} port {port}: {e}");
            Errno(e.raw_os_error().unwrap_or(errno::EIO))
        })?;
        return Ok(Some(Arc::new(umad::SoftVerbsTransport::new(
            udp, info, watcher,
        ))));
    }
    if !rdma_name(name) {
        return Ok(None);
    }
    let (info, watcher) = verbs::open_watched(name)?;
    Ok(Some(Arc::new(umad::UmadTransport::open(&info, watcher)?)))
}

/// The transport a device name stands for: a real device (`open_verbs`),
/// else a `DeviceSpec`'s UDP or in-process fabric.
pub fn open_transport(name: &str) -> Result<Arc<dyn Transport>, Errno> {
    if let Some(t) = open_verbs(name)? {
        return Ok(t);
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
    Ok(transport)
}
