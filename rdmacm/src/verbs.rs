//! libibverbs for the rdma_cm layer: what librdmacm does with verbs, on
//! top of `ibcm::api::ibv` (ibcm's run-time loader of the process's own
//! `libibverbs.so.1`).
//!
//! * **Devices** ([`devices`], [`device_of`]): every verbs device opened
//!   once, on first use, and never closed — the `struct ibv_context *`
//!   singletons that `rdma_get_devices` returns and `id->verbs` holds
//!   (librdmacm `ucma_init`/`ucma_init_device`). A device that does not
//!   open is skipped with a log line. [`Device::facts`] has the ports
//!   (link layer, active MTU, P_Keys, GID table with GID types and
//!   netdevs) and the device limits librdmacm reads.
//! * **Default PD** ([`Device::pd_get`], [`Device::pd_put`]): one per
//!   device, allocated for the first id bound to it and deallocated when
//!   the last one lets go (`ucma_get_device`/`ucma_put_device`).
//! * **Addresses** ([`find_by_ip`], [`route_to`], [`iboe_mtu`]): the
//!   device, port and GID index owning a local IP (RoCE v2 GIDs preferred,
//!   as the kernel's `CMA_PREFERRED_ROCE_GID_TYPE`), and the kernel's
//!   choice of source address, interface, hop limit and path MTU toward a
//!   destination.
//! * **QPs** ([`create_qp`], [`destroy_qp`], [`modify_qp_cm`],
//!   [`init_attr_fresh`], [`qp_state`], [`to_error`], [`qp_ece`],
//!   [`apply_remote_ece`]): `rdma_create_qp_ex`
//!   and `rdma_destroy_qp` (CQs with one completion channel each and
//!   `cq_context == id`, the QP moved to INIT — a UD QP on to RTS — at
//!   once), the QP transitions of connect/accept/disconnect, and ECE.
//! * **Multicast and SRQs** ([`mcast_mgid`], [`attach_mcast`],
//!   [`detach_mcast`], [`join_ip_group`]): what
//!   `rdma_join_multicast`/`rdma_leave_multicast` need on RoCE;
//!   [`create_srq`]/[`destroy_srq`] and the per-device XRC domain
//!   ([`Device::xrcd_get`]) for `rdma_create_srq[_ex]`.
//!
//! Errors are positive errnos ([`Errno`]), as librdmacm leaves in `errno`.

use ibcm::api::ibv::{self, IbvCompChannel, IbvContext, IbvCq, IbvPd, IbvQp, IbvQpAttr};
use ibcm::api::{Ece, Errno, Gid, GidType, QpAttr};
use std::ffi::{c_int, c_void};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::{Mutex, MutexGuard};

pub use ibcm::api::ibv::{
    IbvQpInitAttr, IbvQpInitAttrEx, IbvSrq, IbvSrqInitAttr, IbvSrqInitAttrEx, IbvXrcd,
    QP_INIT_ATTR_PD, QP_INIT_ATTR_XRCD, qp_attr_from_cm, qp_attr_mask, qps, qpt, srq_init_attr,
    srqt,
};

/// `RDMA_UDP_QKEY`: the Q_Key of every rdma_cm UD QP (`RDMA_PS_UDP`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`: "the device's maximum".
pub const RDMA_MAX_RD_ATOMIC: u8 = 0xff;
/// The P_Key rdma_cm uses on RoCE (the default, full member).
pub const ROCE_PKEY: u16 = 0xffff;

fn log_error(msg: &str) {
    ibcm::ibcm_log!(ibcm::log::ERROR, "rdmacm: {msg}");
}
fn log_debug(msg: &str) {
    ibcm::ibcm_log!(ibcm::log::DEBUG, "rdmacm: {msg}");
}

/// One GID table entry of a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidFacts {
    pub index: u16,
    pub gid: Gid,
    /// IB, RoCE v1 or RoCE v2 (`ibv_query_gid_ex`'s `gid_type`).
    pub gid_type: GidType,
    /// The netdev the GID was derived from (RoCE), when the kernel says.
    pub ndev: Option<String>,
}

/// One physical port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortFacts {
    /// 1-based.
    pub port_num: u8,
    /// Ethernet link layer (RoCE).
    pub is_roce: bool,
    /// `active_mtu` (`enum ibv_mtu`: 1 = 256 … 5 = 4096).
    pub active_mtu: u8,
    /// The P_Key table, index = position.
    pub pkeys: Vec<u16>,
    /// The valid GID table entries (holes left out).
    pub gids: Vec<GidFacts>,
}

impl PortFacts {
    /// The index of `pkey` in the P_Key table: an exact match (the full
    /// member) first, else the same key with the other membership bit, as
    /// the kernel's `ib_find_cached_pkey`; `None` if absent.
    pub fn pkey_index(&self, pkey: u16) -> Option<u16> {
        let exact = self.pkeys.iter().position(|&k| k == pkey);
        let base = || {
            self.pkeys
                .iter()
                .position(|&k| k & 0x7fff == pkey & 0x7fff && k & 0x7fff != 0)
        };
        exact.or_else(base).map(|i| i as u16)
    }
}

/// What a device is (refreshed by [`Device::refresh`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFacts {
    /// Node GUID, host order.
    pub node_guid: u64,
    /// `max_qp_rd_atom` (responder resources).
    pub max_qp_rd_atom: u32,
    /// `max_qp_init_rd_atom` (initiator depth).
    pub max_qp_init_rd_atom: u32,
    pub max_qp_wr: u32,
    pub max_cqe: u32,
    pub ports: Vec<PortFacts>,
}

#[derive(Debug)]
struct PdSlot {
    pd: *mut IbvPd,
    refs: usize,
    /// The device's XRC domain (librdmacm's `cma_dev->xrcd`), opened on
    /// first use and closed with the default PD.
    xrcd: *mut ibv::IbvXrcd,
}

/// A verbs device with its context open for the life of the process.
#[derive(Debug)]
pub struct Device {
    name: String,
    ctx: *mut IbvContext,
    facts: Mutex<DeviceFacts>,
    pd: Mutex<PdSlot>,
}

// The context and PD are used only through libibverbs calls, which are
// thread-safe; the PD slot is behind a lock.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

fn facts_of(ctx: *mut IbvContext, name: &str) -> Result<DeviceFacts, Errno> {
    // SAFETY: `ctx` is one of `ibv::open_all`'s contexts, never closed.
    let info = unsafe { ibv::query_context(ctx, name) }?;
    let ports = info
        .ports
        .iter()
        .map(|p| PortFacts {
            port_num: p.port_num,
            is_roce: p.is_roce,
            active_mtu: p.mtu,
            pkeys: p.pkeys.clone(),
            gids: p
                .gids
                .iter()
                .enumerate()
                .filter(|(_, e)| !e.gid.is_zero())
                .map(|(i, e)| GidFacts {
                    index: i as u16,
                    gid: e.gid,
                    gid_type: e.gid_type,
                    ndev: if p.is_roce {
                        ibv::gid_ndev(name, p.port_num, i)
                    } else {
                        None
                    },
                })
                .collect(),
        })
        .collect();
    Ok(DeviceFacts {
        node_guid: info.node_guid,
        max_qp_rd_atom: info.max_qp_rd_atom,
        max_qp_init_rd_atom: info.max_qp_init_rd_atom,
        max_qp_wr: info.max_qp_wr,
        max_cqe: info.max_cqe,
        ports,
    })
}

impl Device {
    /// The device name (`ibv_get_device_name`), e.g. `rxe0`, `mlx5_0`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The shared `struct ibv_context *` (what `id->verbs` and
    /// `rdma_get_devices` hand to the application).
    pub fn context(&self) -> *mut IbvContext {
        self.ctx
    }

