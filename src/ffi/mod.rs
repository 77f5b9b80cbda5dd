//! The C ABI: the kernel's `ib_cm.h` functions plus the `ibcm.h` glue.
//!
//! Every entry point is thin: check pointers and lengths, convert the C
//! structs (`convert.rs`), call the Rust API (`crate::api`), map errors to
//! negative errno values. No
//! panic crosses the boundary (`catch_unwind` → `-EIO` and a log line).
//! Pointers are checked against registries of live devices and ids, so
//! NULL, freed or foreign pointers give `-EINVAL` instead of a crash.
//!
//! # Safety
//! The entry points are `unsafe extern "C"`: id and device pointers are
//! checked against the registries, but the other pointer arguments (param
//! structs, private data, path records, output buffers) must point to valid
//! memory of the size the kernel API documents, as in the kernel.
#![allow(clippy::missing_safety_doc)]

pub mod convert;

use crate::abi::*;
use crate::api::{
    self, ApiResult, CmId, Device, DeviceCounters, DeviceOptions, Ece, Errno, Event, Gid, PathRec,
    RepParams, ReqParams, RustHandler, SidrRepParams, SidrReqParams, errno,
};
use crate::log::{ERROR, WARN};
use crate::wire::pdata;
use convert::{path_from_c, path_to_c, qp_attr_to_c, with_c_event};
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, LazyLock, Mutex};

// ------------------------------------------------------------ registries

static DEVICES: LazyLock<Mutex<HashMap<usize, Arc<Device>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn id_of(p: *mut IbCmId) -> Result<CmId, Errno> {
    if is_err(p) {
        return Err(Errno::EINVAL);
    }
    api::lookup(p).ok_or(Errno::EINVAL)
}

fn device_of(p: *mut c_void) -> Result<Arc<Device>, Errno> {
    if p.is_null() || is_err(p) {
        return Err(Errno::EINVAL);
    }
    lock(&DEVICES)
        .get(&(p as usize))
        .cloned()
        .ok_or(Errno::EINVAL)
}

// -------------------------------------------------------------- handlers

/// The Rust handler of every id made through the C API: builds the C event
/// and calls the id's `cm_handler`, read at each event (C code may set it,
/// and `context`, after creating the id; REQ ids inherit both from their
/// listener). One shared value, so `ib_cm_insert_listen` calls with the
/// same C handler still find each other's listener.
static C_HANDLER: LazyLock<RustHandler> = LazyLock::new(|| Arc::new(deliver_c));

fn deliver_c(id: &CmId, ev: &Event) -> i32 {
    let Some(f) = id.public().cm_handler else {
        return 0;
    };
    let p = id.c_ptr();
    with_c_event(id.device(), ev, api::listen_id(ev), |cev| unsafe {
        f(p, cev)
    })
}

// --------------------------------------------------------------- helpers

/// Runs `f`, turning a panic into `-EIO` with a log line.
fn guard(what: &str, f: impl FnOnce() -> Result<c_int, Errno>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => -e.0,
        Err(_) => {
            ibcm_log!(
                ERROR,
                "{what}: internal error (panic caught); returning -EIO"
            );
            -errno::EIO
        }
    }
}

fn guard_ptr<T>(what: &str, f: impl FnOnce() -> Result<*mut T, Errno>) -> *mut T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => err_ptr(-e.0),
        Err(_) => {
            ibcm_log!(
                ERROR,
                "{what}: internal error (panic caught); returning ERR_PTR(-EIO)"
            );
            err_ptr(-errno::EIO)
        }
    }
}

fn ok(r: ApiResult) -> Result<c_int, Errno> {
    r.map(|_| 0)
}

/// A caller's byte area with the kernel's limit check *before* any byte is
/// read: a length over `max` with a non-NULL pointer is `-EINVAL`; NULL
/// means none (its length is ignored, as the kernel only copies when the
/// pointer is set).
unsafe fn area<'a>(p: *const c_void, len: u8, max: usize) -> Result<&'a [u8], Errno> {
    if !p.is_null() && len as usize > max {
        return Err(Errno::EINVAL);
    }
    Ok(unsafe { bytes(p, len) })
}

unsafe fn bytes<'a>(p: *const c_void, len: u8) -> &'a [u8] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(p as *const u8, len as usize) }
    }
}

