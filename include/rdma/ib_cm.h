/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * ibcm: the InfiniBand / RoCE Communication Manager API with exactly the
 * C interface of the Linux kernel's <rdma/ib_cm.h> (v6.16 and later):
 * same names, enumerator values, structure layouts and function signatures,
 * implemented in userspace by libibcm.
 *
 * Conventions (as in the kernel):
 *   - functions returning int return 0 or a negative errno value;
 *   - functions returning a pointer return ERR_PTR(-errno) on failure, never
 *     NULL (test with IS_ERR() / PTR_ERR() from <rdma/ibcm_kernel_types.h>);
 *   - __be16/__be32/__be64 members and arguments are in network byte order,
 *     everything else in host order.
 *
 * Userspace glue (opening a device, building a path record) lives in the
 * separate header <ibcm.h>.
 */
#ifndef IB_CM_H
#define IB_CM_H

#include <rdma/ib_mad.h>
#include <rdma/ib_sa.h>
#include <rdma/rdma_cm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Connection state of a cm_id (read-only for users). */
enum ib_cm_state {
	IB_CM_IDLE,
	IB_CM_LISTEN,
	IB_CM_REQ_SENT,
	IB_CM_REQ_RCVD,
	IB_CM_MRA_REQ_SENT,
	IB_CM_MRA_REQ_RCVD,
	IB_CM_REP_SENT,
	IB_CM_REP_RCVD,
	IB_CM_MRA_REP_SENT,
	IB_CM_MRA_REP_RCVD,
	IB_CM_ESTABLISHED,
	IB_CM_DREQ_SENT,
	IB_CM_DREQ_RCVD,
	IB_CM_TIMEWAIT,
	IB_CM_SIDR_REQ_SENT,
	IB_CM_SIDR_REQ_RCVD
};

/* Alternate path (LAP) state of a connected cm_id (read-only for users). */
enum ib_cm_lap_state {
	IB_CM_LAP_UNINIT,
	IB_CM_LAP_IDLE,
	IB_CM_LAP_SENT,
	IB_CM_LAP_RCVD,
	IB_CM_MRA_LAP_SENT,
	IB_CM_MRA_LAP_RCVD,
};

/* Kind of event passed to an ib_cm_handler. */
enum ib_cm_event_type {
	IB_CM_REQ_ERROR,
	IB_CM_REQ_RECEIVED,
	IB_CM_REP_ERROR,
	IB_CM_REP_RECEIVED,
	IB_CM_RTU_RECEIVED,
	IB_CM_USER_ESTABLISHED,
	IB_CM_DREQ_ERROR,
	IB_CM_DREQ_RECEIVED,
	IB_CM_DREP_RECEIVED,
	IB_CM_TIMEWAIT_EXIT,
	IB_CM_MRA_RECEIVED,
	IB_CM_REJ_RECEIVED,
	IB_CM_LAP_ERROR,
	IB_CM_LAP_RECEIVED,
	IB_CM_APR_RECEIVED,
	IB_CM_SIDR_REQ_ERROR,
	IB_CM_SIDR_REQ_RECEIVED,
	IB_CM_SIDR_REP_RECEIVED
};

/* Fixed sizes, in bytes, of the private data / info areas of each message.
 * A received event's private_data always points to this many bytes. */
enum ib_cm_data_size {
	IB_CM_REQ_PRIVATE_DATA_SIZE	 = 92,
	IB_CM_MRA_PRIVATE_DATA_SIZE	 = 222,
	IB_CM_REJ_PRIVATE_DATA_SIZE	 = 148,
	IB_CM_REP_PRIVATE_DATA_SIZE	 = 196,
	IB_CM_RTU_PRIVATE_DATA_SIZE	 = 224,
	IB_CM_DREQ_PRIVATE_DATA_SIZE	 = 220,
	IB_CM_DREP_PRIVATE_DATA_SIZE	 = 224,
	IB_CM_REJ_ARI_LENGTH		 = 72,
	IB_CM_LAP_PRIVATE_DATA_SIZE	 = 168,
	IB_CM_APR_PRIVATE_DATA_SIZE	 = 148,
	IB_CM_APR_INFO_LENGTH		 = 72,
	IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE = 216,
	IB_CM_SIDR_REP_PRIVATE_DATA_SIZE = 136,
	IB_CM_SIDR_REP_INFO_LENGTH	 = 72,
};