    /// A snapshot of the device's ports, GIDs and limits.
    pub fn facts(&self) -> DeviceFacts {
        self.facts.lock().unwrap().clone()
    }

    /// One port's facts.
    pub fn port(&self, port_num: u8) -> Option<PortFacts> {
        let f = self.facts.lock().unwrap();
        f.ports.iter().find(|p| p.port_num == port_num).cloned()
    }

    /// Re-reads the ports and GID tables (addresses come and go).
    pub fn refresh(&self) -> Result<(), Errno> {
        let f = facts_of(self.ctx, &self.name)?;
        *self.facts.lock().unwrap() = f;
        Ok(())
    }

    /// The default PD, allocated on the first call; each call takes a
    /// reference that [`Device::pd_put`] returns (librdmacm's
    /// `ucma_get_device` for every id bound to the device: `id->pd`).
    pub fn pd_get(&self) -> Result<*mut IbvPd, Errno> {
        let mut s = self.pd.lock().unwrap();
        if s.pd.is_null() {
            // SAFETY: the context stays open.
            s.pd = unsafe { ibv::alloc_pd(self.ctx) }.inspect_err(|e| {
                log_error(&format!("ibv_alloc_pd({}) failed: {e}", self.name));
            })?;
        }
        s.refs += 1;
        Ok(s.pd)
    }

    /// Returns a reference taken by [`Device::pd_get`]; the last one
    /// deallocates the PD (`ucma_put_device`). A PD the application still
    /// uses (its MRs, QPs: `EBUSY`) is kept and logged, and the next
    /// `pd_get` hands it out again.
    pub fn pd_put(&self) {
        let mut s = self.pd.lock().unwrap();
        if s.refs == 0 {
            log_debug(&format!(
                "{}: default PD released more than taken",
                self.name
            ));
            return;
        }
        s.refs -= 1;
        if s.refs == 0 && !s.xrcd.is_null() {
            // SAFETY: our XRC domain; no id holds the device any more.
            match unsafe { ibv::close_xrcd(s.xrcd) } {
                Ok(()) => s.xrcd = std::ptr::null_mut(),
                Err(e) => log_error(&format!(
                    "ibv_close_xrcd({}) failed: {e} (XRC QPs or SRQs of the application still \
                     use it); kept",
                    self.name
                )),
            }
        }
        if s.refs == 0 && !s.pd.is_null() {
            // SAFETY: our PD, no id holds it any more.
            match unsafe { ibv::dealloc_pd(s.pd) } {
                Ok(()) => s.pd = std::ptr::null_mut(),
                Err(e) => log_error(&format!(
                    "ibv_dealloc_pd({}) failed: {e} (objects of the application still use the \
                     default PD); kept",
                    self.name
                )),
            }
        }
    }

    /// The device's XRC domain, opened on the first call (librdmacm's
    /// `ucma_get_xrcd`: `ibv_open_xrcd` with no file, `O_CREAT`) and
    /// closed when the last id lets go of the device. A device without
    /// XRC (Soft-RoCE among them) gives `EOPNOTSUPP`, logged.
    pub fn xrcd_get(&self) -> Result<*mut IbvXrcd, Errno> {
        let mut s = self.pd.lock().unwrap();
        if s.xrcd.is_null() {
            let mut a = ibv::IbvXrcdInitAttr {
                comp_mask: ibv::xrcd_init_attr::FD | ibv::xrcd_init_attr::OFLAGS,
                fd: -1,
                oflags: libc::O_CREAT,
            };
            // SAFETY: the context stays open.
            s.xrcd = unsafe { ibv::open_xrcd(self.ctx, &mut a) }.inspect_err(|e| {
                log_error(&format!(
                    "ibv_open_xrcd({}) failed: {e}: the device offers no XRC domains, so no \
                     XRC SRQ or XRC QP can be created on it (Soft-RoCE, rxe, implements no XRC)",
                    self.name
                ));
            })?;
        }
        Ok(s.xrcd)
    }

    /// The default PD if allocated, and its reference count.
    pub fn pd_current(&self) -> (*mut IbvPd, usize) {
        let s = self.pd.lock().unwrap();
        (s.pd, s.refs)
    }

    /// The device's limits for `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`
    /// (`max_qp_rd_atom`, `max_qp_init_rd_atom`).
    pub fn rd_atomic_max(&self) -> RdAtomicMax {
        let f = self.facts.lock().unwrap();
        RdAtomicMax::from_attrs(f.max_qp_rd_atom, f.max_qp_init_rd_atom)
    }
}

/// The most RDMA reads / atomics an id without a verbs device (a soft
/// device: QP-less connections only) advertises for `RDMA_MAX_RESP_RES` /
/// `RDMA_MAX_INIT_DEPTH`.
pub const SOFT_MAX_RD_ATOMIC: u8 = 16;

/// A device's responder resources (`max_qp_rd_atom`) and initiator depth
/// (`max_qp_init_rd_atom`) limits, as librdmacm keeps them per device
/// (`cma_dev->max_responder_resources` / `max_initiator_depth`, the
/// attributes truncated to 8 bits; here capped at 255) and applies them in
/// `rdma_connect` / `rdma_accept`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdAtomicMax {
    pub responder_resources: u8,
    pub initiator_depth: u8,
}

impl RdAtomicMax {
    pub fn from_attrs(max_qp_rd_atom: u32, max_qp_init_rd_atom: u32) -> Self {
        RdAtomicMax {
            responder_resources: max_qp_rd_atom.min(255) as u8,
            initiator_depth: max_qp_init_rd_atom.min(255) as u8,
        }
    }

    /// The limits of an id's device; [`SOFT_MAX_RD_ATOMIC`] without one.
    pub fn of(dev: Option<&Device>) -> Self {
        dev.map_or(
            RdAtomicMax {
                responder_resources: SOFT_MAX_RD_ATOMIC,
                initiator_depth: SOFT_MAX_RD_ATOMIC,
            },
            Device::rd_atomic_max,
        )
    }

