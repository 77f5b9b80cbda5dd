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
//!   the MGID (`ibv_attach_mcast`, MLID 0) when the application retrieves
//!   the MULTICAST_JOIN event (librdmacm's `rdma_get_cm_event` →
//!   `ucma_process_join`; in synchronous mode inside the join call), so
//!   a QP created between the join and that retrieval is attached;
//! * MULTICAST_JOIN reports `param.ud`: the address handle (global, DGID
//!   = MGID, the id's source GID index and port, hop limit 64 for an IPv4
//!   group on RoCE v2 and 1 otherwise, traffic class 0), QPN 0xFFFFFF,
//!   Q_Key `RDMA_UDP_QKEY`, `private_data` = the join's context
//!   (`private_data_len` 0). A failed attach turns it into
//!   MULTICAST_ERROR with status -1, as librdmacm does;
//! * `rdma_leave_multicast` drops the join's events not retrieved yet (as
//!   the kernel's leave does), waits until the ones retrieved are acked
//!   (librdmacm's `mc->events_completed < resp.events_reported` wait),
//!   then detaches the QP if it was attached and drops the IP-level
//!   membership; `rdma_destroy_id` does the same for every join (its wait
//!   for acks is the id's).
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
use std::sync::{Arc, Condvar, Mutex, OnceLock};

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

/// One join as its events see it (librdmacm's `struct cma_multicast`):
/// the MGID, whether it is send-only, whether the QP was attached, and the
/// counts `rdma_leave_multicast` waits on.
pub struct Mc {
    mgid: Gid,
    send_only: bool,
    st: Mutex<McState>,
    acked: Condvar,
}

#[derive(Default)]
struct McState {
    /// Events of the join the application retrieved.
    reported: u64,
    /// Of those, acked.
    completed: u64,
    /// The id's QP was attached at the MULTICAST_JOIN's retrieval.
    attached: bool,
}

impl Mc {
    fn new(mgid: Gid, send_only: bool) -> Arc<Mc> {
        Arc::new(Mc {
            mgid,
            send_only,
            st: Mutex::new(McState::default()),
            acked: Condvar::new(),
        })
    }

    pub(crate) fn note_reported(&self) {
        lock(&self.st).reported += 1;
    }

    pub(crate) fn note_completed(&self) {
        lock(&self.st).completed += 1;
        self.acked.notify_all();
    }