struct ib_cm_id;

/* IB_CM_REQ_RECEIVED: the connection request. */
struct ib_cm_req_event_param {
	struct ib_cm_id *listen_id;	/* listener that matched the REQ */

	u16 bth_pkey;			/* P_Key of the received packet */

	u8 port;

	struct sa_path_rec *primary_path;
	struct sa_path_rec *alternate_path;	/* NULL if none */

	/* source GID attribute of the primary path (RoCE) */
	const struct ib_gid_attr *ppath_sgid_attr;

	__be64 remote_ca_guid;
	u32 remote_qkey;
	u32 remote_qpn;
	enum ib_qp_type qp_type;

	u32 starting_psn;
	u8 responder_resources;
	u8 initiator_depth;
	unsigned int local_cm_response_timeout:5;
	unsigned int flow_control:1;
	unsigned int remote_cm_response_timeout:5;
	unsigned int retry_count:3;
	unsigned int rnr_retry_count:3;
	unsigned int srq:1;
	struct rdma_ucm_ece ece;
};

/* IB_CM_REP_RECEIVED: the connection reply. */
struct ib_cm_rep_event_param {
	__be64 remote_ca_guid;
	u32 remote_qkey;
	u32 remote_qpn;
	u32 starting_psn;
	u8 responder_resources;
	u8 initiator_depth;
	unsigned int target_ack_delay:5;
	unsigned int failover_accepted:2;
	unsigned int flow_control:1;
	unsigned int rnr_retry_count:3;
	unsigned int srq:1;
	struct rdma_ucm_ece ece;
};

/* REJ reason codes (IBTA Table 109).  34 is not defined. */
enum ib_cm_rej_reason {
	IB_CM_REJ_NO_QP				= 1,
	IB_CM_REJ_NO_EEC			= 2,
	IB_CM_REJ_NO_RESOURCES			= 3,
	IB_CM_REJ_TIMEOUT			= 4,
	IB_CM_REJ_UNSUPPORTED			= 5,
	IB_CM_REJ_INVALID_COMM_ID		= 6,
	IB_CM_REJ_INVALID_COMM_INSTANCE		= 7,
	IB_CM_REJ_INVALID_SERVICE_ID		= 8,
	IB_CM_REJ_INVALID_TRANSPORT_TYPE	= 9,
	IB_CM_REJ_STALE_CONN			= 10,
	IB_CM_REJ_RDC_NOT_EXIST			= 11,
	IB_CM_REJ_INVALID_GID			= 12,
	IB_CM_REJ_INVALID_LID			= 13,
	IB_CM_REJ_INVALID_SL			= 14,
	IB_CM_REJ_INVALID_TRAFFIC_CLASS		= 15,
	IB_CM_REJ_INVALID_HOP_LIMIT		= 16,
	IB_CM_REJ_INVALID_PACKET_RATE		= 17,
	IB_CM_REJ_INVALID_ALT_GID		= 18,
	IB_CM_REJ_INVALID_ALT_LID		= 19,
	IB_CM_REJ_INVALID_ALT_SL		= 20,
	IB_CM_REJ_INVALID_ALT_TRAFFIC_CLASS	= 21,
	IB_CM_REJ_INVALID_ALT_HOP_LIMIT		= 22,
	IB_CM_REJ_INVALID_ALT_PACKET_RATE	= 23,
	IB_CM_REJ_PORT_CM_REDIRECT		= 24,
	IB_CM_REJ_PORT_REDIRECT			= 25,
	IB_CM_REJ_INVALID_MTU			= 26,
	IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES	= 27,
	IB_CM_REJ_CONSUMER_DEFINED		= 28,
	IB_CM_REJ_INVALID_RNR_RETRY		= 29,
	IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID	= 30,
	IB_CM_REJ_INVALID_CLASS_VERSION		= 31,
	IB_CM_REJ_INVALID_FLOW_LABEL		= 32,
	IB_CM_REJ_INVALID_ALT_FLOW_LABEL	= 33,
	IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED	= 35,
};

