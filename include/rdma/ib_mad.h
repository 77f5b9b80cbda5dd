/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * ibcm: the subset of the Linux kernel's <rdma/ib_mad.h> useful to CM
 * users: MAD versions, management classes, methods and status codes, the
 * 24-byte common MAD header, the 256-byte MAD and ClassPortInfo.  Values and
 * layouts are the kernel's.  The MAD agent API is not part of ibcm.
 */
#ifndef IB_MAD_H
#define IB_MAD_H

#include <rdma/ib_verbs.h>

/* Base versions */
#define IB_MGMT_BASE_VERSION			1
#define OPA_MGMT_BASE_VERSION			0x80

#define OPA_SM_CLASS_VERSION			0x80

/* Management classes (IB_MGMT_CLASS_CM is the Communication Manager) */
#define IB_MGMT_CLASS_SUBN_LID_ROUTED		0x01
#define IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE	0x81
#define IB_MGMT_CLASS_SUBN_ADM			0x03
#define IB_MGMT_CLASS_PERF_MGMT			0x04
#define IB_MGMT_CLASS_BM			0x05
#define IB_MGMT_CLASS_DEVICE_MGMT		0x06
#define IB_MGMT_CLASS_CM			0x07
#define IB_MGMT_CLASS_SNMP			0x08
#define IB_MGMT_CLASS_DEVICE_ADM		0x10
#define IB_MGMT_CLASS_BOOT_MGMT			0x11
#define IB_MGMT_CLASS_BIS			0x12
#define IB_MGMT_CLASS_CONG_MGMT			0x21
#define IB_MGMT_CLASS_VENDOR_RANGE2_START	0x30
#define IB_MGMT_CLASS_VENDOR_RANGE2_END		0x4F

#define IB_OPENIB_OUI				(0x001405)

/* Methods; every CM message is a Send */
#define IB_MGMT_METHOD_GET			0x01
#define IB_MGMT_METHOD_SET			0x02
#define IB_MGMT_METHOD_GET_RESP			0x81
#define IB_MGMT_METHOD_SEND			0x03
#define IB_MGMT_METHOD_TRAP			0x05
#define IB_MGMT_METHOD_REPORT			0x06
#define IB_MGMT_METHOD_REPORT_RESP		0x86
#define IB_MGMT_METHOD_TRAP_REPRESS		0x07

#define IB_MGMT_METHOD_RESP			0x80	/* response bit */

#define IB_MGMT_MAX_METHODS			128

/* Status field values (host order; the header carries them big-endian) */
#define IB_MGMT_MAD_STATUS_SUCCESS			0x0000
#define IB_MGMT_MAD_STATUS_BUSY				0x0001
#define IB_MGMT_MAD_STATUS_REDIRECT_REQD		0x0002
#define IB_MGMT_MAD_STATUS_BAD_VERSION			0x0004
#define IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD		0x0008
#define IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB	0x000c
#define IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE		0x001c

/* Special QPs and keys */
#define IB_QP0		0
#define IB_QP1		cpu_to_be32(1)
#define IB_QP1_QKEY	0x80010000
#define IB_QP_SET_QKEY	0x80000000

#define IB_DEFAULT_PKEY_PARTIAL 0x7FFF
#define IB_DEFAULT_PKEY_FULL	0xFFFF

/* Sizes in bytes */
enum {
	IB_MGMT_MAD_HDR = 24,
	IB_MGMT_MAD_DATA = 232,
	IB_MGMT_RMPP_HDR = 36,
	IB_MGMT_RMPP_DATA = 220,
	IB_MGMT_VENDOR_HDR = 40,
	IB_MGMT_VENDOR_DATA = 216,
	IB_MGMT_SA_HDR = 56,
	IB_MGMT_SA_DATA = 200,
	IB_MGMT_DEVICE_HDR = 64,
	IB_MGMT_DEVICE_DATA = 192,
	IB_MGMT_MAD_SIZE = IB_MGMT_MAD_HDR + IB_MGMT_MAD_DATA,
	OPA_MGMT_MAD_DATA = 2024,
	OPA_MGMT_RMPP_DATA = 2012,
	OPA_MGMT_MAD_SIZE = IB_MGMT_MAD_HDR + OPA_MGMT_MAD_DATA,
};

/* Common MAD header; multi-byte fields are big-endian. */
struct ib_mad_hdr {
	u8 base_version;
	u8 mgmt_class;
	u8 class_version;
	u8 method;
	__be16 status;
	__be16 class_specific;
	__be64 tid;
	__be16 attr_id;
	__be16 resv;
	__be32 attr_mod;
};

/* A complete 256-byte MAD. */
struct ib_mad {
	struct ib_mad_hdr mad_hdr;
	u8 data[IB_MGMT_MAD_DATA];
};

/* Attribute ID of ClassPortInfo (common to all GMP classes). */
#define IB_MGMT_CLASSPORTINFO_ATTR_ID	cpu_to_be16(0x0001)

#define IB_CLASS_PORT_INFO_RESP_TIME_MASK	0x1F
#define IB_CLASS_PORT_INFO_RESP_TIME_FIELD_SIZE 5

/* ClassPortInfo attribute (72 bytes, big-endian fields). */
struct ib_class_port_info {
	u8 base_version;
	u8 class_version;
	__be16 capability_mask;
	/* upper 27 bits: CapabilityMask2, lower 5 bits: RespTimeValue */
	__be32 cap_mask2_resp_time;
	u8 redirect_gid[16];
	__be32 redirect_tcslfl;
	__be16 redirect_lid;
	__be16 redirect_pkey;
	__be32 redirect_qp;
	__be32 redirect_qkey;
	u8 trap_gid[16];
	__be32 trap_tcslfl;
	__be16 trap_lid;
	__be16 trap_pkey;
	__be32 trap_hlqp;
	__be32 trap_qkey;
};

/* RespTimeValue of a ClassPortInfo. */
static inline u8 ib_get_cpi_resp_time(struct ib_class_port_info *cpi)
{
	return (u8)(be32_to_cpu(cpi->cap_mask2_resp_time) &
		    IB_CLASS_PORT_INFO_RESP_TIME_MASK);
}

/* Replace the RespTimeValue, keeping CapabilityMask2. */
static inline void ib_set_cpi_resp_time(struct ib_class_port_info *cpi,
					u8 rtime)
{
	u32 v = be32_to_cpu(cpi->cap_mask2_resp_time);

	v = (v & ~(u32)IB_CLASS_PORT_INFO_RESP_TIME_MASK) |
	    ((u32)rtime & IB_CLASS_PORT_INFO_RESP_TIME_MASK);
	cpi->cap_mask2_resp_time = cpu_to_be32(v);
}

/* CapabilityMask2 of a ClassPortInfo. */
static inline u32 ib_get_cpi_capmask2(struct ib_class_port_info *cpi)
{
	return be32_to_cpu(cpi->cap_mask2_resp_time) >>
	       IB_CLASS_PORT_INFO_RESP_TIME_FIELD_SIZE;
}

/* Replace CapabilityMask2, keeping the RespTimeValue. */
static inline void ib_set_cpi_capmask2(struct ib_class_port_info *cpi,
				       u32 capmask2)
{
	u32 v = be32_to_cpu(cpi->cap_mask2_resp_time);

	v = (v & IB_CLASS_PORT_INFO_RESP_TIME_MASK) |
	    (capmask2 << IB_CLASS_PORT_INFO_RESP_TIME_FIELD_SIZE);
	cpi->cap_mask2_resp_time = cpu_to_be32(v);
}

#endif /* IB_MAD_H */
