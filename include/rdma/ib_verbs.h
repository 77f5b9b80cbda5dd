/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * ibcm: the subset of the Linux kernel's <rdma/ib_verbs.h> that the
 * <rdma/ib_cm.h> API depends on.  Names, member order, member types and
 * numeric values are those of the kernel (v6.16+); the layouts are the
 * kernel's on LP64 targets.  Only declarations used by the CM API are here:
 * GIDs and GID attributes, the QP/WC/event/MTU/rate enumerations, address
 * handle attributes and struct ib_qp_attr.
 *
 * struct ib_device and struct net_device are opaque: only pointers to them
 * are ever used.
 */
#ifndef IB_VERBS_H
#define IB_VERBS_H

#include <rdma/ibcm_kernel_types.h>

#ifndef ETH_ALEN
#define ETH_ALEN 6
#endif

struct ib_device;
struct net_device;

/* -------------------------------------------------------------------------
 * GIDs
 * ---------------------------------------------------------------------- */

/* A 128-bit port GID; both views hold network byte order. */
union ib_gid {
	u8 raw[16];
	struct {
		__be64 subnet_prefix;
		__be64 interface_id;
	} global;
};

enum ib_gid_type {
	IB_GID_TYPE_IB = 0,
	IB_GID_TYPE_ROCE = 1,		/* RoCE v1 */
	IB_GID_TYPE_ROCE_UDP_ENCAP = 2,	/* RoCE v2 */
	IB_GID_TYPE_SIZE
};

/* UDP destination port of RoCE v2. */
#define ROCE_V2_UDP_DPORT 4791

/* One entry of a port's GID table.  The CM hands out borrowed pointers to
 * these in events; they stay valid for the duration of the callback. */
struct ib_gid_attr {
	struct net_device *ndev;
	struct ib_device *device;
	union ib_gid gid;
	enum ib_gid_type gid_type;
	u16 index;
	u32 port_num;
};

/* -------------------------------------------------------------------------
 * Asynchronous events (ib_cm_notify() accepts IB_EVENT_COMM_EST and
 * IB_EVENT_PATH_MIG only)
 * ---------------------------------------------------------------------- */
enum ib_event_type {
	IB_EVENT_CQ_ERR,
	IB_EVENT_QP_FATAL,
	IB_EVENT_QP_REQ_ERR,
	IB_EVENT_QP_ACCESS_ERR,
	IB_EVENT_COMM_EST,
	IB_EVENT_SQ_DRAINED,
	IB_EVENT_PATH_MIG,
	IB_EVENT_PATH_MIG_ERR,
	IB_EVENT_DEVICE_FATAL,
	IB_EVENT_PORT_ACTIVE,
	IB_EVENT_PORT_ERR,
	IB_EVENT_LID_CHANGE,
	IB_EVENT_PKEY_CHANGE,
	IB_EVENT_SM_CHANGE,
	IB_EVENT_SRQ_ERR,
	IB_EVENT_SRQ_LIMIT_REACHED,
	IB_EVENT_QP_LAST_WQE_REACHED,
	IB_EVENT_CLIENT_REREGISTER,
	IB_EVENT_GID_CHANGE,
	IB_EVENT_WQ_FATAL,
	IB_EVENT_DEVICE_SPEED_CHANGE,	/* 20; newest kernels only */
};

/* -------------------------------------------------------------------------
 * Queue pair types
 * ---------------------------------------------------------------------- */
enum ib_qp_type {
	IB_QPT_SMI,
	IB_QPT_GSI,
	IB_QPT_RC,
	IB_QPT_UC,
	IB_QPT_UD,
	IB_QPT_RAW_IPV6,
	IB_QPT_RAW_ETHERTYPE,
	IB_QPT_RAW_PACKET = 8,
	IB_QPT_XRC_INI = 9,
	IB_QPT_XRC_TGT,
	IB_QPT_MAX,
	IB_QPT_DRIVER = 0xFF,
	/* values kept for driver-private QP types */
	IB_QPT_RESERVED1 = 0x1000,
	IB_QPT_RESERVED2,
	IB_QPT_RESERVED3,
	IB_QPT_RESERVED4,
	IB_QPT_RESERVED5,
	IB_QPT_RESERVED6,
	IB_QPT_RESERVED7,
	IB_QPT_RESERVED8,
	IB_QPT_RESERVED9,
	IB_QPT_RESERVED10,
};

/* -------------------------------------------------------------------------
 * Work completion status (carried by the CM's *_ERROR events)
 * ---------------------------------------------------------------------- */