/* IB_CM_REJ_RECEIVED: ari points to ari_length bytes. */
struct ib_cm_rej_event_param {
	enum ib_cm_rej_reason reason;
	void *ari;
	u8 ari_length;
};

/* IB_CM_MRA_RECEIVED */
struct ib_cm_mra_event_param {
	u8 service_timeout;
};

/* IB_CM_LAP_RECEIVED */
struct ib_cm_lap_event_param {
	struct sa_path_rec *alternate_path;
};

/* APR status codes (IBTA Table 118). */
enum ib_cm_apr_status {
	IB_CM_APR_SUCCESS,
	IB_CM_APR_INVALID_COMM_ID,
	IB_CM_APR_UNSUPPORTED,
	IB_CM_APR_REJECT,
	IB_CM_APR_REDIRECT,
	IB_CM_APR_IS_CURRENT,
	IB_CM_APR_INVALID_QPN_EECN,
	IB_CM_APR_INVALID_LID,
	IB_CM_APR_INVALID_GID,
	IB_CM_APR_INVALID_FLOW_LABEL,
	IB_CM_APR_INVALID_TCLASS,
	IB_CM_APR_INVALID_HOP_LIMIT,
	IB_CM_APR_INVALID_PACKET_RATE,
	IB_CM_APR_INVALID_SL
};

/* IB_CM_APR_RECEIVED: apr_info points to info_len bytes. */
struct ib_cm_apr_event_param {
	enum ib_cm_apr_status ap_status;
	void *apr_info;
	u8 info_len;
};

/* IB_CM_SIDR_REQ_RECEIVED */
struct ib_cm_sidr_req_event_param {
	struct ib_cm_id *listen_id;
	__be64 service_id;

	/* source GID attribute of the request (RoCE) */
	const struct ib_gid_attr *sgid_attr;
	u16 bth_pkey;			/* P_Key of the received packet */
	u8 port;
	u16 pkey;			/* P_Key carried in the SIDR_REQ */
};

/* SIDR_REP status codes. */
enum ib_cm_sidr_status {
	IB_SIDR_SUCCESS,
	IB_SIDR_UNSUPPORTED,
	IB_SIDR_REJECT,
	IB_SIDR_NO_QP,
	IB_SIDR_REDIRECT,
	IB_SIDR_UNSUPPORTED_VERSION
};

/* IB_CM_SIDR_REP_RECEIVED: info points to info_len bytes. */
struct ib_cm_sidr_rep_event_param {
	enum ib_cm_sidr_status status;
	u32 qkey;
	u32 qpn;
	void *info;
	const struct ib_gid_attr *sgid_attr;
	u8 info_len;
};

/*
 * A CM event.  Only the param member that matches `event` is meaningful
 * (RTU, DREQ and DREP carry none; *_ERROR events set send_status).
 * private_data points to the message's private data, whose length is the
 * fixed size from enum ib_cm_data_size.  Everything reachable from the
 * event is valid only during the callback.
 */
struct ib_cm_event {
	enum ib_cm_event_type event;
	union {
		struct ib_cm_req_event_param req_rcvd;
		struct ib_cm_rep_event_param rep_rcvd;
		struct ib_cm_rej_event_param rej_rcvd;
		struct ib_cm_mra_event_param mra_rcvd;
		struct ib_cm_lap_event_param lap_rcvd;
		struct ib_cm_apr_event_param apr_rcvd;
		struct ib_cm_sidr_req_event_param sidr_req_rcvd;
		struct ib_cm_sidr_rep_event_param sidr_rep_rcvd;
		enum ib_wc_status send_status;
	} param;

	void *private_data;
};

