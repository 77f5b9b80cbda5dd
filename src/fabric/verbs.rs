//! Real RDMA devices: what libibverbs says about a device (ports, GID
//! tables with GID types, P_Key tables, LIDs, CA GUID, ACK delay).
//!
//! libibverbs is loaded at run time (`dlopen("libibverbs.so.1")`), never
//! linked: the default build and every soft/loop device work on a machine
//! without rdma-core, and a real device fails to open with `-ENOSYS` and a
//! log line when the library is missing. Only a handful of functions are
//! used, through our own declarations of the few structs they fill; their
//! layouts are the stable rdma-core ABI (`tests/verbs.rs` compares
//! every offset used here with gcc's view of `<infiniband/verbs.h>` when
//! the header is installed). Output structs are over-allocated so a newer
//! library that appends members cannot write past them.
//!
//! GID types come from `_ibv_query_gid_table` (rdma-core ≥ 32); with an
//! older library, from `ibv_query_gid` plus sysfs
//! (`/sys/class/infiniband/<dev>/ports/<p>/gid_attrs/types/<i>`).
//!
//! The second half ("Objects shared with the application") serves the
//! librdmacm drop-in (`rdmacm/`): contexts kept open for the process's
//! life, PDs, completion channels, CQs and QPs created on the
//! application's behalf, and the `struct ibv_qp_attr` built from the
//! CM's [`QpAttr`]. `dlopen` by SONAME returns the application's own copy
//! of libibverbs when it is linked with it, so these objects are the ones
//! its `ibv_*` calls expect.

use crate::engine::{Errno, GidEntry, GidType, PathRecType, PortInfo, QpAttr, errno};
use crate::log::{DEBUG, ERROR};
use crate::wire::Gid;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;

/// `struct ibv_device_attr` offsets (x86_64/aarch64 LP64 layout).
pub mod device_attr {
    pub const NODE_GUID: usize = 64;
    pub const MAX_QP_WR: usize = 112;
    pub const MAX_CQE: usize = 132;
    pub const MAX_QP_RD_ATOM: usize = 144;
    pub const MAX_QP_INIT_RD_ATOM: usize = 156;
    pub const MAX_PKEYS: usize = 224;
    pub const LOCAL_CA_ACK_DELAY: usize = 226;
    pub const PHYS_PORT_CNT: usize = 227;
    /// `sizeof(struct ibv_device_attr)`.
    pub const SIZE: usize = 232;
}

/// `struct ibv_port_attr` offsets.
pub mod port_attr {
    pub const STATE: usize = 0;
    pub const ACTIVE_MTU: usize = 8;
    pub const GID_TBL_LEN: usize = 12;
    pub const PKEY_TBL_LEN: usize = 32;
    pub const LID: usize = 34;
    pub const LMC: usize = 38;
    pub const ACTIVE_WIDTH: usize = 43;
    pub const ACTIVE_SPEED: usize = 44;
    pub const LINK_LAYER: usize = 46;
}

/// `struct ibv_gid_entry` offsets.
pub mod gid_entry {
    pub const GID: usize = 0;
    pub const GID_INDEX: usize = 16;
    pub const PORT_NUM: usize = 20;
    pub const GID_TYPE: usize = 24;
    pub const SIZE: usize = 32;
    /// The most entries one `_ibv_query_gid_table` can return: the array
    /// is one ioctl attribute, whose length field is 16 bits (a larger
    /// buffer fails the call, ENOSPC from Linux 6.1's rxe0, and every GID
    /// index was then queried one ioctl at a time: 1,024 on rxe0, twice
    /// per process). Valid entries only are returned, so this is no limit
    /// in practice; a device with more falls back to the per-index queries.
    pub const TABLE_MAX: usize = u16::MAX as usize / SIZE;
}

/// `offsetof(struct ibv_context, async_fd)`.
pub const CONTEXT_ASYNC_FD: usize = 268;
/// `sizeof(struct ibv_async_event)` and the offset of `event_type`.
pub const ASYNC_EVENT_SIZE: usize = 16;
pub const ASYNC_EVENT_TYPE: usize = 8;
/// `enum ibv_event_type` values that change what `query` reports:
/// PORT_ACTIVE, PORT_ERR, LID_CHANGE, PKEY_CHANGE, SM_CHANGE,
/// CLIENT_REREGISTER, GID_CHANGE.
pub const PORT_EVENTS: [u32; 7] = [9, 10, 11, 12, 13, 17, 18];

/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;

/// Room for every output struct (newer libraries may append members).
const OUT_BUF: usize = 512;

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type CloseDevice = unsafe extern "C" fn(*mut c_void) -> c_int;
type QueryDevice = unsafe extern "C" fn(*mut c_void, *mut u8) -> c_int;
type QueryPort = unsafe extern "C" fn(*mut c_void, u8, *mut u8) -> c_int;
type QueryGid = unsafe extern "C" fn(*mut c_void, u8, c_int, *mut u8) -> c_int;
type QueryPkey = unsafe extern "C" fn(*mut c_void, u8, c_int, *mut u16) -> c_int;
type QueryGidTable = unsafe extern "C" fn(*mut c_void, *mut u8, usize, u32, usize) -> isize;
type GetAsyncEvent = unsafe extern "C" fn(*mut c_void, *mut u8) -> c_int;
type AckAsyncEvent = unsafe extern "C" fn(*mut u8);
type AllocPd = unsafe extern "C" fn(*mut IbvContext) -> *mut IbvPd;
type DeallocPd = unsafe extern "C" fn(*mut IbvPd) -> c_int;
type CreateCompChannel = unsafe extern "C" fn(*mut IbvContext) -> *mut IbvCompChannel;
type DestroyCompChannel = unsafe extern "C" fn(*mut IbvCompChannel) -> c_int;
type CreateCq = unsafe extern "C" fn(
    *mut IbvContext,
    c_int,
    *mut c_void,
    *mut IbvCompChannel,
    c_int,
) -> *mut IbvCq;
type DestroyCq = unsafe extern "C" fn(*mut IbvCq) -> c_int;
type CreateQp = unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp;
type CreateQpEx = unsafe extern "C" fn(*mut IbvContext, *mut IbvQpInitAttrEx) -> *mut IbvQp;
type DestroyQp = unsafe extern "C" fn(*mut IbvQp) -> c_int;
type ModifyQp = unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int;
type QueryQp = unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int, *mut IbvQpInitAttr) -> c_int;
type McastOp = unsafe extern "C" fn(*mut IbvQp, *const [u8; 16], u16) -> c_int;
type EceOp = unsafe extern "C" fn(*mut IbvQp, *mut IbvEce) -> c_int;
type CreateSrq = unsafe extern "C" fn(*mut IbvPd, *mut IbvSrqInitAttr) -> *mut IbvSrq;
type DestroySrq = unsafe extern "C" fn(*mut IbvSrq) -> c_int;
type CreateSrqEx = unsafe extern "C" fn(*mut IbvContext, *mut IbvSrqInitAttrEx) -> *mut IbvSrq;
type OpenXrcd = unsafe extern "C" fn(*mut IbvContext, *mut IbvXrcdInitAttr) -> *mut IbvXrcd;
type CloseXrcd = unsafe extern "C" fn(*mut IbvXrcd) -> c_int;