enum ib_wc_status {
	IB_WC_SUCCESS,
	IB_WC_LOC_LEN_ERR,
	IB_WC_LOC_QP_OP_ERR,
	IB_WC_LOC_EEC_OP_ERR,
	IB_WC_LOC_PROT_ERR,
	IB_WC_WR_FLUSH_ERR,
	IB_WC_MW_BIND_ERR,
	IB_WC_BAD_RESP_ERR,
	IB_WC_LOC_ACCESS_ERR,
	IB_WC_REM_INV_REQ_ERR,
	IB_WC_REM_ACCESS_ERR,
	IB_WC_REM_OP_ERR,
	IB_WC_RETRY_EXC_ERR,
	IB_WC_RNR_RETRY_EXC_ERR,
	IB_WC_LOC_RDD_VIOL_ERR,
	IB_WC_REM_INV_RD_REQ_ERR,
	IB_WC_REM_ABORT_ERR,
	IB_WC_INV_EECN_ERR,
	IB_WC_INV_EEC_STATE_ERR,
	IB_WC_FATAL_ERR,
	IB_WC_RESP_TIMEOUT_ERR,
	IB_WC_GENERAL_ERR
};

/* -------------------------------------------------------------------------
 * Path MTU and static rate
 * ---------------------------------------------------------------------- */
enum ib_mtu {
	IB_MTU_256 = 1,
	IB_MTU_512 = 2,
	IB_MTU_1024 = 3,
	IB_MTU_2048 = 4,
	IB_MTU_4096 = 5
};

enum opa_mtu {
	OPA_MTU_8192 = 6,
	OPA_MTU_10240 = 7
};

/* Number of bytes of an IB MTU code, -1 for an unknown code. */
static inline int ib_mtu_enum_to_int(enum ib_mtu mtu)
{
	switch (mtu) {
	case IB_MTU_256:  return 256;
	case IB_MTU_512:  return 512;
	case IB_MTU_1024: return 1024;
	case IB_MTU_2048: return 2048;
	case IB_MTU_4096: return 4096;
	default:          return -1;
	}
}

/* The values are the IBTA StaticRate / PacketRate codes, hence not sorted. */
enum ib_rate {
	IB_RATE_PORT_CURRENT = 0,
	IB_RATE_2_5_GBPS = 2,
	IB_RATE_5_GBPS = 5,
	IB_RATE_10_GBPS = 3,
	IB_RATE_20_GBPS = 6,
	IB_RATE_30_GBPS = 4,
	IB_RATE_40_GBPS = 7,
	IB_RATE_60_GBPS = 8,
	IB_RATE_80_GBPS = 9,
	IB_RATE_120_GBPS = 10,
	IB_RATE_14_GBPS = 11,
	IB_RATE_56_GBPS = 12,
	IB_RATE_112_GBPS = 13,
	IB_RATE_168_GBPS = 14,
	IB_RATE_25_GBPS = 15,
	IB_RATE_100_GBPS = 16,
	IB_RATE_200_GBPS = 17,
	IB_RATE_300_GBPS = 18,
	IB_RATE_28_GBPS = 19,
	IB_RATE_50_GBPS = 20,
	IB_RATE_400_GBPS = 21,
	IB_RATE_600_GBPS = 22,
	IB_RATE_800_GBPS = 23,
	/* 24 is not defined by the kernel */
	IB_RATE_1600_GBPS = 25,		/* newest kernels only */
};

/* -------------------------------------------------------------------------
 * QP state machine and attributes
 * ---------------------------------------------------------------------- */
enum ib_qp_state {
	IB_QPS_RESET,
	IB_QPS_INIT,
	IB_QPS_RTR,
	IB_QPS_RTS,
	IB_QPS_SQD,
	IB_QPS_SQE,
	IB_QPS_ERR
};

enum ib_mig_state {
	IB_MIG_MIGRATED,
	IB_MIG_REARM,
	IB_MIG_ARMED
};

/* Bits of the qp_attr_mask filled by ib_cm_init_qp_attr(). */
enum ib_qp_attr_mask {
	IB_QP_STATE = 1,
	IB_QP_CUR_STATE = (1 << 1),
	IB_QP_EN_SQD_ASYNC_NOTIFY = (1 << 2),
	IB_QP_ACCESS_FLAGS = (1 << 3),
	IB_QP_PKEY_INDEX = (1 << 4),
	IB_QP_PORT = (1 << 5),
	IB_QP_QKEY = (1 << 6),
	IB_QP_AV = (1 << 7),
	IB_QP_PATH_MTU = (1 << 8),
	IB_QP_TIMEOUT = (1 << 9),
	IB_QP_RETRY_CNT = (1 << 10),
	IB_QP_RNR_RETRY = (1 << 11),
	IB_QP_RQ_PSN = (1 << 12),
	IB_QP_MAX_QP_RD_ATOMIC = (1 << 13),
	IB_QP_ALT_PATH = (1 << 14),
	IB_QP_MIN_RNR_TIMER = (1 << 15),
	IB_QP_SQ_PSN = (1 << 16),
	IB_QP_MAX_DEST_RD_ATOMIC = (1 << 17),
	IB_QP_PATH_MIG_STATE = (1 << 18),
	IB_QP_CAP = (1 << 19),
	IB_QP_DEST_QPN = (1 << 20),
	IB_QP_RESERVED1 = (1 << 21),
	IB_QP_RESERVED2 = (1 << 22),
	IB_QP_RESERVED3 = (1 << 23),
	IB_QP_RESERVED4 = (1 << 24),
	IB_QP_RATE_LIMIT = (1 << 25),

