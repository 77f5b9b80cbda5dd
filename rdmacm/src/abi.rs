//! `#[repr(C)]` mirrors of rdma-core's `<rdma/rdma_cma.h>` (and the parts
//! of `<infiniband/sa.h>` it embeds; the `<infiniband/verbs.h>` structs
//! are ibcm's, re-exported), x86_64.
//! `tests/abi.rs` compares every size and offset here with what gcc says
//! about the installed headers.

use ibcm::api::ibv;
use std::ffi::{c_char, c_int, c_void};

/// The libibverbs structs rdma_cm embeds or takes (`struct ibv_ah_attr`
/// in `rdma_ud_param`, `ibv_qp_init_attr`, `ibv_qp_attr`, `ibv_ece`): one
/// definition, ibcm's (`ibcm::api::ibv`), checked against gcc's layout by
/// `tests/abi.rs` here and `tests/verbs.rs` in ibcm.
pub use ibv::{IbvAhAttr, IbvEce, IbvGlobalRoute, IbvQpAttr, IbvQpCap, IbvQpInitAttr};

/// `union ibv_gid`: 16 bytes, 8-aligned (it has a `uint64_t` view).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct IbvGid {
    pub raw: [u8; 16],
}

/// `struct sockaddr_storage`: 128 bytes, 8-aligned.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct SockaddrStorage {
    pub bytes: [u8; 128],
}

impl Default for SockaddrStorage {
    fn default() -> Self {
        SockaddrStorage { bytes: [0; 128] }
    }
}

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct RdmaIbAddr {
    pub sgid: IbvGid,
    pub dgid: IbvGid,
    /// Network order.
    pub pkey: u16,
}

/// `struct rdma_addr` (the anonymous unions as their storage member).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct RdmaAddr {
    pub src: SockaddrStorage,
    pub dst: SockaddrStorage,
    pub ibaddr: RdmaIbAddr,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaRoute {
    pub addr: RdmaAddr,
    pub path_rec: *mut IbvSaPathRec,
    pub num_paths: c_int,
}

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct RdmaEventChannel {
    pub fd: c_int,
}

/// `struct rdma_cm_id` (416 bytes).
#[repr(C)]
pub struct RdmaCmId {
    pub verbs: *mut c_void,
    pub channel: *mut RdmaEventChannel,
    pub context: *mut c_void,
    pub qp: *mut c_void,
    pub route: RdmaRoute,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut RdmaCmEvent,
    pub send_cq_channel: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq_channel: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub pd: *mut c_void,
    pub qp_type: c_int,
}

conn_param_bytes!(bytes_struct! {
    /// `struct rdma_conn_param`. `..u8s` stands for the one-byte members
    /// `responder_resources` … `srq` (`conn_param_bytes!`, `lib.rs`),
    /// shared with `id::ConnParam`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct RdmaConnParam {
        pub private_data: *const c_void,
        pub private_data_len: u8,
        ..u8s,
        pub qp_num: u32,
    }
});

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaUdParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: IbvAhAttr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union RdmaCmEventParam {
    pub conn: RdmaConnParam,
    pub ud: RdmaUdParam,
}

/// `struct rdma_cm_event` (80 bytes).
#[repr(C)]
pub struct RdmaCmEvent {
    pub id: *mut RdmaCmId,
    pub listen_id: *mut RdmaCmId,
    pub event: c_int,
    pub status: c_int,
    pub param: RdmaCmEventParam,
}

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`; 16-bit and 32-bit
/// fields in network order).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvSaPathRec {
    pub dgid: IbvGid,
    pub sgid: IbvGid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct rdma_addrinfo` (96 bytes).
#[repr(C)]
pub struct RdmaAddrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: libc::socklen_t,
    pub ai_dst_len: libc::socklen_t,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut RdmaAddrinfo,
}

/// `enum rdma_cm_event_type` values beyond `ibcm::cma::RdmaCmEventType`
/// (rdma-core ≥ v60).
pub const RDMA_CM_EVENT_ADDRINFO_RESOLVED: c_int = 16;
pub const RDMA_CM_EVENT_ADDRINFO_ERROR: c_int = 17;
pub const RDMA_CM_EVENT_USER: c_int = 18;
pub const RDMA_CM_EVENT_INTERNAL: c_int = 19;

/// `enum ibv_qp_type`.
pub const IBV_QPT_RC: c_int = 2;
pub const IBV_QPT_UC: c_int = 3;
pub const IBV_QPT_UD: c_int = 4;

/// `enum ibv_qp_state` (`ibcm::api::ibv::qps`).
pub const IBV_QPS_INIT: c_int = ibv::qps::INIT as c_int;
pub const IBV_QPS_RTR: c_int = ibv::qps::RTR as c_int;
pub const IBV_QPS_RTS: c_int = ibv::qps::RTS as c_int;

/// `enum ibv_qp_attr_mask` bits used here (`ibcm::api::ibv::qp_attr_mask`).
pub const IBV_QP_STATE: c_int = ibv::qp_attr_mask::STATE;
pub const IBV_QP_ACCESS_FLAGS: c_int = ibv::qp_attr_mask::ACCESS_FLAGS;
pub const IBV_QP_PKEY_INDEX: c_int = ibv::qp_attr_mask::PKEY_INDEX;
pub const IBV_QP_PORT: c_int = ibv::qp_attr_mask::PORT;
pub const IBV_QP_QKEY: c_int = ibv::qp_attr_mask::QKEY;
pub const IBV_QP_TIMEOUT: c_int = ibv::qp_attr_mask::TIMEOUT;

/// `rdma_addrinfo.ai_flags`.
pub const RAI_PASSIVE: c_int = 1;
pub const RAI_NUMERICHOST: c_int = 2;
pub const RAI_NOROUTE: c_int = 4;
pub const RAI_FAMILY: c_int = 8;

/// `rdma_set_option` levels and names.
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
pub const RDMA_OPTION_IB_PATH: c_int = 1;

/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`.
pub const RDMA_MAX_RESP_RES: u8 = 0xff;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xff;

/// The private-data room of an event (`RDMA_MAX_PRIVATE_DATA`).
pub const RDMA_MAX_PRIVATE_DATA: usize = 256;

/// `enum ibv_event_type` values `rdma_notify` accepts.
pub const IBV_EVENT_COMM_EST: c_int = 4;

/// `AF_IB`.
pub const AF_IB: c_int = 27;