/// The libibverbs entry points we use.
struct Lib {
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    open_device: OpenDevice,
    close_device: CloseDevice,
    query_device: QueryDevice,
    query_port: QueryPort,
    query_gid: QueryGid,
    query_pkey: QueryPkey,
    query_gid_table: Option<QueryGidTable>,
    get_async_event: GetAsyncEvent,
    ack_async_event: AckAsyncEvent,
    alloc_pd: AllocPd,
    dealloc_pd: DeallocPd,
    create_comp_channel: CreateCompChannel,
    destroy_comp_channel: DestroyCompChannel,
    create_cq: CreateCq,
    destroy_cq: DestroyCq,
    create_qp: CreateQp,
    destroy_qp: DestroyQp,
    modify_qp: ModifyQp,
    query_qp: QueryQp,
    attach_mcast: McastOp,
    detach_mcast: McastOp,
    create_srq: CreateSrq,
    destroy_srq: DestroySrq,
    /// rdma-core ≥ 31 (`IBVERBS_1.10`).
    query_ece: Option<EceOp>,
    set_ece: Option<EceOp>,
}

unsafe fn sym(h: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

fn load() -> Result<Lib, String> {
    let h = unsafe {
        libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        )
    };
    if h.is_null() {
        let e = unsafe { libc::dlerror() };
        let msg = if e.is_null() {
            "unknown error".to_string()
        } else {
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        };
        return Err(format!(
            "cannot load libibverbs.so.1 ({msg}); install rdma-core's libibverbs1 and the \
             device's provider (ibverbs-providers)"
        ));
    }
    macro_rules! need {
        ($name:literal, $t:ty) => {
            match unsafe { sym(h, $name) } {
                // SAFETY: the symbol has the documented rdma-core prototype.
                Some(p) => unsafe { std::mem::transmute::<*mut c_void, $t>(p) },
                None => return Err(format!("libibverbs.so.1 lacks {:?}", $name)),
            }
        };
    }
    Ok(Lib {
        get_device_list: need!(c"ibv_get_device_list", GetDeviceList),
        free_device_list: need!(c"ibv_free_device_list", FreeDeviceList),
        get_device_name: need!(c"ibv_get_device_name", GetDeviceName),
        open_device: need!(c"ibv_open_device", OpenDevice),
        close_device: need!(c"ibv_close_device", CloseDevice),
        query_device: need!(c"ibv_query_device", QueryDevice),
        query_port: need!(c"ibv_query_port", QueryPort),
        query_gid: need!(c"ibv_query_gid", QueryGid),
        query_pkey: need!(c"ibv_query_pkey", QueryPkey),
        get_async_event: need!(c"ibv_get_async_event", GetAsyncEvent),
        ack_async_event: need!(c"ibv_ack_async_event", AckAsyncEvent),
        alloc_pd: need!(c"ibv_alloc_pd", AllocPd),
        dealloc_pd: need!(c"ibv_dealloc_pd", DeallocPd),
        create_comp_channel: need!(c"ibv_create_comp_channel", CreateCompChannel),
        destroy_comp_channel: need!(c"ibv_destroy_comp_channel", DestroyCompChannel),
        create_cq: need!(c"ibv_create_cq", CreateCq),
        destroy_cq: need!(c"ibv_destroy_cq", DestroyCq),
        create_qp: need!(c"ibv_create_qp", CreateQp),
        destroy_qp: need!(c"ibv_destroy_qp", DestroyQp),
        modify_qp: need!(c"ibv_modify_qp", ModifyQp),
        query_qp: need!(c"ibv_query_qp", QueryQp),
        attach_mcast: need!(c"ibv_attach_mcast", McastOp),
        detach_mcast: need!(c"ibv_detach_mcast", McastOp),
        create_srq: need!(c"ibv_create_srq", CreateSrq),
        destroy_srq: need!(c"ibv_destroy_srq", DestroySrq),
        query_ece: unsafe { sym(h, c"ibv_query_ece") }
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, EceOp>(p) }),
        set_ece: unsafe { sym(h, c"ibv_set_ece") }
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, EceOp>(p) }),
        query_gid_table: unsafe { sym(h, c"_ibv_query_gid_table") }
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, QueryGidTable>(p) }),
    })
}

fn lib() -> Result<&'static Lib, Errno> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    match LIB.get_or_init(load) {
        Ok(l) => Ok(l),
        Err(e) => {
            crate::ibcm_log!(ERROR, "{e}");
            Err(Errno(38)) // ENOSYS
        }
    }
}

/// What a verbs device is, as the engine and the path helpers need it.
#[derive(Debug, Clone)]
pub struct VerbsInfo {
    pub name: String,
    /// CA (node) GUID, host order.
    pub node_guid: u64,
    /// `local_ca_ack_delay`.
    pub ack_delay: u8,
    /// `max_qp_rd_atom`: the most RDMA READ/atomic requests a QP of this
    /// device accepts as responder (what `RDMA_MAX_RESP_RES` becomes).
    pub max_qp_rd_atom: u32,
    /// `max_qp_init_rd_atom`: the most it issues as initiator (what
    /// `RDMA_MAX_INIT_DEPTH` becomes).
    pub max_qp_init_rd_atom: u32,
    /// `max_qp_wr` and `max_cqe`.
    pub max_qp_wr: u32,
    pub max_cqe: u32,
    /// One entry per physical port; `gids[i]` is GID index `i` (holes are
    /// zero GIDs), `pkeys[i]` P_Key index `i`.
    pub ports: Vec<PortInfo>,
}

fn rd16(b: &[u8], o: usize) -> u16 {
    u16::from_ne_bytes([b[o], b[o + 1]])
}
fn rd32(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(b[o..o + 4].try_into().unwrap())
}

/// `enum ib_rate` for a port's active width and speed (IBTA encodings).
pub fn ib_rate(width: u8, speed: u8) -> u8 {
    let lanes: u32 = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => return 0,
    };
    // Lane speed in units of 0.5 Gb/s (so SDR = 5).
    let lane: u32 = match speed {
        1 => 5,
        2 => 10,
        4 | 8 => 20,
        16 => 28,
        32 => 50,
        64 => 100,
        128 => 200,
        _ => return 0,
    };
    // (Gb/s × 2, enum ib_rate)
    const RATES: [(u32, u8); 22] = [
        (5, 2),
        (10, 5),
        (20, 3),
        (28, 11),
        (40, 6),
        (50, 15),
        (56, 19),
        (60, 4),
        (80, 7),
        (100, 20),
        (112, 12),
        (120, 8),
        (160, 9),
        (200, 16),
        (224, 13),
        (240, 10),
        (336, 14),
        (400, 17),
        (600, 18),
        (800, 21),
        (1200, 22),
        (1600, 23),
    ];
    let want = lanes * lane;
    RATES
        .iter()
        .rev()
        .find(|(r, _)| *r <= want)
        .map(|(_, e)| *e)
        .unwrap_or(0)
}

fn sysfs_gid_type(dev: &str, port: u8, index: usize) -> GidType {
    let p = format!("/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{index}");
    match std::fs::read_to_string(p) {
        Ok(s) if s.trim().eq_ignore_ascii_case("RoCE v2") => GidType::RoceV2,
        Ok(s) if s.trim().starts_with("RoCE") || s.trim().starts_with("IB/RoCE") => GidType::RoceV1,
        _ => GidType::Ib,
    }
}

