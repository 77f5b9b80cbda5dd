//! The public Rust API: what the CLI, the tests, the benchmarks and the C
//! layer (`ffi`) use. Nothing here knows C: `ffi` checks pointers, converts
//! the C structs to these types and calls in.
//!
//! * [`Device`] — `Device::open(name, DeviceOptions)`, `close`, `ports`,
//!   [`Device::query_gid`], [`Device::init_path`], `counters` (the CM's own)
//!   and [`Device::all_counters`] (everything, by name: [`DeviceCounters`]),
//!   `create_id` / `insert_listen` with a [`RustHandler`].
//! * [`CmId`] — one connection or listener: `listen`, `send_req`,
//!   `send_rep`, `send_rtu`, `send_dreq`, `send_drep`, `send_rej`,
//!   `prepare_mra`, `notify`, `init_qp_attr`, `send_sidr_req`,
//!   `send_sidr_rep`, `destroy`, `state`.
//! * [`ibv`] — libibverbs objects shared with the application, for the
//!   librdmacm drop-in (`rdmacm/`): device contexts kept open, PDs, CQs,
//!   QPs, and the CM's [`QpAttr`] as a `struct ibv_qp_attr`.
//! * Parameters and events are the engine's plain values ([`ReqParams`],
//!   [`Event`], [`PathRec`], …); path and source-GID policy is
//!   [`select_sgid`] / [`path_from_port`].
//!
//! ```
//! use ibcm::api::*;
//! use std::sync::Arc;
//! use std::time::{Duration, Instant};
//!
//! let server = Device::open("loop:10.251.0.1", DeviceOptions::default())?;
//! let client = Device::open("loop:10.251.0.2", DeviceOptions::default())?;
//! // The passive side answers each REQ with a REP.
//! let accept: RustHandler = Arc::new(|id, ev| {
//!     if ev.kind == EventType::ReqReceived {
//!         let rep = RepParams { qp_num: 0x22, starting_psn: 7, ..RepParams::default() };
//!         id.send_rep(&rep).map_or(1, |()| 0)
//!     } else {
//!         0
//!     }
//! });
//! let listener = server.create_id(None, std::ptr::null_mut(), Some(accept))?;
//! listener.listen(0x1000)?;
//! // The active side answers the REP with an RTU.
//! let rtu: RustHandler = Arc::new(|id, ev| match ev.kind {
//!     EventType::RepReceived => id.send_rtu(&[]).map_or(1, |()| 0),
//!     _ => 0,
//! });
//! let path = client.init_path(1, server.query_gid(1, 0)?)?;
//! let id = client.create_id(None, std::ptr::null_mut(), Some(rtu))?;
//! id.send_req(&ReqParams {
//!     primary_path: path,
//!     service_id: 0x1000,
//!     qp_num: 0x11,
//!     qp_type: qp_type::RC,
//!     remote_cm_response_timeout: 20,
//!     local_cm_response_timeout: 20,
//!     max_cm_retries: 3,
//!     ..ReqParams::default()
//! })?;
//! let t = Instant::now();
//! while id.state() != Some(State::Established) && t.elapsed() < Duration::from_secs(10) {
//!     std::thread::sleep(Duration::from_millis(1));
//! }
//! assert_eq!(id.state(), Some(State::Established));
//! assert_eq!(client.all_counters().cm.tx[1], 1); // one REQ (index 1: REQ)
//! client.close();
//! server.close();
//! # Ok::<(), Errno>(())
//! ```

/// For `ffi::convert`: the members of a [`QpAttr`] one mask bit selects.
pub(crate) use crate::engine::copy_plain_qp_attrs;
pub use crate::engine::{
    AhAttr, ApiResult, Counters, Ece, Errno, Event, EventParam, EventType, GidEntry, GidType,
    PathRec, PathRecType, PortInfo, QpAttr, RepParams, ReqParams, SidrRepParams, SidrReqParams,
    State, errno, qp_mask, qp_type,
};
pub use crate::fabric::TransportCounters;
pub use crate::ipc::Stat as ServiceStat;
pub use crate::path::{SOFT_PACKET_LIFE_TIME, path_from_port, select_sgid};
pub use crate::runtime::{
    CmId, Device, DeviceOptions, DeviceSpec, LocalSwitch, PortsHook, ROUND_SLICE, RustHandler,
    delivery_round, in_delivery_round, listen_id, lookup, service_busy_max, service_busy_waits,
    service_stopped_waits, service_timeout, service_timeouts, set_delivery_round_end,
};
pub use crate::wire::Gid;