unsafe fn path_arg(p: *const SaPathRec) -> Result<Option<PathRec>, Errno> {
    if p.is_null() {
        return Ok(None);
    }
    path_from_c(unsafe { &*p }).map(Some).ok_or(Errno::EINVAL)
}

unsafe fn gid_attr_arg(p: *const IbGidAttr) -> Option<(u8, u16)> {
    if p.is_null() {
        None
    } else {
        let a = unsafe { &*p };
        Some((a.port_num as u8, a.index))
    }
}

// ------------------------------------------------------------ ibcm.h glue

/// `ibcm_open_device`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_open_device(name: *const c_char) -> *mut c_void {
    guard_ptr("ibcm_open_device", || {
        let name = if name.is_null() {
            std::env::var("IBCM_DEVICE").unwrap_or_else(|_| "soft:127.0.0.1".to_string())
        } else {
            unsafe { CStr::from_ptr(name) }
                .to_str()
                .map_err(|_| Errno::EINVAL)?
                .to_string()
        };
        let dev = Device::open(&name, DeviceOptions::default())?;
        let p = dev.c_ptr();
        lock(&DEVICES).insert(p as usize, dev);
        Ok(p)
    })
}

/// `ibcm_close_device`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_close_device(device: *mut c_void) {
    guard("ibcm_close_device", || {
        let Some(dev) = lock(&DEVICES).remove(&(device as usize)) else {
            ibcm_log!(ERROR, "ibcm_close_device({device:?}): not an open device");
            return Err(Errno::EINVAL);
        };
        dev.close();
        Ok(0)
    });
}

/// `ibcm_query_gid`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_query_gid(
    device: *mut c_void,
    port_num: u32,
    index: c_int,
    gid: *mut IbGid,
) -> c_int {
    guard("ibcm_query_gid", || {
        let dev = device_of(device)?;
        if gid.is_null() || index < 0 {
            return Err(Errno::EINVAL);
        }
        let g = dev.query_gid(port_num, index as usize)?;
        unsafe { *gid = IbGid::from_raw(g.0) };
        Ok(0)
    })
}

/// `ibcm_init_path`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_init_path(
    device: *mut c_void,
    port_num: u32,
    dgid: *const IbGid,
    rec: *mut SaPathRec,
) -> c_int {
    guard("ibcm_init_path", || {
        let dev = device_of(device)?;
        if dgid.is_null() || rec.is_null() {
            return Err(Errno::EINVAL);
        }
        let p = dev.init_path(port_num, Gid(unsafe { (*dgid).as_raw() }))?;
        unsafe { *rec = path_to_c(&p) };
        Ok(0)
    })
}

/// `ibcm_gid_from_string`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_gid_from_string(ip: *const c_char, gid: *mut IbGid) -> c_int {
    guard("ibcm_gid_from_string", || {
        if ip.is_null() || gid.is_null() {
            return Err(Errno::EINVAL);
        }
        let s = unsafe { CStr::from_ptr(ip) }
            .to_str()
            .map_err(|_| Errno::EINVAL)?;
        let g: Gid = s.trim().parse().map_err(|_| Errno::EINVAL)?;
        unsafe { *gid = IbGid::from_raw(g.0) };
        Ok(0)
    })
}

/// Every counter of a device by name: the CM's and the transport's
/// (each struct's one list), then the device's own two.
fn counter_sources(d: &DeviceCounters) -> impl Iterator<Item = (&'static str, &[u64])> {
    let own = [
        ("live_ids", std::slice::from_ref(&d.live_ids)),
        ("pending_timers", std::slice::from_ref(&d.pending_timers)),
    ];
    d.cm.fields()
        .into_iter()
        .chain(d.transport.fields())
        .chain(own)
}

/// A device's counters in the C layout: each member of `struct
/// ibcm_counters` from the counter of its name (`c_counters_name_every_counter_once`
/// checks that each has exactly one).
fn counters_to_c(d: &DeviceCounters) -> IbcmCounters {
    let mut c = IbcmCounters::default();
    for (name, member) in c.members_mut() {
        if let Some((_, v)) =
            counter_sources(d).find(|(n, v)| *n == name && v.len() == member.len())
        {
            member.copy_from_slice(v);
        }
    }
    c
}