/// Names of the verbs devices present.
pub fn device_names() -> Result<Vec<String>, Errno> {
    let l = lib()?;
    let mut n: c_int = 0;
    let list = unsafe { (l.get_device_list)(&mut n) };
    if list.is_null() {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(errno::ENODEV),
        ));
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        let d = unsafe { *list.add(i) };
        let name = unsafe { (l.get_device_name)(d) };
        if !name.is_null() {
            out.push(
                unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    unsafe { (l.free_device_list)(list) };
    Ok(out)
}

/// Opens `name` once for a CM device: what the CM needs, read through
/// the context that is then kept to follow the device's port events (one
/// `ibv_open_device`; a read of its own and a `Watcher` took two: on the
/// lab's emulated CPU each open and its queries are a process's start-up
/// time).
pub fn open_watched(name: &str) -> Result<(VerbsInfo, Watcher), Errno> {
    let w = Watcher::open(name)?;
    let info = w.query()?;
    Ok((info, w))
}

/// An open device context kept to follow its port events (GID table,
/// LID, P_Key, port state changes) through its async event file.
pub struct Watcher {
    ctx: *mut c_void,
    name: String,
    async_fd: c_int,
}

// The context is only used through thread-safe libibverbs calls.
unsafe impl Send for Watcher {}
unsafe impl Sync for Watcher {}

impl Watcher {
    pub fn open(name: &str) -> Result<Watcher, Errno> {
        let l = lib()?;
        let ctx = open_ctx(l, name)?;
        let async_fd = unsafe { *(ctx as *const u8).add(CONTEXT_ASYNC_FD).cast::<c_int>() };
        // Non-blocking, as rdma-core documents, so `wait` can time out.
        unsafe {
            let fl = libc::fcntl(async_fd, libc::F_GETFL);
            libc::fcntl(async_fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        Ok(Watcher {
            ctx,
            name: name.to_string(),
            async_fd,
        })
    }

    /// The device as it is now.
    pub fn query(&self) -> Result<VerbsInfo, Errno> {
        query_ctx(lib()?, self.ctx, &self.name)
    }

    /// Waits up to `timeout` for async events; true if one of them may
    /// have changed what `query` reports (all are acknowledged).
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        let Ok(l) = lib() else { return false };
        let mut pfd = libc::pollfd {
            fd: self.async_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        if unsafe { libc::poll(&mut pfd, 1, ms) } <= 0 {
            return false;
        }
        let mut changed = false;
        let mut ev = [0u64; ASYNC_EVENT_SIZE / 8 + 4];
        let evp = ev.as_mut_ptr() as *mut u8;
        while unsafe { (l.get_async_event)(self.ctx, evp) } == 0 {
            let bytes = unsafe { std::slice::from_raw_parts(evp, ASYNC_EVENT_SIZE) };
            let t = rd32(bytes, ASYNC_EVENT_TYPE);
            crate::ibcm_log!(DEBUG, "{}: async event {t}", self.name);
            changed |= PORT_EVENTS.contains(&t);
            unsafe { (l.ack_async_event)(evp) };
        }
        changed
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if let Ok(l) = lib() {
            unsafe { (l.close_device)(self.ctx) };
        }
    }
}

fn open_ctx(l: &Lib, name: &str) -> Result<*mut c_void, Errno> {
    let cname = CString::new(name).map_err(|_| Errno::EINVAL)?;
    let mut n: c_int = 0;
    let list = unsafe { (l.get_device_list)(&mut n) };
    if list.is_null() {
        crate::ibcm_log!(
            ERROR,
            "ibv_get_device_list failed: {}",
            std::io::Error::last_os_error()
        );
        return Err(Errno::ENODEV);
    }
    let mut found = std::ptr::null_mut();
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        let d = unsafe { *list.add(i) };
        let dn = unsafe { (l.get_device_name)(d) };
        if dn.is_null() {
            continue;
        }
        let dn = unsafe { CStr::from_ptr(dn) };
        names.push(dn.to_string_lossy().into_owned());
        if dn == cname.as_c_str() {
            found = d;
        }
    }
    let ctx = if found.is_null() {
        std::ptr::null_mut()
    } else {
        unsafe { (l.open_device)(found) }
    };
    unsafe { (l.free_device_list)(list) };
    if found.is_null() {
        crate::ibcm_log!(
            ERROR,
            "no RDMA device {name:?} (present: {}); device names are soft:<ip>[:<port>], \
             loop:<ip>, soft:<ip>[:<port>]@<rdma device> or an RDMA device name",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
        return Err(Errno::ENODEV);
    }
    if ctx.is_null() {
        let e = std::io::Error::last_os_error();
        crate::ibcm_log!(ERROR, "ibv_open_device({name}) failed: {e}");
        return Err(Errno(e.raw_os_error().unwrap_or(errno::ENODEV)));
    }
    Ok(ctx)
}

fn query_ctx(l: &Lib, ctx: *mut c_void, name: &str) -> Result<VerbsInfo, Errno> {
    let mut da = [0u8; OUT_BUF];
    let r = unsafe { (l.query_device)(ctx, da.as_mut_ptr()) };
    if r != 0 {
        crate::ibcm_log!(ERROR, "ibv_query_device({name}) failed: {r}");
        return Err(Errno(r.abs().max(errno::EIO)));
    }
    let node_guid = u64::from_be_bytes(
        da[device_attr::NODE_GUID..device_attr::NODE_GUID + 8]
            .try_into()
            .unwrap(),
    );
    let ack_delay = da[device_attr::LOCAL_CA_ACK_DELAY] & 0x1f;
    let nports = da[device_attr::PHYS_PORT_CNT];
    let mut ports = Vec::new();
    for p in 1..=nports {
        let mut pa = [0u8; OUT_BUF];
        let r = unsafe { (l.query_port)(ctx, p, pa.as_mut_ptr()) };
        if r != 0 {
            crate::ibcm_log!(ERROR, "ibv_query_port({name}, {p}) failed: {r}");
            return Err(Errno(r.abs().max(errno::EIO)));
        }
        let is_roce = pa[port_attr::LINK_LAYER] == LINK_LAYER_ETHERNET;
        let gid_len = rd32(&pa, port_attr::GID_TBL_LEN) as usize;
        let pkey_len = rd16(&pa, port_attr::PKEY_TBL_LEN) as usize;
        let gids = query_gids(l, ctx, name, p, gid_len, is_roce);
        let mut pkeys = Vec::with_capacity(pkey_len);
        for i in 0..pkey_len {
            let mut k: u16 = 0;
            if unsafe { (l.query_pkey)(ctx, p, i as c_int, &mut k) } != 0 {
                break;
            }
            pkeys.push(u16::from_be(k));
        }
        if pkeys.is_empty() {
            pkeys.push(0xffff);
        }
        let info = PortInfo {
            port_num: p,
            gids,
            pkeys,
            lid: rd16(&pa, port_attr::LID),
            lmc: pa[port_attr::LMC] & 7,
            is_roce,
            mtu: rd32(&pa, port_attr::ACTIVE_MTU) as u8,
            rate: ib_rate(pa[port_attr::ACTIVE_WIDTH], pa[port_attr::ACTIVE_SPEED]),
        };
        crate::ibcm_log!(
            DEBUG,
            "{name} port {p}: {} lid {:#x} mtu {} rate {} state {}, {} GID(s), {} P_Key(s)",
            if is_roce { "Ethernet" } else { "InfiniBand" },
            info.lid,
            info.mtu,
            info.rate,
            rd32(&pa, port_attr::STATE),
            info.gids.iter().filter(|g| !g.gid.is_zero()).count(),
            info.pkeys.len()
        );
        ports.push(info);
    }
    if ports.is_empty() {
        crate::ibcm_log!(ERROR, "{name}: no ports");
        return Err(Errno::ENODEV);
    }
    Ok(VerbsInfo {
        name: name.to_string(),
        node_guid,
        ack_delay,
        max_qp_rd_atom: rd32(&da, device_attr::MAX_QP_RD_ATOM),
        max_qp_init_rd_atom: rd32(&da, device_attr::MAX_QP_INIT_RD_ATOM),
        max_qp_wr: rd32(&da, device_attr::MAX_QP_WR),
        max_cqe: rd32(&da, device_attr::MAX_CQE),
        ports,
    })
}

/// The GID table of a port, index = position, holes as zero GIDs.
fn query_gids(
    l: &Lib,
    ctx: *mut c_void,
    name: &str,
    port: u8,
    len: usize,
    is_roce: bool,
) -> Vec<GidEntry> {
    let hole = GidEntry {
        gid: Gid::default(),
        gid_type: GidType::Ib,
    };
    let mut out: Vec<GidEntry> = Vec::new();
    let mut put = |i: usize, e: GidEntry| {
        if out.len() <= i {
            out.resize(i + 1, hole);
        }
        out[i] = e;
    };
    if let Some(table) = l.query_gid_table {
        // All ports' valid entries of the device at once.
        let max = gid_entry::TABLE_MAX;
        let mut buf = vec![0u8; max * gid_entry::SIZE];
        let n = unsafe { table(ctx, buf.as_mut_ptr(), max, 0, gid_entry::SIZE) };
        if n >= 0 {
            for k in 0..n as usize {
                let e = &buf[k * gid_entry::SIZE..(k + 1) * gid_entry::SIZE];
                if rd32(e, gid_entry::PORT_NUM) != port as u32 {
                    continue;
                }
                let gid = Gid(e[gid_entry::GID..gid_entry::GID + 16].try_into().unwrap());
                let gid_type = match rd32(e, gid_entry::GID_TYPE) {
                    1 => GidType::RoceV1,
                    2 => GidType::RoceV2,
                    _ => GidType::Ib,
                };
                put(
                    rd32(e, gid_entry::GID_INDEX) as usize,
                    GidEntry { gid, gid_type },
                );
            }
            return out;
        }
        crate::ibcm_log!(
            DEBUG,
            "{name}: _ibv_query_gid_table failed ({n}); per-index queries"
        );
    }
    for i in 0..len {
        let mut g = [0u8; 16];
        if unsafe { (l.query_gid)(ctx, port, i as c_int, g.as_mut_ptr()) } != 0 {
            continue;
        }
        let gid = Gid(g);
        if gid.is_zero() {
            continue;
        }
        let gid_type = if is_roce {
            sysfs_gid_type(name, port, i)
        } else {
            GidType::Ib
        };
        put(i, GidEntry { gid, gid_type });
    }
    out
}

/// The netdev a RoCE GID belongs to (sysfs
/// `/sys/class/infiniband/<dev>/ports/<p>/gid_attrs/ndevs/<i>`), when the
/// kernel names one.
pub fn gid_ndev(dev: &str, port: u8, index: usize) -> Option<String> {
    let p = format!("/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/ndevs/{index}");
    let s = std::fs::read_to_string(p).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

// ---------------------------------------------------------------------------
// Objects shared with the application (the librdmacm drop-in).
// ---------------------------------------------------------------------------

macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident;)*) => {$(
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _opaque: [u8; 0],
            _not_send: std::marker::PhantomData<*mut u8>,
        }
    )*};
}