    /// librdmacm's `ucma_valid_param` (`RDMA_PS_TCP` ids only: `check`):
    /// an explicit value above the device's limit is `EINVAL`.
    fn valid(self, resp: u8, init: u8, check: bool) -> Result<(), Errno> {
        if check
            && ((resp != RDMA_MAX_RD_ATOMIC && resp > self.responder_resources)
                || (init != RDMA_MAX_RD_ATOMIC && init > self.initiator_depth))
        {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// `rdma_connect`'s (responder resources, initiator depth) for the REQ:
    /// `RDMA_MAX_*` (0xff) becomes the device's limit, an explicit value is
    /// kept (after the `PS_TCP` check).
    pub fn connect(self, resp: u8, init: u8, check: bool) -> Result<(u8, u8), Errno> {
        self.valid(resp, init, check)?;
        let pick = |v: u8, max: u8| if v == RDMA_MAX_RD_ATOMIC { max } else { v };
        Ok((
            pick(resp, self.responder_resources),
            pick(init, self.initiator_depth),
        ))
    }

    /// `rdma_accept`'s (responder resources, initiator depth) for the REP:
    /// without `conn_param` (`want` `None`) or for `RDMA_MAX_*`, what the
    /// peer's REQ asked for (`peer`, in this side's view) capped at the
    /// device's limit; an explicit value is kept (after the `PS_TCP` check).
    pub fn accept(
        self,
        want: Option<(u8, u8)>,
        peer: (u8, u8),
        check: bool,
    ) -> Result<(u8, u8), Errno> {
        let (resp, init) = want.unwrap_or((RDMA_MAX_RD_ATOMIC, RDMA_MAX_RD_ATOMIC));
        self.valid(resp, init, check)?;
        let pick = |v: u8, asked: u8, max: u8| {
            if v == RDMA_MAX_RD_ATOMIC {
                asked.min(max)
            } else {
                v
            }
        };
        Ok((
            pick(resp, peer.0, self.responder_resources),
            pick(init, peer.1, self.initiator_depth),
        ))
    }
}

static DEVICES: Mutex<Option<&'static [Device]>> = Mutex::new(None);

/// libibverbs' device table held across `fork()` (`crate::fork`): the
/// child keeps using the same contexts and default PDs, as librdmacm's
/// child keeps its `ibv_context`s, so no parent thread may hold their
/// locks when the process is copied.
pub(crate) struct ForkHold {
    _devices: MutexGuard<'static, Option<&'static [Device]>>,
    _facts: Vec<MutexGuard<'static, DeviceFacts>>,
    _pds: Vec<MutexGuard<'static, PdSlot>>,
}

/// Takes the table's lock, then each device's (every other holder takes
/// one of them at a time).
pub(crate) fn hold_for_fork() -> ForkHold {
    let devices = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    let list: &'static [Device] = devices.unwrap_or(&[]);
    ForkHold {
        _facts: list
            .iter()
            .map(|d| d.facts.lock().unwrap_or_else(|p| p.into_inner()))
            .collect(),
        _pds: list
            .iter()
            .map(|d| d.pd.lock().unwrap_or_else(|p| p.into_inner()))
            .collect(),
        _devices: devices,
    }
}

/// Every usable verbs device, opened on the first call (later calls
/// return the same objects). `ENOSYS` without libibverbs (logged, with
/// what to install), `ENODEV` when no device opens (librdmacm's
/// `ucma_init`); a failure is not remembered, so a later call tries again.
pub fn devices() -> Result<&'static [Device], Errno> {
    let mut g = DEVICES.lock().unwrap();
    if let Some(d) = *g {
        return Ok(d);
    }
    // Without libibverbs, `open_all` has logged why (ENOSYS).
    let opened = match ibv::open_all() {
        Ok(o) => o,
        Err(e) if e == Errno::ENODEV => Vec::new(),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for (name, ctx) in opened {
        match facts_of(ctx, &name) {
            Ok(facts) => {
                log_debug(&format!(
                    "{name}: {} port(s), {} GID(s)",
                    facts.ports.len(),
                    facts.ports.iter().map(|p| p.gids.len()).sum::<usize>()
                ));
                out.push(Device {
                    name,
                    ctx,
                    facts: Mutex::new(facts),
                    pd: Mutex::new(PdSlot {
                        pd: std::ptr::null_mut(),
                        refs: 0,
                        xrcd: std::ptr::null_mut(),
                    }),
                });
            }
            // The context stays open (it may already be in use elsewhere
            // in the process); the device is just not offered.
            Err(e) => log_error(&format!("{name}: cannot query the device ({e}); skipped")),
        }
    }
    if out.is_empty() {
        log_error(
            "no usable RDMA device (ibv_devices lists none, or none opens: load rdma_rxe and \
             `rdma link add rxe0 type rxe netdev <if>` for Soft-RoCE, check /dev/infiniband)",
        );
        return Err(Errno::ENODEV);
    }
    let leaked: &'static [Device] = Box::leak(out.into_boxed_slice());
    *g = Some(leaked);
    Ok(leaked)
}

/// The device whose shared context is `ctx` (an application-supplied
/// `ibv_context *`); `None` for a context ibcm did not open.
pub fn device_of(ctx: *const IbvContext) -> Option<&'static Device> {
    devices()
        .ok()?
        .iter()
        .find(|d| std::ptr::eq(d.ctx.cast_const(), ctx))
}

/// The GID rdma_cm uses for an IP address (`rdma_ip2gid`): IPv4 as
/// `::ffff:a.b.c.d`, IPv6 as is.
pub fn ip_gid(ip: IpAddr) -> Gid {
    Gid::from(ip)
}

/// Where a local IP address lives: the device/port/GID an id bound to it
/// uses (`id->verbs`, `id->port_num`, the source GID index).
#[derive(Debug, Clone)]
pub struct Binding {
    pub device: &'static Device,
    pub port_num: u8,
    pub gid_index: u16,
    pub gid: Gid,
    pub gid_type: GidType,
    /// The netdev of the GID, when known.
    pub ndev: Option<String>,
    /// Index of P_Key 0xffff on the port (0 when the table lacks it).
    pub pkey_index: u16,
}

fn gid_rank(t: GidType) -> u8 {
    match t {
        GidType::RoceV2 => 0,
        GidType::RoceV1 => 1,
        GidType::Ib => 2,
    }
}

/// The best (port, GID entry) of `ports` for `gid`: only RoCE ports,
/// RoCE v2 before v1, the lower index first; with `ifname`, only entries
/// whose netdev is that interface (or unknown).
pub fn pick_gid<'a>(
    ports: &'a [PortFacts],
    gid: &Gid,
    ifname: Option<&str>,
) -> Option<(&'a PortFacts, &'a GidFacts)> {
    ports
        .iter()
        .filter(|p| p.is_roce)
        .flat_map(|p| p.gids.iter().map(move |g| (p, g)))
        .filter(|(_, g)| g.gid == *gid)
        .filter(|(_, g)| match (ifname, g.ndev.as_deref()) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        })
        .min_by_key(|(_, g)| (gid_rank(g.gid_type), g.index))
}

fn find_in(devs: &'static [Device], gid: &Gid, ifname: Option<&str>) -> Option<Binding> {
    // RoCE v2 wins over v1 across devices too; then device order.
    let mut best: Option<(u8, Binding)> = None;
    for d in devs {
        let f = d.facts.lock().unwrap();
        if let Some((p, g)) = pick_gid(&f.ports, gid, ifname) {
            let rank = gid_rank(g.gid_type);
            if best.as_ref().is_none_or(|(r, _)| rank < *r) {
                best = Some((
                    rank,
                    Binding {
                        device: d,
                        port_num: p.port_num,
                        gid_index: g.index,
                        gid: g.gid,
                        gid_type: g.gid_type,
                        ndev: g.ndev.clone(),
                        pkey_index: p.pkey_index(ROCE_PKEY).unwrap_or(0),
                    },
                ));
            }
        }
    }
    best.map(|(_, b)| b)
}

/// The device, port and GID index whose GID table holds `ip`
/// (`rdma_bind_addr` to a specific address, the source of
/// `rdma_resolve_addr`): RoCE v2 GIDs preferred over v1, as the kernel
/// does. `ifname` narrows the match to one netdev (IPv6 link-local
/// addresses). The tables are re-read once on a miss; `ENODEV` when no
/// device has the address (an IP on a non-RDMA interface, or no RoCE
/// device at all).
pub fn find_by_ip(ip: IpAddr, ifname: Option<&str>) -> Result<Binding, Errno> {
    let devs = devices()?;
    let gid = ip_gid(ip);
    if let Some(b) = find_in(devs, &gid, ifname) {
        return Ok(b);
    }
    for d in devs {
        if let Err(e) = d.refresh() {
            log_debug(&format!("{}: refresh failed: {e}", d.name));
        }
    }
    find_in(devs, &gid, ifname).ok_or_else(|| {
        log_debug(&format!("no RDMA device has {ip} in its GID table"));
        Errno::ENODEV
    })
}

