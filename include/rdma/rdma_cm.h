/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * ibcm: the only part of the kernel's <rdma/rdma_cm.h> chain that
 * <rdma/ib_cm.h> needs, struct rdma_ucm_ece (Enhanced Connection
 * Establishment data, from the UAPI header <rdma/rdma_user_cm.h>), plus the
 * RDMA CM port spaces of the same UAPI header.  The rdma_cm API itself is
 * not part of ibcm.
 *
 * Include order with the UAPI header <rdma/rdma_user_cm.h> (kernel headers
 * package or rdma-core), which defines the same types:
 *   - <rdma/rdma_user_cm.h> first, then <rdma/ib_cm.h>: fine, the
 *     definitions below are skipped (guard RDMA_USER_CM_H).
 *   - <rdma/ib_cm.h> first, then <rdma/rdma_user_cm.h>: does NOT compile
 *     (struct rdma_ucm_ece redefined).  Include the UAPI header first.
 * The UAPI header is not included from here: copies older than Linux 5.8
 * lack struct rdma_ucm_ece, and it drags in the socket, in6 and uverbs ABI
 * headers that CM users do not otherwise need.
 */
#ifndef RDMA_CM_H
#define RDMA_CM_H

#include <rdma/ib_sa.h>

#ifndef RDMA_USER_CM_H
/* Port spaces: bytes 4 and 5 of an IP-based (RDMA CM) service ID. */
enum rdma_ucm_port_space {
	RDMA_PS_IPOIB = 0x0002,
	RDMA_PS_IB = 0x013F,
	RDMA_PS_TCP = 0x0106,
	RDMA_PS_UDP = 0x0111,
};

/* ECE data: vendor_id goes into the 24-bit VendorID of REQ/REP, attr_mod
 * into the MAD AttributeModifier of REQ/REP/SIDR_REP.  Host order. */
struct rdma_ucm_ece {
	__u32 vendor_id;
	__u32 attr_mod;
};
#endif /* RDMA_USER_CM_H */

#endif /* RDMA_CM_H */
