/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * ibcm: the subset of the Linux kernel's <rdma/ib_sa.h> that the CM API
 * uses: struct sa_path_rec (the path record handed to ib_send_cm_req() and
 * reported in REQ/LAP events), its type and selector enumerations, the
 * IB_PATH_* flags and the small inline accessors.  Names, member order,
 * types and values are the kernel's.
 */
#ifndef IB_SA_H
#define IB_SA_H

#include <rdma/ib_verbs.h>
#include <rdma/ib_mad.h>

/*
 * IB_PATH_GMP, IB_PATH_PRIMARY, ... (values of sa_path_rec.flags) belong to
 * the kernel UAPI header <rdma/ib_user_sa.h>, shipped with the kernel
 * headers (linux-libc-dev) and by rdma-core.  As in the kernel we take them
 * from there, so that including both headers never defines them twice; the
 * fallback only serves systems without that header.
 */
#if defined(__has_include)
#if __has_include(<rdma/ib_user_sa.h>)
#include <rdma/ib_user_sa.h>
#define IBCM_HAVE_IB_USER_SA_H 1
#endif
#endif
#if !defined(IBCM_HAVE_IB_USER_SA_H) && !defined(IB_USER_SA_H)
enum {
	IB_PATH_GMP = 1,
	IB_PATH_PRIMARY = (1 << 1),
	IB_PATH_ALTERNATE = (1 << 2),
	IB_PATH_OUTBOUND = (1 << 3),
	IB_PATH_INBOUND = (1 << 4),
	IB_PATH_INBOUND_REVERSE = (1 << 5),
	IB_PATH_BIDIRECTIONAL = IB_PATH_OUTBOUND | IB_PATH_INBOUND_REVERSE
};
#endif

/* Which member of the address union of struct sa_path_rec is valid. */
enum sa_path_rec_type {
	SA_PATH_REC_TYPE_IB,
	SA_PATH_REC_TYPE_ROCE_V1,
	SA_PATH_REC_TYPE_ROCE_V2,
	SA_PATH_REC_TYPE_OPA
};

/* Meaning of the *_selector fields of a path record. */
enum ib_sa_selector {
	IB_SA_GT = 0,
	IB_SA_LT = 1,
	IB_SA_EQ = 2,
	/* best available: for rate, MTU and packet life time */
	IB_SA_BEST = 3
};

/* InfiniBand addressing of a path (LIDs big-endian). */
struct sa_path_rec_ib {
	__be16 dlid;
	__be16 slid;
	u8 raw_traffic;
};

/* RoCE addressing of a path. */
struct sa_path_rec_roce {
	bool route_resolved;
	u8 dmac[ETH_ALEN];
};

/* Omni-Path addressing of a path (32-bit LIDs, big-endian). */
struct sa_path_rec_opa {
	__be32 dlid;
	__be32 slid;
	u8 raw_traffic;
	u8 l2_8B;
	u8 l2_10B;
	u8 l2_9B;
	u8 l2_16B;
	u8 qos_type;
	u8 qos_priority;
};

/*
 * A path record.  dgid/sgid/service_id/flow_label/pkey/qos_class are in
 * network byte order; mtu is an enum ib_mtu, rate an enum ib_rate and
 * packet_life_time the IBTA exponent (4.096 us * 2^n).  rec_type selects
 * the member of the anonymous union; flags holds IB_PATH_* bits.
 */
struct sa_path_rec {
	union ib_gid dgid;
	union ib_gid sgid;
	__be64 service_id;
	__be32 flow_label;
	u8 hop_limit;
	u8 traffic_class;
	u8 reversible;
	u8 numb_path;
	__be16 pkey;
	__be16 qos_class;
	u8 sl;
	u8 mtu_selector;
	u8 mtu;
	u8 rate_selector;
	u8 rate;
	u8 packet_life_time_selector;
	u8 packet_life_time;
	u8 preference;
	union {
		struct sa_path_rec_ib ib;
		struct sa_path_rec_roce roce;
		struct sa_path_rec_opa opa;
	};
	enum sa_path_rec_type rec_type;
	u32 flags;
};

/* -------------------------------------------------------------------------
 * Inline helpers
 * ---------------------------------------------------------------------- */

/* Path record type matching a GID type. */
static inline enum sa_path_rec_type
sa_conv_gid_to_pathrec_type(enum ib_gid_type type)
{
	if (type == IB_GID_TYPE_ROCE)
		return SA_PATH_REC_TYPE_ROCE_V1;
	if (type == IB_GID_TYPE_ROCE_UDP_ENCAP)
		return SA_PATH_REC_TYPE_ROCE_V2;
	return SA_PATH_REC_TYPE_IB;
}

