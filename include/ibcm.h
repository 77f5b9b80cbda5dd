/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * ibcm userspace glue.
 *
 * <rdma/ib_cm.h> is the kernel's CM API unchanged.  In the kernel a
 * struct ib_device comes from the RDMA core; in userspace it comes from the
 * few functions below, which are ibcm's own and not part of any kernel API.
 *
 * Devices (ibcm_open_device(3) has the details):
 *   "soft:<ip>[:<udp port>]"  a software device whose MADs travel as
 *                             RoCE v2 packets over UDP (default port 4791,
 *                             ROCE_V2_UDP_DPORT) from/to <ip>, an IPv4 or
 *                             IPv6 address (IPv6 written in brackets when a
 *                             port follows, e.g. "soft:[::1]:4791").
 *   "loop:<ip>"               the in-process fabric: MADs go straight to
 *                             another loop: device of the same process.
 *   "<rdma device>"           a real RDMA device (e.g. "rxe0", "mlx5_0"):
 *                             the CM speaks on its QP1 through the kernel's
 *                             ib_umad, ports and GID tables come from
 *                             libibverbs; -EBUSY while the kernel's ib_cm
 *                             owns the CM class of its ports.
 *   "soft:<ip>[:<udp port>]@<rdma device>"
 *                             MADs over UDP as for soft: (default port
 *                             4792), ports, GIDs and GUID from the device.
 * soft: and real devices are opened through the host CM service when one
 * runs or can be started, else in-process (IBCM_SERVICE in
 * ibcm_open_device(3)); the calls below behave the same either way.
 *
 * Ports are numbered from 1.  A soft device has exactly port 1, whose GID
 * table holds one entry, index 0: the device's own address as a GID.
 */
#ifndef IBCM_H
#define IBCM_H

#include <stddef.h>
#include <stdint.h>
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

/*
 * Counters: what a device sent, received, retried, timed out, rejected
 * and dropped (and why), so an operator can see what the CM is doing.
 */

/* Index of the per-attribute arrays. */
enum ibcm_attr_index {
	IBCM_ATTR_CLASS_PORT_INFO = 0,
	IBCM_ATTR_REQ = 1,
	IBCM_ATTR_MRA = 2,
	IBCM_ATTR_REJ = 3,
	IBCM_ATTR_REP = 4,
	IBCM_ATTR_RTU = 5,
	IBCM_ATTR_DREQ = 6,
	IBCM_ATTR_DREP = 7,
	IBCM_ATTR_SIDR_REQ = 8,
	IBCM_ATTR_SIDR_REP = 9,
	IBCM_ATTR_LAP = 10,
	IBCM_ATTR_APR = 11,
	IBCM_ATTR_COUNT = 12
};

/* Why a received MAD was not acted on. */
enum ibcm_drop_cause {
	IBCM_DROP_MALFORMED = 0,	/* not a well-formed CM MAD */
	IBCM_DROP_UNKNOWN_ID = 1,	/* addressed to no id */
	IBCM_DROP_WRONG_STATE = 2,	/* the id's state does not take it */
	IBCM_DROP_DUPLICATE = 3,	/* a duplicate needing no answer */
	IBCM_DROP_UNSUPPORTED = 4,	/* e.g. LAP/APR on RoCE */
	IBCM_DROP_OVERLOAD = 5,		/* over the half-open cap (REJ sent) */
	IBCM_DROP_IGNORED = 6,		/* answered from the MAD (REJ 8, ...) */
	IBCM_DROP_MISMATCH = 7,		/* fields inconsistent (QPN, GID, stale) */
	IBCM_DROP_COUNT = 8
};

/* Reject reasons 0..35; index 36 counts anything larger. */
#define IBCM_REJ_REASON_SLOTS 37

struct ibcm_counters {
	u64 tx[IBCM_ATTR_COUNT];		/* MADs sent */
	u64 rx[IBCM_ATTR_COUNT];		/* MADs received and parsed */
	u64 rx_duplicates[IBCM_ATTR_COUNT];	/* duplicates received */
	u64 tx_retries[IBCM_ATTR_COUNT];	/* retransmissions + answers to duplicates */
	u64 timeouts[IBCM_ATTR_COUNT];		/* requests whose retries ran out */
	u64 rej_tx[IBCM_REJ_REASON_SLOTS];	/* REJs sent, by reason */
	u64 rej_rx[IBCM_REJ_REASON_SLOTS];	/* REJs received, by reason */
	u64 drops[IBCM_DROP_COUNT];		/* received MADs dropped, by cause */
	u64 ids_created;
	u64 ids_destroyed;
	u64 events;				/* events delivered to handlers */
	u64 live_ids;
	u64 pending_timers;
	/* transport */
	u64 rx_datagrams;
	u64 tx_datagrams;
	u64 rx_garbage;				/* datagrams that were not CM MADs */
	u64 rx_icrc_unverified;			/* ICRC not the Linux-socket one */
	u64 tx_errors;
	u64 rx_errors;
	u64 tx_unroutable;
	/* engine, appended (older callers pass a smaller size) */
	u64 rx_clamped;			/* length fields > 72 clamped and delivered */
	u64 half_open_evicted;		/* half-open connections evicted for newer REQs */
	u64 rx_off_path;			/* REQs naming another requester than their source */
};

/**
 * ibcm_get_counters - read a device's counters.
 * @device: the device.
 * @counters: receives the counters.
 * @size: sizeof(*counters) as the caller was compiled with; only that many
 *   bytes are written, so older programs keep working as fields are added.
 *
 * Returns the number of bytes written, or -EINVAL.
 */
int ibcm_get_counters(struct ib_device *device, struct ibcm_counters *counters,
		      size_t size);

/*
 * Capture: every CM MAD the process sends and receives, on every device
 * and fabric, written to a pcapng file that tshark/Wireshark decode as
 * RoCE v2 (one interface per device, named like the device; each record a
 * synthetic Ethernet/IP/UDP frame to port 4791 with BTH, DETH, the MAD and
 * a valid ICRC, the real time in nanoseconds and the direction in the
 * packet flags).  The environment variable IBCM_PCAP=<file> starts one at
 * the first ibcm_open_device() ("%p" in <file> becomes the process ID;
 * IBCM_PCAP_LIMIT=<bytes> caps it, K/M/G suffixes allowed).  While no
 * capture runs the cost is one test of a flag per MAD.  A child made by
 * fork() records nothing and leaves its parent's capture alone.
 */

/**
 * ibcm_pcap_start - start capturing CM MADs to a pcapng file.
 * @path: the file, created or truncated.
 * @max_bytes: the largest size the file may reach (0 means 256 MiB,
 *   UINT64_MAX no limit; the short section header is written whatever
 *   the value); the MAD that would pass it ends the capture, with one
 *   warning on stderr.
 *
 * Records are buffered and written every 100 ms, and completely on
 * ibcm_pcap_stop(), ibcm_close_device() and exit().  Thread-safe.
 *
 * Returns 0, -EINVAL for a NULL or empty @path, -EBUSY if a capture (from
 * this function or IBCM_PCAP) already runs, or -errno from opening @path.
 */
int ibcm_pcap_start(const char *path, uint64_t max_bytes);

/**
 * ibcm_pcap_stop - end the capture: write what is buffered, close the file.
 *
 * Returns 0, -ENOENT if no capture runs, or -errno of the first write that
 * failed (the capture ended at that point).
 */
int ibcm_pcap_stop(void);

#ifdef __cplusplus
}
#endif

#endif /* IBCM_H */