/* MAD AttributeIDs of the CM messages (network byte order). */
#define CM_REQ_ATTR_ID		cpu_to_be16(0x0010)
#define CM_MRA_ATTR_ID		cpu_to_be16(0x0011)
#define CM_REJ_ATTR_ID		cpu_to_be16(0x0012)
#define CM_REP_ATTR_ID		cpu_to_be16(0x0013)
#define CM_RTU_ATTR_ID		cpu_to_be16(0x0014)
#define CM_DREQ_ATTR_ID		cpu_to_be16(0x0015)
#define CM_DREP_ATTR_ID		cpu_to_be16(0x0016)
#define CM_SIDR_REQ_ATTR_ID	cpu_to_be16(0x0017)
#define CM_SIDR_REP_ATTR_ID	cpu_to_be16(0x0018)
#define CM_LAP_ATTR_ID		cpu_to_be16(0x0019)
#define CM_APR_ATTR_ID		cpu_to_be16(0x001A)

/**
 * typedef ib_cm_handler - callback reporting a CM event.
 * @cm_id: the id the event is for.  For REQ_RECEIVED and SIDR_REQ_RECEIVED
 *   produced by a listener this is a new id (inheriting the listener's
 *   handler and context) that the user now owns and must destroy.
 * @event: the event; valid only until the callback returns.
 *
 * The callback must not call ib_destroy_cm_id() on @cm_id.  Returning a
 * non-zero value asks the CM to destroy @cm_id once the callback returns.
 * Events for one id are delivered one at a time, in order.
 */
typedef int (*ib_cm_handler)(struct ib_cm_id *cm_id,
			     const struct ib_cm_event *event);

/* A communication identifier.  Users may read every member and may set
 * context; the rest is maintained by the CM. */
struct ib_cm_id {
	ib_cm_handler cm_handler;
	void *context;
	struct ib_device *device;
	__be64 service_id;
	enum ib_cm_state state;		/* informational */
	enum ib_cm_lap_state lap_state;	/* informational */
	__be32 local_id;
	__be32 remote_id;
	u32 remote_cm_qpn;		/* always 1 (no redirection) */
};

/**
 * ib_create_cm_id - allocate a communication identifier in IB_CM_IDLE.
 * @device: device all communication of the id goes through.
 * @cm_handler: callback for the id's events.
 * @context: user value stored in the id.
 *
 * Returns the id, or ERR_PTR(-errno).
 */
struct ib_cm_id *ib_create_cm_id(struct ib_device *device,
				 ib_cm_handler cm_handler,
				 void *context);

/**
 * ib_destroy_cm_id - destroy an id, first sending whatever its state
 *   requires (REJ, DREQ, DREP, ...).
 * @cm_id: the id.
 *
 * Blocks until no callback for the id is running or pending.
 */
void ib_destroy_cm_id(struct ib_cm_id *cm_id);

/* Service ID constants (network byte order). */
#define IB_SERVICE_ID_AGN_MASK	cpu_to_be64(0xFF00000000000000ULL)
#define IB_CM_ASSIGN_SERVICE_ID	cpu_to_be64(0x0200000000000000ULL)
#define IB_CMA_SERVICE_ID	cpu_to_be64(0x0000000001000000ULL)
#define IB_CMA_SERVICE_ID_MASK	cpu_to_be64(0xFFFFFFFFFF000000ULL)
#define IB_SDP_SERVICE_ID	cpu_to_be64(0x0000000000010000ULL)
#define IB_SDP_SERVICE_ID_MASK	cpu_to_be64(0xFFFFFFFFFFFF0000ULL)

/**
 * ib_cm_listen - accept REQ and SIDR_REQ messages for a service ID.
 * @cm_id: an idle id; it moves to IB_CM_LISTEN.
 * @service_id: service ID (network byte order) matched exactly, or
 *   IB_CM_ASSIGN_SERVICE_ID to have one assigned (stored in
 *   @cm_id->service_id).
 */
int ib_cm_listen(struct ib_cm_id *cm_id, __be64 service_id);