	IB_QP_ATTR_STANDARD_BITS = (1 << 21) - 1,	/* bits 0..20 */
};

/* Memory / QP access rights (same bits as the uverbs ABI). */
enum ib_access_flags {
	IB_ACCESS_LOCAL_WRITE = 1,
	IB_ACCESS_REMOTE_WRITE = (1 << 1),
	IB_ACCESS_REMOTE_READ = (1 << 2),
	IB_ACCESS_REMOTE_ATOMIC = (1 << 3),
	IB_ACCESS_MW_BIND = (1 << 4),
	IB_ZERO_BASED = (1 << 5),
	IB_ACCESS_ON_DEMAND = (1 << 6),
	IB_ACCESS_HUGETLB = (1 << 7),
	IB_ACCESS_RELAXED_ORDERING = (1 << 20),	/* first optional bit */
	IB_ACCESS_FLUSH_GLOBAL = (1 << 8),
	IB_ACCESS_FLUSH_PERSISTENT = (1 << 9),

	/* bits 20..29: optional, ignored by devices that lack them */
	IB_ACCESS_OPTIONAL = 0x3FF00000,
	IB_ACCESS_SUPPORTED =
		((IB_ACCESS_FLUSH_PERSISTENT << 1) - 1) | IB_ACCESS_OPTIONAL,
};

/* -------------------------------------------------------------------------
 * Address handle attributes
 * ---------------------------------------------------------------------- */
#define IB_LID_PERMISSIVE cpu_to_be16(0xFFFF)
#define IB_MULTICAST_LID_BASE cpu_to_be16(0xC000)
#define IB_MULTICAST_QPN 0xffffff
#define IB_QPN_MASK 0xFFFFFF

enum rdma_ah_attr_type {
	RDMA_AH_ATTR_TYPE_UNDEFINED,
	RDMA_AH_ATTR_TYPE_IB,
	RDMA_AH_ATTR_TYPE_ROCE,
	RDMA_AH_ATTR_TYPE_OPA,
};

enum ib_ah_flags {
	IB_AH_GRH = 1
};

/* GRH part of an address: flow_label is host order (20 bits). */
struct ib_global_route {
	const struct ib_gid_attr *sgid_attr;
	union ib_gid dgid;
	u32 flow_label;
	u8 sgid_index;
	u8 hop_limit;
	u8 traffic_class;
};

/* InfiniBand part: dlid is host order. */
struct ib_ah_attr {
	u16 dlid;
	u8 src_path_bits;
};

/* RoCE part: destination MAC. */
struct roce_ah_attr {
	u8 dmac[ETH_ALEN];
};

/* Omni-Path part. */
struct opa_ah_attr {
	u32 dlid;
	u8 src_path_bits;
	bool make_grd;
};

/* Transport-independent address vector; `type` selects the union member. */
struct rdma_ah_attr {
	struct ib_global_route grh;
	u8 sl;
	u8 static_rate;		/* enum ib_rate */
	u32 port_num;
	u8 ah_flags;		/* IB_AH_GRH */
	enum rdma_ah_attr_type type;
	union {
		struct ib_ah_attr ib;
		struct roce_ah_attr roce;
		struct opa_ah_attr opa;
	};
};

struct ib_qp_cap {
	u32 max_send_wr;
	u32 max_recv_wr;
	u32 max_send_sge;
	u32 max_recv_sge;
	u32 max_inline_data;
	u32 max_rdma_ctxs;
};

/* Attributes for a QP state transition, as filled by ib_cm_init_qp_attr().
 * Which members are meaningful is given by the accompanying mask. */
struct ib_qp_attr {
	enum ib_qp_state qp_state;
	enum ib_qp_state cur_qp_state;
	enum ib_mtu path_mtu;
	enum ib_mig_state path_mig_state;
	u32 qkey;
	u32 rq_psn;
	u32 sq_psn;
	u32 dest_qp_num;
	int qp_access_flags;		/* enum ib_access_flags */
	struct ib_qp_cap cap;
	struct rdma_ah_attr ah_attr;
	struct rdma_ah_attr alt_ah_attr;
	u16 pkey_index;
	u16 alt_pkey_index;
	u8 en_sqd_async_notify;
	u8 sq_draining;
	u8 max_rd_atomic;
	u8 max_dest_rd_atomic;
	u8 min_rnr_timer;
	u32 port_num;
	u8 timeout;
	u8 retry_cnt;
	u8 rnr_retry;
	u32 alt_port_num;
	u8 alt_timeout;
	u32 rate_limit;
	struct net_device *xmit_slave;
};

#endif /* IB_VERBS_H */