/* GID type matching a path record type. */
static inline enum ib_gid_type
sa_conv_pathrec_to_gid_type(const struct sa_path_rec *rec)
{
	if (rec->rec_type == SA_PATH_REC_TYPE_ROCE_V1)
		return IB_GID_TYPE_ROCE;
	if (rec->rec_type == SA_PATH_REC_TYPE_ROCE_V2)
		return IB_GID_TYPE_ROCE_UDP_ENCAP;
	return IB_GID_TYPE_IB;
}

static inline bool sa_path_is_roce(const struct sa_path_rec *rec)
{
	return rec->rec_type == SA_PATH_REC_TYPE_ROCE_V1 ||
	       rec->rec_type == SA_PATH_REC_TYPE_ROCE_V2;
}

static inline bool sa_path_is_opa(const struct sa_path_rec *rec)
{
	return rec->rec_type == SA_PATH_REC_TYPE_OPA;
}

/* Store a host-order source LID (no-op for RoCE paths). */
static inline void sa_path_set_slid(struct sa_path_rec *rec, u32 slid)
{
	if (rec->rec_type == SA_PATH_REC_TYPE_IB)
		rec->ib.slid = cpu_to_be16(slid);
	else if (rec->rec_type == SA_PATH_REC_TYPE_OPA)
		rec->opa.slid = cpu_to_be32(slid);
}

/* Store a host-order destination LID (no-op for RoCE paths). */
static inline void sa_path_set_dlid(struct sa_path_rec *rec, u32 dlid)
{
	if (rec->rec_type == SA_PATH_REC_TYPE_IB)
		rec->ib.dlid = cpu_to_be16(dlid);
	else if (rec->rec_type == SA_PATH_REC_TYPE_OPA)
		rec->opa.dlid = cpu_to_be32(dlid);
}

/* Source LID widened to 32 bits, big-endian; 0 for RoCE paths. */
static inline __be32 sa_path_get_slid(const struct sa_path_rec *rec)
{
	if (rec->rec_type == SA_PATH_REC_TYPE_IB)
		return cpu_to_be32(be16_to_cpu(rec->ib.slid));
	if (rec->rec_type == SA_PATH_REC_TYPE_OPA)
		return rec->opa.slid;
	return 0;
}

/* Destination LID widened to 32 bits, big-endian; 0 for RoCE paths. */
static inline __be32 sa_path_get_dlid(const struct sa_path_rec *rec)
{
	if (rec->rec_type == SA_PATH_REC_TYPE_IB)
		return cpu_to_be32(be16_to_cpu(rec->ib.dlid));
	if (rec->rec_type == SA_PATH_REC_TYPE_OPA)
		return rec->opa.dlid;
	return 0;
}

static inline void sa_path_set_raw_traffic(struct sa_path_rec *rec,
					   u8 raw_traffic)
{
	if (rec->rec_type == SA_PATH_REC_TYPE_IB)
		rec->ib.raw_traffic = raw_traffic;
	else if (rec->rec_type == SA_PATH_REC_TYPE_OPA)
		rec->opa.raw_traffic = raw_traffic;
}

static inline u8 sa_path_get_raw_traffic(const struct sa_path_rec *rec)
{
	if (rec->rec_type == SA_PATH_REC_TYPE_IB)
		return rec->ib.raw_traffic;
	if (rec->rec_type == SA_PATH_REC_TYPE_OPA)
		return rec->opa.raw_traffic;
	return 0;
}

/* Destination MAC of a RoCE path (ignored for other types). */
static inline void sa_path_set_dmac(struct sa_path_rec *rec, const u8 *dmac)
{
	int i;

	if (!sa_path_is_roce(rec))
		return;
	for (i = 0; i < ETH_ALEN; i++)
		rec->roce.dmac[i] = dmac[i];
}

static inline void sa_path_set_dmac_zero(struct sa_path_rec *rec)
{
	int i;

	if (!sa_path_is_roce(rec))
		return;
	for (i = 0; i < ETH_ALEN; i++)
		rec->roce.dmac[i] = 0;
}

/* Destination MAC of a RoCE path, NULL for other types. */
static inline u8 *sa_path_get_dmac(struct sa_path_rec *rec)
{
	return sa_path_is_roce(rec) ? rec->roce.dmac : NULL;
}

#endif /* IB_SA_H */