/// The kernel's `iboe_get_mtu`: the largest IB MTU (`enum ibv_mtu`, 1 =
/// 256 … 5 = 4096) that fits a netdev MTU once the RoCE headers are taken
/// off (GRH 40, UDP 8, BTH 12, XRC ETH 4, AtomicETH 28, ICRC 4 = 96
/// bytes); 0 if not even 256 fits.
pub fn iboe_mtu(netdev_mtu: u32) -> u8 {
    let room = netdev_mtu.saturating_sub(40 + 8 + 12 + 4 + 28 + 4);
    match room {
        4096.. => 5,
        2048.. => 4,
        1024.. => 3,
        512.. => 2,
        256.. => 1,
        _ => 0,
    }
}

/// The path to a destination, as the kernel's address resolution finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The source address the kernel picks (or the one given).
    pub src: IpAddr,
    /// The interface holding `src` (the netdev whose RoCE GID it is).
    pub ifname: String,
    pub ifindex: u32,
    /// That interface's MTU, and [`iboe_mtu`] of it.
    pub netdev_mtu: u32,
    pub mtu: u8,
    /// IPv4 TTL / IPv6 hop limit for the path (`dev_addr.hoplimit`).
    pub hop_limit: u8,
}

fn sys_err() -> Errno {
    Errno(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

fn io_err(e: &std::io::Error) -> Errno {
    Errno(e.raw_os_error().unwrap_or(libc::EIO))
}

/// The interface (name, index) holding `ip`, from `getifaddrs`; for an
/// IPv6 address with a scope, the interface of that scope.
pub fn iface_of(ip: IpAddr, scope: u32) -> Result<(String, u32), Errno> {
    if scope != 0 {
        let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
        let p = unsafe { libc::if_indextoname(scope, buf.as_mut_ptr()) };
        if p.is_null() {
            return Err(sys_err());
        }
        let name = unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned();
        return Ok((name, scope));
    }
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return Err(sys_err());
    }
    let mut found = None;
    let mut cur = ifa;
    while !cur.is_null() {
        let e = unsafe { &*cur };
        cur = e.ifa_next;
        if e.ifa_addr.is_null() {
            continue;
        }
        let fam = unsafe { (*e.ifa_addr).sa_family } as c_int;
        let addr = match fam {
            libc::AF_INET => {
                let sin = unsafe { &*(e.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                let sin6 = unsafe { &*(e.ifa_addr as *const libc::sockaddr_in6) };
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
            }
            _ => continue,
        };
        if addr == ip {
            let name = unsafe { std::ffi::CStr::from_ptr(e.ifa_name) }
                .to_string_lossy()
                .into_owned();
            found = Some(name);
            break;
        }
    }
    unsafe { libc::freeifaddrs(ifa) };
    let name = found.ok_or(Errno(libc::EADDRNOTAVAIL))?;
    let cname = std::ffi::CString::new(name.clone()).map_err(|_| Errno::EINVAL)?;
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    Ok((name, index))
}

fn netdev_mtu(ifname: &str, sock: &UdpSocket, v6: bool) -> u32 {
    let sysfs = format!("/sys/class/net/{ifname}/mtu");
    if let Some(m) = std::fs::read_to_string(sysfs)
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        return m;
    }
    // No sysfs (some containers): the route's MTU of the connected socket.
    use std::os::fd::AsRawFd;
    let (level, opt) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    getsockopt_int(sock.as_raw_fd(), level, opt).map_or(1500, |v| v as u32)
}

fn getsockopt_int(fd: c_int, level: c_int, opt: c_int) -> Result<c_int, Errno> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    let r = unsafe { libc::getsockopt(fd, level, opt, (&mut v as *mut c_int).cast(), &mut len) };
    if r != 0 {
        return Err(sys_err());
    }
    Ok(v)
}

/// Source selection and path facts toward `dst` (`rdma_resolve_addr`
/// with or without a source address), by asking the kernel's routing
/// table through a connected UDP socket: `connect()` on a datagram socket
/// sends nothing but makes the kernel choose the route and the source
/// address (`getsockname`), the same choice a netlink `RTM_GETROUTE`
/// would return. The hop limit is the socket's TTL / unicast hop limit
/// for that route; the MTU is the MTU of the interface holding the source
/// address (what the kernel's RoCE route uses, `iboe_get_mtu(ndev->mtu)`).
/// With `src`, the socket is bound to it first (`EADDRNOTAVAIL` if it is
/// not local). Routing errors are returned as the kernel reports them
/// (`ENETUNREACH`, `EHOSTUNREACH`, …), as rdma_cm's `ADDR_ERROR` status.
pub fn route_to(dst: SocketAddr, src: Option<SocketAddr>) -> Result<Route, Errno> {
    let v6 = dst.is_ipv6();
    if src.is_some_and(|s| s.is_ipv6() != v6) {
        return Err(Errno::EINVAL);
    }
    let bind: SocketAddr = match src {
        Some(mut s) => {
            s.set_port(0);
            s
        }
        None if v6 => (Ipv6Addr::UNSPECIFIED, 0).into(),
        None => (Ipv4Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(bind).map_err(|e| io_err(&e))?;
    let mut to = dst;
    if to.port() == 0 {
        // Any port: connect() on UDP sends nothing.
        to.set_port(9);
    }
    sock.connect(to).map_err(|e| io_err(&e))?;
    let local = sock.local_addr().map_err(|e| io_err(&e))?;
    let scope = match local {
        SocketAddr::V6(a) => a.scope_id(),
        SocketAddr::V4(_) => 0,
    };
    let (ifname, ifindex) = iface_of(local.ip(), scope)?;
    let ndev_mtu = netdev_mtu(&ifname, &sock, v6);
    use std::os::fd::AsRawFd;
    let hop = if v6 {
        getsockopt_int(
            sock.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_UNICAST_HOPS,
        )?
    } else {
        getsockopt_int(sock.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TTL)?
    };
    Ok(Route {
        src: local.ip(),
        ifname,
        ifindex,
        netdev_mtu: ndev_mtu,
        mtu: iboe_mtu(ndev_mtu),
        hop_limit: hop.clamp(1, 255) as u8,
    })
}

/// The MGID rdma_cm uses on RoCE for an IP multicast group (the kernel's
/// `cma_iboe_set_mgid`): an IPv6 group as is; IPv4 `a.b.c.d` as
/// `::ffff:a.b.c.d` for a RoCE v2 join and `ff0e::ffff:a.b.c.d` otherwise;
/// the wildcard address as the zero MGID.
pub fn mcast_mgid(group: IpAddr, gid_type: GidType) -> Gid {
    match group {
        IpAddr::V6(v6) => Gid(v6.octets()),
        IpAddr::V4(v4) if v4.is_unspecified() => Gid([0; 16]),
        IpAddr::V4(v4) => {
            let mut g = [0u8; 16];
            if gid_type != GidType::RoceV2 {
                g[0] = 0xff;
                g[1] = 0x0e;
            }
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(&v4.octets());
            Gid(g)
        }
    }
}

/// `ibv_attach_mcast(qp, mgid, mlid)`: what `rdma_join_multicast` does on
/// the MULTICAST_JOIN event for a QP that is not send-only (RoCE: mlid 0).
///
/// # Safety
/// `qp` must be a live (UD) QP.
pub unsafe fn attach_mcast(qp: *mut IbvQp, mgid: &Gid, mlid: u16) -> Result<(), Errno> {
    unsafe { ibv::attach_mcast(qp, &mgid.0, mlid) }
}

/// `ibv_detach_mcast` (`rdma_leave_multicast`).
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn detach_mcast(qp: *mut IbvQp, mgid: &Gid, mlid: u16) -> Result<(), Errno> {
    unsafe { ibv::detach_mcast(qp, &mgid.0, mlid) }
}

/// An IP-level multicast membership (IGMP / MLD report) on one interface,
/// held until dropped: the join the kernel's rdma_cm makes on the netdev
/// for a RoCE v2 group, so that switches and the peer's stack forward the
/// group's RoCE traffic.
#[derive(Debug)]
pub struct IpMembership {
    _sock: UdpSocket,
    pub group: IpAddr,
}

/// Joins `group` at the IP level on the interface holding `local`
/// (IPv4) or with index `ifindex` (IPv6). `EINVAL` for a non-multicast
/// group or mixed families; the socket layer's error otherwise.
pub fn join_ip_group(group: IpAddr, local: IpAddr, ifindex: u32) -> Result<IpMembership, Errno> {
    if !group.is_multicast() {
        return Err(Errno::EINVAL);
    }
    let sock = match (group, local) {
        (IpAddr::V4(g), IpAddr::V4(l)) => {
            let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| io_err(&e))?;
            s.join_multicast_v4(&g, &l).map_err(|e| io_err(&e))?;
            s
        }
        (IpAddr::V6(g), IpAddr::V6(_)) => {
            let s = UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0)).map_err(|e| io_err(&e))?;
            s.join_multicast_v6(&g, ifindex).map_err(|e| io_err(&e))?;
            s
        }
        _ => return Err(Errno::EINVAL),
    };
    Ok(IpMembership { _sock: sock, group })
}

