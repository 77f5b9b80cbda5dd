//! QPs, SRQs and devices of the rdma_cm API: the parts that
//! need a verbs device (`id->verbs`). Ids on a software device (`soft:`,
//! see `select`) have none; these calls then fail as librdmacm fails
//! without a device context: `EINVAL` (QP/SRQ on an id whose `verbs` is
//! NULL). `rdma_get_devices` lists the
//! verbs devices of `verbs::devices` (empty when the host has none).
//!
//! SRQs follow librdmacm (cma.c `rdma_create_srq_ex`, `rdma_create_qp_ex`,
//! `rdma_destroy_srq`): `id->srq` is used by `rdma_create_qp[_ex]` when
//! the attributes name no SRQ; an XRC SRQ (`IBV_SRQT_XRC`, or
//! `rdma_create_srq` on an `IBV_QPT_XRC_RECV` id) gets the device's XRC
//! domain and a CQ; `rdma_destroy_id` destroys the SRQ the id still has.

use crate::abi::*;
use crate::channel::lock;
use crate::exports::guard;
use crate::id::{self, IdPriv};
use crate::verbs;
use ibcm::api::Errno;
use ibcm::api::ibv;
use ibcm::api::qp_type as cm_qp_type;
use ibcm::log::{DEBUG, ERROR};
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
/// default PD); the granted capabilities and the CQs and SRQ used are
/// written back into `attr`, as librdmacm copies them back.
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
    basic.srq = ex.srq;
    Ok(())
}

/// `rdma_destroy_qp`.
pub fn destroy_qp(id: &Arc<IdPriv>) {
    if let Err(e) = id::destroy_qp(id) {
        ibcm_log!(DEBUG, "librdmacm (ibcm): rdma_destroy_qp: {e}");
    }
}

/// `rdma_create_srq_ex`: an SRQ on the id's device (`verbs::create_srq`
/// does librdmacm's defaults: the id's PD, for XRC the device's XRC
/// domain and a CQ), kept in `id->srq`; an XRC SRQ's CQ and channel become
/// `id->recv_cq` / `id->recv_cq_channel`. `EINVAL` when the id already has
/// an SRQ (librdmacm would replace it and leak the first) or no verbs
/// device.
///
/// # Safety
/// `attr` must point to a writable `struct ibv_srq_init_attr_ex`.
pub unsafe fn create_srq_ex(
    id: &Arc<IdPriv>,
    attr: *mut verbs::IbvSrqInitAttrEx,
) -> Result<(), Errno> {
    let mut s = lock(&id.st);
    if !id.public().srq.is_null() || s.srq.is_some() {
        ibcm_log!(
            DEBUG,
            "librdmacm (ibcm): rdma_create_srq: the id already has an SRQ"
        );
        return Err(Errno::EINVAL);
    }
    let Some(vdev) = s.vdev else {
        return Err(no_verbs("rdma_create_srq"));
    };
    // SAFETY: the caller's writable struct; its pointers are the
    // application's objects; the PD is the id's default one.
    let r = unsafe { verbs::create_srq(vdev, s.pd.cast(), id.public_ptr().cast(), &mut *attr) }?;
    let p = id.public_mut();
    p.srq = r.srq.cast();
    s.srq = Some(r);
    srq_cq_public(p, Some(&r));
    Ok(())
}

/// `rdma_create_srq`: a basic SRQ (an XRC one on an `IBV_QPT_XRC_RECV`
/// id) on `pd` (NULL: the id's PD) through [`create_srq_ex`]; the limits
/// granted are written back to `attr`.
///
/// # Safety
/// `attr` must point to a writable `struct ibv_srq_init_attr`.
pub unsafe fn create_srq(
    id: &Arc<IdPriv>,
    pd: *mut c_void,
    attr: *mut verbs::IbvSrqInitAttr,
) -> Result<(), Errno> {
    // SAFETY: the caller's struct.
    let basic = unsafe { &mut *attr };
    let mut ex = verbs::IbvSrqInitAttrEx {
        srq_context: basic.srq_context,
        attr: basic.attr,
        comp_mask: verbs::srq_init_attr::TYPE | verbs::srq_init_attr::PD,
        srq_type: if id.public().qp_type == verbs::qpt::XRC_RECV as c_int {
            verbs::srqt::XRC
        } else {
            verbs::srqt::BASIC
        },
        pd: pd.cast(),
        ..verbs::IbvSrqInitAttrEx::default()
    };
    let r = unsafe { create_srq_ex(id, &mut ex) };
    basic.srq_context = ex.srq_context;
    basic.attr = ex.attr;
    r
}

