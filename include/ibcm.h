/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * ibcm userspace glue.
 *
 * <rdma/ib_cm.h> is the kernel's CM API unchanged.  In the kernel a
 * struct ib_device comes from the RDMA core; in userspace it comes from the
 * few functions below, which are ibcm's own and not part of any kernel API.
 *
 * Devices:
 *   "soft:<ip>[:<udp port>]"  a software device whose MADs travel as
 *                             RoCE v2 packets over UDP (default port 4791,
 *                             ROCE_V2_UDP_DPORT) from/to <ip>, an IPv4 or
 *                             IPv6 address (IPv6 written in brackets when a
 *                             port follows, e.g. "soft:[::1]:4791").
 *
 * Ports are numbered from 1.  A soft device has exactly port 1, whose GID
 * table holds one entry, index 0: the device's own address as a GID.
 */
#ifndef IBCM_H
#define IBCM_H

#include <rdma/ib_cm.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * ibcm_open_device - open a device by name.
 * @name: device name as above; NULL means the value of the environment
 *   variable IBCM_DEVICE, or "soft:127.0.0.1" when that is unset.
 *
 * Returns the device, or ERR_PTR(-errno) (never NULL), e.g. -EINVAL for a
 * malformed name.
 */
struct ib_device *ibcm_open_device(const char *name);

/**
 * ibcm_close_device - release a device returned by ibcm_open_device().
 * @device: the device; every cm_id created on it must have been destroyed.
 */
void ibcm_close_device(struct ib_device *device);

/**
 * ibcm_query_gid - read one entry of a port's GID table.
 * @device: the device.
 * @port_num: port number, starting at 1.
 * @index: GID table index (a soft device has only index 0).
 * @gid: receives the GID.
 *
 * Returns 0, or -EINVAL for a bad port or index.
 */
int ibcm_query_gid(struct ib_device *device, u32 port_num, int index,
		   union ib_gid *gid);

/**
 * ibcm_init_path - build a complete path record from the local port to a
 *   destination GID, as an SA or RoCE route resolution would: RoCE v2
 *   record type, sgid = the port's GID index 0, dgid, default P_Key
 *   0xFFFF, MTU, rate, hop limit, packet life time, reversible, one path.
 * @device: the device.
 * @port_num: local port number, starting at 1.
 * @dgid: destination GID.
 * @rec: receives the path record, ready for ib_send_cm_req().
 *
 * Returns 0 or a negative errno value.
 */
int ibcm_init_path(struct ib_device *device, u32 port_num,
		   const union ib_gid *dgid, struct sa_path_rec *rec);

/**
 * ibcm_gid_from_string - convert an IP address in text form to a GID.
 * @ip: dotted IPv4 ("192.0.2.1") or IPv6 ("2001:db8::1") address.
 * @gid: receives the GID; an IPv4 address becomes the IPv4-mapped IPv6
 *   address ::ffff:a.b.c.d, as RoCE v2 GIDs do.
 *
 * Returns 0, or -EINVAL if @ip is not an address.
 */
int ibcm_gid_from_string(const char *ip, union ib_gid *gid);

#ifdef __cplusplus
}
#endif

#endif /* IBCM_H */