/// What [`create_srq`] made: the SRQ, and for an XRC SRQ without a CQ
/// in its attributes the completion channel and CQ created for it
/// (librdmacm puts them in `id->recv_cq_channel` / `id->recv_cq`).
#[derive(Debug, Clone, Copy)]
pub struct SrqResources {
    pub srq: *mut IbvSrq,
    pub cq: *mut IbvCq,
    pub cq_channel: *mut IbvCompChannel,
}

/// `rdma_create_srq_ex` on an id bound to device `dev` (librdmacm
/// cma.c): `EINVAL` without `IBV_SRQ_INIT_ATTR_TYPE`; the PD is `pd` (the
/// id's) unless the attributes name one; an XRC SRQ gets the device's
/// XRC domain unless the attributes name one, and a CQ of `attr.max_wr`
/// entries on its own completion channel (`cq_context == id`) unless they
/// name one. `ibv_create_srq_ex` (a basic SRQ through `ibv_create_srq`)
/// then creates it; the limits granted land in `attr`. On failure what was
/// created here is destroyed again.
///
/// # Safety
/// The pointers in `attr` must be null or live objects of `dev`'s
/// context; `pd` the id's default PD; `id` is only stored.
pub unsafe fn create_srq(
    dev: &Device,
    pd: *mut IbvPd,
    id: *mut c_void,
    attr: &mut IbvSrqInitAttrEx,
) -> Result<SrqResources, Errno> {
    use srq_init_attr as m;
    if attr.comp_mask & m::TYPE == 0 {
        log_debug("rdma_create_srq_ex: comp_mask lacks IBV_SRQ_INIT_ATTR_TYPE");
        return Err(Errno::EINVAL);
    }
    if attr.comp_mask & m::PD == 0 || attr.pd.is_null() {
        attr.pd = pd;
        attr.comp_mask |= m::PD;
    }
    let ctx = dev.context();
    let mut r = SrqResources {
        srq: std::ptr::null_mut(),
        cq: std::ptr::null_mut(),
        cq_channel: std::ptr::null_mut(),
    };
    if attr.srq_type == srqt::XRC {
        if attr.comp_mask & m::XRCD == 0 || attr.xrcd.is_null() {
            attr.xrcd = dev.xrcd_get()?;
        }
        // No entries asked for: no CQ (as librdmacm's `ucma_create_cqs`);
        // the provider then refuses the SRQ.
        if (attr.comp_mask & m::CQ == 0 || attr.cq.is_null()) && attr.attr.max_wr > 0 {
            (r.cq, r.cq_channel) = unsafe { cq_with_channel(ctx, attr.attr.max_wr, id) }?;
            attr.cq = r.cq;
        }
        attr.comp_mask |= m::XRCD | m::CQ;
    }
    match unsafe { ibv::create_srq_ex(ctx, attr) } {
        Ok(srq) => {
            r.srq = srq;
            Ok(r)
        }
        Err(e) => {
            log_debug(&format!("rdma_create_srq: ibv_create_srq_ex failed: {e}"));
            if !r.cq.is_null() {
                attr.cq = std::ptr::null_mut();
            }
            let _ = unsafe { destroy_srq(&mut r) };
            Err(e)
        }
    }
}

/// `rdma_destroy_srq`: the SRQ, then the CQ and channel [`create_srq`]
/// made for it. Each object destroyed is cleared from `r`; the first
/// failure stops there and is returned (an SRQ a QP still uses, a CQ with
/// unacknowledged events: `EBUSY`), leaving the rest in `r` for a later
/// attempt.
///
/// # Safety
/// The non-null pointers of `r` must be live and unused by the caller.
pub unsafe fn destroy_srq(r: &mut SrqResources) -> Result<(), Errno> {
    let fail = |what: &str, e: Errno| {
        log_debug(&format!("rdma_destroy_srq: {what}: {e}"));
        e
    };
    if !r.srq.is_null() {
        unsafe { ibv::destroy_srq(r.srq) }.map_err(|e| fail("ibv_destroy_srq", e))?;
        r.srq = std::ptr::null_mut();
    }
    if !r.cq.is_null() {
        unsafe { ibv::destroy_cq(r.cq) }.map_err(|e| fail("ibv_destroy_cq", e))?;
        r.cq = std::ptr::null_mut();
    }
    if !r.cq_channel.is_null() {
        unsafe { ibv::destroy_comp_channel(r.cq_channel) }
            .map_err(|e| fail("ibv_destroy_comp_channel", e))?;
        r.cq_channel = std::ptr::null_mut();
    }
    Ok(())
}

impl SrqResources {
    /// Everything was destroyed.
    pub fn is_empty(&self) -> bool {
        self.srq.is_null() && self.cq.is_null() && self.cq_channel.is_null()
    }
}

/// How `create_qp` moves an RC/UC QP to INIT.
#[derive(Debug, Clone, Copy)]
pub enum QpInit<'a> {
    /// No CM exchange yet (an id after ADDR/ROUTE_RESOLVED, or bound):
    /// P_Key index and port, access flags 0 — the kernel's
    /// `cma_ib_init_qp_attr`.
    Fresh { port_num: u8, pkey_index: u16 },
    /// A CONNECT_REQUEST child: `ib_cm_init_qp_attr(INIT)` of its CM id
    /// (remote write, plus remote read/atomic when it grants responder
    /// resources).
    Cm(&'a QpAttr),
}

/// The INIT attributes of a QP before any CM exchange (what
/// `rdma_init_qp_attr(INIT)` returns then): STATE, PKEY_INDEX, PORT and
/// QKEY ([`RDMA_UDP_QKEY`]) for UD, or ACCESS_FLAGS (0) otherwise.
pub fn init_attr_fresh(port_num: u8, pkey_index: u16, qp_type: u32) -> (IbvQpAttr, c_int) {
    use qp_attr_mask as m;
    let mut a = IbvQpAttr {
        qp_state: qps::INIT,
        pkey_index,
        port_num,
        ..IbvQpAttr::default()
    };
    let mut mask = m::STATE | m::PKEY_INDEX | m::PORT;
    if qp_type == qpt::UD {
        a.qkey = RDMA_UDP_QKEY;
        mask |= m::QKEY;
    } else {
        a.qp_access_flags = 0;
        mask |= m::ACCESS_FLAGS;
    }
    (a, mask)
}