/// `ibcm_get_counters`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_get_counters(
    device: *mut c_void,
    counters: *mut IbcmCounters,
    size: usize,
) -> c_int {
    guard("ibcm_get_counters", || {
        let dev = device_of(device)?;
        if counters.is_null() {
            return Err(Errno::EINVAL);
        }
        let c = counters_to_c(&dev.all_counters());
        let n = size.min(std::mem::size_of::<IbcmCounters>());
        unsafe {
            std::ptr::copy_nonoverlapping(&c as *const _ as *const u8, counters as *mut u8, n)
        };
        Ok(n as c_int)
    })
}

/// `ibcm_pcap_start`: capture every CM MAD of the process to a pcapng file.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_pcap_start(path: *const c_char, max_bytes: u64) -> c_int {
    guard("ibcm_pcap_start", || {
        if path.is_null() {
            return Err(Errno::EINVAL);
        }
        let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
        if bytes.is_empty() {
            return Err(Errno::EINVAL);
        }
        let path = std::path::Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes),
        );
        api::pcap_start(path, max_bytes).map(|()| 0)
    })
}

/// `ibcm_pcap_stop`: end the capture, flushing and closing the file.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_pcap_stop() -> c_int {
    guard("ibcm_pcap_stop", || api::pcap_stop().map(|()| 0))
}

// ---------------------------------------------------------------- ib_cm.h

/// `ib_create_cm_id`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_create_cm_id(
    device: *mut c_void,
    cm_handler: IbCmHandler,
    context: *mut c_void,
) -> *mut IbCmId {
    guard_ptr("ib_create_cm_id", || {
        let dev = device_of(device)?;
        let id = dev.create_id(cm_handler, context, Some(C_HANDLER.clone()))?;
        Ok(id.c_ptr())
    })
}

/// `ib_destroy_cm_id`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_destroy_cm_id(cm_id: *mut IbCmId) {
    guard("ib_destroy_cm_id", || {
        let id = match id_of(cm_id) {
            Ok(id) => id,
            Err(e) => {
                ibcm_log!(ERROR, "ib_destroy_cm_id({cm_id:?}): not a live cm_id");
                return Err(e);
            }
        };
        // Refused from the id's own callback (logged there).
        id.destroy()?;
        Ok(0)
    });
}

/// `ib_cm_listen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_cm_listen(cm_id: *mut IbCmId, service_id: Be64) -> c_int {
    guard("ib_cm_listen", || {
        ok(id_of(cm_id)?.listen(u64::from_be(service_id)))
    })
}

/// `ib_cm_insert_listen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_cm_insert_listen(
    device: *mut c_void,
    cm_handler: IbCmHandler,
    service_id: Be64,
) -> *mut IbCmId {
    guard_ptr("ib_cm_insert_listen", || {
        let dev = device_of(device)?;
        let id = dev.insert_listen(
            cm_handler,
            u64::from_be(service_id),
            Some(C_HANDLER.clone()),
        )?;
        Ok(id.c_ptr())
    })
}

/// `ib_send_cm_req`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_req(cm_id: *mut IbCmId, param: *mut IbCmReqParam) -> c_int {
    guard("ib_send_cm_req", || {
        let id = id_of(cm_id)?;
        if param.is_null() {
            return Err(Errno::EINVAL);
        }
        let p = unsafe { &*param };
        let primary = unsafe { path_arg(p.primary_path) }?.ok_or(Errno::EINVAL)?;
        let params = req_param_bytes!(bytes_from! {
            p => ReqParams {
                primary_path: primary,
                primary_path_inbound: unsafe { path_arg(p.primary_path_inbound) }?,
                primary_path_outbound: unsafe { path_arg(p.primary_path_outbound) }?,
                alternate_path: unsafe { path_arg(p.alternate_path) }?,
                sgid_attr: unsafe { gid_attr_arg(p.ppath_sgid_attr) },
                service_id: u64::from_be(p.service_id),
                qp_num: p.qp_num,
                qp_type: p.qp_type,
                starting_psn: p.starting_psn,
                private_data: unsafe { area(p.private_data, p.private_data_len, pdata::REQ) }?
                    .to_vec(),
                ece: Ece {
                    vendor_id: p.ece.vendor_id,
                    attr_mod: p.ece.attr_mod,
                },
            }
        });
        ok(id.send_req(&params))
    })
}