/// `rdma_destroy_srq`: the SRQ made through the id and what was made with
/// it; nothing on an id without one. An SRQ still in use (a QP on it:
/// `EBUSY`, logged) stays, in `id->srq`, for a later call or
/// `rdma_destroy_id`.
pub fn destroy_srq(id: &Arc<IdPriv>) {
    let mut s = lock(&id.st);
    let Some(mut r) = s.srq.take() else {
        if !id.public().srq.is_null() {
            ibcm_log!(
                DEBUG,
                "librdmacm (ibcm): rdma_destroy_srq: id->srq was not created by rdma_create_srq; \
                 left alone"
            );
        }
        return;
    };
    // SAFETY: our objects; the application let go of them.
    let done = unsafe { verbs::destroy_srq(&mut r) };
    let p = id.public_mut();
    if r.srq.is_null() {
        p.srq = std::ptr::null_mut();
    }
    if r.cq.is_null() {
        // The id's receive CQ is its QP's again (librdmacm leaves NULL).
        let q = s.qpres;
        p.recv_cq = q.map_or(std::ptr::null_mut(), |q| q.recv_cq.cast());
        p.recv_cq_channel = q.map_or(std::ptr::null_mut(), |q| q.recv_cq_channel.cast());
    }
    if !r.is_empty() {
        ibcm_log!(
            ERROR,
            "librdmacm (ibcm): rdma_destroy_srq: {} (a QP still on the SRQ?); kept for a later \
             rdma_destroy_srq or rdma_destroy_id",
            done.err().map_or_else(String::new, |e| e.to_string())
        );
        s.srq = Some(r);
    }
}

/// `rdma_destroy_id` on an id with an SRQ (called with the id's state
/// locked, its SRQ taken out): destroyed; one still in use is logged and
/// left to the application.
pub(crate) fn srq_released(id: &IdPriv, r: &verbs::SrqResources) {
    let mut r = *r;
    // SAFETY: our objects; the id is going away.
    if let Err(e) = unsafe { verbs::destroy_srq(&mut r) } {
        ibcm_log!(
            DEBUG,
            "librdmacm (ibcm): rdma_destroy_id: the id's SRQ could not be destroyed ({e}: a QP \
             still on it); left to the application"
        );
    }
    let p = id.public_mut();
    p.srq = std::ptr::null_mut();
}

/// `id->recv_cq` / `id->recv_cq_channel` are an XRC SRQ's CQ while the
/// SRQ exists (librdmacm's `ucma_create_cqs` in `rdma_create_srq_ex`).
pub(crate) fn srq_cq_public(p: &mut RdmaCmId, srq: Option<&verbs::SrqResources>) {
    if let Some(r) = srq.filter(|r| !r.cq.is_null()) {
        p.recv_cq = r.cq.cast();
        p.recv_cq_channel = r.cq_channel.cast();
    }
}