    /// Waits until every retrieved event of the join is acked.
    fn wait_acked(&self) {
        let mut s = lock(&self.st);
        while s.completed < s.reported {
            s = self.acked.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// One join of an id.
struct Membership {
    addr: SocketAddr,
    mc: Arc<Mc>,
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
    log(format_args!(
        "joined {} as MGID {mgid} ({gid_type:?}{}) on {} port {port_num}",
        group.ip(),
        if send_only { ", send-only" } else { "" },
        vdev.name()
    ));
    let param = join_param(
        &mgid,
        hop_limit(group.ip(), gid_type),
        port_num,
        gid_index,
        context,
    );
    queue_join(id, group, Mc::new(mgid, send_only), ip, param);
    id::complete(id)
}

/// Records a join of `id` and queues its MULTICAST_JOIN (the QP is
/// attached when the application retrieves it: [`retrieved`]).
fn queue_join(
    id: &Arc<IdPriv>,
    group: SocketAddr,
    mc: Arc<Mc>,
    ip: Option<IpMembership>,
    param: RdmaUdParam,
) {
    lock(members())
        .entry(key(id))
        .or_default()
        .push(Membership {
            addr: group,
            mc: mc.clone(),
            _ip: ip,
        });
    let mut b = EventBox::new(id, id, R::MulticastJoin as c_int, 0);
    b.ev.param.ud = param;
    b.mc = Some(mc);
    id::enqueue(id, b);
}

/// The application retrieves a multicast event (`rdma_get_cm_event`, or
/// the synchronous join): a MULTICAST_JOIN attaches the id's QP, if it
/// has one now and the join is not send-only; a failed attach turns it
/// into MULTICAST_ERROR with status -1 (librdmacm's `ucma_process_join`).
pub(crate) fn retrieved(b: &mut EventBox) {
    let Some(mc) = b.mc.clone() else { return };
    if b.ev.event != R::MulticastJoin as c_int || mc.send_only {
        return;
    }
    let qp = b.subject.public().qp;
    if qp.is_null() {
        return;
    }
    // SAFETY: id->qp is the QP rdma_create_qp made (cleared on destroy).
    match unsafe { verbs::attach_mcast(qp.cast(), &mc.mgid, 0) } {
        Ok(()) => {
            lock(&mc.st).attached = true;
            log(format_args!(
                "MULTICAST_JOIN retrieved: QP attached to MGID {}",
                mc.mgid
            ));
        }
        Err(e) => {
            log(format_args!(
                "MULTICAST_JOIN retrieved: ibv_attach_mcast({}) failed: {e}; reporting \
                 MULTICAST_ERROR",
                mc.mgid
            ));
            b.ev.event = R::MulticastError as c_int;
            b.ev.status = -1;
        }
    }
}

/// Detaches the id's QP (if the join's retrieval attached it) and drops
/// the IP-level membership.
fn release(id: &IdPriv, m: Membership) {
    let qp = id.public().qp;
    if lock(&m.mc.st).attached && !qp.is_null() {
        // SAFETY: id->qp is live while set.
        if let Err(e) = unsafe { verbs::detach_mcast(qp.cast(), &m.mc.mgid, 0) } {
            log(format_args!("ibv_detach_mcast({}): {e}", m.mc.mgid));
        }
    }
    log(format_args!("left {} (MGID {})", m.addr.ip(), m.mc.mgid));
}

/// `rdma_leave_multicast`: the latest join of exactly `group`
/// (`EADDRNOTAVAIL` if none). Its events not retrieved yet are dropped;
/// the call returns once the retrieved ones are acked (librdmacm's wait),
/// then detaches. On a synchronous id the join's MULTICAST_JOIN is the
/// id's `event` until the next call; it is acked here first (nothing
/// else could: librdmacm's leave would wait for it forever).
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
    let (ch, sync) = {
        let s = lock(&id.st);
        (s.channel.clone(), s.sync)
    };
    // Under the channel's lock: every event of the join is now either
    // dropped here or counted as reported.
    drop(ch.take_where(|e| e.mc.as_ref().is_some_and(|x| Arc::ptr_eq(x, &m.mc))));
    if sync {
        let last = id.public().event;
        if !last.is_null() && crate::channel::mc_of(last).is_some_and(|x| Arc::ptr_eq(&x, &m.mc)) {
            id.public_mut().event = std::ptr::null_mut();
            let _ = crate::channel::ack(last);
        }
    }
    m.mc.wait_acked();
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

    /// A UD id on a channel of its own (`sync`: a synchronous id) with a
    /// join of 239.1.1.1 queued as `join` queues it: its MULTICAST_JOIN
    /// waits on the channel, not retrieved.
    fn joined(sync: bool) -> (Arc<crate::channel::Channel>, Arc<IdPriv>, SocketAddr) {
        let ch = crate::channel::Channel::new().unwrap();
        let id = IdPriv::new(ch.clone(), sync, 0x0111, IBV_QPT_UD, std::ptr::null_mut());
        let group: SocketAddr = "239.1.1.1:0".parse().unwrap();
        let mgid = verbs::mcast_mgid(group.ip(), GidType::RoceV2);
        let mut ctx = 0u8;
        let param = join_param(&mgid, 64, 1, 1, (&raw mut ctx).cast());
        queue_join(&id, group, Mc::new(mgid, false), None, param);
        (ch, id, group)
    }

    /// librdmacm's `rdma_leave_multicast` returns only once the join's
    /// retrieved events are acked (`mc->events_completed <
    /// resp.events_reported`): here the ack comes from another thread.
    #[test]
    fn leave_waits_until_the_retrieved_join_event_is_acked() {
        let (ch, id, group) = joined(false);
        let ev = crate::channel::hand_out(ch.pop().unwrap());
        // SAFETY: the event just handed out.
        let e = unsafe { &*ev };
        assert_eq!(e.event, R::MulticastJoin as c_int);
        assert_eq!(e.status, 0, "no QP: nothing to attach, no error");
        let left = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (i, l) = (id.clone(), left.clone());
        let leaver = std::thread::spawn(move || {
            let r = leave(&i, group);
            l.store(true, std::sync::atomic::Ordering::SeqCst);
            r
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            !left.load(std::sync::atomic::Ordering::SeqCst),
            "rdma_leave_multicast returned with the MULTICAST_JOIN not acked"
        );
        let ev_addr = ev as usize;
        crate::channel::ack(ev_addr as *mut RdmaCmEvent).unwrap();
        assert_eq!(leaver.join().unwrap(), Ok(()));
        assert_eq!(leave(&id, group), Err(Errno(libc::EADDRNOTAVAIL)));
    }

    /// The join's MULTICAST_JOIN not retrieved yet when the application
    /// leaves is dropped (the kernel's leave drops it): the leave does not
    /// wait and the channel has nothing left; the id's own count agrees
    /// (its destroy would not wait either).
    #[test]
    fn leave_drops_the_join_event_not_retrieved_and_does_not_wait() {
        let (ch, id, group) = joined(false);
        let (tx, rx) = std::sync::mpsc::channel();
        let i = id.clone();
        std::thread::spawn(move || tx.send(leave(&i, group)).unwrap());
        let r = rx.recv_timeout(std::time::Duration::from_secs(5));
        assert_eq!(r, Ok(Ok(())), "leave waited for an event never retrieved");
        assert!(ch.take_for(&id).is_empty());
    }

    /// A synchronous id retrieves the MULTICAST_JOIN inside the join (and
    /// keeps it in `id->event`): the leave acks it and returns.
    #[test]
    fn leave_of_a_synchronous_id_acks_its_join_event() {
        let (_ch, id, group) = joined(true);
        id::complete(&id).unwrap();
        let ev = id.public().event;
        assert!(!ev.is_null());
        // SAFETY: the id's current event.
        assert_eq!(unsafe { (*ev).event }, R::MulticastJoin as c_int);
        let (tx, rx) = std::sync::mpsc::channel();
        let i = id.clone();
        std::thread::spawn(move || tx.send(leave(&i, group)).unwrap());
        let r = rx.recv_timeout(std::time::Duration::from_secs(5));
        assert_eq!(r, Ok(Ok(())), "the synchronous leave did not return");
        assert!(id.public().event.is_null());
        assert_eq!(
            crate::channel::ack(ev),
            Err(Errno::EINVAL),
            "the leave acked it"
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
