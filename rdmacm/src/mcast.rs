//! Multicast through rdma_cm on RoCE: `rdma_join_multicast`,
//! `rdma_join_multicast_ex` and `rdma_leave_multicast`, done as the
//! kernel's rdma_cm does for iboe ports (`cma_iboe_join_multicast`) plus
//! what librdmacm adds in user space (`ucma_process_join`,
//! `rdma_leave_multicast`):
//!
//! * no SA: the MGID is the IP group mapped by `cma_iboe_set_mgid`
//!   ([`verbs::mcast_mgid`]) for the GID type of the id's source GID (an
//!   IPv4 group on a RoCE v2 GID: `::ffff:a.b.c.d`; on RoCE v1:
//!   `ff0e::ffff:a.b.c.d`; an IPv6 group as is);
//! * an IPv4 group on a RoCE v2 port is joined at the IP level on the
//!   netdev of the source GID (an `IP_ADD_MEMBERSHIP` socket held while
//!   joined — the kernel's `cma_igmp_send`), so that the IP stack delivers
//!   the group's RoCE v2 packets to the device and switches forward them;
//!   not for a send-only join. An IPv6 group on a RoCE v2 port is refused
//!   as the kernel refuses it (`ENOTSUPP`, 524);
//! * the id's QP (if any, and not for a send-only join) is attached to
//!   the MGID (`ibv_attach_mcast`, MLID 0);
//! * MULTICAST_JOIN reports `param.ud`: the address handle (global, DGID
//!   = MGID, the id's source GID index and port, hop limit 64 for an IPv4
//!   group on RoCE v2 and 1 otherwise, traffic class 0), QPN 0xFFFFFF,
//!   Q_Key `RDMA_UDP_QKEY`, `private_data` = the join's context
//!   (`private_data_len` 0). A failed attach turns it into
//!   MULTICAST_ERROR with status -1, as librdmacm does;
//! * `rdma_leave_multicast` and `rdma_destroy_id` detach the id's QP and
//!   drop the IP-level membership.
//!
//! Joins are kept per id (by the id's address) in this module; `id`
//! calls [`forget`] when an id is torn down.

use crate::abi::*;
use crate::channel::{EventBox, lock};
use crate::exports::guard;
use crate::id::{self, IdPriv, St};
use crate::verbs::{self, IpMembership, RDMA_UDP_QKEY};
use ibcm::api::{Errno, Gid, GidType};
use ibcm::cma::RdmaCmEventType as R;
use ibcm::log::DEBUG;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};

/// `enum rdma_cm_join_mc_attr_mask`.
pub const JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
pub const JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
pub const JOIN_MC_ATTR_RESERVED: u32 = 1 << 2;
/// `enum rdma_cm_mc_join_flags`.
pub const MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
pub const MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
pub const MC_JOIN_FLAG_RESERVED: u32 = 2;

/// The QPN of a multicast destination (`param.ud.qp_num`).
pub const MC_QPN: u32 = 0x00ff_ffff;
/// The kernel-internal `ENOTSUPP` the kernel's rdma_cm returns (and user
/// space sees) for an IPv6 group on a RoCE v2 port.
pub const ENOTSUPP: i32 = 524;
/// `IPV6_DEFAULT_HOPLIMIT`: the hop limit of an IPv4 group on RoCE v2.
const IPV6_DEFAULT_HOPLIMIT: u8 = 64;

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaCmJoinMcAttrEx {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut libc::sockaddr,
}

/// One join of an id.
struct Membership {
    addr: SocketAddr,
    mgid: Gid,
    send_only: bool,
    /// The IP-level membership (IPv4 group, RoCE v2, not send-only).
    _ip: Option<IpMembership>,
}

/// Joins by id address, in join order.
fn members() -> &'static Mutex<HashMap<usize, Vec<Membership>>> {
    static M: OnceLock<Mutex<HashMap<usize, Vec<Membership>>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

fn key(id: &IdPriv) -> usize {
    id.public_ptr() as usize
}