/// libibverbs, loaded at run time by SONAME (the application's own copy
/// when it links libibverbs), for the librdmacm drop-in: see
/// `src/fabric/verbs.rs`. Every `unsafe fn` takes pointers to live
/// objects of this process's libibverbs.
pub mod ibv {
    pub use crate::fabric::verbs::{
        IbvAhAttr, IbvCompChannel, IbvContext, IbvCq, IbvEce, IbvGlobalRoute, IbvPd, IbvQp,
        IbvQpAttr, IbvQpCap, IbvQpInitAttr, IbvQpInitAttrEx, IbvRwqIndTable, IbvRxHashConf, IbvSrq,
        IbvSrqAttr, IbvSrqInitAttr, IbvSrqInitAttrEx, IbvTmCap, IbvXrcd, IbvXrcdInitAttr,
        QP_INIT_ATTR_PD, QP_INIT_ATTR_XRCD, QpView, VerbsInfo, alloc_pd, attach_mcast, close_xrcd,
        comp_channel_fd, cq_channel, cq_user_context, create_comp_channel, create_cq, create_qp_ex,
        create_srq, create_srq_ex, dealloc_pd, destroy_comp_channel, destroy_cq, destroy_qp,
        destroy_srq, detach_mcast, device_name, gid_ndev, modify_qp, open_all, open_xrcd,
        pd_context, qp_attr_from_cm, qp_attr_mask, qp_view, qps, qpt, query_context, query_ece,
        query_qp, set_ece, srq_context, srq_init_attr, srqt, xrcd_init_attr,
    };
}

/// Every counter of a device, by name.
#[derive(Debug, Clone, Default)]
pub struct DeviceCounters {
    /// The CM's counters, summed over the engine shards.
    pub cm: Counters,
    /// The transport's datagram counters.
    pub transport: TransportCounters,
    /// Live ids (listeners and incoming ids included).
    pub live_ids: u64,
    /// Pending timers of all shards.
    pub pending_timers: u64,
}

impl Device {
    /// The GID at `index` of port `port_num` (`ibcm_query_gid`); `-EINVAL`
    /// for an unknown port or an empty entry.
    pub fn query_gid(&self, port_num: u32, index: usize) -> Result<Gid, Errno> {
        let ports = self.ports();
        let port = ports
            .iter()
            .find(|p| p.port_num as u32 == port_num)
            .ok_or(Errno::EINVAL)?;
        port.gids
            .get(index)
            .filter(|e| !e.gid.is_zero())
            .map(|e| e.gid)
            .ok_or(Errno::EINVAL)
    }

    /// A path record from port `port_num` to `dgid` (`ibcm_init_path`):
    /// RoCE v2/v1 or IB as the port is, source GID by [`select_sgid`].
    pub fn init_path(&self, port_num: u32, dgid: Gid) -> Result<PathRec, Errno> {
        let ports = self.ports();
        let port = ports
            .iter()
            .find(|p| p.port_num as u32 == port_num)
            .ok_or(Errno::EINVAL)?;
        path_from_port(port, dgid)
    }

    /// Every counter of the device (`ibcm_get_counters`); a device served
    /// by the CM service reports the service's (its ids: this process's).
    pub fn all_counters(&self) -> DeviceCounters {
        if let Some(s) = self.service_stat() {
            return DeviceCounters {
                cm: s.cm,
                transport: s.transport,
                live_ids: s.live_ids,
                pending_timers: s.pending_timers,
            };
        }
        DeviceCounters {
            cm: self.counters(),
            transport: self.transport().stats().snapshot(),
            live_ids: self.live_ids() as u64,
            pending_timers: self.timer_count() as u64,
        }
    }
}

/// The kernel's text for a REJ reason (`ibcm_reject_msg`).
pub fn reject_msg(reason: i32) -> &'static str {
    crate::wire::rej_reason::text_str(reason as i64)
}

/// Starts capturing every CM MAD of the process to a pcapng file at
/// `path`, at most `max_bytes` (0: the default limit).
pub fn pcap_start(path: &std::path::Path, max_bytes: u64) -> Result<(), Errno> {
    let limit = if max_bytes == 0 {
        crate::capture::live::DEFAULT_LIMIT
    } else {
        max_bytes
    };
    crate::capture::live::start(path, limit)
}

/// Ends the capture, flushing and closing the file.
pub fn pcap_stop() -> Result<(), Errno> {
    crate::capture::live::stop()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reject_messages() {
        assert_eq!(reject_msg(8), "invalid service ID");
        assert_eq!(reject_msg(35), "vendor option is not supported");
        for bad in [0, 34, 36, -1, 1000] {
            assert_eq!(reject_msg(bad), "unrecognized reason");
        }
    }

    #[test]
    fn device_queries_and_named_counters() {
        let dev = Device::open("loop:10.250.0.1", DeviceOptions::default()).unwrap();
        let gid = dev.query_gid(1, 0).unwrap();
        assert_eq!(
            gid,
            Gid::from("10.250.0.1".parse::<std::net::IpAddr>().unwrap())
        );
        assert_eq!(dev.query_gid(2, 0), Err(Errno::EINVAL));
        assert_eq!(dev.query_gid(1, 4096), Err(Errno::EINVAL));
        let dest = Gid::from("10.250.0.2".parse::<std::net::IpAddr>().unwrap());
        let p = dev.init_path(1, dest).unwrap();
        assert_eq!((p.sgid, p.dgid), (gid, dest));
        assert_eq!(p.rec_type, PathRecType::RoceV2);
        assert_eq!(dev.init_path(9, dest).err(), Some(Errno::EINVAL));
        let _id = dev.create_id(None, std::ptr::null_mut(), None).unwrap();
        let c = dev.all_counters();
        assert_eq!(c.live_ids, 1);
        assert_eq!(c.cm.ids_created, 1);
        assert_eq!(c.transport, dev.transport().stats().snapshot());
        dev.close();
    }
}