opaque! {
    /// `struct ibv_context` (only ever used through pointers).
    IbvContext;
    /// `struct ibv_pd`.
    IbvPd;
    /// `struct ibv_cq`.
    IbvCq;
    /// `struct ibv_comp_channel`.
    IbvCompChannel;
    /// `struct ibv_qp`.
    IbvQp;
    /// `struct ibv_srq`.
    IbvSrq;
    /// `struct ibv_xrcd`.
    IbvXrcd;
    /// `struct ibv_rwq_ind_table`.
    IbvRwqIndTable;
}

/// `struct ibv_global_route`: 8-aligned, as C's `union ibv_gid` (it has a
/// `uint64_t` view) makes it, so that `struct ibv_ah_attr` embedded after
/// a byte (`rdma_ud_param`) sits where gcc puts it.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbvGlobalRoute {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// Explicit padding (always 0), so the struct has no undefined bytes.
    pub _pad: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    /// Explicit padding (always 0).
    pub _pad: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_attr`. Its padding is spelled out (`_pad*`, zero), so
/// every byte is defined; build it with `..IbvQpAttr::default()`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbvQpAttr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    /// Explicit padding (always 0).
    pub _pad0: u8,
    pub rate_limit: u32,
    /// Explicit tail padding (always 0).
    pub _pad1: u32,
}

/// Declares `struct ibv_qp_init_attr` and `struct ibv_qp_init_attr_ex`
/// from one list of the members they share (the extended struct repeats
/// them first, then adds its own), with the conversions between the two.
/// The extended struct cannot embed the basic one: C lays its first
/// extension member (`comp_mask`) right after `sq_sig_all`, inside what
/// would be the embedded struct's tail padding.
macro_rules! qp_init_attr {
    (
        [$($f:ident: $t:ty,)*]
        $(#[$xm:meta])*
        extended [$($(#[$xfm:meta])* $xf:ident: $xt:ty,)*]
    ) => {
        /// `struct ibv_qp_init_attr`.
        #[repr(C)]
        #[derive(Debug, Clone, Copy)]
        pub struct IbvQpInitAttr {
            $(pub $f: $t,)*
        }

        $(#[$xm])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy)]
        pub struct IbvQpInitAttrEx {
            $(pub $f: $t,)*
            $($(#[$xfm])* pub $xf: $xt,)*
        }

        impl IbvQpInitAttrEx {
            /// The extended form of a plain `ibv_qp_init_attr` on `pd`, as
            /// librdmacm's `rdma_create_qp` builds it (`comp_mask = PD`).
            pub fn from_basic(a: &IbvQpInitAttr, pd: *mut IbvPd) -> IbvQpInitAttrEx {
                IbvQpInitAttrEx {
                    $($f: a.$f,)*
                    comp_mask: QP_INIT_ATTR_PD,
                    pd,
                    ..IbvQpInitAttrEx::default()
                }
            }

            /// The `ibv_qp_init_attr` part (what `rdma_create_qp` copies
            /// back to its caller: the CQs chosen and the capabilities
            /// granted).
            pub fn basic(&self) -> IbvQpInitAttr {
                IbvQpInitAttr {
                    $($f: self.$f,)*
                }
            }
        }
    };
}

qp_init_attr! {
    [
        qp_context: *mut c_void,
        send_cq: *mut IbvCq,
        recv_cq: *mut IbvCq,
        srq: *mut IbvSrq,
        cap: IbvQpCap,
        qp_type: u32,
        sq_sig_all: c_int,
    ]
    /// `struct ibv_qp_init_attr_ex`: `struct ibv_qp_init_attr` followed by
    /// the extended members selected by `comp_mask`.
    extended [
        comp_mask: u32,
        pd: *mut IbvPd,
        xrcd: *mut IbvXrcd,
        create_flags: u32,
        max_tso_header: u16,
        rwq_ind_tbl: *mut IbvRwqIndTable,
        rx_hash_conf: IbvRxHashConf,
        source_qpn: u32,
        send_ops_flags: u64,
    ]
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvRxHashConf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

impl Default for IbvQpInitAttr {
    fn default() -> Self {
        // SAFETY: pointers and integers only; all-zero is the C idiom
        // (`memset(&attr, 0, sizeof attr)`).
        unsafe { std::mem::zeroed() }
    }
}

impl Default for IbvQpInitAttrEx {
    fn default() -> Self {
        // SAFETY: as for `IbvQpInitAttr`.
        unsafe { std::mem::zeroed() }
    }
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbvSrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvSrqInitAttr {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
}

/// `struct ibv_tm_cap` (tag matching; part of `ibv_srq_init_attr_ex`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbvTmCap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex`: `struct ibv_srq_init_attr` followed by
/// the members selected by `comp_mask` ([`srq_init_attr`] bits).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvSrqInitAttrEx {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
    pub comp_mask: u32,
    /// `enum ibv_srq_type` ([`srqt`]).
    pub srq_type: u32,
    pub pd: *mut IbvPd,
    pub xrcd: *mut IbvXrcd,
    pub cq: *mut IbvCq,
    pub tm_cap: IbvTmCap,
}