/// librdmacm's `rdma_create_qp_ex` rules for the SRQ of the id: CQs the
/// attributes leave out are the id's (an XRC SRQ's CQ), a CQ other than
/// the id's is `EINVAL`, `id->srq` is the QP's SRQ unless the attributes
/// name one, and an `IBV_QPT_XRC_RECV` id's QP is in the device's XRC
/// domain unless they name one (`xrcd`: the device's,
/// `verbs::Device::xrcd_get`).
pub(crate) fn qp_attr_from_srq(
    p: &RdmaCmId,
    srq: Option<&verbs::SrqResources>,
    xrcd: impl FnOnce() -> Result<*mut verbs::IbvXrcd, Errno>,
    attr: &mut verbs::IbvQpInitAttrEx,
) -> Result<(), Errno> {
    // Before its QP exists an id has a CQ only from an XRC SRQ (a receive
    // one).
    let id_recv = srq.map_or(std::ptr::null_mut(), |r| r.cq);
    if !id_recv.is_null() && !attr.recv_cq.is_null() && attr.recv_cq != id_recv {
        ibcm_log!(
            DEBUG,
            "librdmacm (ibcm): rdma_create_qp: the attributes name another CQ than the id's"
        );
        return Err(Errno::EINVAL);
    }
    if attr.recv_cq.is_null() {
        attr.recv_cq = id_recv;
    }
    if attr.srq.is_null() && !p.srq.is_null() {
        attr.srq = p.srq.cast();
    }
    if p.qp_type == verbs::qpt::XRC_RECV as c_int
        && (attr.comp_mask & verbs::QP_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null())
    {
        attr.xrcd = xrcd()?;
        attr.comp_mask |= verbs::QP_INIT_ATTR_XRCD;
    }
    Ok(())
}

/// The SRQ bit of a REQ or REP: whether the id's QP has an SRQ, or the
/// application's `conn_param->srq` without a QP (librdmacm's
/// `rdma_connect` and `rdma_accept`).
pub(crate) fn srq_bit(qp: *mut c_void, param: u8) -> u8 {
    if qp.is_null() {
        return param;
    }
    // SAFETY: `id->qp` is the application's live QP.
    u8::from(!unsafe { ibv::qp_view(qp.cast()) }.srq.is_null())
}