/// `ib_send_cm_rep`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_rep(cm_id: *mut IbCmId, param: *mut IbCmRepParam) -> c_int {
    guard("ib_send_cm_rep", || {
        let id = id_of(cm_id)?;
        if param.is_null() {
            return Err(Errno::EINVAL);
        }
        let p = unsafe { &*param };
        if p.qp_num & !0xff_ffff != 0 {
            ibcm_log!(
                WARN,
                "ib_send_cm_rep: QPN {:#x} has bits above 24; they are dropped",
                p.qp_num
            );
        }
        let params = rep_param_bytes!(bytes_from! {
            p => RepParams {
                qp_num: p.qp_num,
                starting_psn: p.starting_psn,
                private_data: unsafe { area(p.private_data, p.private_data_len, pdata::REP) }?
                    .to_vec(),
                ece: Ece {
                    vendor_id: p.ece.vendor_id,
                    attr_mod: p.ece.attr_mod,
                },
            }
        });
        ok(id.send_rep(&params))
    })
}

/// `ib_send_cm_rtu`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_rtu(
    cm_id: *mut IbCmId,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    guard("ib_send_cm_rtu", || {
        ok(id_of(cm_id)?.send_rtu(unsafe { area(private_data, private_data_len, pdata::RTU) }?))
    })
}

/// `ib_send_cm_dreq`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_dreq(
    cm_id: *mut IbCmId,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    guard("ib_send_cm_dreq", || {
        ok(id_of(cm_id)?.send_dreq(unsafe { area(private_data, private_data_len, pdata::DREQ) }?))
    })
}

/// `ib_send_cm_drep`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_drep(
    cm_id: *mut IbCmId,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    guard("ib_send_cm_drep", || {
        ok(id_of(cm_id)?.send_drep(unsafe { area(private_data, private_data_len, pdata::DREP) }?))
    })
}

/// `ib_cm_notify`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_cm_notify(cm_id: *mut IbCmId, event: IbEventType) -> c_int {
    guard("ib_cm_notify", || ok(id_of(cm_id)?.notify(event)))
}

/// `ib_send_cm_rej`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_rej(
    cm_id: *mut IbCmId,
    reason: IbCmRejReason,
    ari: *mut c_void,
    ari_length: u8,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    guard("ib_send_cm_rej", || {
        let id = id_of(cm_id)?;
        let ari = unsafe { area(ari, ari_length, pdata::REJ_ARI) }?;
        let pd = unsafe { area(private_data, private_data_len, pdata::REJ) }?;
        ok(id.send_rej(reason, ari, pd))
    })
}

/// `ib_prepare_cm_mra`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_prepare_cm_mra(cm_id: *mut IbCmId) -> c_int {
    guard("ib_prepare_cm_mra", || ok(id_of(cm_id)?.prepare_mra()))
}

/// `ib_cm_init_qp_attr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_cm_init_qp_attr(
    cm_id: *mut IbCmId,
    qp_attr: *mut IbQpAttr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    guard("ib_cm_init_qp_attr", || {
        let id = id_of(cm_id)?;
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return Err(Errno::EINVAL);
        }
        let c = unsafe { &mut *qp_attr };
        let a = id.init_qp_attr(c.qp_state)?;
        qp_attr_to_c(id.device(), &a, c);
        unsafe { *qp_attr_mask = a.mask as c_int };
        Ok(0)
    })
}

/// `ib_send_cm_sidr_req`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_sidr_req(
    cm_id: *mut IbCmId,
    param: *mut IbCmSidrReqParam,
) -> c_int {
    guard("ib_send_cm_sidr_req", || {
        let id = id_of(cm_id)?;
        if param.is_null() {
            return Err(Errno::EINVAL);
        }
        let p = unsafe { &*param };
        let path = unsafe { path_arg(p.path) }?.ok_or(Errno::EINVAL)?;
        let params = SidrReqParams {
            path,
            sgid_attr: unsafe { gid_attr_arg(p.sgid_attr) },
            service_id: u64::from_be(p.service_id),
            // C `unsigned long` is 64 bits on LP64.
            timeout_ms: p.timeout_ms,
            private_data: unsafe { area(p.private_data, p.private_data_len, pdata::SIDR_REQ) }?
                .to_vec(),
            max_cm_retries: p.max_cm_retries,
        };
        ok(id.send_sidr_req(&params))
    })
}