impl Default for IbvSrqInitAttrEx {
    fn default() -> Self {
        // SAFETY: pointers and integers only; all-zero is the C idiom.
        unsafe { std::mem::zeroed() }
    }
}

/// `struct ibv_xrcd_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbvXrcdInitAttr {
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

/// `enum ibv_srq_init_attr_mask` bits.
pub mod srq_init_attr {
    pub const TYPE: u32 = 1 << 0;
    pub const PD: u32 = 1 << 1;
    pub const XRCD: u32 = 1 << 2;
    pub const CQ: u32 = 1 << 3;
    pub const TM: u32 = 1 << 4;
}

/// `enum ibv_srq_type` values.
pub mod srqt {
    pub const BASIC: u32 = 0;
    pub const XRC: u32 = 1;
    pub const TM: u32 = 2;
}

/// `enum ibv_xrcd_init_attr_mask` bits.
pub mod xrcd_init_attr {
    pub const FD: u32 = 1 << 0;
    pub const OFLAGS: u32 = 1 << 1;
}

/// `struct ibv_ece` (Enhanced Connection Establishment).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbvEce {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `IBV_QP_INIT_ATTR_PD`.
pub const QP_INIT_ATTR_PD: u32 = 1;
/// `IBV_QP_INIT_ATTR_XRCD`.
pub const QP_INIT_ATTR_XRCD: u32 = 1 << 1;

/// `enum ibv_qp_type` values.
pub mod qpt {
    pub const RC: u32 = 2;
    pub const UC: u32 = 3;
    pub const UD: u32 = 4;
    /// XRC initiator (the kernel's `IB_QPT_XRC_INI`).
    pub const XRC_SEND: u32 = 9;
    /// XRC target (`IB_QPT_XRC_TGT`).
    pub const XRC_RECV: u32 = 10;
}

/// `enum ibv_qp_state` values.
pub mod qps {
    pub const RESET: u32 = 0;
    pub const INIT: u32 = 1;
    pub const RTR: u32 = 2;
    pub const RTS: u32 = 3;
    pub const SQD: u32 = 4;
    pub const SQE: u32 = 5;
    pub const ERR: u32 = 6;
}

/// `enum ibv_qp_attr_mask` bits. They are the kernel's `ib_qp_attr_mask`
/// bits (`crate::engine::qp_mask`), which [`qp_attr_from_cm`] relies on.
pub mod qp_attr_mask {
    use std::ffi::c_int;
    pub const STATE: c_int = 1 << 0;
    pub const CUR_STATE: c_int = 1 << 1;
    pub const ACCESS_FLAGS: c_int = 1 << 3;
    pub const PKEY_INDEX: c_int = 1 << 4;
    pub const PORT: c_int = 1 << 5;
    pub const QKEY: c_int = 1 << 6;
    pub const AV: c_int = 1 << 7;
    pub const PATH_MTU: c_int = 1 << 8;
    pub const TIMEOUT: c_int = 1 << 9;
    pub const RETRY_CNT: c_int = 1 << 10;
    pub const RNR_RETRY: c_int = 1 << 11;
    pub const RQ_PSN: c_int = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: c_int = 1 << 13;
    pub const ALT_PATH: c_int = 1 << 14;
    pub const MIN_RNR_TIMER: c_int = 1 << 15;
    pub const SQ_PSN: c_int = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
    pub const PATH_MIG_STATE: c_int = 1 << 18;
    pub const CAP: c_int = 1 << 19;
    pub const DEST_QPN: c_int = 1 << 20;
}

/// Member offsets of the libibverbs objects read through pointers.
pub mod obj {
    /// `struct ibv_pd`: `context`.
    pub const PD_CONTEXT: usize = 0;
    /// `struct ibv_cq`: `context`, `channel`, `cq_context`.
    pub const CQ_CONTEXT: usize = 0;
    pub const CQ_CHANNEL: usize = 8;
    pub const CQ_CQ_CONTEXT: usize = 16;
    /// `struct ibv_comp_channel`: `context`, `fd`.
    pub const CHANNEL_CONTEXT: usize = 0;
    pub const CHANNEL_FD: usize = 8;
    /// `struct ibv_qp`: `context`, `qp_context`, `pd`, `send_cq`,
    /// `recv_cq`, `srq`, `qp_num`, `state`, `qp_type`.
    pub const QP_CONTEXT: usize = 0;
    pub const QP_QP_CONTEXT: usize = 8;
    pub const QP_PD: usize = 16;
    pub const QP_SEND_CQ: usize = 24;
    pub const QP_RECV_CQ: usize = 32;
    pub const QP_SRQ: usize = 40;
    pub const QP_QP_NUM: usize = 52;
    pub const QP_STATE: usize = 56;
    pub const QP_TYPE: usize = 60;
    /// `struct ibv_context`: `abi_compat` (`(void *)-1` when the context
    /// is the `context` member of a `struct verbs_context`).
    pub const CONTEXT_ABI_COMPAT: usize = 320;
    /// `struct verbs_context`, counted back from its `context` member:
    /// `create_qp_ex`, `create_srq_ex`, `open_xrcd`, `close_xrcd` and `sz`.
    pub const VCTX_CREATE_QP_EX_BACK: usize = 56;
    pub const VCTX_CREATE_SRQ_EX_BACK: usize = 40;
    pub const VCTX_OPEN_XRCD_BACK: usize = 32;
    pub const VCTX_CLOSE_XRCD_BACK: usize = 24;
    pub const VCTX_SZ_BACK: usize = 8;
    /// `sizeof(struct verbs_context) - offsetof(struct verbs_context,
    /// create_qp_ex)`: the least `sz` of a provider that has the op (and
    /// likewise for the other ops).
    pub const VCTX_CREATE_QP_EX_NEED: usize = 384;
    pub const VCTX_CREATE_SRQ_EX_NEED: usize = 368;
    pub const VCTX_OPEN_XRCD_NEED: usize = 360;
    pub const VCTX_CLOSE_XRCD_NEED: usize = 352;
    /// `struct ibv_srq`: `context`; `struct ibv_xrcd`: `context`.
    pub const SRQ_CONTEXT: usize = 0;
    pub const XRCD_CONTEXT: usize = 0;
}

unsafe fn field<T: Copy>(p: *const c_void, off: usize) -> T {
    unsafe { p.cast::<u8>().add(off).cast::<T>().read_unaligned() }
}

/// The device name behind `ctx`, if libibverbs knows it.
fn context_name(l: &Lib, ctx: *mut IbvContext) -> String {
    // `struct ibv_context` begins with its `struct ibv_device *`.
    let dev = unsafe { field::<*mut c_void>(ctx.cast(), 0) };
    if dev.is_null() {
        return "?".into();
    }
    let n = unsafe { (l.get_device_name)(dev) };
    if n.is_null() {
        return "?".into();
    }
    unsafe { CStr::from_ptr(n) }.to_string_lossy().into_owned()
}

fn last_errno(default: i32) -> Errno {
    Errno(
        std::io::Error::last_os_error()
            .raw_os_error()
            .filter(|&e| e > 0)
            .unwrap_or(default),
    )
}