/**
 * ib_cm_insert_listen - create a listening id with a NULL context, or
 *   share the existing listener of @device / @service_id if it has the
 *   same handler and a NULL context.
 * @device: device to listen on.
 * @cm_handler: callback for the listener's events.
 * @service_id: service ID (network byte order).
 *
 * Every successful call must be paired with ib_destroy_cm_id().
 * Returns the id, or ERR_PTR(-errno).
 */
struct ib_cm_id *ib_cm_insert_listen(struct ib_device *device,
				     ib_cm_handler cm_handler,
				     __be64 service_id);

/* Parameters of ib_send_cm_req(). */
struct ib_cm_req_param {
	struct sa_path_rec *primary_path;
	struct sa_path_rec *primary_path_inbound;	/* optional */
	struct sa_path_rec *primary_path_outbound;	/* optional */
	struct sa_path_rec *alternate_path;		/* optional */
	const struct ib_gid_attr *ppath_sgid_attr;	/* optional */
	__be64 service_id;
	u32 qp_num;
	enum ib_qp_type qp_type;
	u32 starting_psn;
	const void *private_data;
	u8 private_data_len;
	u8 responder_resources;
	u8 initiator_depth;
	u8 remote_cm_response_timeout;
	u8 flow_control;
	u8 local_cm_response_timeout;
	u8 retry_count;
	u8 rnr_retry_count;
	u8 max_cm_retries;
	u8 srq;
	struct rdma_ucm_ece ece;
};

/**
 * ib_send_cm_req - send a connection request (active side).
 * @cm_id: an idle id; it moves to IB_CM_REQ_SENT.
 * @param: request parameters; private data up to
 *   IB_CM_REQ_PRIVATE_DATA_SIZE bytes.
 */
int ib_send_cm_req(struct ib_cm_id *cm_id,
		   struct ib_cm_req_param *param);

/* Parameters of ib_send_cm_rep(). */
struct ib_cm_rep_param {
	u32 qp_num;
	u32 starting_psn;
	const void *private_data;
	u8 private_data_len;
	u8 responder_resources;
	u8 initiator_depth;
	u8 failover_accepted;
	u8 flow_control;
	u8 rnr_retry_count;
	u8 srq;
	struct rdma_ucm_ece ece;
};

/**
 * ib_send_cm_rep - accept a received connection request (passive side).
 * @cm_id: id in IB_CM_REQ_RCVD or IB_CM_MRA_REQ_SENT.
 * @param: reply parameters; private data up to
 *   IB_CM_REP_PRIVATE_DATA_SIZE bytes.
 */
int ib_send_cm_rep(struct ib_cm_id *cm_id,
		   struct ib_cm_rep_param *param);

/**
 * ib_send_cm_rtu - complete connection setup after a REP (active side);
 *   the id becomes IB_CM_ESTABLISHED.
 * @cm_id: id in IB_CM_REP_RCVD or IB_CM_MRA_REP_SENT.
 * @private_data: optional data, up to IB_CM_RTU_PRIVATE_DATA_SIZE bytes.
 * @private_data_len: its length.
 */
int ib_send_cm_rtu(struct ib_cm_id *cm_id,
		   const void *private_data,
		   u8 private_data_len);

/**
 * ib_send_cm_dreq - start disconnecting an established connection.
 * @cm_id: id in IB_CM_ESTABLISHED.
 * @private_data: optional data, up to IB_CM_DREQ_PRIVATE_DATA_SIZE bytes.
 * @private_data_len: its length.
 */
int ib_send_cm_dreq(struct ib_cm_id *cm_id,
		    const void *private_data,
		    u8 private_data_len);

/**
 * ib_send_cm_drep - answer a disconnect request.
 * @cm_id: id in IB_CM_DREQ_RCVD.
 * @private_data: optional data, up to IB_CM_DREP_PRIVATE_DATA_SIZE bytes.
 * @private_data_len: its length.
 *
 * From the right state the id enters timewait even if sending fails.
 */
int ib_send_cm_drep(struct ib_cm_id *cm_id,
		    const void *private_data,
		    u8 private_data_len);