/// `ib_send_cm_sidr_rep`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_sidr_rep(
    cm_id: *mut IbCmId,
    param: *mut IbCmSidrRepParam,
) -> c_int {
    guard("ib_send_cm_sidr_rep", || {
        let id = id_of(cm_id)?;
        if param.is_null() {
            return Err(Errno::EINVAL);
        }
        let p = unsafe { &*param };
        let params = SidrRepParams {
            qp_num: p.qp_num,
            qkey: p.qkey,
            status: p.status,
            info: unsafe { area(p.info, p.info_length, pdata::SIDR_REP_INFO) }?.to_vec(),
            private_data: unsafe { area(p.private_data, p.private_data_len, pdata::SIDR_REP) }?
                .to_vec(),
            ece: Ece {
                vendor_id: p.ece.vendor_id,
                attr_mod: p.ece.attr_mod,
            },
        };
        ok(id.send_sidr_rep(&params))
    })
}

/// `ibcm_reject_msg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_reject_msg(reason: c_int) -> *const c_char {
    crate::wire::rej_reason::text(reason as i64).as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_map_by_name() {
        // Distinct values everywhere: a member fed from the wrong field
        // shows up as a wrong number.
        let mut d = DeviceCounters::default();
        d.cm.tx[1] = 1;
        d.cm.rx[4] = 2;
        d.cm.rx_duplicates[5] = 3;
        d.cm.tx_retries[1] = 4;
        d.cm.timeouts[6] = 5;
        d.cm.rej_tx[28] = 6;
        d.cm.rej_rx[8] = 7;
        d.cm.drops[2] = 8;
        d.cm.ids_created = 9;
        d.cm.ids_destroyed = 10;
        d.cm.events = 11;
        d.live_ids = 12;
        d.pending_timers = 13;
        d.transport = api::TransportCounters {
            rx_datagrams: 14,
            tx_datagrams: 15,
            rx_garbage: 16,
            rx_icrc_unverified: 17,
            tx_errors: 18,
            rx_errors: 19,
            tx_unroutable: 20,
        };
        d.cm.rx_clamped = 21;
        d.cm.half_open_evicted = 22;
        d.cm.rx_off_path = 23;
        let c = counters_to_c(&d);
        assert_eq!(
            (
                c.tx[1],
                c.rx[4],
                c.rx_duplicates[5],
                c.tx_retries[1],
                c.timeouts[6]
            ),
            (1, 2, 3, 4, 5)
        );
        assert_eq!((c.rej_tx[28], c.rej_rx[8], c.drops[2]), (6, 7, 8));
        assert_eq!(
            [
                c.ids_created,
                c.ids_destroyed,
                c.events,
                c.live_ids,
                c.pending_timers
            ],
            [9, 10, 11, 12, 13]
        );
        assert_eq!(
            [
                c.rx_datagrams,
                c.tx_datagrams,
                c.rx_garbage,
                c.rx_icrc_unverified,
                c.tx_errors,
                c.rx_errors,
                c.tx_unroutable
            ],
            [14, 15, 16, 17, 18, 19, 20]
        );
        assert_eq!(
            [c.rx_clamped, c.half_open_evicted, c.rx_off_path],
            [21, 22, 23]
        );
    }

    /// The C struct and the Rust counters drift apart when either gains,
    /// loses or resizes a counter: each C member must have exactly one
    /// counter of its name and length, and each counter one member.
    #[test]
    fn c_counters_name_every_counter_once() {
        let d = DeviceCounters::default();
        let mut c = IbcmCounters::default();
        let members: Vec<(&str, usize)> =
            c.members_mut().iter().map(|(n, v)| (*n, v.len())).collect();
        let sources: Vec<(&str, usize)> = counter_sources(&d).map(|(n, v)| (n, v.len())).collect();
        for m in &members {
            let n = sources.iter().filter(|s| *s == m).count();
            assert_eq!(n, 1, "counters named and sized as C member {m:?}");
        }
        for s in &sources {
            assert!(members.contains(s), "counter {s:?} has no C member");
        }
        assert_eq!(members.len(), sources.len());
    }

    #[test]
    fn reject_messages() {
        let p = unsafe { ibcm_reject_msg(28) };
        assert_eq!(
            unsafe { CStr::from_ptr(p) }.to_str().unwrap(),
            "consumer defined"
        );
    }
}