/// A pointer-returning libibverbs call's result: the object, or (NULL) the
/// errno it left, `default` when it left none.
fn nonnull<T>(p: *mut T, default: i32) -> Result<*mut T, Errno> {
    if p.is_null() {
        Err(last_errno(default))
    } else {
        Ok(p)
    }
}

/// Status of an `int`-returning libibverbs call: 0, or an errno (positive
/// or negative depending on the provider; -1 means "see errno").
fn status(r: c_int) -> Result<(), Errno> {
    match r {
        0 => Ok(()),
        -1 => Err(last_errno(errno::EIO)),
        r => Err(Errno(r.abs())),
    }
}

/// Opens every verbs device of the host, in libibverbs' order, for the
/// process's lifetime (the contexts are never closed: librdmacm keeps its
/// devices open while it is loaded, and the application uses them). A
/// device that fails to open is skipped with a log line (a container may
/// expose only some of the uverbs files). `Err` only when libibverbs is
/// missing (`ENOSYS`) or lists no device at all (`ENODEV`).
pub fn open_all() -> Result<Vec<(String, *mut IbvContext)>, Errno> {
    let l = lib()?;
    let mut n: c_int = 0;
    let list = unsafe { (l.get_device_list)(&mut n) };
    if list.is_null() {
        // ENOSYS here means "no kernel uverbs support": no device either way.
        let e = last_errno(errno::ENODEV);
        crate::ibcm_log!(ERROR, "ibv_get_device_list failed: {e}: no RDMA device");
        return Err(Errno::ENODEV);
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        let d = unsafe { *list.add(i) };
        let name = unsafe { (l.get_device_name)(d) };
        let name = if name.is_null() {
            format!("device #{i}")
        } else {
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        };
        let ctx = unsafe { (l.open_device)(d) };
        if ctx.is_null() {
            crate::ibcm_log!(
                ERROR,
                "ibv_open_device({name}) failed: {}; device skipped",
                std::io::Error::last_os_error()
            );
            continue;
        }
        out.push((name, ctx.cast::<IbvContext>()));
    }
    unsafe { (l.free_device_list)(list) };
    Ok(out)
}

/// Everything the CM needs (as [`Watcher::query`] reads it) from a context
/// that stays open (one from [`open_all`]).
///
/// # Safety
/// `ctx` must be a live `struct ibv_context *` of this process's
/// libibverbs.
pub unsafe fn query_context(ctx: *mut IbvContext, name: &str) -> Result<VerbsInfo, Errno> {
    query_ctx(lib()?, ctx.cast(), name)
}

/// `ibv_alloc_pd`.
///
/// # Safety
/// `ctx` must be a live context.
pub unsafe fn alloc_pd(ctx: *mut IbvContext) -> Result<*mut IbvPd, Errno> {
    nonnull(unsafe { (lib()?.alloc_pd)(ctx) }, errno::ENOMEM)
}

/// `ibv_dealloc_pd` (`EBUSY` while objects still use the PD).
///
/// # Safety
/// `pd` must be a live PD no longer used by the caller.
pub unsafe fn dealloc_pd(pd: *mut IbvPd) -> Result<(), Errno> {
    status(unsafe { (lib()?.dealloc_pd)(pd) })
}

/// `ibv_create_comp_channel`.
///
/// # Safety
/// `ctx` must be a live context.
pub unsafe fn create_comp_channel(ctx: *mut IbvContext) -> Result<*mut IbvCompChannel, Errno> {
    nonnull(unsafe { (lib()?.create_comp_channel)(ctx) }, errno::ENOMEM)
}

/// `ibv_destroy_comp_channel` (`EBUSY` while a CQ uses it).
///
/// # Safety
/// `ch` must be a live completion channel.
pub unsafe fn destroy_comp_channel(ch: *mut IbvCompChannel) -> Result<(), Errno> {
    status(unsafe { (lib()?.destroy_comp_channel)(ch) })
}

/// `ibv_create_cq(ctx, cqe, cq_context, channel, comp_vector)`.
///
/// # Safety
/// `ctx` must be a live context, `channel` null or one of its channels.
pub unsafe fn create_cq(
    ctx: *mut IbvContext,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut IbvCompChannel,
    comp_vector: c_int,
) -> Result<*mut IbvCq, Errno> {
    let cq = unsafe { (lib()?.create_cq)(ctx, cqe, cq_context, channel, comp_vector) };
    nonnull(cq, errno::ENOMEM)
}

/// `ibv_destroy_cq`.
///
/// # Safety
/// `cq` must be a live CQ no QP uses any more.
pub unsafe fn destroy_cq(cq: *mut IbvCq) -> Result<(), Errno> {
    status(unsafe { (lib()?.destroy_cq)(cq) })
}

/// `ibv_create_qp_ex`, which `<infiniband/verbs.h>` defines inline: with
/// `comp_mask == IBV_QP_INIT_ATTR_PD` it is `ibv_create_qp(attr->pd,
/// attr)`; otherwise the provider's `create_qp_ex` operation of the
/// `struct verbs_context` around `ctx` (`EOPNOTSUPP` when the provider has
/// none). On success the granted capabilities are written back to `attr`.
///
/// # Safety
/// `ctx` must be a live context and every pointer in `attr` null or live.
pub unsafe fn create_qp_ex(
    ctx: *mut IbvContext,
    attr: &mut IbvQpInitAttrEx,
) -> Result<*mut IbvQp, Errno> {
    let l = lib()?;
    if attr.comp_mask & QP_INIT_ATTR_PD != 0 && attr.pd.is_null() {
        return Err(Errno::EINVAL);
    }
    let qp = if attr.comp_mask == QP_INIT_ATTR_PD {
        // `struct ibv_qp_init_attr_ex` begins with `struct ibv_qp_init_attr`.
        let basic = (attr as *mut IbvQpInitAttrEx).cast::<IbvQpInitAttr>();
        unsafe { (l.create_qp)(attr.pd, basic) }
    } else {
        match unsafe { ctx_create_qp_ex(ctx) } {
            Some(f) => unsafe { f(ctx, attr) },
            None => return Err(Errno(libc::EOPNOTSUPP)),
        }
    };
    nonnull(qp, errno::EINVAL)
}

/// The provider's `create_qp_ex` (`verbs_get_ctx_op(ctx, create_qp_ex)`).
unsafe fn ctx_create_qp_ex(ctx: *mut IbvContext) -> Option<CreateQpEx> {
    let f = unsafe {
        ctx_op(
            ctx,
            obj::VCTX_CREATE_QP_EX_BACK,
            obj::VCTX_CREATE_QP_EX_NEED,
        )
    }?;
    // SAFETY: the provider's op has the documented prototype.
    Some(unsafe { std::mem::transmute::<*mut c_void, CreateQpEx>(f) })
}

/// `verbs_get_ctx_op(ctx, op)`: the operation `back` bytes before the
/// `context` member of the `struct verbs_context` around `ctx`, if the
/// context is one (`abi_compat == -1`), the provider's structure is large
/// enough to have it (`sz >= need`) and the pointer is set.
unsafe fn ctx_op(ctx: *mut IbvContext, back: usize, need: usize) -> Option<*mut c_void> {
    let base = ctx.cast::<u8>();
    let compat: usize = unsafe { field(ctx.cast(), obj::CONTEXT_ABI_COMPAT) };
    if compat != usize::MAX {
        return None;
    }
    let sz: usize = unsafe { base.sub(obj::VCTX_SZ_BACK).cast::<usize>().read_unaligned() };
    if sz < need {
        return None;
    }
    let f: *mut c_void = unsafe { base.sub(back).cast::<*mut c_void>().read_unaligned() };
    (!f.is_null()).then_some(f)
}