/// What [`create_qp`] made: the QP and the CQs/completion channels it
/// created (null when the caller supplied the CQ or asked for no entries).
/// rdma_cm copies them to `id->qp`, `id->send_cq`, `id->recv_cq`,
/// `id->send_cq_channel`, `id->recv_cq_channel`.
#[derive(Debug, Clone, Copy)]
pub struct QpResources {
    pub qp: *mut IbvQp,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub send_cq_channel: *mut IbvCompChannel,
    pub recv_cq_channel: *mut IbvCompChannel,
}

impl QpResources {
    fn empty() -> QpResources {
        QpResources {
            qp: std::ptr::null_mut(),
            send_cq: std::ptr::null_mut(),
            recv_cq: std::ptr::null_mut(),
            send_cq_channel: std::ptr::null_mut(),
            recv_cq_channel: std::ptr::null_mut(),
        }
    }
}

/// One completion channel and a CQ of `size` entries on it, with
/// `cq_context = id` (librdmacm's `ucma_create_cqs`).
unsafe fn cq_with_channel(
    ctx: *mut IbvContext,
    size: u32,
    id: *mut c_void,
) -> Result<(*mut IbvCq, *mut IbvCompChannel), Errno> {
    let ch = unsafe { ibv::create_comp_channel(ctx) }?;
    let cqe = c_int::try_from(size).map_err(|_| Errno::EINVAL);
    match cqe.and_then(|n| unsafe { ibv::create_cq(ctx, n, id, ch, 0) }) {
        Ok(cq) => Ok((cq, ch)),
        Err(e) => {
            let _ = unsafe { ibv::destroy_comp_channel(ch) };
            Err(e)
        }
    }
}

/// Moves a UD QP INIT → RTR → RTS (`sq_psn` 0), or an RC/UC one to INIT.
unsafe fn initial_transitions(qp: *mut IbvQp, qp_type: u32, init: QpInit) -> Result<(), Errno> {
    use qp_attr_mask as m;
    if qp_type == qpt::UD {
        let (port_num, pkey_index) = match init {
            QpInit::Fresh {
                port_num,
                pkey_index,
            } => (port_num, pkey_index),
            QpInit::Cm(a) => (a.port_num, a.pkey_index),
        };
        let (a, mask) = init_attr_fresh(port_num, pkey_index, qpt::UD);
        unsafe { ibv::modify_qp(qp, &a, mask) }?;
        let rtr = IbvQpAttr {
            qp_state: qps::RTR,
            ..IbvQpAttr::default()
        };
        unsafe { ibv::modify_qp(qp, &rtr, m::STATE) }?;
        let rts = IbvQpAttr {
            qp_state: qps::RTS,
            sq_psn: 0,
            ..IbvQpAttr::default()
        };
        return unsafe { ibv::modify_qp(qp, &rts, m::STATE | m::SQ_PSN) };
    }
    let (a, mask) = match init {
        QpInit::Fresh {
            port_num,
            pkey_index,
        } => init_attr_fresh(port_num, pkey_index, qp_type),
        QpInit::Cm(cm) => {
            if cm.qp_state != qps::INIT {
                return Err(Errno::EINVAL);
            }
            qp_attr_from_cm(cm)?
        }
    };
    unsafe { ibv::modify_qp(qp, &a, mask) }
}

/// `rdma_create_qp_ex` on an id bound to `ctx`: `EINVAL` unless `attr`
/// names a PD (`comp_mask` has [`QP_INIT_ATTR_PD`]) of that same context;
/// creates each missing CQ (null `send_cq`/`recv_cq` with a non-zero
/// `max_send_wr`/`max_recv_wr`) with its own completion channel and
/// `cq_context == id`, writes the CQs into `attr`, creates the QP
/// (`ibv_create_qp_ex`; the granted `cap` lands in `attr`) and moves it
/// at once: UD to RTS with Q_Key [`RDMA_UDP_QKEY`], RC/UC to INIT as
/// `init` says. On any failure everything created here is destroyed and
/// the error returned.
///
/// # Safety
/// `ctx` must be a live context (normally [`Device::context`]) and the
/// pointers in `attr` null or live objects of it; `id` is only stored.
pub unsafe fn create_qp(
    ctx: *mut IbvContext,
    id: *mut c_void,
    attr: &mut IbvQpInitAttrEx,
    init: QpInit,
) -> Result<QpResources, Errno> {
    if attr.comp_mask & QP_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        log_debug("rdma_create_qp: no PD");
        return Err(Errno::EINVAL);
    }
    if unsafe { ibv::pd_context(attr.pd) } != ctx {
        log_debug("rdma_create_qp: the PD belongs to another device context than the id");
        return Err(Errno::EINVAL);
    }
    let mut r = QpResources::empty();
    let res = (|| -> Result<(), Errno> {
        if attr.recv_cq.is_null() && attr.cap.max_recv_wr > 0 {
            (r.recv_cq, r.recv_cq_channel) =
                unsafe { cq_with_channel(ctx, attr.cap.max_recv_wr, id) }?;
            attr.recv_cq = r.recv_cq;
        }
        if attr.send_cq.is_null() && attr.cap.max_send_wr > 0 {
            (r.send_cq, r.send_cq_channel) =
                unsafe { cq_with_channel(ctx, attr.cap.max_send_wr, id) }?;
            attr.send_cq = r.send_cq;
        }
        r.qp = unsafe { ibv::create_qp_ex(ctx, attr) }?;
        unsafe { initial_transitions(r.qp, attr.qp_type, init) }
    })();
    match res {
        Ok(()) => Ok(r),
        Err(e) => {
            if attr.qp_type == qpt::XRC_SEND || attr.qp_type == qpt::XRC_RECV {
                log_error(&format!(
                    "rdma_create_qp: XRC QP (type {}) not created: {e} (does the device \
                     implement XRC? Soft-RoCE, rxe, does not)",
                    attr.qp_type
                ));
            }
            log_debug(&format!("rdma_create_qp failed: {e}"));
            // Undo in reverse; the CQs we put into `attr` come out again.
            if attr.recv_cq == r.recv_cq {
                attr.recv_cq = std::ptr::null_mut();
            }
            if attr.send_cq == r.send_cq {
                attr.send_cq = std::ptr::null_mut();
            }
            let _ = unsafe { destroy_qp(&r) };
            Err(e)
        }
    }
}

