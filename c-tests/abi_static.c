/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Compile-time (and, for bitfields, run-time) check that ibcm's headers
 * have the Linux kernel's ABI: sizes, alignments, member offsets, member
 * sizes and signedness, enumerator and macro values, function prototypes.
 * The expected numbers are the kernel's on x86_64 (LP64), typed in from
 * the kernel headers' member lists (laid out by gcc; docs/CM_RULES.md
 * §abi has the rules and the struct sizes), not from our headers.
 *
 *   gcc -std=c11 -Wall -Wextra -Werror -pedantic -Iinclude \
 *       c-tests/abi_static.c -o /tmp/abi_static && /tmp/abi_static
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <rdma/ib_cm.h>
#include <ibcm.h>

#if !defined(__LP64__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the expected numbers are for little-endian LP64 targets (x86_64, aarch64)"
#endif

/* whole type: size and alignment */
#define SZ(T, size, align)                                                   \
	_Static_assert(sizeof(T) == (size), "sizeof " #T);                   \
	_Static_assert(_Alignof(T) == (align), "_Alignof " #T)

/* member offset and size */
#define OFF(T, m, off, size)                                                 \
	_Static_assert(offsetof(T, m) == (off), "offsetof " #T "." #m);      \
	_Static_assert(sizeof(((T *)0)->m) == (size), "sizeof " #T "." #m)

/* ... and the member is an unsigned / signed integer (or enum) */
#define OFFU(T, m, off, size)                                                \
	OFF(T, m, off, size);                                                \
	_Static_assert((__typeof__(((T *)0)->m))-1 > 0, "unsigned " #T "." #m)
#define OFFS(T, m, off, size)                                                \
	OFF(T, m, off, size);                                                \
	_Static_assert((__typeof__(((T *)0)->m))-1 < 0, "signed " #T "." #m)

/* value of an enumerator or macro */
#define VAL(name, v) _Static_assert((name) == (v), #name " value")

/* exact prototype of a function (the function is not referenced) */
#define PROTO(fn, type) \
	_Static_assert(_Generic(&(fn), type: 1, default: 0), "prototype of " #fn)

/* =====================================================================
 * GIDs (ib_verbs.h)
 * ================================================================== */
SZ(union ib_gid, 16, 8);
OFFU(union ib_gid, raw[0], 0, 1);
OFF(union ib_gid, raw, 0, 16);
OFF(union ib_gid, global, 0, 16);
OFFU(union ib_gid, global.subnet_prefix, 0, 8);
OFFU(union ib_gid, global.interface_id, 8, 8);

VAL(IB_GID_TYPE_IB, 0);
VAL(IB_GID_TYPE_ROCE, 1);
VAL(IB_GID_TYPE_ROCE_UDP_ENCAP, 2);
VAL(IB_GID_TYPE_SIZE, 3);
VAL(ROCE_V2_UDP_DPORT, 4791);

SZ(struct ib_gid_attr, 48, 8);
OFF(struct ib_gid_attr, ndev, 0, 8);
OFF(struct ib_gid_attr, device, 8, 8);
OFF(struct ib_gid_attr, gid, 16, 16);
OFFU(struct ib_gid_attr, gid_type, 32, 4);
OFFU(struct ib_gid_attr, index, 36, 2);
OFFU(struct ib_gid_attr, port_num, 40, 4);

/* =====================================================================
 * path records (ib_sa.h)
 * ================================================================== */
VAL(SA_PATH_REC_TYPE_IB, 0);
VAL(SA_PATH_REC_TYPE_ROCE_V1, 1);
VAL(SA_PATH_REC_TYPE_ROCE_V2, 2);
VAL(SA_PATH_REC_TYPE_OPA, 3);

VAL(IB_SA_GT, 0);
VAL(IB_SA_LT, 1);
VAL(IB_SA_EQ, 2);
VAL(IB_SA_BEST, 3);

VAL(IB_PATH_GMP, 1);
VAL(IB_PATH_PRIMARY, 2);
VAL(IB_PATH_ALTERNATE, 4);
VAL(IB_PATH_OUTBOUND, 8);
VAL(IB_PATH_INBOUND, 16);
VAL(IB_PATH_INBOUND_REVERSE, 32);
VAL(IB_PATH_BIDIRECTIONAL, 40);

SZ(struct sa_path_rec_ib, 6, 2);
OFFU(struct sa_path_rec_ib, dlid, 0, 2);
OFFU(struct sa_path_rec_ib, slid, 2, 2);
OFFU(struct sa_path_rec_ib, raw_traffic, 4, 1);

SZ(struct sa_path_rec_roce, 7, 1);
OFFU(struct sa_path_rec_roce, route_resolved, 0, 1);
OFF(struct sa_path_rec_roce, dmac, 1, 6);

SZ(struct sa_path_rec_opa, 16, 4);
OFFU(struct sa_path_rec_opa, dlid, 0, 4);
OFFU(struct sa_path_rec_opa, slid, 4, 4);
OFFU(struct sa_path_rec_opa, raw_traffic, 8, 1);
OFFU(struct sa_path_rec_opa, l2_8B, 9, 1);
OFFU(struct sa_path_rec_opa, l2_10B, 10, 1);
OFFU(struct sa_path_rec_opa, l2_9B, 11, 1);
OFFU(struct sa_path_rec_opa, l2_16B, 12, 1);
OFFU(struct sa_path_rec_opa, qos_type, 13, 1);
OFFU(struct sa_path_rec_opa, qos_priority, 14, 1);

SZ(struct sa_path_rec, 88, 8);
OFF(struct sa_path_rec, dgid, 0, 16);
OFF(struct sa_path_rec, sgid, 16, 16);
OFFU(struct sa_path_rec, service_id, 32, 8);
OFFU(struct sa_path_rec, flow_label, 40, 4);
OFFU(struct sa_path_rec, hop_limit, 44, 1);
OFFU(struct sa_path_rec, traffic_class, 45, 1);
OFFU(struct sa_path_rec, reversible, 46, 1);
OFFU(struct sa_path_rec, numb_path, 47, 1);
OFFU(struct sa_path_rec, pkey, 48, 2);
OFFU(struct sa_path_rec, qos_class, 50, 2);
OFFU(struct sa_path_rec, sl, 52, 1);
OFFU(struct sa_path_rec, mtu_selector, 53, 1);
OFFU(struct sa_path_rec, mtu, 54, 1);
OFFU(struct sa_path_rec, rate_selector, 55, 1);
OFFU(struct sa_path_rec, rate, 56, 1);
OFFU(struct sa_path_rec, packet_life_time_selector, 57, 1);
OFFU(struct sa_path_rec, packet_life_time, 58, 1);
OFFU(struct sa_path_rec, preference, 59, 1);
OFF(struct sa_path_rec, ib, 60, 6);
OFF(struct sa_path_rec, roce, 60, 7);
OFF(struct sa_path_rec, opa, 60, 16);
OFFU(struct sa_path_rec, rec_type, 76, 4);
OFFU(struct sa_path_rec, flags, 80, 4);

/* =====================================================================
 * enumerations from ib_verbs.h
 * ================================================================== */
VAL(IB_EVENT_CQ_ERR, 0);
VAL(IB_EVENT_QP_FATAL, 1);
VAL(IB_EVENT_QP_REQ_ERR, 2);
VAL(IB_EVENT_QP_ACCESS_ERR, 3);
VAL(IB_EVENT_COMM_EST, 4);
VAL(IB_EVENT_SQ_DRAINED, 5);
VAL(IB_EVENT_PATH_MIG, 6);
VAL(IB_EVENT_PATH_MIG_ERR, 7);
VAL(IB_EVENT_DEVICE_FATAL, 8);
VAL(IB_EVENT_PORT_ACTIVE, 9);
VAL(IB_EVENT_PORT_ERR, 10);
VAL(IB_EVENT_LID_CHANGE, 11);
VAL(IB_EVENT_PKEY_CHANGE, 12);
VAL(IB_EVENT_SM_CHANGE, 13);
VAL(IB_EVENT_SRQ_ERR, 14);
VAL(IB_EVENT_SRQ_LIMIT_REACHED, 15);
VAL(IB_EVENT_QP_LAST_WQE_REACHED, 16);
VAL(IB_EVENT_CLIENT_REREGISTER, 17);
VAL(IB_EVENT_GID_CHANGE, 18);
VAL(IB_EVENT_WQ_FATAL, 19);
VAL(IB_EVENT_DEVICE_SPEED_CHANGE, 20);

VAL(IB_QPT_SMI, 0);
VAL(IB_QPT_GSI, 1);
VAL(IB_QPT_RC, 2);
VAL(IB_QPT_UC, 3);
VAL(IB_QPT_UD, 4);
VAL(IB_QPT_RAW_IPV6, 5);
VAL(IB_QPT_RAW_ETHERTYPE, 6);
VAL(IB_QPT_RAW_PACKET, 8);
VAL(IB_QPT_XRC_INI, 9);
VAL(IB_QPT_XRC_TGT, 10);
VAL(IB_QPT_MAX, 11);
VAL(IB_QPT_DRIVER, 0xFF);
VAL(IB_QPT_RESERVED1, 0x1000);
VAL(IB_QPT_RESERVED2, 0x1001);
VAL(IB_QPT_RESERVED3, 0x1002);
VAL(IB_QPT_RESERVED4, 0x1003);
VAL(IB_QPT_RESERVED5, 0x1004);
VAL(IB_QPT_RESERVED6, 0x1005);
VAL(IB_QPT_RESERVED7, 0x1006);
VAL(IB_QPT_RESERVED8, 0x1007);
VAL(IB_QPT_RESERVED9, 0x1008);
VAL(IB_QPT_RESERVED10, 0x1009);

VAL(IB_WC_SUCCESS, 0);
VAL(IB_WC_LOC_LEN_ERR, 1);
VAL(IB_WC_LOC_QP_OP_ERR, 2);
VAL(IB_WC_LOC_EEC_OP_ERR, 3);
VAL(IB_WC_LOC_PROT_ERR, 4);
VAL(IB_WC_WR_FLUSH_ERR, 5);
VAL(IB_WC_MW_BIND_ERR, 6);
VAL(IB_WC_BAD_RESP_ERR, 7);
VAL(IB_WC_LOC_ACCESS_ERR, 8);
VAL(IB_WC_REM_INV_REQ_ERR, 9);
VAL(IB_WC_REM_ACCESS_ERR, 10);
VAL(IB_WC_REM_OP_ERR, 11);
VAL(IB_WC_RETRY_EXC_ERR, 12);
VAL(IB_WC_RNR_RETRY_EXC_ERR, 13);
VAL(IB_WC_LOC_RDD_VIOL_ERR, 14);
VAL(IB_WC_REM_INV_RD_REQ_ERR, 15);
VAL(IB_WC_REM_ABORT_ERR, 16);
VAL(IB_WC_INV_EECN_ERR, 17);
VAL(IB_WC_INV_EEC_STATE_ERR, 18);
VAL(IB_WC_FATAL_ERR, 19);
VAL(IB_WC_RESP_TIMEOUT_ERR, 20);
VAL(IB_WC_GENERAL_ERR, 21);

VAL(IB_MTU_256, 1);
VAL(IB_MTU_512, 2);
VAL(IB_MTU_1024, 3);
VAL(IB_MTU_2048, 4);
VAL(IB_MTU_4096, 5);
VAL(OPA_MTU_8192, 6);
VAL(OPA_MTU_10240, 7);

VAL(IB_RATE_PORT_CURRENT, 0);
VAL(IB_RATE_2_5_GBPS, 2);
VAL(IB_RATE_5_GBPS, 5);
VAL(IB_RATE_10_GBPS, 3);
VAL(IB_RATE_20_GBPS, 6);
VAL(IB_RATE_30_GBPS, 4);
VAL(IB_RATE_40_GBPS, 7);
VAL(IB_RATE_60_GBPS, 8);
VAL(IB_RATE_80_GBPS, 9);
VAL(IB_RATE_120_GBPS, 10);
VAL(IB_RATE_14_GBPS, 11);
VAL(IB_RATE_56_GBPS, 12);
VAL(IB_RATE_112_GBPS, 13);
VAL(IB_RATE_168_GBPS, 14);
VAL(IB_RATE_25_GBPS, 15);
VAL(IB_RATE_100_GBPS, 16);
VAL(IB_RATE_200_GBPS, 17);
VAL(IB_RATE_300_GBPS, 18);
VAL(IB_RATE_28_GBPS, 19);
VAL(IB_RATE_50_GBPS, 20);
VAL(IB_RATE_400_GBPS, 21);
VAL(IB_RATE_600_GBPS, 22);
VAL(IB_RATE_800_GBPS, 23);
VAL(IB_RATE_1600_GBPS, 25);

VAL(IB_QPS_RESET, 0);
VAL(IB_QPS_INIT, 1);
VAL(IB_QPS_RTR, 2);
VAL(IB_QPS_RTS, 3);
VAL(IB_QPS_SQD, 4);
VAL(IB_QPS_SQE, 5);
VAL(IB_QPS_ERR, 6);

VAL(IB_MIG_MIGRATED, 0);
VAL(IB_MIG_REARM, 1);
VAL(IB_MIG_ARMED, 2);

VAL(IB_QP_STATE, 0x1);
VAL(IB_QP_CUR_STATE, 0x2);
VAL(IB_QP_EN_SQD_ASYNC_NOTIFY, 0x4);
VAL(IB_QP_ACCESS_FLAGS, 0x8);
VAL(IB_QP_PKEY_INDEX, 0x10);
VAL(IB_QP_PORT, 0x20);
VAL(IB_QP_QKEY, 0x40);
VAL(IB_QP_AV, 0x80);
VAL(IB_QP_PATH_MTU, 0x100);
VAL(IB_QP_TIMEOUT, 0x200);
VAL(IB_QP_RETRY_CNT, 0x400);
VAL(IB_QP_RNR_RETRY, 0x800);
VAL(IB_QP_RQ_PSN, 0x1000);
VAL(IB_QP_MAX_QP_RD_ATOMIC, 0x2000);
VAL(IB_QP_ALT_PATH, 0x4000);
VAL(IB_QP_MIN_RNR_TIMER, 0x8000);
VAL(IB_QP_SQ_PSN, 0x10000);
VAL(IB_QP_MAX_DEST_RD_ATOMIC, 0x20000);
VAL(IB_QP_PATH_MIG_STATE, 0x40000);
VAL(IB_QP_CAP, 0x80000);
VAL(IB_QP_DEST_QPN, 0x100000);
VAL(IB_QP_RESERVED1, 0x200000);
VAL(IB_QP_RESERVED2, 0x400000);
VAL(IB_QP_RESERVED3, 0x800000);
VAL(IB_QP_RESERVED4, 0x1000000);
VAL(IB_QP_RATE_LIMIT, 0x2000000);
VAL(IB_QP_ATTR_STANDARD_BITS, 0x1FFFFF);

VAL(IB_ACCESS_LOCAL_WRITE, 1);
VAL(IB_ACCESS_REMOTE_WRITE, 2);
VAL(IB_ACCESS_REMOTE_READ, 4);
VAL(IB_ACCESS_REMOTE_ATOMIC, 8);
VAL(IB_ACCESS_MW_BIND, 16);
VAL(IB_ZERO_BASED, 32);
VAL(IB_ACCESS_ON_DEMAND, 64);
VAL(IB_ACCESS_HUGETLB, 128);
VAL(IB_ACCESS_FLUSH_GLOBAL, 1 << 8);
VAL(IB_ACCESS_FLUSH_PERSISTENT, 1 << 9);
VAL(IB_ACCESS_RELAXED_ORDERING, 1 << 20);
VAL(IB_ACCESS_OPTIONAL, 0x3FF00000);	/* bits 20..29 */
VAL(IB_ACCESS_SUPPORTED, 0x3FF003FF);

VAL(RDMA_AH_ATTR_TYPE_UNDEFINED, 0);
VAL(RDMA_AH_ATTR_TYPE_IB, 1);
VAL(RDMA_AH_ATTR_TYPE_ROCE, 2);
VAL(RDMA_AH_ATTR_TYPE_OPA, 3);
VAL(IB_AH_GRH, 1);

VAL(be16_to_cpu(IB_LID_PERMISSIVE), 0xFFFF);
VAL(be16_to_cpu(IB_MULTICAST_LID_BASE), 0xC000);
VAL(IB_MULTICAST_LID_BASE, 0x00C0);	/* stored big-endian */
VAL(IB_MULTICAST_QPN, 0xFFFFFF);
VAL(IB_QPN_MASK, 0xFFFFFF);
VAL(ETH_ALEN, 6);

/* =====================================================================
 * structures from ib_verbs.h
 * ================================================================== */
SZ(struct ib_global_route, 32, 8);
OFF(struct ib_global_route, sgid_attr, 0, 8);
OFF(struct ib_global_route, dgid, 8, 16);
OFFU(struct ib_global_route, flow_label, 24, 4);
OFFU(struct ib_global_route, sgid_index, 28, 1);
OFFU(struct ib_global_route, hop_limit, 29, 1);
OFFU(struct ib_global_route, traffic_class, 30, 1);

SZ(struct ib_ah_attr, 4, 2);
OFFU(struct ib_ah_attr, dlid, 0, 2);
OFFU(struct ib_ah_attr, src_path_bits, 2, 1);

SZ(struct roce_ah_attr, 6, 1);
OFF(struct roce_ah_attr, dmac, 0, 6);

SZ(struct opa_ah_attr, 8, 4);
OFFU(struct opa_ah_attr, dlid, 0, 4);
OFFU(struct opa_ah_attr, src_path_bits, 4, 1);
OFFU(struct opa_ah_attr, make_grd, 5, 1);

SZ(struct rdma_ah_attr, 56, 8);
OFF(struct rdma_ah_attr, grh, 0, 32);
OFFU(struct rdma_ah_attr, sl, 32, 1);
OFFU(struct rdma_ah_attr, static_rate, 33, 1);
OFFU(struct rdma_ah_attr, port_num, 36, 4);
OFFU(struct rdma_ah_attr, ah_flags, 40, 1);
OFFU(struct rdma_ah_attr, type, 44, 4);
OFF(struct rdma_ah_attr, ib, 48, 4);
OFF(struct rdma_ah_attr, roce, 48, 6);
OFF(struct rdma_ah_attr, opa, 48, 8);

SZ(struct ib_qp_cap, 24, 4);
OFFU(struct ib_qp_cap, max_send_wr, 0, 4);
OFFU(struct ib_qp_cap, max_recv_wr, 4, 4);
OFFU(struct ib_qp_cap, max_send_sge, 8, 4);
OFFU(struct ib_qp_cap, max_recv_sge, 12, 4);
OFFU(struct ib_qp_cap, max_inline_data, 16, 4);
OFFU(struct ib_qp_cap, max_rdma_ctxs, 20, 4);

SZ(struct ib_qp_attr, 216, 8);
OFFU(struct ib_qp_attr, qp_state, 0, 4);
OFFU(struct ib_qp_attr, cur_qp_state, 4, 4);
OFFU(struct ib_qp_attr, path_mtu, 8, 4);
OFFU(struct ib_qp_attr, path_mig_state, 12, 4);
OFFU(struct ib_qp_attr, qkey, 16, 4);
OFFU(struct ib_qp_attr, rq_psn, 20, 4);
OFFU(struct ib_qp_attr, sq_psn, 24, 4);
OFFU(struct ib_qp_attr, dest_qp_num, 28, 4);
OFFS(struct ib_qp_attr, qp_access_flags, 32, 4);
OFF(struct ib_qp_attr, cap, 36, 24);
OFF(struct ib_qp_attr, ah_attr, 64, 56);
OFF(struct ib_qp_attr, alt_ah_attr, 120, 56);
OFFU(struct ib_qp_attr, pkey_index, 176, 2);
OFFU(struct ib_qp_attr, alt_pkey_index, 178, 2);
OFFU(struct ib_qp_attr, en_sqd_async_notify, 180, 1);
OFFU(struct ib_qp_attr, sq_draining, 181, 1);
OFFU(struct ib_qp_attr, max_rd_atomic, 182, 1);
OFFU(struct ib_qp_attr, max_dest_rd_atomic, 183, 1);
OFFU(struct ib_qp_attr, min_rnr_timer, 184, 1);
OFFU(struct ib_qp_attr, port_num, 188, 4);
OFFU(struct ib_qp_attr, timeout, 192, 1);
OFFU(struct ib_qp_attr, retry_cnt, 193, 1);
OFFU(struct ib_qp_attr, rnr_retry, 194, 1);
OFFU(struct ib_qp_attr, alt_port_num, 196, 4);
OFFU(struct ib_qp_attr, alt_timeout, 200, 1);
OFFU(struct ib_qp_attr, rate_limit, 204, 4);
OFF(struct ib_qp_attr, xmit_slave, 208, 8);

/* =====================================================================
 * ECE and port spaces
 * ================================================================== */
SZ(struct rdma_ucm_ece, 8, 4);
OFFU(struct rdma_ucm_ece, vendor_id, 0, 4);
OFFU(struct rdma_ucm_ece, attr_mod, 4, 4);

VAL(RDMA_PS_IPOIB, 0x0002);
VAL(RDMA_PS_IB, 0x013F);
VAL(RDMA_PS_TCP, 0x0106);
VAL(RDMA_PS_UDP, 0x0111);

/* =====================================================================
 * ib_mad.h: MAD header, ClassPortInfo, management classes
 * ================================================================== */
VAL(IB_MGMT_BASE_VERSION, 1);
VAL(OPA_MGMT_BASE_VERSION, 0x80);
VAL(OPA_SM_CLASS_VERSION, 0x80);
VAL(IB_MGMT_CLASS_SUBN_LID_ROUTED, 0x01);
VAL(IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE, 0x81);
VAL(IB_MGMT_CLASS_SUBN_ADM, 0x03);
VAL(IB_MGMT_CLASS_PERF_MGMT, 0x04);
VAL(IB_MGMT_CLASS_BM, 0x05);
VAL(IB_MGMT_CLASS_DEVICE_MGMT, 0x06);
VAL(IB_MGMT_CLASS_CM, 0x07);
VAL(IB_MGMT_CLASS_SNMP, 0x08);
VAL(IB_MGMT_CLASS_DEVICE_ADM, 0x10);
VAL(IB_MGMT_CLASS_BOOT_MGMT, 0x11);
VAL(IB_MGMT_CLASS_BIS, 0x12);
VAL(IB_MGMT_CLASS_CONG_MGMT, 0x21);
VAL(IB_MGMT_CLASS_VENDOR_RANGE2_START, 0x30);
VAL(IB_MGMT_CLASS_VENDOR_RANGE2_END, 0x4F);
VAL(IB_OPENIB_OUI, 0x001405);
VAL(IB_MGMT_METHOD_GET, 0x01);
VAL(IB_MGMT_METHOD_SET, 0x02);
VAL(IB_MGMT_METHOD_GET_RESP, 0x81);
VAL(IB_MGMT_METHOD_SEND, 0x03);
VAL(IB_MGMT_METHOD_TRAP, 0x05);
VAL(IB_MGMT_METHOD_REPORT, 0x06);
VAL(IB_MGMT_METHOD_REPORT_RESP, 0x86);
VAL(IB_MGMT_METHOD_TRAP_REPRESS, 0x07);
VAL(IB_MGMT_METHOD_RESP, 0x80);
VAL(IB_MGMT_MAX_METHODS, 128);
VAL(IB_MGMT_MAD_STATUS_SUCCESS, 0x0000);
VAL(IB_MGMT_MAD_STATUS_BUSY, 0x0001);
VAL(IB_MGMT_MAD_STATUS_REDIRECT_REQD, 0x0002);
VAL(IB_MGMT_MAD_STATUS_BAD_VERSION, 0x0004);
VAL(IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD, 0x0008);
VAL(IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB, 0x000C);
VAL(IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE, 0x001C);
VAL(IB_QP0, 0);
VAL(be32_to_cpu(IB_QP1), 1);
VAL(IB_QP1_QKEY, 0x80010000);
VAL(IB_QP_SET_QKEY, 0x80000000);
VAL(IB_DEFAULT_PKEY_PARTIAL, 0x7FFF);
VAL(IB_DEFAULT_PKEY_FULL, 0xFFFF);
VAL(IB_MGMT_MAD_HDR, 24);
VAL(IB_MGMT_MAD_DATA, 232);
VAL(IB_MGMT_RMPP_HDR, 36);
VAL(IB_MGMT_RMPP_DATA, 220);
VAL(IB_MGMT_VENDOR_HDR, 40);
VAL(IB_MGMT_VENDOR_DATA, 216);
VAL(IB_MGMT_SA_HDR, 56);
VAL(IB_MGMT_SA_DATA, 200);
VAL(IB_MGMT_DEVICE_HDR, 64);
VAL(IB_MGMT_DEVICE_DATA, 192);
VAL(IB_MGMT_MAD_SIZE, 256);
VAL(OPA_MGMT_MAD_DATA, 2024);
VAL(OPA_MGMT_RMPP_DATA, 2012);
VAL(OPA_MGMT_MAD_SIZE, 2048);
VAL(be16_to_cpu(IB_MGMT_CLASSPORTINFO_ATTR_ID), 0x0001);
VAL(IB_MGMT_CLASSPORTINFO_ATTR_ID, 0x0100);
VAL(IB_CLASS_PORT_INFO_RESP_TIME_MASK, 0x1F);
VAL(IB_CLASS_PORT_INFO_RESP_TIME_FIELD_SIZE, 5);

SZ(struct ib_mad_hdr, 24, 8);
OFFU(struct ib_mad_hdr, base_version, 0, 1);
OFFU(struct ib_mad_hdr, mgmt_class, 1, 1);
OFFU(struct ib_mad_hdr, class_version, 2, 1);
OFFU(struct ib_mad_hdr, method, 3, 1);
OFFU(struct ib_mad_hdr, status, 4, 2);
OFFU(struct ib_mad_hdr, class_specific, 6, 2);
OFFU(struct ib_mad_hdr, tid, 8, 8);
OFFU(struct ib_mad_hdr, attr_id, 16, 2);
OFFU(struct ib_mad_hdr, resv, 18, 2);
OFFU(struct ib_mad_hdr, attr_mod, 20, 4);

SZ(struct ib_mad, 256, 8);
OFF(struct ib_mad, mad_hdr, 0, 24);
OFF(struct ib_mad, data, 24, 232);

SZ(struct ib_class_port_info, 72, 4);
OFFU(struct ib_class_port_info, base_version, 0, 1);
OFFU(struct ib_class_port_info, class_version, 1, 1);
OFFU(struct ib_class_port_info, capability_mask, 2, 2);
OFFU(struct ib_class_port_info, cap_mask2_resp_time, 4, 4);
OFF(struct ib_class_port_info, redirect_gid, 8, 16);
OFFU(struct ib_class_port_info, redirect_tcslfl, 24, 4);
OFFU(struct ib_class_port_info, redirect_lid, 28, 2);
OFFU(struct ib_class_port_info, redirect_pkey, 30, 2);
OFFU(struct ib_class_port_info, redirect_qp, 32, 4);
OFFU(struct ib_class_port_info, redirect_qkey, 36, 4);
OFF(struct ib_class_port_info, trap_gid, 40, 16);
OFFU(struct ib_class_port_info, trap_tcslfl, 56, 4);
OFFU(struct ib_class_port_info, trap_lid, 60, 2);
OFFU(struct ib_class_port_info, trap_pkey, 62, 2);
OFFU(struct ib_class_port_info, trap_hlqp, 64, 4);
OFFU(struct ib_class_port_info, trap_qkey, 68, 4);

/* =====================================================================
 * ib_cm.h enumerations
 * ================================================================== */
VAL(IB_CM_IDLE, 0);
VAL(IB_CM_LISTEN, 1);
VAL(IB_CM_REQ_SENT, 2);
VAL(IB_CM_REQ_RCVD, 3);
VAL(IB_CM_MRA_REQ_SENT, 4);
VAL(IB_CM_MRA_REQ_RCVD, 5);
VAL(IB_CM_REP_SENT, 6);
VAL(IB_CM_REP_RCVD, 7);
VAL(IB_CM_MRA_REP_SENT, 8);
VAL(IB_CM_MRA_REP_RCVD, 9);
VAL(IB_CM_ESTABLISHED, 10);
VAL(IB_CM_DREQ_SENT, 11);
VAL(IB_CM_DREQ_RCVD, 12);
VAL(IB_CM_TIMEWAIT, 13);
VAL(IB_CM_SIDR_REQ_SENT, 14);
VAL(IB_CM_SIDR_REQ_RCVD, 15);

VAL(IB_CM_LAP_UNINIT, 0);
VAL(IB_CM_LAP_IDLE, 1);
VAL(IB_CM_LAP_SENT, 2);
VAL(IB_CM_LAP_RCVD, 3);
VAL(IB_CM_MRA_LAP_SENT, 4);
VAL(IB_CM_MRA_LAP_RCVD, 5);

VAL(IB_CM_REQ_ERROR, 0);
VAL(IB_CM_REQ_RECEIVED, 1);
VAL(IB_CM_REP_ERROR, 2);
VAL(IB_CM_REP_RECEIVED, 3);
VAL(IB_CM_RTU_RECEIVED, 4);
VAL(IB_CM_USER_ESTABLISHED, 5);
VAL(IB_CM_DREQ_ERROR, 6);
VAL(IB_CM_DREQ_RECEIVED, 7);
VAL(IB_CM_DREP_RECEIVED, 8);
VAL(IB_CM_TIMEWAIT_EXIT, 9);
VAL(IB_CM_MRA_RECEIVED, 10);
VAL(IB_CM_REJ_RECEIVED, 11);
VAL(IB_CM_LAP_ERROR, 12);
VAL(IB_CM_LAP_RECEIVED, 13);
VAL(IB_CM_APR_RECEIVED, 14);
VAL(IB_CM_SIDR_REQ_ERROR, 15);
VAL(IB_CM_SIDR_REQ_RECEIVED, 16);
VAL(IB_CM_SIDR_REP_RECEIVED, 17);

VAL(IB_CM_REQ_PRIVATE_DATA_SIZE, 92);
VAL(IB_CM_MRA_PRIVATE_DATA_SIZE, 222);
VAL(IB_CM_REJ_PRIVATE_DATA_SIZE, 148);
VAL(IB_CM_REP_PRIVATE_DATA_SIZE, 196);
VAL(IB_CM_RTU_PRIVATE_DATA_SIZE, 224);
VAL(IB_CM_DREQ_PRIVATE_DATA_SIZE, 220);
VAL(IB_CM_DREP_PRIVATE_DATA_SIZE, 224);
VAL(IB_CM_REJ_ARI_LENGTH, 72);
VAL(IB_CM_LAP_PRIVATE_DATA_SIZE, 168);
VAL(IB_CM_APR_PRIVATE_DATA_SIZE, 148);
VAL(IB_CM_APR_INFO_LENGTH, 72);
VAL(IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE, 216);
VAL(IB_CM_SIDR_REP_PRIVATE_DATA_SIZE, 136);
VAL(IB_CM_SIDR_REP_INFO_LENGTH, 72);

VAL(IB_CM_REJ_NO_QP, 1);
VAL(IB_CM_REJ_NO_EEC, 2);
VAL(IB_CM_REJ_NO_RESOURCES, 3);
VAL(IB_CM_REJ_TIMEOUT, 4);
VAL(IB_CM_REJ_UNSUPPORTED, 5);
VAL(IB_CM_REJ_INVALID_COMM_ID, 6);
VAL(IB_CM_REJ_INVALID_COMM_INSTANCE, 7);
VAL(IB_CM_REJ_INVALID_SERVICE_ID, 8);
VAL(IB_CM_REJ_INVALID_TRANSPORT_TYPE, 9);
VAL(IB_CM_REJ_STALE_CONN, 10);
VAL(IB_CM_REJ_RDC_NOT_EXIST, 11);
VAL(IB_CM_REJ_INVALID_GID, 12);
VAL(IB_CM_REJ_INVALID_LID, 13);
VAL(IB_CM_REJ_INVALID_SL, 14);
VAL(IB_CM_REJ_INVALID_TRAFFIC_CLASS, 15);
VAL(IB_CM_REJ_INVALID_HOP_LIMIT, 16);
VAL(IB_CM_REJ_INVALID_PACKET_RATE, 17);
VAL(IB_CM_REJ_INVALID_ALT_GID, 18);
VAL(IB_CM_REJ_INVALID_ALT_LID, 19);
VAL(IB_CM_REJ_INVALID_ALT_SL, 20);
VAL(IB_CM_REJ_INVALID_ALT_TRAFFIC_CLASS, 21);
VAL(IB_CM_REJ_INVALID_ALT_HOP_LIMIT, 22);
VAL(IB_CM_REJ_INVALID_ALT_PACKET_RATE, 23);
VAL(IB_CM_REJ_PORT_CM_REDIRECT, 24);
VAL(IB_CM_REJ_PORT_REDIRECT, 25);
VAL(IB_CM_REJ_INVALID_MTU, 26);
VAL(IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES, 27);
VAL(IB_CM_REJ_CONSUMER_DEFINED, 28);
VAL(IB_CM_REJ_INVALID_RNR_RETRY, 29);
VAL(IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID, 30);
VAL(IB_CM_REJ_INVALID_CLASS_VERSION, 31);
VAL(IB_CM_REJ_INVALID_FLOW_LABEL, 32);
VAL(IB_CM_REJ_INVALID_ALT_FLOW_LABEL, 33);
VAL(IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED, 35);

VAL(IB_CM_APR_SUCCESS, 0);
VAL(IB_CM_APR_INVALID_COMM_ID, 1);
VAL(IB_CM_APR_UNSUPPORTED, 2);
VAL(IB_CM_APR_REJECT, 3);
VAL(IB_CM_APR_REDIRECT, 4);
VAL(IB_CM_APR_IS_CURRENT, 5);
VAL(IB_CM_APR_INVALID_QPN_EECN, 6);
VAL(IB_CM_APR_INVALID_LID, 7);
VAL(IB_CM_APR_INVALID_GID, 8);
VAL(IB_CM_APR_INVALID_FLOW_LABEL, 9);
VAL(IB_CM_APR_INVALID_TCLASS, 10);
VAL(IB_CM_APR_INVALID_HOP_LIMIT, 11);
VAL(IB_CM_APR_INVALID_PACKET_RATE, 12);
VAL(IB_CM_APR_INVALID_SL, 13);

VAL(IB_SIDR_SUCCESS, 0);
VAL(IB_SIDR_UNSUPPORTED, 1);
VAL(IB_SIDR_REJECT, 2);
VAL(IB_SIDR_NO_QP, 3);
VAL(IB_SIDR_REDIRECT, 4);
VAL(IB_SIDR_UNSUPPORTED_VERSION, 5);

/* =====================================================================
 * ib_cm.h macros: values as stored (big-endian) and in host order
 * ================================================================== */
_Static_assert(sizeof(IB_SERVICE_ID_AGN_MASK) == 8, "be64 macro size");
_Static_assert(sizeof(CM_REQ_ATTR_ID) == 2, "be16 macro size");
VAL(be64_to_cpu(IB_SERVICE_ID_AGN_MASK), 0xFF00000000000000ULL);
VAL(be64_to_cpu(IB_CM_ASSIGN_SERVICE_ID), 0x0200000000000000ULL);
VAL(be64_to_cpu(IB_CMA_SERVICE_ID), 0x0000000001000000ULL);
VAL(be64_to_cpu(IB_CMA_SERVICE_ID_MASK), 0xFFFFFFFFFF000000ULL);
VAL(be64_to_cpu(IB_SDP_SERVICE_ID), 0x0000000000010000ULL);
VAL(be64_to_cpu(IB_SDP_SERVICE_ID_MASK), 0xFFFFFFFFFFFF0000ULL);
VAL(IB_SERVICE_ID_AGN_MASK, 0x00000000000000FFULL);
VAL(IB_CM_ASSIGN_SERVICE_ID, 0x0000000000000002ULL);
VAL(IB_CMA_SERVICE_ID, 0x0000000100000000ULL);
VAL(IB_CMA_SERVICE_ID_MASK, 0x000000FFFFFFFFFFULL);
VAL(IB_SDP_SERVICE_ID, 0x0000010000000000ULL);
VAL(IB_SDP_SERVICE_ID_MASK, 0x0000FFFFFFFFFFFFULL);

VAL(be16_to_cpu(CM_REQ_ATTR_ID), 0x0010);
VAL(be16_to_cpu(CM_MRA_ATTR_ID), 0x0011);
VAL(be16_to_cpu(CM_REJ_ATTR_ID), 0x0012);
VAL(be16_to_cpu(CM_REP_ATTR_ID), 0x0013);
VAL(be16_to_cpu(CM_RTU_ATTR_ID), 0x0014);
VAL(be16_to_cpu(CM_DREQ_ATTR_ID), 0x0015);
VAL(be16_to_cpu(CM_DREP_ATTR_ID), 0x0016);
VAL(be16_to_cpu(CM_SIDR_REQ_ATTR_ID), 0x0017);
VAL(be16_to_cpu(CM_SIDR_REP_ATTR_ID), 0x0018);
VAL(be16_to_cpu(CM_LAP_ATTR_ID), 0x0019);
VAL(be16_to_cpu(CM_APR_ATTR_ID), 0x001A);
VAL(CM_REQ_ATTR_ID, 0x1000);
VAL(CM_APR_ATTR_ID, 0x1A00);

VAL(cpu_to_be32(0x01020304), 0x04030201);
VAL(be32_to_cpu(0x04030201), 0x01020304);
VAL(MAX_ERRNO, 4095);

/* =====================================================================
 * ib_cm.h structures
 * ================================================================== */
SZ(struct ib_cm_id, 56, 8);
OFF(struct ib_cm_id, cm_handler, 0, 8);
OFF(struct ib_cm_id, context, 8, 8);
OFF(struct ib_cm_id, device, 16, 8);
OFFU(struct ib_cm_id, service_id, 24, 8);
OFFU(struct ib_cm_id, state, 32, 4);
OFFU(struct ib_cm_id, lap_state, 36, 4);
OFFU(struct ib_cm_id, local_id, 40, 4);
OFFU(struct ib_cm_id, remote_id, 44, 4);
OFFU(struct ib_cm_id, remote_cm_qpn, 48, 4);

SZ(struct ib_cm_req_event_param, 80, 8);
OFF(struct ib_cm_req_event_param, listen_id, 0, 8);
OFFU(struct ib_cm_req_event_param, bth_pkey, 8, 2);
OFFU(struct ib_cm_req_event_param, port, 10, 1);
OFF(struct ib_cm_req_event_param, primary_path, 16, 8);
OFF(struct ib_cm_req_event_param, alternate_path, 24, 8);
OFF(struct ib_cm_req_event_param, ppath_sgid_attr, 32, 8);
OFFU(struct ib_cm_req_event_param, remote_ca_guid, 40, 8);
OFFU(struct ib_cm_req_event_param, remote_qkey, 48, 4);
OFFU(struct ib_cm_req_event_param, remote_qpn, 52, 4);
OFFU(struct ib_cm_req_event_param, qp_type, 56, 4);
OFFU(struct ib_cm_req_event_param, starting_psn, 60, 4);
OFFU(struct ib_cm_req_event_param, responder_resources, 64, 1);
OFFU(struct ib_cm_req_event_param, initiator_depth, 65, 1);
/* bitfields: checked at run time below */
OFF(struct ib_cm_req_event_param, ece, 72, 8);

SZ(struct ib_cm_rep_event_param, 32, 8);
OFFU(struct ib_cm_rep_event_param, remote_ca_guid, 0, 8);
OFFU(struct ib_cm_rep_event_param, remote_qkey, 8, 4);
OFFU(struct ib_cm_rep_event_param, remote_qpn, 12, 4);
OFFU(struct ib_cm_rep_event_param, starting_psn, 16, 4);
OFFU(struct ib_cm_rep_event_param, responder_resources, 20, 1);
OFFU(struct ib_cm_rep_event_param, initiator_depth, 21, 1);
OFF(struct ib_cm_rep_event_param, ece, 24, 8);

SZ(struct ib_cm_rej_event_param, 24, 8);
OFFU(struct ib_cm_rej_event_param, reason, 0, 4);
OFF(struct ib_cm_rej_event_param, ari, 8, 8);
OFFU(struct ib_cm_rej_event_param, ari_length, 16, 1);

SZ(struct ib_cm_mra_event_param, 1, 1);
OFFU(struct ib_cm_mra_event_param, service_timeout, 0, 1);

SZ(struct ib_cm_lap_event_param, 8, 8);
OFF(struct ib_cm_lap_event_param, alternate_path, 0, 8);

SZ(struct ib_cm_apr_event_param, 24, 8);
OFFU(struct ib_cm_apr_event_param, ap_status, 0, 4);
OFF(struct ib_cm_apr_event_param, apr_info, 8, 8);
OFFU(struct ib_cm_apr_event_param, info_len, 16, 1);

SZ(struct ib_cm_sidr_req_event_param, 32, 8);
OFF(struct ib_cm_sidr_req_event_param, listen_id, 0, 8);
OFFU(struct ib_cm_sidr_req_event_param, service_id, 8, 8);
OFF(struct ib_cm_sidr_req_event_param, sgid_attr, 16, 8);
OFFU(struct ib_cm_sidr_req_event_param, bth_pkey, 24, 2);
OFFU(struct ib_cm_sidr_req_event_param, port, 26, 1);
OFFU(struct ib_cm_sidr_req_event_param, pkey, 28, 2);

SZ(struct ib_cm_sidr_rep_event_param, 40, 8);
OFFU(struct ib_cm_sidr_rep_event_param, status, 0, 4);
OFFU(struct ib_cm_sidr_rep_event_param, qkey, 4, 4);
OFFU(struct ib_cm_sidr_rep_event_param, qpn, 8, 4);
OFF(struct ib_cm_sidr_rep_event_param, info, 16, 8);
OFF(struct ib_cm_sidr_rep_event_param, sgid_attr, 24, 8);
OFFU(struct ib_cm_sidr_rep_event_param, info_len, 32, 1);

SZ(struct ib_cm_event, 96, 8);
OFFU(struct ib_cm_event, event, 0, 4);
OFF(struct ib_cm_event, param, 8, 80);
OFF(struct ib_cm_event, param.req_rcvd, 8, 80);
OFF(struct ib_cm_event, param.rep_rcvd, 8, 32);
OFF(struct ib_cm_event, param.rej_rcvd, 8, 24);
OFF(struct ib_cm_event, param.mra_rcvd, 8, 1);
OFF(struct ib_cm_event, param.lap_rcvd, 8, 8);
OFF(struct ib_cm_event, param.apr_rcvd, 8, 24);
OFF(struct ib_cm_event, param.sidr_req_rcvd, 8, 32);
OFF(struct ib_cm_event, param.sidr_rep_rcvd, 8, 40);
OFFU(struct ib_cm_event, param.send_status, 8, 4);
OFF(struct ib_cm_event, private_data, 88, 8);

SZ(struct ib_cm_req_param, 96, 8);
OFF(struct ib_cm_req_param, primary_path, 0, 8);
OFF(struct ib_cm_req_param, primary_path_inbound, 8, 8);
OFF(struct ib_cm_req_param, primary_path_outbound, 16, 8);
OFF(struct ib_cm_req_param, alternate_path, 24, 8);
OFF(struct ib_cm_req_param, ppath_sgid_attr, 32, 8);
OFFU(struct ib_cm_req_param, service_id, 40, 8);
OFFU(struct ib_cm_req_param, qp_num, 48, 4);
OFFU(struct ib_cm_req_param, qp_type, 52, 4);
OFFU(struct ib_cm_req_param, starting_psn, 56, 4);
OFF(struct ib_cm_req_param, private_data, 64, 8);
OFFU(struct ib_cm_req_param, private_data_len, 72, 1);
OFFU(struct ib_cm_req_param, responder_resources, 73, 1);
OFFU(struct ib_cm_req_param, initiator_depth, 74, 1);
OFFU(struct ib_cm_req_param, remote_cm_response_timeout, 75, 1);
OFFU(struct ib_cm_req_param, flow_control, 76, 1);
OFFU(struct ib_cm_req_param, local_cm_response_timeout, 77, 1);
OFFU(struct ib_cm_req_param, retry_count, 78, 1);
OFFU(struct ib_cm_req_param, rnr_retry_count, 79, 1);
OFFU(struct ib_cm_req_param, max_cm_retries, 80, 1);
OFFU(struct ib_cm_req_param, srq, 81, 1);
OFF(struct ib_cm_req_param, ece, 84, 8);

SZ(struct ib_cm_rep_param, 32, 8);
OFFU(struct ib_cm_rep_param, qp_num, 0, 4);
OFFU(struct ib_cm_rep_param, starting_psn, 4, 4);
OFF(struct ib_cm_rep_param, private_data, 8, 8);
OFFU(struct ib_cm_rep_param, private_data_len, 16, 1);
OFFU(struct ib_cm_rep_param, responder_resources, 17, 1);
OFFU(struct ib_cm_rep_param, initiator_depth, 18, 1);
OFFU(struct ib_cm_rep_param, failover_accepted, 19, 1);
OFFU(struct ib_cm_rep_param, flow_control, 20, 1);
OFFU(struct ib_cm_rep_param, rnr_retry_count, 21, 1);
OFFU(struct ib_cm_rep_param, srq, 22, 1);
OFF(struct ib_cm_rep_param, ece, 24, 8);

SZ(struct ib_cm_sidr_req_param, 48, 8);
OFF(struct ib_cm_sidr_req_param, path, 0, 8);
OFF(struct ib_cm_sidr_req_param, sgid_attr, 8, 8);
OFFU(struct ib_cm_sidr_req_param, service_id, 16, 8);
OFFU(struct ib_cm_sidr_req_param, timeout_ms, 24, 8);
OFF(struct ib_cm_sidr_req_param, private_data, 32, 8);
OFFU(struct ib_cm_sidr_req_param, private_data_len, 40, 1);
OFFU(struct ib_cm_sidr_req_param, max_cm_retries, 41, 1);

SZ(struct ib_cm_sidr_rep_param, 56, 8);
OFFU(struct ib_cm_sidr_rep_param, qp_num, 0, 4);
OFFU(struct ib_cm_sidr_rep_param, qkey, 4, 4);
OFFU(struct ib_cm_sidr_rep_param, status, 8, 4);
OFF(struct ib_cm_sidr_rep_param, info, 16, 8);
OFFU(struct ib_cm_sidr_rep_param, info_length, 24, 1);
OFF(struct ib_cm_sidr_rep_param, private_data, 32, 8);
OFFU(struct ib_cm_sidr_rep_param, private_data_len, 40, 1);
OFF(struct ib_cm_sidr_rep_param, ece, 44, 8);

/* =====================================================================
 * ib_cm.h callback type and prototypes
 * ================================================================== */
_Static_assert(_Generic((ib_cm_handler)0,
		int (*)(struct ib_cm_id *, const struct ib_cm_event *): 1,
		default: 0), "ib_cm_handler type");

PROTO(ib_create_cm_id,
      struct ib_cm_id *(*)(struct ib_device *, ib_cm_handler, void *));
PROTO(ib_destroy_cm_id, void (*)(struct ib_cm_id *));
PROTO(ib_cm_listen, int (*)(struct ib_cm_id *, __be64));
PROTO(ib_cm_insert_listen,
      struct ib_cm_id *(*)(struct ib_device *, ib_cm_handler, __be64));
PROTO(ib_send_cm_req, int (*)(struct ib_cm_id *, struct ib_cm_req_param *));
PROTO(ib_send_cm_rep, int (*)(struct ib_cm_id *, struct ib_cm_rep_param *));
PROTO(ib_send_cm_rtu, int (*)(struct ib_cm_id *, const void *, u8));
PROTO(ib_send_cm_dreq, int (*)(struct ib_cm_id *, const void *, u8));
PROTO(ib_send_cm_drep, int (*)(struct ib_cm_id *, const void *, u8));
PROTO(ib_cm_notify, int (*)(struct ib_cm_id *, enum ib_event_type));
PROTO(ib_send_cm_rej, int (*)(struct ib_cm_id *, enum ib_cm_rej_reason,
			      void *, u8, const void *, u8));
PROTO(ib_prepare_cm_mra, int (*)(struct ib_cm_id *));
PROTO(ib_cm_init_qp_attr,
      int (*)(struct ib_cm_id *, struct ib_qp_attr *, int *));
PROTO(ib_send_cm_sidr_req,
      int (*)(struct ib_cm_id *, struct ib_cm_sidr_req_param *));
PROTO(ib_send_cm_sidr_rep,
      int (*)(struct ib_cm_id *, struct ib_cm_sidr_rep_param *));
PROTO(ibcm_reject_msg, const char *(*)(int));

/* <ibcm.h> glue */
PROTO(ibcm_open_device, struct ib_device *(*)(const char *));
PROTO(ibcm_close_device, void (*)(struct ib_device *));
PROTO(ibcm_query_gid, int (*)(struct ib_device *, u32, int, union ib_gid *));
PROTO(ibcm_init_path, int (*)(struct ib_device *, u32, const union ib_gid *,
			      struct sa_path_rec *));
PROTO(ibcm_gid_from_string, int (*)(const char *, union ib_gid *));
PROTO(ibcm_get_counters, int (*)(struct ib_device *, struct ibcm_counters *, size_t));
PROTO(ibcm_pcap_start, int (*)(const char *, uint64_t));
PROTO(ibcm_pcap_stop, int (*)(void));
_Static_assert(sizeof(struct ibcm_counters) == 8 * (5 * 12 + 2 * 37 + 8 + 5 + 7 + 3),
	       "struct ibcm_counters size");
_Static_assert(offsetof(struct ibcm_counters, rej_tx) == 8 * 60, "rej_tx");
_Static_assert(offsetof(struct ibcm_counters, drops) == 8 * 134, "drops");
_Static_assert(offsetof(struct ibcm_counters, ids_created) == 8 * 142, "ids_created");
_Static_assert(offsetof(struct ibcm_counters, rx_datagrams) == 8 * 147, "rx_datagrams");
_Static_assert(offsetof(struct ibcm_counters, rx_clamped) == 8 * 154, "rx_clamped");
_Static_assert(offsetof(struct ibcm_counters, rx_off_path) == 8 * 156, "rx_off_path");
_Static_assert(IBCM_ATTR_APR == 11 && IBCM_DROP_MISMATCH == 7, "counter indexes");

/* Constant expressions where the kernel uses them: case labels. */
static int attr_index(__be16 attr_id)
{
	switch (attr_id) {
	case CM_REQ_ATTR_ID:		return 0;
	case CM_MRA_ATTR_ID:		return 1;
	case CM_REJ_ATTR_ID:		return 2;
	case CM_REP_ATTR_ID:		return 3;
	case CM_RTU_ATTR_ID:		return 4;
	case CM_DREQ_ATTR_ID:		return 5;
	case CM_DREP_ATTR_ID:		return 6;
	case CM_SIDR_REQ_ATTR_ID:	return 7;
	case CM_SIDR_REP_ATTR_ID:	return 8;
	case CM_LAP_ATTR_ID:		return 9;
	case CM_APR_ATTR_ID:		return 10;
	default:			return -1;
	}
}

static const __be64 static_service_id = IB_CM_ASSIGN_SERVICE_ID;

/* =====================================================================
 * Run-time checks
 * ================================================================== */
static int failures;

static void check_bytes(const char *what, const void *obj, size_t size,
			size_t off, const unsigned char *expect, size_t n)
{
	const unsigned char *p = obj;
	size_t i;

	for (i = 0; i < size; i++) {
		unsigned char want = (i >= off && i < off + n) ? expect[i - off] : 0;

		if (p[i] != want) {
			printf("FAIL %s: byte %zu is 0x%02x, expected 0x%02x\n",
			       what, i, p[i], want);
			failures++;
		}
	}
}

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);\
			failures++;                                          \
		}                                                            \
	} while (0)

/*
 * Set one bitfield to all ones in a zeroed struct and compare the struct's
 * bytes with the expected pattern starting at byte `off`.  The value comes
 * through a volatile so that the compiler does not warn about truncation.
 */
#define BITFIELD(T, m, off, ...)                                             \
	do {                                                                 \
		T v_;                                                        \
		const unsigned char e_[] = { __VA_ARGS__ };                  \
		memset(&v_, 0, sizeof(v_));                                  \
		v_.m = ones;                                                 \
		check_bytes(#T "." #m, &v_, sizeof(v_), off, e_, sizeof(e_));\
	} while (0)

static void check_bitfields(void)
{
	volatile unsigned int ones = ~0u;

	/* struct ib_cm_req_event_param, bytes 66..68 (CM_RULES.md §abi) */
	BITFIELD(struct ib_cm_req_event_param, local_cm_response_timeout, 66, 0x1F);
	BITFIELD(struct ib_cm_req_event_param, flow_control, 66, 0x20);
	BITFIELD(struct ib_cm_req_event_param, remote_cm_response_timeout, 66, 0xC0, 0x07);
	BITFIELD(struct ib_cm_req_event_param, retry_count, 67, 0x38);
	BITFIELD(struct ib_cm_req_event_param, rnr_retry_count, 68, 0x07);
	BITFIELD(struct ib_cm_req_event_param, srq, 68, 0x08);

	/* struct ib_cm_rep_event_param, bytes 22..23 */
	BITFIELD(struct ib_cm_rep_event_param, target_ack_delay, 22, 0x1F);
	BITFIELD(struct ib_cm_rep_event_param, failover_accepted, 22, 0x60);
	BITFIELD(struct ib_cm_rep_event_param, flow_control, 22, 0x80);
	BITFIELD(struct ib_cm_rep_event_param, rnr_retry_count, 23, 0x07);
	BITFIELD(struct ib_cm_rep_event_param, srq, 23, 0x08);

	/* A value that is not all ones, read back and as raw bytes. */
	{
		struct ib_cm_req_event_param r;
		const unsigned char e[] = { 0x55, 0x35, 0x0D };
		volatile unsigned int five = 0x15, seven = 7, one = 1, six = 6,
				      zero = 0;

		memset(&r, 0, sizeof(r));
		r.local_cm_response_timeout = five;	/* 10101 */
		r.flow_control = zero;
		r.remote_cm_response_timeout = five;	/* 10101 */
		r.retry_count = six;			/* 110 */
		r.rnr_retry_count = five & seven;	/* 101 */
		r.srq = one;
		check_bytes("req_event_param pattern", &r, sizeof(r), 66, e, 3);
		CHECK(r.local_cm_response_timeout == 0x15);
		CHECK(r.remote_cm_response_timeout == 0x15);
		CHECK(r.retry_count == 6);
		CHECK(r.rnr_retry_count == 5);
		CHECK(r.srq == 1);
		CHECK(r.flow_control == 0);
	}
	{
		struct ib_cm_rep_event_param r;
		const unsigned char e[] = { 0xD5, 0x0E };
		volatile unsigned int v21 = 0x15, v2 = 2, v1 = 1, v6 = 6, v0 = 0;

		memset(&r, 0, sizeof(r));
		r.target_ack_delay = v21;	/* 10101 */
		r.failover_accepted = v2;	/* 10 */
		r.flow_control = v1;
		r.rnr_retry_count = v6;		/* 110 */
		r.srq = v1;
		check_bytes("rep_event_param pattern", &r, sizeof(r), 22, e, 2);
		r.srq = v0;
		CHECK(r.target_ack_delay == 0x15 && r.failover_accepted == 2 &&
		      r.flow_control == 1 && r.rnr_retry_count == 6 && r.srq == 0);
	}
}

static void check_helpers(void)
{
	struct sa_path_rec rec;
	union ib_gid gid;
	const unsigned char be[] = { 0x00, 0x10 };
	__be16 attr = CM_REQ_ATTR_ID;
	const u8 mac[ETH_ALEN] = { 1, 2, 3, 4, 5, 6 };

	/* error pointers */
	CHECK(IS_ERR(ERR_PTR(-1)));
	CHECK(IS_ERR(ERR_PTR(-MAX_ERRNO)));
	CHECK(!IS_ERR(ERR_PTR(-MAX_ERRNO - 1)));
	CHECK(!IS_ERR(NULL));
	CHECK(!IS_ERR(&rec));
	CHECK(IS_ERR_OR_NULL(NULL));
	CHECK(IS_ERR_OR_NULL(ERR_PTR(-22)));
	CHECK(!IS_ERR_OR_NULL(&rec));
	CHECK(PTR_ERR(ERR_PTR(-12)) == -12);
	CHECK(PTR_ERR_OR_ZERO(ERR_PTR(-5)) == -5);
	CHECK(PTR_ERR_OR_ZERO(&rec) == 0);
	CHECK(PTR_ERR_OR_ZERO(NULL) == 0);
	CHECK(ERR_CAST(ERR_PTR(-7)) == ERR_PTR(-7));
	CHECK(IS_ERR_VALUE(-4095L));
	CHECK(!IS_ERR_VALUE(0L));

	/* byte order: attribute IDs are stored big-endian */
	CHECK(memcmp(&attr, be, 2) == 0);
	CHECK(attr_index(CM_SIDR_REP_ATTR_ID) == 8);
	CHECK(attr_index(cpu_to_be16(0x0010)) == 0);
	CHECK(be64_to_cpu(static_service_id) == 0x0200000000000000ULL);
	CHECK(cpu_to_be64(be64_to_cpu(0x0123456789abcdefULL)) ==
	      0x0123456789abcdefULL);

	/* union ib_gid views */
	memset(&gid, 0, sizeof(gid));
	gid.raw[0] = 0xfe;
	gid.raw[1] = 0x80;
	gid.raw[15] = 0x01;
	CHECK(be64_to_cpu(gid.global.subnet_prefix) == 0xfe80000000000000ULL);
	CHECK(be64_to_cpu(gid.global.interface_id) == 1);

	/* sa_path_rec helpers */
	memset(&rec, 0, sizeof(rec));
	rec.rec_type = SA_PATH_REC_TYPE_IB;
	sa_path_set_dlid(&rec, 0x1234);
	sa_path_set_slid(&rec, 0x0042);
	CHECK(be16_to_cpu(rec.ib.dlid) == 0x1234);
	CHECK(be32_to_cpu(sa_path_get_dlid(&rec)) == 0x1234);
	CHECK(be32_to_cpu(sa_path_get_slid(&rec)) == 0x0042);
	CHECK(!sa_path_is_roce(&rec) && !sa_path_is_opa(&rec));
	CHECK(sa_path_get_dmac(&rec) == NULL);
	rec.rec_type = SA_PATH_REC_TYPE_OPA;
	sa_path_set_dlid(&rec, 0x00123456);
	CHECK(be32_to_cpu(sa_path_get_dlid(&rec)) == 0x00123456);
	memset(&rec, 0, sizeof(rec));
	rec.rec_type = SA_PATH_REC_TYPE_ROCE_V2;
	sa_path_set_dlid(&rec, 0x1234);			/* no-op */
	CHECK(sa_path_get_dlid(&rec) == 0);
	sa_path_set_dmac(&rec, mac);
	CHECK(sa_path_is_roce(&rec));
	CHECK(memcmp(sa_path_get_dmac(&rec), mac, ETH_ALEN) == 0);
	CHECK(rec.roce.route_resolved == false);
	CHECK(sa_conv_pathrec_to_gid_type(&rec) == IB_GID_TYPE_ROCE_UDP_ENCAP);
	CHECK(sa_conv_gid_to_pathrec_type(IB_GID_TYPE_ROCE) ==
	      SA_PATH_REC_TYPE_ROCE_V1);
	CHECK(sa_conv_gid_to_pathrec_type(IB_GID_TYPE_IB) == SA_PATH_REC_TYPE_IB);
	sa_path_set_dmac_zero(&rec);
	CHECK(rec.roce.dmac[0] == 0 && rec.roce.dmac[5] == 0);

	CHECK(ib_mtu_enum_to_int(IB_MTU_4096) == 4096);
	CHECK(ib_mtu_enum_to_int(IB_MTU_256) == 256);

	{
		struct ib_class_port_info cpi;

		memset(&cpi, 0, sizeof(cpi));
		ib_set_cpi_resp_time(&cpi, 18);
		ib_set_cpi_capmask2(&cpi, 0x5);
		CHECK(ib_get_cpi_resp_time(&cpi) == 18);
		CHECK(ib_get_cpi_capmask2(&cpi) == 0x5);
		CHECK(be32_to_cpu(cpi.cap_mask2_resp_time) == ((0x5u << 5) | 18));
	}
}

int main(void)
{
	check_bitfields();
	check_helpers();
	if (failures) {
		printf("abi_static: %d check(s) FAILED\n", failures);
		return 1;
	}
	printf("abi_static: all checks passed\n");
	return 0;
}