/// `ibv_destroy_qp`.
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn destroy_qp(qp: *mut IbvQp) -> Result<(), Errno> {
    status(unsafe { (lib()?.destroy_qp)(qp) })
}

/// `ibv_modify_qp(qp, attr, mask)`.
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn modify_qp(qp: *mut IbvQp, attr: &IbvQpAttr, mask: c_int) -> Result<(), Errno> {
    let mut a = *attr;
    status(unsafe { (lib()?.modify_qp)(qp, &mut a, mask) })
}

/// `ibv_query_qp(qp, mask)`: the attributes and the creation attributes.
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn query_qp(qp: *mut IbvQp, mask: c_int) -> Result<(IbvQpAttr, IbvQpInitAttr), Errno> {
    let mut a = IbvQpAttr::default();
    let mut init = IbvQpInitAttr::default();
    status(unsafe { (lib()?.query_qp)(qp, &mut a, mask, &mut init) })?;
    Ok((a, init))
}

/// `ibv_attach_mcast(qp, mgid, mlid)`: `qp` (UD) receives the group.
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn attach_mcast(qp: *mut IbvQp, mgid: &[u8; 16], mlid: u16) -> Result<(), Errno> {
    status(unsafe { (lib()?.attach_mcast)(qp, mgid, mlid) })
}

/// `ibv_detach_mcast(qp, mgid, mlid)`.
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn detach_mcast(qp: *mut IbvQp, mgid: &[u8; 16], mlid: u16) -> Result<(), Errno> {
    status(unsafe { (lib()?.detach_mcast)(qp, mgid, mlid) })
}

/// `ibv_query_ece(qp)`: the ECE options the QP's provider offers.
/// `EOPNOTSUPP` when the provider (or a libibverbs older than
/// rdma-core 31) has none — librdmacm then sends no ECE.
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn query_ece(qp: *mut IbvQp) -> Result<IbvEce, Errno> {
    let f = lib()?.query_ece.ok_or(Errno(libc::EOPNOTSUPP))?;
    let mut e = IbvEce::default();
    status(unsafe { f(qp, &mut e) })?;
    Ok(e)
}

/// `ibv_set_ece(qp, ece)`: the options the peer accepted (librdmacm
/// applies the remote ECE before RTR). `EOPNOTSUPP` as for [`query_ece`].
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn set_ece(qp: *mut IbvQp, ece: &IbvEce) -> Result<(), Errno> {
    let f = lib()?.set_ece.ok_or(Errno(libc::EOPNOTSUPP))?;
    let mut e = *ece;
    status(unsafe { f(qp, &mut e) })
}

/// `ibv_create_srq(pd, attr)` (a basic SRQ; the granted limits are
/// written back to `attr`).
///
/// # Safety
/// `pd` must be a live PD.
pub unsafe fn create_srq(pd: *mut IbvPd, attr: &mut IbvSrqInitAttr) -> Result<*mut IbvSrq, Errno> {
    nonnull(unsafe { (lib()?.create_srq)(pd, attr) }, errno::EINVAL)
}

/// `ibv_destroy_srq`.
///
/// # Safety
/// `srq` must be a live SRQ no QP uses any more.
pub unsafe fn destroy_srq(srq: *mut IbvSrq) -> Result<(), Errno> {
    status(unsafe { (lib()?.destroy_srq)(srq) })
}

/// `ibv_create_srq_ex`, which `<infiniband/verbs.h>` defines inline: a
/// basic SRQ on a PD (`comp_mask` no more than TYPE|PD, type BASIC) is
/// `ibv_create_srq(attr->pd, attr)`; anything else (XRC, tag matching)
/// the provider's `create_srq_ex` operation (`EOPNOTSUPP` when it has
/// none, as the inline sets). The granted limits land in `attr`.
///
/// # Safety
/// `ctx` must be a live context and every pointer in `attr` null or live.
pub unsafe fn create_srq_ex(
    ctx: *mut IbvContext,
    attr: &mut IbvSrqInitAttrEx,
) -> Result<*mut IbvSrq, Errno> {
    use srq_init_attr as m;
    let l = lib()?;
    let mask = attr.comp_mask;
    let basic = mask & !(m::PD | m::TYPE) == 0
        && mask & m::PD != 0
        && (mask & m::TYPE == 0 || attr.srq_type == srqt::BASIC);
    let srq = if basic {
        if attr.pd.is_null() {
            return Err(Errno::EINVAL);
        }
        // `struct ibv_srq_init_attr_ex` begins with `struct ibv_srq_init_attr`.
        let b = (attr as *mut IbvSrqInitAttrEx).cast::<IbvSrqInitAttr>();
        unsafe { (l.create_srq)(attr.pd, b) }
    } else {
        let Some(f) = (unsafe {
            ctx_op(
                ctx,
                obj::VCTX_CREATE_SRQ_EX_BACK,
                obj::VCTX_CREATE_SRQ_EX_NEED,
            )
        }) else {
            return Err(Errno(libc::EOPNOTSUPP));
        };
        // SAFETY: the provider's op has the documented prototype.
        let f = unsafe { std::mem::transmute::<*mut c_void, CreateSrqEx>(f) };
        unsafe { f(ctx, attr) }
    };
    if srq.is_null() {
        return Err(last_errno(errno::EINVAL));
    }
    Ok(srq)
}

/// `ibv_open_xrcd` (inline in `<infiniband/verbs.h>`): the provider's
/// `open_xrcd`, `EOPNOTSUPP` when it has none (Soft-RoCE, for one).
///
/// # Safety
/// `ctx` must be a live context.
pub unsafe fn open_xrcd(
    ctx: *mut IbvContext,
    attr: &mut IbvXrcdInitAttr,
) -> Result<*mut IbvXrcd, Errno> {
    lib()?;
    let Some(f) = (unsafe { ctx_op(ctx, obj::VCTX_OPEN_XRCD_BACK, obj::VCTX_OPEN_XRCD_NEED) })
    else {
        return Err(Errno(libc::EOPNOTSUPP));
    };
    // SAFETY: the provider's op has the documented prototype.
    let f = unsafe { std::mem::transmute::<*mut c_void, OpenXrcd>(f) };
    let x = unsafe { f(ctx, attr) };
    if x.is_null() {
        return Err(last_errno(libc::EOPNOTSUPP));
    }
    Ok(x)
}

/// `ibv_close_xrcd` (`EBUSY` while QPs or SRQs use the domain).
///
/// # Safety
/// `xrcd` must be a live XRC domain from [`open_xrcd`].
pub unsafe fn close_xrcd(xrcd: *mut IbvXrcd) -> Result<(), Errno> {
    lib()?;
    let ctx: *mut IbvContext = unsafe { field(xrcd.cast(), obj::XRCD_CONTEXT) };
    let Some(f) = (unsafe { ctx_op(ctx, obj::VCTX_CLOSE_XRCD_BACK, obj::VCTX_CLOSE_XRCD_NEED) })
    else {
        return Err(Errno(libc::EOPNOTSUPP));
    };
    // SAFETY: the provider's op has the documented prototype.
    let f = unsafe { std::mem::transmute::<*mut c_void, CloseXrcd>(f) };
    status(unsafe { f(xrcd) })
}

/// `srq->context`.
///
/// # Safety
/// `srq` must be a live SRQ.
pub unsafe fn srq_context(srq: *mut IbvSrq) -> *mut IbvContext {
    unsafe { field(srq.cast(), obj::SRQ_CONTEXT) }
}

/// `pd->context`.
///
/// # Safety
/// `pd` must be a live PD.
pub unsafe fn pd_context(pd: *mut IbvPd) -> *mut IbvContext {
    unsafe { field(pd.cast(), obj::PD_CONTEXT) }
}

