//! The exported `rdma_*` functions (rdma-core's `librdmacm.map`, nodes
//! RDMACM_1.0 … 1.4). Each one checks its pointers against the registries
//! (NULL, freed or foreign objects → `EINVAL`), runs under
//! `catch_unwind`, and reports failure as librdmacm does: -1 with `errno`
//! (and a debug line, `IBCM_LOG=debug`).

use crate::abi::*;
use crate::addrinfo;
use crate::channel::{self, Channel, lock};
use crate::id::{self, ConnParam, IdPriv};
use crate::select;
use ibcm::api::Errno;
use ibcm::log::{DEBUG, ERROR};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: the thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Runs an export: `Ok(v)` → v; `Err(e)` → -1 with errno e.
pub(crate) fn guard(what: &str, f: impl FnOnce() -> Result<c_int, Errno>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            ibcm_log!(DEBUG, "librdmacm (ibcm): {what}: {e} ({})", e.0);
            set_errno(e.0);
            -1
        }
        Err(_) => {
            ibcm::log::always(ERROR, format_args!("librdmacm (ibcm): {what} panicked"));
            set_errno(libc::EIO);
            -1
        }
    }
}

/// `guard` for functions returning a pointer (NULL on failure).
fn guard_ptr<T>(what: &str, f: impl FnOnce() -> Result<*mut T, Errno>) -> *mut T {
    let mut out = std::ptr::null_mut();
    let r = guard(what, || {
        out = f()?;
        Ok(0)
    });
    if r != 0 {
        return std::ptr::null_mut();
    }
    out
}

/// # Safety
/// `p` NULL or a readable `struct rdma_conn_param`.
unsafe fn read_conn_param(p: *const RdmaConnParam, max: usize) -> Result<Option<ConnParam>, Errno> {
    let Some(c) = (unsafe { p.as_ref() }) else {
        return Ok(None);
    };
    let data = unsafe { id::pdata(c.private_data, c.private_data_len as usize, max)? };
    Ok(Some(conn_param_bytes!(bytes_from! { c => ConnParam {
        private_data: data.to_vec(),
        qp_num: c.qp_num,
    }})))
}