/**
 * ib_cm_notify - tell the CM about a QP event seen by the user.
 * @cm_id: the connection's id.
 * @event: IB_EVENT_COMM_EST (data arrived on the QP before the RTU) or
 *   IB_EVENT_PATH_MIG (the QP migrated to the alternate path).
 */
int ib_cm_notify(struct ib_cm_id *cm_id, enum ib_event_type event);

/**
 * ib_send_cm_rej - reject a connection request or reply.
 * @cm_id: the id being rejected.
 * @reason: reject reason.
 * @ari: optional additional rejection information.
 * @ari_length: its length, up to IB_CM_REJ_ARI_LENGTH bytes.
 * @private_data: optional data, up to IB_CM_REJ_PRIVATE_DATA_SIZE bytes.
 * @private_data_len: its length.
 */
int ib_send_cm_rej(struct ib_cm_id *cm_id,
		   enum ib_cm_rej_reason reason,
		   void *ari,
		   u8 ari_length,
		   const void *private_data,
		   u8 private_data_len);

/**
 * ib_prepare_cm_mra - acknowledge a received REQ, REP or LAP that will take
 *   a while to answer.  Nothing is sent now; an MRA goes out only if the
 *   peer retransmits the message.
 * @cm_id: id in IB_CM_REQ_RCVD, IB_CM_REP_RCVD, or established with a LAP
 *   received.
 */
int ib_prepare_cm_mra(struct ib_cm_id *cm_id);

/**
 * ib_cm_init_qp_attr - fill in QP attributes for a state transition.
 * @cm_id: the connection's id.
 * @qp_attr: on input qp_state holds the target state (IB_QPS_INIT,
 *   IB_QPS_RTR or IB_QPS_RTS); on output the required and known optional
 *   attributes for that transition.
 * @qp_attr_mask: receives the IB_QP_* mask of the attributes set.
 *
 * The caller may adjust the result before modifying its QP.
 */
int ib_cm_init_qp_attr(struct ib_cm_id *cm_id,
		       struct ib_qp_attr *qp_attr,
		       int *qp_attr_mask);

/* Parameters of ib_send_cm_sidr_req(). */
struct ib_cm_sidr_req_param {
	struct sa_path_rec *path;
	const struct ib_gid_attr *sgid_attr;
	__be64 service_id;
	unsigned long timeout_ms;
	const void *private_data;
	u8 private_data_len;
	u8 max_cm_retries;
};

/**
 * ib_send_cm_sidr_req - ask a remote node which UD QP serves a service ID.
 * @cm_id: an idle id; it moves to IB_CM_SIDR_REQ_SENT.
 * @param: request parameters; private data up to
 *   IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE bytes.
 */
int ib_send_cm_sidr_req(struct ib_cm_id *cm_id,
			struct ib_cm_sidr_req_param *param);

/* Parameters of ib_send_cm_sidr_rep(). */
struct ib_cm_sidr_rep_param {
	u32 qp_num;
	u32 qkey;
	enum ib_cm_sidr_status status;
	const void *info;
	u8 info_length;
	const void *private_data;
	u8 private_data_len;
	struct rdma_ucm_ece ece;
};

/**
 * ib_send_cm_sidr_rep - answer a service ID resolution request.
 * @cm_id: id in IB_CM_SIDR_REQ_RCVD; it returns to IB_CM_IDLE.
 * @param: reply parameters; info up to IB_CM_SIDR_REP_INFO_LENGTH bytes,
 *   private data up to IB_CM_SIDR_REP_PRIVATE_DATA_SIZE bytes.
 */
int ib_send_cm_sidr_rep(struct ib_cm_id *cm_id,
			struct ib_cm_sidr_rep_param *param);

/**
 * ibcm_reject_msg - text describing a REJ reason ("unrecognized reason"
 *   for unknown values).  The string is static.
 * @reason: an enum ib_cm_rej_reason value.
 */
const char *IBCM_ATTR_CONST ibcm_reject_msg(int reason);

#ifdef __cplusplus
}
#endif

#endif /* IB_CM_H */