/// `cq->cq_context` (the cookie given to `ibv_create_cq`).
///
/// # Safety
/// `cq` must be a live CQ.
pub unsafe fn cq_user_context(cq: *mut IbvCq) -> *mut c_void {
    unsafe { field(cq.cast(), obj::CQ_CQ_CONTEXT) }
}

/// `cq->channel`.
///
/// # Safety
/// `cq` must be a live CQ.
pub unsafe fn cq_channel(cq: *mut IbvCq) -> *mut IbvCompChannel {
    unsafe { field(cq.cast(), obj::CQ_CHANNEL) }
}

/// `channel->fd`.
///
/// # Safety
/// `ch` must be a live completion channel.
pub unsafe fn comp_channel_fd(ch: *mut IbvCompChannel) -> c_int {
    unsafe { field(ch.cast(), obj::CHANNEL_FD) }
}

/// The members of a `struct ibv_qp` the rdma_cm layer reads.
#[derive(Debug, Clone, Copy)]
pub struct QpView {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub qp_num: u32,
    /// `qp->state` as libibverbs last recorded it (use [`query_qp`] for
    /// the device's view).
    pub state: u32,
    pub qp_type: u32,
}

/// Reads `qp`'s public members.
///
/// # Safety
/// `qp` must be a live QP.
pub unsafe fn qp_view(qp: *mut IbvQp) -> QpView {
    let p = qp.cast::<c_void>();
    unsafe {
        QpView {
            context: field(p, obj::QP_CONTEXT),
            pd: field(p, obj::QP_PD),
            send_cq: field(p, obj::QP_SEND_CQ),
            recv_cq: field(p, obj::QP_RECV_CQ),
            srq: field(p, obj::QP_SRQ),
            qp_num: field(p, obj::QP_QP_NUM),
            state: field(p, obj::QP_STATE),
            qp_type: field(p, obj::QP_TYPE),
        }
    }
}

/// The name of the device `ctx` belongs to.
///
/// # Safety
/// `ctx` must be a live context.
pub unsafe fn device_name(ctx: *mut IbvContext) -> Result<String, Errno> {
    Ok(context_name(lib()?, ctx))
}

fn ah_from_cm(a: &crate::engine::AhAttr, port_fallback: u8) -> Result<IbvAhAttr, Errno> {
    // RoCE addresses always need the GRH (the kernel marks RoCE AH
    // attributes global); IB ones when the CM says so.
    let global = a.has_grh || matches!(a.rec_type, PathRecType::RoceV1 | PathRecType::RoceV2);
    let sgid_index = u8::try_from(a.sgid_index).map_err(|_| Errno::EINVAL)?;
    Ok(IbvAhAttr {
        grh: if global {
            IbvGlobalRoute {
                dgid: a.dgid.0,
                flow_label: a.flow_label & 0xf_ffff,
                sgid_index,
                hop_limit: a.hop_limit,
                traffic_class: a.traffic_class,
                _pad: 0,
            }
        } else {
            IbvGlobalRoute::default()
        },
        dlid: a.dlid as u16,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: global as u8,
        port_num: if a.port_num != 0 {
            a.port_num
        } else {
            port_fallback
        },
        _pad: 0,
    })
}

/// The CM's QP attributes (`ib_cm_init_qp_attr`, [`QpAttr`]) as the
/// `struct ibv_qp_attr` and mask `ibv_modify_qp` takes — what librdmacm's
/// `ucma_modify_qp_rtr`/`_rts` pass on after `rdma_init_qp_attr`. The mask
/// bits are shared by both APIs; only members the mask selects are filled
/// (the rest stay zero). RoCE address vectors get the GRH (`is_global`,
/// dgid, sgid_index, hop limit, traffic class, flow label); the device
/// resolves the destination MAC itself. `EINVAL` when a value does not
/// fit `ibv_qp_attr` (an SGID index above 255).
pub fn qp_attr_from_cm(a: &QpAttr) -> Result<(IbvQpAttr, c_int), Errno> {
    use crate::engine::qp_mask as m;
    let known = m::STATE
        | m::ACCESS_FLAGS
        | m::PKEY_INDEX
        | m::PORT
        | m::AV
        | m::PATH_MTU
        | m::TIMEOUT
        | m::RETRY_CNT
        | m::RNR_RETRY
        | m::RQ_PSN
        | m::MAX_QP_RD_ATOMIC
        | m::ALT_PATH
        | m::MIN_RNR_TIMER
        | m::SQ_PSN
        | m::MAX_DEST_RD_ATOMIC
        | m::PATH_MIG_STATE
        | m::DEST_QPN;
    let mask = a.mask & known;
    let has = |bit: u32| mask & bit != 0;
    let mut o = IbvQpAttr::default();
    crate::engine::copy_plain_qp_attrs!(mask, a, &mut o);
    if has(m::STATE) {
        o.qp_state = a.qp_state;
    }
    if has(m::PORT) {
        o.port_num = a.port_num;
    }
    if has(m::AV) {
        o.ah_attr = ah_from_cm(&a.ah_attr, a.port_num)?;
    }
    if has(m::ALT_PATH) {
        o.alt_ah_attr = ah_from_cm(&a.alt_ah_attr, a.alt_port_num)?;
        o.alt_port_num = a.alt_port_num;
        o.alt_pkey_index = a.alt_pkey_index;
        o.alt_timeout = a.alt_timeout;
    }
    Ok((o, mask as c_int))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_attr_ex_round_trip() {
        let mut b = IbvQpInitAttr {
            qp_type: qpt::UD,
            sq_sig_all: 1,
            ..IbvQpInitAttr::default()
        };
        b.cap.max_send_wr = 7;
        b.cap.max_recv_sge = 2;
        b.qp_context = 0x1000 as *mut c_void;
        let pd = 0x2000 as *mut IbvPd;
        let ex = IbvQpInitAttrEx::from_basic(&b, pd);
        assert_eq!((ex.comp_mask, ex.pd), (QP_INIT_ATTR_PD, pd));
        assert!(ex.xrcd.is_null() && ex.create_flags == 0 && ex.source_qpn == 0);
        let back = ex.basic();
        assert_eq!(back.cap, b.cap);
        assert_eq!((back.qp_type, back.sq_sig_all), (qpt::UD, 1));
        assert_eq!(back.qp_context, b.qp_context);
        // A PD-masked request without a PD never reaches libibverbs.
        let mut no_pd = IbvQpInitAttrEx::from_basic(&b, std::ptr::null_mut());
        let r = unsafe { create_qp_ex(std::ptr::null_mut(), &mut no_pd) };
        assert!(matches!(r, Err(Errno::EINVAL) | Err(Errno(38))), "{r:?}");
    }

    #[test]
    fn gid_table_fits_one_ioctl_attribute() {
        // struct ib_uverbs_attr's len is a __u16: the whole array must fit.
        assert!(gid_entry::TABLE_MAX * gid_entry::SIZE <= u16::MAX as usize);
        assert_eq!(gid_entry::TABLE_MAX, 2047);
    }

    #[test]
    fn rates() {
        assert_eq!(ib_rate(1, 1), 2); // 1x SDR 2.5
        assert_eq!(ib_rate(2, 1), 3); // 4x SDR 10
        assert_eq!(ib_rate(2, 32), 16); // 4x EDR 100
        assert_eq!(ib_rate(2, 64), 17); // 4x HDR 200
        assert_eq!(ib_rate(2, 16), 12); // 4x FDR 56
        assert_eq!(ib_rate(0, 1), 0);
    }
}