/// `rdma_destroy_qp`: destroys the QP, then the CQs and completion
/// channels [`create_qp`] created for it. Every object is attempted; the
/// first error is returned.
///
/// A CQ that other QPs still use (`ibv_destroy_cq`: `EBUSY`) is kept with
/// its channel, as librdmacm's `ucma_destroy_cqs` keeps it (it ignores the
/// failure): `rdma_create_qp` writes the CQs it created back into the
/// application's attributes, as librdmacm does, so an application that
/// reuses one `struct ibv_qp_init_attr` for every id (Debian 12's
/// `cmtime`) creates all later QPs on the first id's CQs, and that id's
/// `rdma_destroy_qp` comes while they live. Destroying the CQ later would
/// free an object the application still holds in those attributes and
/// may hand to the next `rdma_create_qp`; so it stays for the process,
/// logged at debug level, not counted as an error.
///
/// # Safety
/// The non-null pointers of `r` must be live and unused by the caller.
pub unsafe fn destroy_qp(r: &QpResources) -> Result<(), Errno> {
    let mut first: Result<(), Errno> = Ok(());
    let mut note = |what: &str, res: Result<(), Errno>| {
        if let Err(e) = res {
            log_error(&format!("rdma_destroy_qp: {what}: {e}"));
            if first.is_ok() {
                first = Err(e);
            }
        }
    };
    if !r.qp.is_null() {
        note("ibv_destroy_qp", unsafe { ibv::destroy_qp(r.qp) });
    }
    // Whether the CQ (and so its channel) went: false when kept (EBUSY).
    let cq_gone = |what: &str, cq: *mut IbvCq, note: &mut dyn FnMut(&str, Result<(), Errno>)| match unsafe {
        ibv::destroy_cq(cq)
    } {
        Err(e) if e == Errno::EBUSY => {
            log_debug(&format!(
                "rdma_destroy_qp: {what} CQ still used by other QPs (the application passed \
                     it to later rdma_create_qp calls); kept with its channel, as librdmacm keeps it"
            ));
            false
        }
        res => {
            note(what, res);
            true
        }
    };
    let mut send_gone = true;
    if !r.send_cq.is_null() {
        send_gone = cq_gone("ibv_destroy_cq (send)", r.send_cq, &mut note);
    }
    let mut recv_gone = send_gone;
    if !r.recv_cq.is_null() && r.recv_cq != r.send_cq {
        recv_gone = cq_gone("ibv_destroy_cq (recv)", r.recv_cq, &mut note);
    }
    for (ch, gone) in [
        (r.send_cq_channel, send_gone),
        (r.recv_cq_channel, recv_gone),
    ] {
        if !ch.is_null() && gone {
            note("ibv_destroy_comp_channel", unsafe {
                ibv::destroy_comp_channel(ch)
            });
        }
    }
    first
}

/// `ibv_modify_qp` with the CM's attributes ([`qp_attr_from_cm`]): the
/// RTR/RTS steps of `rdma_accept` and of the active side on REP
/// (`ucma_modify_qp_rtr`/`_rts`).
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn modify_qp_cm(qp: *mut IbvQp, a: &QpAttr) -> Result<(), Errno> {
    let (attr, mask) = qp_attr_from_cm(a)?;
    unsafe { ibv::modify_qp(qp, &attr, mask) }
}

/// The QP's own ECE options (`ibv_query_ece`), which librdmacm records
/// as the id's local ECE when `rdma_create_qp` creates the QP; a provider
/// without ECE (`EOPNOTSUPP`) gives the empty ECE (vendor 0: none sent).
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn qp_ece(qp: *mut IbvQp) -> Result<Ece, Errno> {
    match unsafe { ibv::query_ece(qp) } {
        Ok(e) => Ok(Ece {
            vendor_id: e.vendor_id,
            attr_mod: e.options,
        }),
        Err(e) if e.0 == libc::EOPNOTSUPP => Ok(Ece::default()),
        Err(e) => Err(e),
    }
}

/// Applies the ECE the peer answered with (`ibv_set_ece`), as librdmacm
/// does before moving the QP to RTR: nothing for vendor 0 or a provider
/// without ECE.
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn apply_remote_ece(qp: *mut IbvQp, ece: &Ece) -> Result<(), Errno> {
    if ece.vendor_id == 0 {
        return Ok(());
    }
    let e = ibv::IbvEce {
        vendor_id: ece.vendor_id,
        options: ece.attr_mod,
        comp_mask: 0,
    };
    match unsafe { ibv::set_ece(qp, &e) } {
        Err(e) if e.0 == libc::EOPNOTSUPP => Ok(()),
        r => r,
    }
}

/// Moves `qp` to ERR (`rdma_disconnect` does so before the DREQ,
/// librdmacm's `ucma_shutdown`).
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn to_error(qp: *mut IbvQp) -> Result<(), Errno> {
    let a = IbvQpAttr {
        qp_state: qps::ERR,
        ..IbvQpAttr::default()
    };
    unsafe { ibv::modify_qp(qp, &a, qp_attr_mask::STATE) }
}

