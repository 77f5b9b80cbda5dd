//! `#[repr(C)]` mirrors of rdma-core's `<rdma/rdma_cma.h>` (and the parts
//! of `<infiniband/verbs.h>` / `<infiniband/sa.h>` it embeds), x86_64.
//! `tests/abi.rs` compares every size and offset here with what gcc says
//! about the installed headers.

use std::ffi::{c_char, c_int, c_void};

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

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaConnParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvGlobalRoute {
    pub dgid: IbvGid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

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

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvQpAttr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
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
    pub rate_limit: u32,
}

/// `struct ibv_ece`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvEce {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
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

/// `enum ibv_qp_state`.
pub const IBV_QPS_INIT: c_int = 1;
pub const IBV_QPS_RTR: c_int = 2;
pub const IBV_QPS_RTS: c_int = 3;

/// `enum ibv_qp_attr_mask` bits used here (the rest are ibcm's `qp_mask`).
pub const IBV_QP_STATE: c_int = 1;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_QKEY: c_int = 1 << 6;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;

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