// ---------------------------------------------------------------------------
// Event channels and events
// ---------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn rdma_create_event_channel() -> *mut RdmaEventChannel {
    guard_ptr("rdma_create_event_channel", || {
        select::check_any_device()?;
        let ch = Channel::new()?;
        let p = ch.public_ptr();
        lock(channel::channels()).insert(p as usize, ch);
        Ok(p)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_destroy_event_channel(channel: *mut RdmaEventChannel) {
    guard("rdma_destroy_event_channel", || {
        if channel.is_null() {
            return Err(Errno::EINVAL);
        }
        let ch = lock(channel::channels()).remove(&(channel as usize));
        let Some(ch) = ch else {
            // The parent's channel in a child of fork(): only the child's
            // copy of the fd goes (librdmacm closes it; the kernel object
            // stays the parent's).
            if let Some(fd) = crate::fork::take_inherited_channel(channel as usize) {
                // SAFETY: the child's own copy of the inherited fd.
                unsafe { libc::close(fd) };
                return Ok(0);
            }
            return Err(Errno::EINVAL);
        };
        let dropped = ch.close();
        if !dropped.is_empty() {
            ibcm_log!(
                DEBUG,
                "librdmacm (ibcm): rdma_destroy_event_channel: {} unretrieved events dropped",
                dropped.len()
            );
        }
        Ok(0)
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut RdmaEventChannel,
    event: *mut *mut RdmaCmEvent,
) -> c_int {
    guard("rdma_get_cm_event", || {
        if event.is_null() {
            return Err(Errno::EINVAL);
        }
        let ch = channel::lookup(channel)?;
        let b = ch.pop()?;
        // SAFETY: checked non-NULL; the caller's out pointer.
        unsafe { *event = channel::hand_out(b) };
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_ack_cm_event(event: *mut RdmaCmEvent) -> c_int {
    guard("rdma_ack_cm_event", || channel::ack(event).map(|()| 0))
}

/// The names `rdma_event_str` returns (index = event number).
const EVENT_NAMES: [&CStr; 20] = [
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
    c"RDMA_CM_EVENT_ADDRINFO_RESOLVED",
    c"RDMA_CM_EVENT_ADDRINFO_ERROR",
    c"RDMA_CM_EVENT_USER",
    c"RDMA_CM_EVENT_INTERNAL",
];

#[unsafe(no_mangle)]
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    usize::try_from(event)
        .ok()
        .and_then(|i| EVENT_NAMES.get(i))
        .map_or(c"UNKNOWN EVENT".as_ptr(), |s| s.as_ptr())
}

/// 1.4: `rdma_write_cm_event` — a user event on the id's channel.
#[unsafe(no_mangle)]
pub extern "C" fn rdma_write_cm_event(
    id: *mut RdmaCmId,
    event: c_int,
    status: c_int,
    arg: u64,
) -> c_int {
    guard("rdma_write_cm_event", || {
        let id = id::lookup(id)?;
        id::write_event(&id, event, status, arg)?;
        Ok(0)
    })
}

// ---------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------

fn create_id(
    channel: *mut RdmaEventChannel,
    context: *mut c_void,
    ps: c_int,
    qpt: c_int,
) -> Result<Arc<IdPriv>, Errno> {
    if !id::valid_ps(ps) {
        return Err(Errno::EINVAL);
    }
    let ch = if channel.is_null() {
        None
    } else {
        Some(channel::lookup(channel)?)
    };
    id::create(ch, context, ps as u16, qpt)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut RdmaEventChannel,
    id: *mut *mut RdmaCmId,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    guard("rdma_create_id", || {
        if id.is_null() {
            return Err(Errno::EINVAL);
        }
        let n = create_id(channel, context, ps, id::qp_type_of(ps as u16))?;
        // SAFETY: checked non-NULL.
        unsafe { *id = n.public_ptr() };
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_destroy_id(id: *mut RdmaCmId) -> c_int {
    guard("rdma_destroy_id", || {
        let id = id::lookup(id)?;
        id::destroy(&id)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_migrate_id(id: *mut RdmaCmId, channel: *mut RdmaEventChannel) -> c_int {
    guard("rdma_migrate_id", || {
        let id = id::lookup(id)?;
        let ch = if channel.is_null() {
            None
        } else {
            Some(channel::lookup(channel)?)
        };
        id::migrate(&id, ch)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut RdmaCmId,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    guard("rdma_set_option", || {
        let id = id::lookup(id)?;
        if optval.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: the caller's buffer of optlen bytes.
        let v = unsafe { std::slice::from_raw_parts(optval.cast::<u8>(), optlen) };
        id::set_option(&id, level, optname, v)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_notify(id: *mut RdmaCmId, event: c_int) -> c_int {
    guard("rdma_notify", || {
        let id = id::lookup(id)?;
        id::notify(&id, event)?;
        Ok(0)
    })
}

// ---------------------------------------------------------------------------
// Addresses and routes
// ---------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut RdmaCmId, addr: *mut libc::sockaddr) -> c_int {
    guard("rdma_bind_addr", || {
        let id = id::lookup(id)?;
        let a = unsafe { id::read_sockaddr(addr)? };
        id::bind(&id, a)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut RdmaCmId,
    src_addr: *mut libc::sockaddr,
    dst_addr: *mut libc::sockaddr,
    timeout_ms: c_int,
) -> c_int {
    guard("rdma_resolve_addr", || {
        let id = id::lookup(id)?;
        let dst = unsafe { id::read_sockaddr(dst_addr)? };
        let src = if src_addr.is_null() {
            None
        } else {
            Some(unsafe { id::read_sockaddr(src_addr)? })
        };
        id::resolve_addr(&id, src, dst, timeout_ms)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_resolve_route(id: *mut RdmaCmId, _timeout_ms: c_int) -> c_int {
    guard("rdma_resolve_route", || {
        let id = id::lookup(id)?;
        id::resolve_route(&id)?;
        Ok(0)
    })
}

fn port_of(id: *mut RdmaCmId, src: bool) -> u16 {
    let mut port = 0;
    guard(
        if src {
            "rdma_get_src_port"
        } else {
            "rdma_get_dst_port"
        },
        || {
            let id = id::lookup(id)?;
            let s = lock(&id.st);
            port = if src { s.src } else { s.dst }.map_or(0, |a| a.port().to_be());
            Ok(0)
        },
    );
    port
}

/// The source port, network order (`__be16`).
#[unsafe(no_mangle)]
pub extern "C" fn rdma_get_src_port(id: *mut RdmaCmId) -> u16 {
    port_of(id, true)
}

/// The destination port, network order (`__be16`).
#[unsafe(no_mangle)]
pub extern "C" fn rdma_get_dst_port(id: *mut RdmaCmId) -> u16 {
    port_of(id, false)
}

// ---------------------------------------------------------------------------
// Connections
// ---------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn rdma_listen(id: *mut RdmaCmId, _backlog: c_int) -> c_int {
    guard("rdma_listen", || {
        let id = id::lookup(id)?;
        id::listen(&id)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_connect(id: *mut RdmaCmId, conn_param: *mut RdmaConnParam) -> c_int {
    guard("rdma_connect", || {
        let id = id::lookup(id)?;
        let p = unsafe { read_conn_param(conn_param, ibcm::cma::SIDR_REQ_USER_DATA)? };
        id::connect(&id, p)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_accept(id: *mut RdmaCmId, conn_param: *mut RdmaConnParam) -> c_int {
    guard("rdma_accept", || {
        let id = id::lookup(id)?;
        let p = unsafe { read_conn_param(conn_param, id::MAX_REP_PDATA)? };
        id::accept(&id, p)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_reject(
    id: *mut RdmaCmId,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    guard("rdma_reject", || {
        let id = id::lookup(id)?;
        let d = unsafe { id::pdata(private_data, private_data_len as usize, 255)? };
        id::reject(&id, d, id::REJ_CONSUMER_DEFINED)?;
        Ok(0)
    })
}

/// 1.3: reject with "vendor option not supported" (35).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut RdmaCmId,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    guard("rdma_reject_ece", || {
        let id = id::lookup(id)?;
        let d = unsafe { id::pdata(private_data, private_data_len as usize, 255)? };
        id::reject(&id, d, id::REJ_VENDOR_OPTION_NOT_SUPPORTED)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_disconnect(id: *mut RdmaCmId) -> c_int {
    guard("rdma_disconnect", || {
        let id = id::lookup(id)?;
        id::disconnect(&id)?;
        Ok(0)
    })
}

/// 1.2.
#[unsafe(no_mangle)]
pub extern "C" fn rdma_establish(id: *mut RdmaCmId) -> c_int {
    guard("rdma_establish", || {
        let id = id::lookup(id)?;
        id::establish(&id)?;
        Ok(0)
    })
}

/// 1.2.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut RdmaCmId,
    qp_attr: *mut IbvQpAttr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    guard("rdma_init_qp_attr", || {
        let id = id::lookup(id)?;
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: checked non-NULL; the caller's structs.
        let mask = id::init_qp_attr(&id, unsafe { &mut *qp_attr })?;
        unsafe { *qp_attr_mask = mask };
        Ok(0)
    })
}

/// 1.3.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut RdmaCmId, ece: *mut IbvEce) -> c_int {
    guard("rdma_set_local_ece", || {
        let id = id::lookup(id)?;
        let e = unsafe { ece.as_ref() }.ok_or(Errno::EINVAL)?;
        id::set_local_ece(&id, e)?;
        Ok(0)
    })
}

/// 1.3.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut RdmaCmId, ece: *mut IbvEce) -> c_int {
    guard("rdma_get_remote_ece", || {
        let id = id::lookup(id)?;
        if ece.is_null() {
            return Err(Errno::EINVAL);
        }
        let e = id::remote_ece(&id)?;
        unsafe { *ece = e };
        Ok(0)
    })
}

// ---------------------------------------------------------------------------
// Endpoints and addrinfo
// ---------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const RdmaAddrinfo,
    res: *mut *mut RdmaAddrinfo,
) -> c_int {
    let mut gai = 0;
    let r = guard("rdma_getaddrinfo", || {
        if res.is_null() {
            return Err(Errno::EINVAL);
        }
        match unsafe { addrinfo::getaddrinfo(node, service, hints) } {
            Ok(p) => {
                unsafe { *res = p };
                Ok(0)
            }
            Err(addrinfo::Failure::Gai(code)) => {
                gai = code;
                Ok(code)
            }
            Err(addrinfo::Failure::Errno(e)) => Err(e),
        }
    });
    if gai != 0 { gai } else { r }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut RdmaAddrinfo) {
    guard("rdma_freeaddrinfo", || {
        unsafe { addrinfo::free(res) };
        Ok(0)
    });
}

/// 1.4: resolves like `rdma_getaddrinfo` and reports
/// ADDRINFO_RESOLVED / ADDRINFO_ERROR on the id.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_resolve_addrinfo(
    id: *mut RdmaCmId,
    node: *const c_char,
    service: *const c_char,
    hints: *const RdmaAddrinfo,
) -> c_int {
    guard("rdma_resolve_addrinfo", || {
        let id = id::lookup(id)?;
        match unsafe { addrinfo::getaddrinfo(node, service, hints) } {
            Ok(p) => {
                lock(&id.st).addrinfo = Some(addrinfo::Owned(p));
                id::post_event(&id, RDMA_CM_EVENT_ADDRINFO_RESOLVED, 0);
            }
            Err(addrinfo::Failure::Gai(_)) => {
                id::post_event(&id, RDMA_CM_EVENT_ADDRINFO_ERROR, -libc::EHOSTUNREACH)
            }
            Err(addrinfo::Failure::Errno(e)) => return Err(e),
        }
        id::complete(&id)?;
        Ok(0)
    })
}

/// 1.4: a copy of what `rdma_resolve_addrinfo` found (free it with
/// `rdma_freeaddrinfo`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_query_addrinfo(
    id: *mut RdmaCmId,
    info: *mut *mut RdmaAddrinfo,
) -> c_int {
    guard("rdma_query_addrinfo", || {
        let id = id::lookup(id)?;
        if info.is_null() {
            return Err(Errno::EINVAL);
        }
        let s = lock(&id.st);
        let a = s.addrinfo.as_ref().ok_or(Errno::EINVAL)?;
        let copy = unsafe { addrinfo::dup(a.0) };
        if copy.is_null() {
            return Err(Errno::ENOMEM);
        }
        unsafe { *info = copy };
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut RdmaCmId,
    res: *mut RdmaAddrinfo,
    pd: *mut c_void,
    qp_init_attr: *mut IbvQpInitAttr,
) -> c_int {
    guard("rdma_create_ep", || {
        if id.is_null() {
            return Err(Errno::EINVAL);
        }
        let r = unsafe { res.as_ref() }.ok_or(Errno::EINVAL)?;
        let n = create_id(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            r.ai_port_space,
            r.ai_qp_type,
        )?;
        let run = || -> Result<(), Errno> {
            if r.ai_flags & RAI_PASSIVE != 0 {
                let a = unsafe { id::read_sockaddr(r.ai_src_addr)? };
                id::bind(&n, a)?;
                let mut s = lock(&n.st);
                s.ep_pd = pd;
                s.ep_qp_attr = unsafe { qp_init_attr.as_ref() }.map(|a| {
                    let mut a = *a;
                    a.qp_type = r.ai_qp_type as u32;
                    a
                });
                return Ok(());
            }
            let src = if r.ai_src_addr.is_null() {
                None
            } else {
                Some(unsafe { id::read_sockaddr(r.ai_src_addr)? })
            };
            let dst = unsafe { id::read_sockaddr(r.ai_dst_addr)? };
            // librdmacm's `rdma_create_ep` resolves with 2000 ms; the
            // route is `ai_route`'s path records when it has them.
            id::resolve_addr(&n, src, dst, 2000)?;
            if r.ai_route_len > 0 && !r.ai_route.is_null() {
                // SAFETY: the caller's `ai_route_len` bytes.
                let v =
                    unsafe { std::slice::from_raw_parts(r.ai_route.cast::<u8>(), r.ai_route_len) };
                id::set_option(&n, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, v)?;
                id::complete(&n)?;
            } else {
                id::resolve_route(&n)?;
            }
            if !qp_init_attr.is_null() {
                // The QP type is the address's (librdmacm forces it too).
                unsafe { (*qp_init_attr).qp_type = n.public().qp_type as u32 };
                // SAFETY: the caller's attributes, checked non-NULL.
                unsafe { crate::qp::create_qp(&n, pd, qp_init_attr) }?;
            }
            if r.ai_connect_len > 0 && !r.ai_connect.is_null() {
                let c = unsafe { id::pdata(r.ai_connect, r.ai_connect_len, 255)? };
                lock(&n.st).connect_prefix = c.to_vec();
            }
            Ok(())
        };
        if let Err(e) = run() {
            let _ = id::destroy(&n);
            return Err(e);
        }
        unsafe { *id = n.public_ptr() };
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_destroy_ep(id: *mut RdmaCmId) {
    guard("rdma_destroy_ep", || {
        let n = id::lookup(id)?;
        crate::qp::destroy_qp(&n);
        crate::qp::destroy_srq(&n);
        id::destroy(&n)?;
        Ok(0)
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_get_request(listen: *mut RdmaCmId, id: *mut *mut RdmaCmId) -> c_int {
    guard("rdma_get_request", || {
        let l = id::lookup(listen)?;
        if id.is_null() {
            return Err(Errno::EINVAL);
        }
        let child = id::get_request(&l)?;
        let (pd, attr) = {
            let s = lock(&l.st);
            (s.ep_pd, s.ep_qp_attr)
        };
        if let Some(mut a) = attr {
            let pd = if pd.is_null() { l.public().pd } else { pd };
            // SAFETY: our own copy of the listener's attributes.
            if let Err(e) = unsafe { crate::qp::create_qp(&child, pd, &mut a) } {
                let _ = id::reject(&child, &[], id::REJ_CONSUMER_DEFINED);
                let _ = id::destroy(&child);
                return Err(e);
            }
        }
        unsafe { *id = child.public_ptr() };
        Ok(0)
    })
}