/// The REQ's QP type (its transport service type) for an id, as the
/// kernel's ucma decides it (`ucma_get_qp_type`, `cma_connect_ib`):
/// `RDMA_PS_TCP` is always RC; `RDMA_PS_IB` sends the id's own type (UC,
/// or XRC for `IBV_QPT_XRC_SEND`, as the kernel's `IB_QPT_XRC_INI`).
pub(crate) fn req_qp_type(ps: u16, qp_type: c_int) -> u32 {
    if ps != ibcm::cma::port_space::IB {
        return cm_qp_type::RC;
    }
    match qp_type as u32 {
        verbs::qpt::UC => cm_qp_type::UC,
        verbs::qpt::XRC_SEND => cm_qp_type::XRC_INI,
        _ => cm_qp_type::RC,
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
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut RdmaCmId,
    pd: *mut c_void,
    attr: *mut verbs::IbvSrqInitAttr,
) -> c_int {
    guard("rdma_create_srq", || {
        let id = id::lookup(id)?;
        if attr.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: checked non-NULL; the application's attributes.
        unsafe { create_srq(&id, pd, attr) }?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut RdmaCmId,
    attr: *mut verbs::IbvSrqInitAttrEx,
) -> c_int {
    guard("rdma_create_srq_ex", || {
        let id = id::lookup(id)?;
        if attr.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: checked non-NULL; the application's attributes.
        unsafe { create_srq_ex(&id, attr) }?;
        Ok(0)
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

#[cfg(test)]
mod tests {
    use super::*;
    use ibcm::cma::port_space;

    #[test]
    fn req_qp_type_as_the_kernel() {
        let xs = verbs::qpt::XRC_SEND as c_int;
        let uc = verbs::qpt::UC as c_int;
        let rc = verbs::qpt::RC as c_int;
        // RDMA_PS_TCP is RC whatever the id says (ucma_get_qp_type).
        assert_eq!(req_qp_type(port_space::TCP, xs), cm_qp_type::RC);
        assert_eq!(req_qp_type(port_space::TCP, uc), cm_qp_type::RC);
        // RDMA_PS_IB sends the id's type: XRC_SEND as IB_QPT_XRC_INI.
        assert_eq!(req_qp_type(port_space::IB, xs), cm_qp_type::XRC_INI);
        assert_eq!(req_qp_type(port_space::IB, uc), cm_qp_type::UC);
        assert_eq!(req_qp_type(port_space::IB, rc), cm_qp_type::RC);
        assert_eq!(cm_qp_type::XRC_INI, verbs::qpt::XRC_SEND);
    }

    #[test]
    fn srq_bit_without_a_qp_is_the_applications() {
        assert_eq!(srq_bit(std::ptr::null_mut(), 0), 0);
        assert_eq!(srq_bit(std::ptr::null_mut(), 1), 1);
    }

    #[test]
    fn qp_attributes_from_the_ids_srq() {
        // Stand-in pointers: qp_attr_from_srq only copies them.
        let fake = |n: usize| n as *mut c_void;
        let no_xrcd = || -> Result<*mut verbs::IbvXrcd, Errno> { panic!("no XRC domain here") };
        // SAFETY: all-zero is a valid RdmaCmId.
        let mut p: RdmaCmId = unsafe { std::mem::zeroed() };
        p.qp_type = verbs::qpt::RC as c_int;
        // No SRQ: the attributes stay as they are.
        let mut a = verbs::IbvQpInitAttrEx::default();
        qp_attr_from_srq(&p, None, no_xrcd, &mut a).unwrap();
        assert!(a.srq.is_null() && a.recv_cq.is_null() && a.xrcd.is_null());
        assert_eq!(a.comp_mask, 0);
        // A basic SRQ: the QP takes id->srq; one named in the attributes wins.
        let basic = verbs::SrqResources {
            srq: fake(0x1000).cast(),
            cq: std::ptr::null_mut(),
            cq_channel: std::ptr::null_mut(),
        };
        p.srq = basic.srq.cast();
        let mut a = verbs::IbvQpInitAttrEx::default();
        qp_attr_from_srq(&p, Some(&basic), no_xrcd, &mut a).unwrap();
        assert_eq!(a.srq, basic.srq);
        assert!(a.recv_cq.is_null());
        let mut a = verbs::IbvQpInitAttrEx {
            srq: fake(0x2000).cast(),
            ..Default::default()
        };
        qp_attr_from_srq(&p, Some(&basic), no_xrcd, &mut a).unwrap();
        assert_eq!(a.srq, fake(0x2000).cast());
        // An XRC SRQ's CQ is the QP's receive CQ; another one is EINVAL.
        let xrc = verbs::SrqResources {
            srq: fake(0x3000).cast(),
            cq: fake(0x3100).cast(),
            cq_channel: fake(0x3200).cast(),
        };
        p.srq = xrc.srq.cast();
        p.qp_type = verbs::qpt::XRC_RECV as c_int;
        let mut a = verbs::IbvQpInitAttrEx::default();
        qp_attr_from_srq(&p, Some(&xrc), || Ok(fake(0x4000).cast()), &mut a).unwrap();
        assert_eq!((a.srq, a.recv_cq), (xrc.srq, xrc.cq));
        // An IBV_QPT_XRC_RECV id's QP is in the device's XRC domain...
        assert_eq!(a.xrcd, fake(0x4000).cast());
        assert_eq!(a.comp_mask, verbs::QP_INIT_ATTR_XRCD);
        // ...unless the attributes name one; a device without XRC: its error.
        let mut a = verbs::IbvQpInitAttrEx {
            comp_mask: verbs::QP_INIT_ATTR_XRCD,
            xrcd: fake(0x5000).cast(),
            ..Default::default()
        };
        qp_attr_from_srq(&p, Some(&xrc), no_xrcd, &mut a).unwrap();
        assert_eq!(a.xrcd, fake(0x5000).cast());
        let mut a = verbs::IbvQpInitAttrEx::default();
        let e = qp_attr_from_srq(&p, Some(&xrc), || Err(Errno(libc::EOPNOTSUPP)), &mut a);
        assert_eq!(e, Err(Errno(libc::EOPNOTSUPP)));
        let mut a = verbs::IbvQpInitAttrEx {
            recv_cq: fake(0x6000).cast(),
            ..Default::default()
        };
        let e = qp_attr_from_srq(&p, Some(&xrc), || Ok(fake(0x4000).cast()), &mut a);
        assert_eq!(e, Err(Errno::EINVAL));
    }
}