/// The QP's state as the device reports it (`ibv_query_qp`).
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn qp_state(qp: *mut IbvQp) -> Result<u32, Errno> {
    Ok(unsafe { ibv::query_qp(qp, qp_attr_mask::STATE) }?
        .0
        .qp_state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_gids() {
        let v4: IpAddr = "10.77.0.1".parse().unwrap();
        assert_eq!(ip_gid(v4).to_string(), "::ffff:10.77.0.1");
        assert_eq!(
            ip_gid(v4).0,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1]
        );
        let v6: IpAddr = "fe80::5054:ff:fe12:3456".parse().unwrap();
        assert_eq!(ip_gid(v6).to_string(), "fe80::5054:ff:fe12:3456");
    }

    #[test]
    fn iboe_mtu_follows_the_kernel() {
        // 96 bytes of RoCE headers come off the netdev MTU.
        assert_eq!(iboe_mtu(1500), 3); // 1404 → 1024
        assert_eq!(iboe_mtu(9000), 5);
        assert_eq!(iboe_mtu(4096 + 96), 5);
        assert_eq!(iboe_mtu(4096 + 95), 4);
        assert_eq!(iboe_mtu(2048 + 96), 4);
        assert_eq!(iboe_mtu(2048 + 95), 3);
        assert_eq!(iboe_mtu(512 + 96), 2);
        assert_eq!(iboe_mtu(256 + 96), 1);
        assert_eq!(iboe_mtu(256 + 95), 0);
        assert_eq!(iboe_mtu(0), 0);
        assert_eq!(iboe_mtu(65536), 5);
    }

    fn gid(s: &str, index: u16, t: GidType, ndev: Option<&str>) -> GidFacts {
        GidFacts {
            index,
            gid: s.parse().unwrap(),
            gid_type: t,
            ndev: ndev.map(str::to_string),
        }
    }

    #[test]
    fn gid_choice_prefers_roce_v2() {
        let ip = ip_gid("10.0.0.1".parse().unwrap());
        let port = PortFacts {
            port_num: 1,
            is_roce: true,
            active_mtu: 3,
            pkeys: vec![0xffff],
            gids: vec![
                gid("fe80::1", 0, GidType::RoceV1, Some("eth0")),
                gid("fe80::1", 1, GidType::RoceV2, Some("eth0")),
                gid("::ffff:10.0.0.1", 2, GidType::RoceV1, Some("eth0")),
                gid("::ffff:10.0.0.1", 3, GidType::RoceV2, Some("eth0")),
            ],
        };
        let ports = [port];
        let (p, g) = pick_gid(&ports, &ip, None).unwrap();
        assert_eq!((p.port_num, g.index, g.gid_type), (1, 3, GidType::RoceV2));
        // Only v1: v1.
        let mut v1 = ports.clone();
        v1[0].gids.truncate(3);
        assert_eq!(pick_gid(&v1, &ip, None).unwrap().1.index, 2);
        // Another netdev: no match; an unknown netdev matches.
        assert!(pick_gid(&ports, &ip, Some("eth1")).is_none());
        let mut unknown = ports.clone();
        unknown[0].gids[3].ndev = None;
        assert_eq!(pick_gid(&unknown, &ip, Some("eth1")).unwrap().1.index, 3);
        // An InfiniBand port never matches an IP GID.
        let mut ib = ports.clone();
        ib[0].is_roce = false;
        assert!(pick_gid(&ib, &ip, None).is_none());
        // Absent address.
        assert!(pick_gid(&ports, &ip_gid("10.0.0.2".parse().unwrap()), None).is_none());
    }

    #[test]
    fn pkey_indexes() {
        let p = PortFacts {
            port_num: 1,
            is_roce: true,
            active_mtu: 3,
            pkeys: vec![0x7fff, 0x8001, 0xffff],
            gids: vec![],
        };
        assert_eq!(p.pkey_index(0xffff), Some(2));
        assert_eq!(p.pkey_index(0x0001), Some(1));
        let limited = PortFacts {
            pkeys: vec![0x1234, 0x7fff],
            ..p.clone()
        };
        assert_eq!(limited.pkey_index(0xffff), Some(1));
        assert_eq!(limited.pkey_index(0x4321), None);
    }

    #[test]
    fn rd_atomic_max_from_the_device() {
        let rxe = RdAtomicMax::from_attrs(128, 128);
        let small = RdAtomicMax::from_attrs(16, 4);
        let huge = RdAtomicMax::from_attrs(1000, 300);
        assert_eq!(huge, RdAtomicMax::from_attrs(255, 255));
        assert_eq!(
            RdAtomicMax::of(None),
            RdAtomicMax::from_attrs(SOFT_MAX_RD_ATOMIC as u32, SOFT_MAX_RD_ATOMIC as u32)
        );
        // connect: 0xff is the device's limit; explicit values stay.
        assert_eq!(rxe.connect(0xff, 0xff, true), Ok((128, 128)));
        assert_eq!(small.connect(0xff, 0xff, true), Ok((16, 4)));
        assert_eq!(small.connect(2, 3, true), Ok((2, 3)));
        assert_eq!(small.connect(16, 4, true), Ok((16, 4)));
        // Above the limit: EINVAL for PS_TCP, passed through otherwise.
        assert_eq!(small.connect(17, 1, true), Err(Errno::EINVAL));
        assert_eq!(small.connect(1, 5, true), Err(Errno::EINVAL));
        assert_eq!(small.connect(17, 5, false), Ok((17, 5)));
        // accept: 0xff or no conn_param → min(what the peer asked, limit).
        assert_eq!(small.accept(None, (8, 8), true), Ok((8, 4)));
        assert_eq!(small.accept(Some((0xff, 0xff)), (32, 2), true), Ok((16, 2)));
        assert_eq!(rxe.accept(Some((0xff, 1)), (3, 9), true), Ok((3, 1)));
        assert_eq!(small.accept(Some((5, 0)), (1, 1), true), Ok((5, 0)));
        assert_eq!(small.accept(Some((0, 9)), (1, 1), true), Err(Errno::EINVAL));
        assert_eq!(small.accept(Some((0, 9)), (1, 1), false), Ok((0, 9)));
    }

    #[test]
    fn fresh_init_attributes() {
        use qp_attr_mask as m;
        let (a, mask) = init_attr_fresh(1, 2, qpt::RC);
        assert_eq!(mask, m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS);
        assert_eq!((a.qp_state, a.pkey_index, a.port_num), (qps::INIT, 2, 1));
        assert_eq!((a.qp_access_flags, a.qkey), (0, 0));
        let (u, umask) = init_attr_fresh(2, 0, qpt::UD);
        assert_eq!(umask, m::STATE | m::PKEY_INDEX | m::PORT | m::QKEY);
        assert_eq!((u.qkey, u.port_num), (RDMA_UDP_QKEY, 2));
    }

    #[test]
    fn multicast_gids() {
        let g: IpAddr = "239.1.2.3".parse().unwrap();
        assert_eq!(
            mcast_mgid(g, GidType::RoceV2).to_string(),
            "::ffff:239.1.2.3"
        );
        assert_eq!(
            mcast_mgid(g, GidType::RoceV1).to_string(),
            "ff0e::ffff:ef01:203"
        );
        let g6: IpAddr = "ff05::1:3".parse().unwrap();
        assert_eq!(mcast_mgid(g6, GidType::RoceV2).to_string(), "ff05::1:3");
        assert!(mcast_mgid("0.0.0.0".parse().unwrap(), GidType::RoceV2).is_zero());
    }

    #[test]
    fn ip_group_membership() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(
            join_ip_group("10.0.0.1".parse().unwrap(), lo, 1).err(),
            Some(Errno::EINVAL)
        );
        assert_eq!(
            join_ip_group("ff05::1:3".parse().unwrap(), lo, 1).err(),
            Some(Errno::EINVAL)
        );
        // 239.255.77.1 on lo: listed in /proc/net/igmp while held.
        let hex = "014DFFEF"; // the group as /proc/net/igmp prints it
        let listed = || std::fs::read_to_string("/proc/net/igmp").is_ok_and(|t| t.contains(hex));
        let procfs = std::fs::metadata("/proc/net/igmp").is_ok();
        let m = join_ip_group("239.255.77.1".parse().unwrap(), lo, 0).unwrap();
        assert_eq!(m.group, "239.255.77.1".parse::<IpAddr>().unwrap());
        assert!(!procfs || listed(), "group joined");
        drop(m);
        assert!(!procfs || !listed(), "group left");
    }

    #[test]
    fn no_device_is_enodev() {
        // Hosts with an RDMA device answer with it; the others (CI) with
        // ENODEV, or ENOSYS without libibverbs — never a panic, and
        // 127.0.0.1 is in no GID table.
        match devices() {
            Ok(d) => assert!(!d.is_empty()),
            Err(e) => assert!(e == Errno::ENODEV || e.0 == 38, "{e:?}"),
        }
        let e = find_by_ip("127.0.0.1".parse().unwrap(), None).unwrap_err();
        assert!(e == Errno::ENODEV || e.0 == 38, "{e:?}");
        assert!(device_of(std::ptr::null()).is_none());
    }

    #[test]
    fn source_selection_on_loopback() {
        let r = route_to("127.0.0.1:7471".parse().unwrap(), None).unwrap();
        assert_eq!(r.src, "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(r.ifname, "lo");
        assert!(r.ifindex > 0);
        assert_eq!(r.mtu, iboe_mtu(r.netdev_mtu));
        assert!(r.hop_limit >= 1);
        // Another loopback address as destination: the kernel's source
        // for 127.0.0.0/8 is 127.0.0.1 on lo.
        let r2 = route_to("127.0.0.2:0".parse().unwrap(), None).unwrap();
        assert_eq!(r2.ifname, "lo");
        // A given source address is kept.
        let r3 = route_to(
            "127.0.0.1:1".parse().unwrap(),
            Some("127.0.0.1:5555".parse().unwrap()),
        )
        .unwrap();
        assert_eq!(r3.src, "127.0.0.1".parse::<IpAddr>().unwrap());
        // IPv6 loopback, where the host has it.
        match route_to("[::1]:1".parse().unwrap(), None) {
            Ok(r6) => {
                assert_eq!(r6.src, "::1".parse::<IpAddr>().unwrap());
                assert_eq!(r6.ifname, "lo");
                assert!(r6.hop_limit >= 1);
            }
            Err(e) => assert!(
                [libc::EADDRNOTAVAIL, libc::EAFNOSUPPORT, libc::ENETUNREACH].contains(&e.0),
                "{e:?}"
            ),
        }
        // A source that is not local, a family mismatch.
        assert_eq!(
            route_to(
                "127.0.0.1:1".parse().unwrap(),
                Some("192.0.2.77:0".parse().unwrap())
            ),
            Err(Errno(libc::EADDRNOTAVAIL))
        );
        assert_eq!(
            route_to(
                "127.0.0.1:1".parse().unwrap(),
                Some("[::1]:0".parse().unwrap())
            ),
            Err(Errno::EINVAL)
        );
    }
}