/// The checks of librdmacm's `rdma_join_multicast_ex` on the attributes:
/// whether the join is send-only. `ENOTSUP` for unknown mask bits;
/// `EINVAL` without an address or join flags, or for unknown flags.
pub fn check_join_attr(comp_mask: u32, join_flags: u32) -> Result<bool, Errno> {
    if comp_mask >= JOIN_MC_ATTR_RESERVED {
        return Err(Errno(libc::ENOTSUP));
    }
    if comp_mask & JOIN_MC_ATTR_ADDRESS == 0 {
        return Err(Errno::EINVAL);
    }
    if comp_mask & JOIN_MC_ATTR_JOIN_FLAGS == 0 || join_flags >= MC_JOIN_FLAG_RESERVED {
        return Err(Errno::EINVAL);
    }
    Ok(join_flags == MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
}

/// A group address from the application: NULL or a family librdmacm does
/// not know → `EINVAL` (`ucma_addrlen` is 0); `AF_IB` → `EAFNOSUPPORT`
/// (no AF_IB anywhere in this library).
///
/// # Safety
/// `sa` must be NULL or point at a readable sockaddr of its family's size.
pub unsafe fn read_group(sa: *const libc::sockaddr) -> Result<SocketAddr, Errno> {
    if sa.is_null() {
        return Err(Errno::EINVAL);
    }
    match unsafe { (*sa).sa_family } as c_int {
        libc::AF_INET | libc::AF_INET6 => unsafe { id::read_sockaddr(sa) },
        AF_IB => Err(Errno(libc::EAFNOSUPPORT)),
        _ => Err(Errno::EINVAL),
    }
}

/// Hop limit of the group's address handle (`cma_iboe_join_multicast`).
pub fn hop_limit(group: IpAddr, gid_type: GidType) -> u8 {
    match (group, gid_type) {
        (IpAddr::V4(_), GidType::RoceV2) => IPV6_DEFAULT_HOPLIMIT,
        _ => 1,
    }
}

/// `param.ud` of MULTICAST_JOIN (`cma_make_mc_event` →
/// `ib_init_ah_from_mcmember`, then librdmacm's `private_data = context`).
pub fn join_param(
    mgid: &Gid,
    hop_limit: u8,
    port_num: u8,
    sgid_index: u8,
    context: *mut c_void,
) -> RdmaUdParam {
    RdmaUdParam {
        private_data: context.cast_const(),
        private_data_len: 0,
        ah_attr: IbvAhAttr {
            grh: IbvGlobalRoute {
                dgid: mgid.0,
                flow_label: 0,
                sgid_index,
                hop_limit,
                traffic_class: 0,
                _pad: 0,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num,
            _pad: 0,
        },
        qp_num: MC_QPN,
        qkey: RDMA_UDP_QKEY,
    }
}

/// The netdev (index) of the id's source GID: the one the GID table
/// names, else the interface holding the source address.
fn netdev_index(ndev: Option<&str>, src: SocketAddr) -> Result<u32, Errno> {
    if let Some(name) = ndev {
        let c = std::ffi::CString::new(name).map_err(|_| Errno::ENODEV)?;
        // SAFETY: a NUL-terminated name.
        let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
        if i != 0 {
            return Ok(i);
        }
    }
    let scope = match src {
        SocketAddr::V6(a) => a.scope_id(),
        SocketAddr::V4(_) => 0,
    };
    verbs::iface_of(src.ip(), scope)
        .map(|(_, i)| i)
        .map_err(|_| Errno::ENODEV)
}

fn log(msg: std::fmt::Arguments) {
    ibcm_log!(DEBUG, "librdmacm (ibcm): {msg}");
}

/// `rdma_join_multicast[_ex]` on an id.
pub fn join(
    id: &Arc<IdPriv>,
    group: SocketAddr,
    send_only: bool,
    context: *mut c_void,
) -> Result<(), Errno> {
    let qpt = id.public().qp_type;
    let (vdev, port_num, gid_index, src) = {
        let s = lock(&id.st);
        // The kernel's rdma_join_multicast: a device and ADDR_BOUND or
        // ADDR_RESOLVED.
        if s.dev.is_none() || !matches!(s.st, St::AddrBound | St::AddrResolved) {
            return Err(Errno::EINVAL);
        }
        (s.vdev, s.port_num, s.gid_index, s.src)
    };
    // The kernel's rdma_join_multicast and cma_iboe_join_multicast: UD
    // ids only ("RDMA/cma: Allow UD qp_type to join multicast only"), no
    // wildcard group.
    if qpt != IBV_QPT_UD || group.ip().is_unspecified() {
        return Err(Errno::EINVAL);
    }
    let Some(vdev) = vdev else {
        log(format_args!(
            "rdma_join_multicast: multicast needs a verbs device; this id is on a soft \
             device (CM over the UDP side channel only, id->verbs is NULL)"
        ));
        return Err(Errno(libc::ENOSYS));
    };
    let src = src.ok_or(Errno::EINVAL)?;
    let port = vdev.port(port_num).ok_or(Errno::ENODEV)?;
    if !port.is_roce {
        log(format_args!(
            "rdma_join_multicast: port {port_num} of {} is InfiniBand: multicast there needs \
             the SA (MCMemberRecord joins), which this library does not do",
            vdev.name()
        ));
        return Err(Errno(libc::ENOSYS));
    }
    let entry = port
        .gids
        .iter()
        .find(|g| g.index == u16::from(gid_index))
        .ok_or(Errno::ENODEV)?;
    let gid_type = entry.gid_type;
    let ifindex = netdev_index(entry.ndev.as_deref(), src)?;
    let mgid = verbs::mcast_mgid(group.ip(), gid_type);
    let ip = match group.ip() {
        IpAddr::V4(_) if gid_type == GidType::RoceV2 && !send_only => {
            Some(verbs::join_ip_group(group.ip(), src.ip(), ifindex)?)
        }
        IpAddr::V6(_) if gid_type == GidType::RoceV2 => {
            log(format_args!(
                "rdma_join_multicast: an IPv6 group on a RoCE v2 GID is not supported \
                 (the kernel's rdma_cm refuses it too: ENOTSUPP)"
            ));
            return Err(Errno(ENOTSUPP));
        }
        _ => None,
    };
    let qp = id.public().qp;
    let status = if qp.is_null() || send_only {
        0
    } else {
        // SAFETY: id->qp is the QP rdma_create_qp made (cleared on destroy).
        match unsafe { verbs::attach_mcast(qp.cast(), &mgid, 0) } {
            Ok(()) => 0,
            Err(e) => {
                log(format_args!(
                    "rdma_join_multicast: ibv_attach_mcast({mgid}) failed: {e}; reporting \
                     MULTICAST_ERROR"
                ));
                -1
            }
        }
    };
    lock(members())
        .entry(key(id))
        .or_default()
        .push(Membership {
            addr: group,
            mgid,
            send_only,
            _ip: ip,
        });
    log(format_args!(
        "joined {} as MGID {mgid} ({gid_type:?}{}) on {} port {port_num}",
        group.ip(),
        if send_only { ", send-only" } else { "" },
        vdev.name()
    ));
    let kind = if status == 0 {
        R::MulticastJoin
    } else {
        R::MulticastError
    };
    let mut b = EventBox::new(id, id, kind as c_int, status);
    b.ev.param.ud = join_param(
        &mgid,
        hop_limit(group.ip(), gid_type),
        port_num,
        gid_index,
        context,
    );
    id::enqueue(id, b);
    id::complete(id)
}

/// Detaches the id's QP (unless the join was send-only) and drops the
/// IP-level membership.
fn release(id: &IdPriv, m: Membership) {
    let qp = id.public().qp;
    if !m.send_only && !qp.is_null() {
        // SAFETY: id->qp is live while set.
        if let Err(e) = unsafe { verbs::detach_mcast(qp.cast(), &m.mgid, 0) } {
            log(format_args!("ibv_detach_mcast({}): {e}", m.mgid));
        }
    }
    log(format_args!("left {} (MGID {})", m.addr.ip(), m.mgid));
}

/// `rdma_leave_multicast`: the latest join of exactly `group`
/// (`EADDRNOTAVAIL` if none).
pub fn leave(id: &Arc<IdPriv>, group: SocketAddr) -> Result<(), Errno> {
    let m = {
        let mut map = lock(members());
        let list = map.get_mut(&key(id)).ok_or(Errno(libc::EADDRNOTAVAIL))?;
        let at = list
            .iter()
            .rposition(|m| m.addr == group)
            .ok_or(Errno(libc::EADDRNOTAVAIL))?;
        let m = list.remove(at);
        if list.is_empty() {
            map.remove(&key(id));
        }
        m
    };
    release(id, m);
    Ok(())
}

/// Leaves every group of an id being destroyed.
pub fn forget(id: &IdPriv) {
    let all = lock(members()).remove(&key(id));
    for m in all.into_iter().flatten().rev() {
        release(id, m);
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut RdmaCmId,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    guard("rdma_join_multicast", || {
        // SAFETY: the application's sockaddr (NULL checked).
        let group = unsafe { read_group(addr) }?;
        join(&id::lookup(id)?, group, false, context)?;
        Ok(0)
    })
}

/// 1.1.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut RdmaCmId,
    attr: *mut RdmaCmJoinMcAttrEx,
    context: *mut c_void,
) -> c_int {
    guard("rdma_join_multicast_ex", || {
        // SAFETY: NULL or the application's attributes.
        let a = unsafe { attr.as_ref() }.ok_or(Errno::EINVAL)?;
        let send_only = check_join_attr(a.comp_mask, a.join_flags)?;
        // SAFETY: the application's sockaddr (NULL checked).
        let group = unsafe { read_group(a.addr) }?;
        join(&id::lookup(id)?, group, send_only, context)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_leave_multicast(
    id: *mut RdmaCmId,
    addr: *mut libc::sockaddr,
) -> c_int {
    guard("rdma_leave_multicast", || {
        // SAFETY: the application's sockaddr (NULL checked).
        let group = unsafe { read_group(addr) }?;
        leave(&id::lookup(id)?, group)?;
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The kernel's `cma_iboe_set_mgid`, byte by byte: an IPv4 group
    /// a.b.c.d is bytes 12..16 after `ff ff` at 10..12, with `ff 0e` in
    /// front unless the GID type is RoCE v2; an IPv6 group is the MGID.
    #[test]
    fn mgid_of_ipv4_groups() {
        let v2 = verbs::mcast_mgid(v4("239.1.1.1"), GidType::RoceV2);
        assert_eq!(
            v2.0,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 1, 1]
        );
        let v1 = verbs::mcast_mgid(v4("224.0.0.251"), GidType::RoceV1);
        assert_eq!(
            v1.0,
            [
                0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 224, 0, 0, 251
            ]
        );
        // The GID type only matters for IPv4: IB-typed entries map as v1.
        assert_eq!(verbs::mcast_mgid(v4("224.0.0.251"), GidType::Ib), v1);
        assert!(verbs::mcast_mgid(v4("0.0.0.0"), GidType::RoceV1).is_zero());
    }

    #[test]
    fn mgid_of_ipv6_groups() {
        let g: IpAddr = "ff12:1:2:3:4:5:6:7".parse().unwrap();
        let want = [0xff, 0x12, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7];
        assert_eq!(verbs::mcast_mgid(g, GidType::RoceV1).0, want);
        assert_eq!(verbs::mcast_mgid(g, GidType::RoceV2).0, want);
        assert!(verbs::mcast_mgid("::".parse().unwrap(), GidType::RoceV1).is_zero());
    }

    #[test]
    fn join_attr_checks_as_librdmacm() {
        let a = JOIN_MC_ATTR_ADDRESS;
        let f = JOIN_MC_ATTR_JOIN_FLAGS;
        assert_eq!(check_join_attr(a | f, MC_JOIN_FLAG_FULLMEMBER), Ok(false));
        assert_eq!(
            check_join_attr(a | f, MC_JOIN_FLAG_SENDONLY_FULLMEMBER),
            Ok(true)
        );
        assert_eq!(
            check_join_attr(a | f | JOIN_MC_ATTR_RESERVED, 0),
            Err(Errno(libc::ENOTSUP))
        );
        assert_eq!(check_join_attr(f, 0), Err(Errno::EINVAL));
        assert_eq!(check_join_attr(a, 0), Err(Errno::EINVAL));
        assert_eq!(
            check_join_attr(a | f, MC_JOIN_FLAG_RESERVED),
            Err(Errno::EINVAL)
        );
    }

    #[test]
    fn join_event_parameters() {
        assert_eq!(hop_limit(v4("239.1.1.1"), GidType::RoceV2), 64);
        assert_eq!(hop_limit(v4("239.1.1.1"), GidType::RoceV1), 1);
        assert_eq!(hop_limit("ff12::1".parse().unwrap(), GidType::RoceV1), 1);
        let mgid = verbs::mcast_mgid(v4("239.1.1.1"), GidType::RoceV2);
        let mut ctx = 7u8;
        let p = join_param(&mgid, 64, 1, 3, (&raw mut ctx).cast());
        assert_eq!(p.private_data, (&raw const ctx).cast::<c_void>());
        assert_eq!(p.private_data_len, 0);
        assert_eq!((p.qp_num, p.qkey), (0xff_ffff, 0x0123_4567));
        let ah = p.ah_attr;
        assert_eq!((ah.is_global, ah.port_num, ah.dlid, ah.sl), (1, 1, 0, 0));
        assert_eq!(ah.grh.dgid, mgid.0);
        assert_eq!(
            (ah.grh.sgid_index, ah.grh.hop_limit, ah.grh.traffic_class),
            (3, 64, 0)
        );
    }

    #[test]
    fn group_addresses() {
        assert_eq!(unsafe { read_group(std::ptr::null()) }, Err(Errno::EINVAL));
        // SAFETY: all-zero sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        ss.ss_family = libc::AF_UNIX as libc::sa_family_t;
        let p = (&raw const ss).cast::<libc::sockaddr>();
        assert_eq!(unsafe { read_group(p) }, Err(Errno::EINVAL));
        ss.ss_family = AF_IB as libc::sa_family_t;
        assert_eq!(unsafe { read_group(p) }, Err(Errno(libc::EAFNOSUPPORT)));
        ss.ss_family = libc::AF_INET as libc::sa_family_t;
        let sin = unsafe { &mut *(&raw mut ss).cast::<libc::sockaddr_in>() };
        sin.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::new(239, 1, 1, 1)).to_be();
        assert_eq!(unsafe { read_group(p) }, Ok("239.1.1.1:0".parse().unwrap()));
    }
}
