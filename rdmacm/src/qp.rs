//! QPs, SRQs and devices of the rdma_cm API: the parts that
//! need a verbs device (`id->verbs`). Ids on a software device (`soft:`,
//! see `select`) have none; these calls then fail as librdmacm fails
//! without a device context: `EINVAL` (QP/SRQ on an id whose `verbs` is
//! NULL). `rdma_get_devices` lists the
//! verbs devices of `verbs::devices` (empty when the host has none).

use crate::abi::*;
use crate::exports::guard;
use crate::id::{self, IdPriv};
use crate::verbs;
use ibcm::api::Errno;
use ibcm::api::ibv;
use ibcm::log::DEBUG;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

fn no_verbs(what: &str) -> Errno {
    ibcm_log!(
        DEBUG,
        "librdmacm (ibcm): {what} needs a verbs device; this id has none (id->verbs is NULL: \
         a soft device, CM only)"
    );
    Errno::EINVAL
}

/// `rdma_create_qp`: the basic attributes with `pd` (NULL: the id's
/// default PD); the granted capabilities and the CQs used are written
/// back into `attr`, as `ibv_create_qp` does.
///
/// # Safety
/// `attr` must point to a writable `struct ibv_qp_init_attr`.
pub unsafe fn create_qp(
    id: &Arc<IdPriv>,
    pd: *mut c_void,
    attr: *mut IbvQpInitAttr,
) -> Result<(), Errno> {
    // SAFETY: the caller's writable struct.
    let basic = unsafe { &mut *attr };
    let mut ex = ibv::IbvQpInitAttrEx::from_basic(basic, pd.cast());
    if pd.is_null() {
        ex.comp_mask &= !verbs::QP_INIT_ATTR_PD;
    }
    id::create_qp(id, &mut ex)?;
    basic.cap = ex.cap;
    basic.send_cq = ex.send_cq;
    basic.recv_cq = ex.recv_cq;
    Ok(())
}

/// `rdma_destroy_qp`.
pub fn destroy_qp(id: &Arc<IdPriv>) {
    if let Err(e) = id::destroy_qp(id) {
        ibcm_log!(DEBUG, "librdmacm (ibcm): rdma_destroy_qp: {e}");
    }
}

/// `rdma_destroy_srq`: nothing to do on an id without an SRQ.
pub fn destroy_srq(id: &Arc<IdPriv>) {
    if !id.public().srq.is_null() {
        ibcm_log!(
            DEBUG,
            "librdmacm (ibcm): rdma_destroy_srq: the SRQ was not created here; left alone"
        );
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut RdmaCmId,
    pd: *mut c_void,
    attr: *mut IbvQpInitAttr,
) -> c_int {
    guard("rdma_create_qp", || {
        let id = id::lookup(id)?;
        if attr.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: checked non-NULL; the application's attributes.
        unsafe { create_qp(&id, pd, attr) }?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_create_qp_ex(id: *mut RdmaCmId, attr: *mut c_void) -> c_int {
    guard("rdma_create_qp_ex", || {
        let id = id::lookup(id)?;
        if attr.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: the application's struct ibv_qp_init_attr_ex.
        let ex = unsafe { &mut *attr.cast::<ibv::IbvQpInitAttrEx>() };
        id::create_qp(&id, ex)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_destroy_qp(id: *mut RdmaCmId) {
    guard("rdma_destroy_qp", || {
        destroy_qp(&id::lookup(id)?);
        Ok(0)
    });
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_create_srq(id: *mut RdmaCmId, _pd: *mut c_void, attr: *mut c_void) -> c_int {
    guard("rdma_create_srq", || {
        let id = id::lookup(id)?;
        if attr.is_null() || !id.public().srq.is_null() {
            return Err(Errno::EINVAL);
        }
        Err(no_verbs("rdma_create_srq"))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_create_srq_ex(id: *mut RdmaCmId, attr: *mut c_void) -> c_int {
    guard("rdma_create_srq_ex", || {
        let id = id::lookup(id)?;
        if attr.is_null() || !id.public().srq.is_null() {
            return Err(Errno::EINVAL);
        }
        Err(no_verbs("rdma_create_srq_ex"))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rdma_destroy_srq(id: *mut RdmaCmId) {
    guard("rdma_destroy_srq", || {
        destroy_srq(&id::lookup(id)?);
        Ok(0)
    });
}

/// The verbs contexts this library uses (`verbs::devices`, the same
/// `struct ibv_context *` objects as `id->verbs`), NULL-terminated; an
/// empty list when the host has no usable verbs device (software devices
/// need none). The array is the caller's, for `rdma_free_devices`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut c_void {
    let ctxs: Vec<*mut c_void> = crate::verbs::devices()
        .map(|d| d.iter().map(|d| d.context().cast()).collect())
        .unwrap_or_default();
    let slot = std::mem::size_of::<*mut c_void>();
    let list = unsafe { libc::calloc(ctxs.len() + 1, slot) } as *mut *mut c_void;
    if list.is_null() {
        crate::exports::set_errno(libc::ENOMEM);
        if !num_devices.is_null() {
            unsafe { *num_devices = 0 };
        }
        return std::ptr::null_mut();
    }
    for (i, c) in ctxs.iter().enumerate() {
        // SAFETY: `list` has room for every context and the NULL after them.
        unsafe { *list.add(i) = *c };
    }
    if !num_devices.is_null() {
        unsafe { *num_devices = ctxs.len() as c_int };
    }
    list
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut c_void) {
    unsafe { libc::free(list.cast()) };
}
