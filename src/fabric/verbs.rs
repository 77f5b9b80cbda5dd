//! Real RDMA devices: what libibverbs says about a device (ports, GID
//! tables with GID types, P_Key tables, LIDs, CA GUID, ACK delay).
//!
//! libibverbs is loaded at run time (`dlopen("libibverbs.so.1")`), never
//! linked: the default build and every soft/loop device work on a machine
//! without rdma-core, and a real device fails to open with `-ENOSYS` and a
//! log line when the library is missing. Only a handful of functions are
//! used, through our own declarations of the few structs they fill; their
//! layouts are the stable rdma-core ABI (`tests/verbs_layout.rs` compares
//! every offset used here with gcc's view of `<infiniband/verbs.h>` when
//! the header is installed). Output structs are over-allocated so a newer
//! library that appends members cannot write past them.
//!
//! GID types come from `_ibv_query_gid_table` (rdma-core ≥ 32); with an
//! older library, from `ibv_query_gid` plus sysfs
//! (`/sys/class/infiniband/<dev>/ports/<p>/gid_attrs/types/<i>`).

use crate::engine::{Errno, GidEntry, GidType, PortInfo, errno};
use crate::log::{DEBUG, ERROR};
use crate::wire::Gid;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;

/// `struct ibv_device_attr` offsets (x86_64/aarch64 LP64 layout).
pub mod device_attr {
    pub const NODE_GUID: usize = 64;
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

/// Opens `name` with libibverbs, reads everything the CM needs, closes it.
pub fn query(name: &str) -> Result<VerbsInfo, Errno> {
    let l = lib()?;
    let ctx = open_ctx(l, name)?;
    let r = query_ctx(l, ctx, name);
    unsafe { (l.close_device)(ctx) };
    r
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
        let max = 4096usize;
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

#[cfg(test)]
mod tests {
    use super::*;

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
