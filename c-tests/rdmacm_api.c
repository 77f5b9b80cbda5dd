/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The rdma_* surface of ibcm's librdmacm.so.1, built against rdma-core's
 * <rdma/rdma_cma.h> and -lrdmacm and run with ibcm's library first in
 * LD_LIBRARY_PATH (make test-rdmacm). Every connection runs over soft
 * devices (IBCM_RDMACM_DEVICE=soft) between two loopback addresses:
 *
 *   usage: rdmacm_api <server-ip> <client-ip>
 *
 * Covered: QP-less connect / accept / establish / disconnect with private
 * data both ways and the reported lengths (56, 196); rdma_init_qp_attr
 * after the exchange; rdma_disconnect's return values in every state (the
 * kernel's: EINVAL only without a CM id, else 0); REJECTED status 8
 * with no listener; reject with private data (status 28, length 148);
 * UD / SIDR (180, qkey); multicast argument errors (EINVAL, ENOTSUP,
 * EADDRNOTAVAIL; ENOSYS on a soft device); the event fd (poll, O_NONBLOCK → EAGAIN);
 * destroy blocking until the event is acked (from another thread);
 * listener destroy with an unretrieved request; synchronous mode
 * (rdma_get_request, blocking calls, id->event); rdma_getaddrinfo,
 * rdma_create_ep (also with ai_route path records: RDMA_OPTION_IB_PATH);
 * rdma_migrate_id; 64 connections at once on one
 * channel per side (event-driven); fork() (the child gets EACCES on the
 * parent's objects and connects on its own); ids left connected at process exit
 * (a child process exits without disconnecting: its peer sees the DREQ,
 * or the DREP to its own DREQ, as with the kernel; perftest -R relies on
 * it); a second rdma_disconnect returns 0; error paths (NULLs,
 * freed and foreign pointers, double ack, private data too long, wrong
 * state).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *server_ip, *client_ip;
static int failures;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: CHECK failed: %s (errno %d)\n", \
				__FILE__, __LINE__, #cond, errno);           \
			failures++;                                          \
			return;                                              \
		}                                                            \
	} while (0)

static struct sockaddr_in addr(const char *ip, int port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((unsigned short)port);
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* The next event of `ch` within 5 s (NULL on timeout or error). */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev = NULL;

	if (poll(&p, 1, 5000) != 1)
		return NULL;
	if (rdma_get_cm_event(ch, &ev))
		return NULL;
	return ev;
}

/* Waits for an event of `type` with `status`; returns it unacked. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch,
				    enum rdma_cm_event_type type, int status)
{
	struct rdma_cm_event *ev = next_event(ch);

	if (!ev) {
		fprintf(stderr, "no event (wanted %s)\n", rdma_event_str(type));
		return NULL;
	}
	if (ev->event != type || ev->status != status) {
		fprintf(stderr, "got %s status %d, wanted %s status %d\n",
			rdma_event_str(ev->event), ev->status,
			rdma_event_str(type), status);
		rdma_ack_cm_event(ev);
		return NULL;
	}
	return ev;
}

static int ack_expect(struct rdma_event_channel *ch,
		      enum rdma_cm_event_type type, int status)
{
	struct rdma_cm_event *ev = expect(ch, type, status);

	return ev && rdma_ack_cm_event(ev) == 0;
}

/* An active id resolved to server_ip:port (address and route). */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, int port,
				   enum rdma_port_space ps)
{
	struct rdma_cm_id *id;
	struct sockaddr_in src = addr(client_ip, 0), dst = addr(server_ip, port);

	if (rdma_create_id(ch, &id, NULL, ps))
		return NULL;
	if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) ||
	    !ack_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0) ||
	    rdma_resolve_route(id, 2000) ||
	    !ack_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0)) {
		rdma_destroy_id(id);
		return NULL;
	}
	return id;
}

static struct rdma_cm_id *listener(struct rdma_event_channel *ch, int port,
				   enum rdma_port_space ps, void *ctx)
{
	struct rdma_cm_id *id;
	struct sockaddr_in a = addr(server_ip, port);

	if (rdma_create_id(ch, &id, ctx, ps))
		return NULL;
	if (rdma_bind_addr(id, (struct sockaddr *)&a) || rdma_listen(id, 8)) {
		rdma_destroy_id(id);
		return NULL;
	}
	return id;
}

static void test_errors(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *freed;
	struct rdma_cm_event *ev;
	struct rdma_cm_id foreign;
	struct rdma_cm_event fake;
	struct rdma_conn_param cp;
	char big[64];

	CHECK(ch);
	errno = 0;
	CHECK(rdma_ack_cm_event(NULL) == -1 && errno == EINVAL);
	memset(&fake, 0, sizeof(fake));
	errno = 0;
	CHECK(rdma_ack_cm_event(&fake) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_destroy_id(NULL) == -1 && errno == EINVAL);
	memset(&foreign, 0, sizeof(foreign));
	errno = 0;
	CHECK(rdma_destroy_id(&foreign) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_get_cm_event(NULL, &ev) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_create_id(ch, &id, NULL, (enum rdma_port_space)0x4242) == -1 &&
	      errno == EINVAL);
	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED),
		     "RDMA_CM_EVENT_ESTABLISHED") == 0);
	CHECK(strcmp(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT") == 0);

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(id->channel == ch && id->verbs == NULL && id->qp_type == IBV_QPT_RC);
	/* Wrong state: nothing resolved yet. */
	memset(&cp, 0, sizeof(cp));
	errno = 0;
	CHECK(rdma_connect(id, &cp) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_resolve_route(id, 100) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_accept(id, &cp) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_disconnect(id) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_establish(id) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_bind_addr(id, NULL) == -1 && errno == EINVAL);
	/* QPs need a verbs device; soft ids have none. */
	errno = 0;
	CHECK(rdma_create_qp(id, NULL, NULL) == -1 && errno == EINVAL);
	CHECK(rdma_destroy_id(id) == 0);
	/* Freed: every call refuses it. */
	freed = id;
	errno = 0;
	CHECK(rdma_destroy_id(freed) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_listen(freed, 1) == -1 && errno == EINVAL);

	/* Private data over the REQ's 56 bytes. */
	id = resolved(ch, 7001, RDMA_PS_TCP);
	CHECK(id);
	memset(big, 'x', sizeof(big));
	cp.private_data = big;
	cp.private_data_len = 57;
	errno = 0;
	CHECK(rdma_connect(id, &cp) == -1 && errno == EINVAL);
	/* PS_TCP without a QP needs conn_param. */
	errno = 0;
	CHECK(rdma_connect(id, NULL) == -1 && errno == EINVAL);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	printf("ok errors\n");
}

/*
 * SRQs through rdma_cm: the argument and error paths (the data path needs a
 * verbs device: the lab's rverbs scenario, interop/verbs). A soft id has no
 * verbs device, so its SRQ calls fail with EINVAL (librdmacm without a
 * device context) and leave id->srq NULL; an id that already has an SRQ
 * refuses a second; rdma_destroy_srq never touches an SRQ it did not make.
 */
static void test_srq_errors(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *freed;
	struct ibv_srq_init_attr attr;
	struct ibv_srq_init_attr_ex ex;
	struct ibv_qp_init_attr qa;
	char not_an_srq[64];

	CHECK(ch);
	memset(&attr, 0, sizeof(attr));
	attr.attr.max_wr = 4;
	attr.attr.max_sge = 1;
	memset(&ex, 0, sizeof(ex));
	ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	ex.srq_type = IBV_SRQT_BASIC;
	ex.attr = attr.attr;
	errno = 0;
	CHECK(rdma_create_srq(NULL, NULL, &attr) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_create_srq_ex(NULL, &ex) == -1 && errno == EINVAL);
	rdma_destroy_srq(NULL);

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	errno = 0;
	CHECK(rdma_create_srq(id, NULL, NULL) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_create_srq_ex(id, NULL) == -1 && errno == EINVAL);
	/* No device yet (nothing bound), then a soft one: no verbs, no SRQ. */
	errno = 0;
	CHECK(rdma_create_srq(id, NULL, &attr) == -1 && errno == EINVAL);
	CHECK(id->srq == NULL);
	rdma_destroy_srq(id);
	CHECK(rdma_destroy_id(id) == 0);
	id = resolved(ch, 7101, RDMA_PS_TCP);
	CHECK(id);
	CHECK(id->verbs == NULL);
	errno = 0;
	CHECK(rdma_create_srq(id, NULL, &attr) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_create_srq_ex(id, &ex) == -1 && errno == EINVAL);
	ex.srq_type = IBV_SRQT_XRC;
	errno = 0;
	CHECK(rdma_create_srq_ex(id, &ex) == -1 && errno == EINVAL);
	CHECK(id->srq == NULL && id->recv_cq == NULL && id->recv_cq_channel == NULL);
	/* The attributes are left as they were. */
	CHECK(attr.attr.max_wr == 4 && attr.attr.max_sge == 1);
	/* An SRQ the application put there: a second is refused, and
	 * rdma_destroy_srq leaves it alone (this one is not even an SRQ). */
	memset(not_an_srq, 0x5a, sizeof(not_an_srq));
	id->srq = (struct ibv_srq *)not_an_srq;
	errno = 0;
	CHECK(rdma_create_srq(id, NULL, &attr) == -1 && errno == EINVAL);
	rdma_destroy_srq(id);
	CHECK(id->srq == (struct ibv_srq *)not_an_srq);
	id->srq = NULL;
	/* QPs (which would take id->srq) still need a verbs device. */
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	errno = 0;
	CHECK(rdma_create_qp(id, NULL, &qa) == -1 && errno == EINVAL);
	CHECK(id->qp == NULL && id->send_cq == NULL && id->recv_cq == NULL);
	CHECK(rdma_destroy_id(id) == 0);
	freed = id;
	errno = 0;
	CHECK(rdma_create_srq(freed, NULL, &attr) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_create_srq_ex(freed, &ex) == -1 && errno == EINVAL);
	rdma_destroy_srq(freed);
	rdma_destroy_event_channel(ch);
	printf("ok srq errors\n");
}

static void test_connect(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c, *child;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	int ctx = 7;

	CHECK(sch && cch);
	l = listener(sch, 7010, RDMA_PS_TCP, &ctx);
	CHECK(l);
	c = resolved(cch, 7010, RDMA_PS_TCP);
	CHECK(c);
	CHECK(c->route.num_paths == 1 && c->route.path_rec);
	CHECK(c->route.path_rec->pkey == htons(0xffff));
	CHECK(ntohs(rdma_get_dst_port(c)) == 7010);

	memset(&cp, 0, sizeof(cp));
	cp.private_data = "hello";
	cp.private_data_len = 6;
	cp.qp_num = 0x123;
	cp.responder_resources = 2;
	cp.initiator_depth = 3;
	cp.retry_count = 5;
	CHECK(rdma_connect(c, &cp) == 0);

	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	CHECK(ev);
	child = ev->id;
	CHECK(ev->listen_id == l && child != l);
	CHECK(child->context == &ctx && child->channel == sch);
	CHECK(ev->param.conn.private_data_len == 56);
	CHECK(memcmp(ev->param.conn.private_data, "hello", 6) == 0);
	CHECK(ev->param.conn.qp_num == 0x123);
	/* The receiver's view: the peer's initiator depth is our resources. */
	CHECK(ev->param.conn.responder_resources == 3 && ev->param.conn.initiator_depth == 2);
	CHECK(ev->param.conn.retry_count == 5);
	CHECK(rdma_get_dst_port(child) == rdma_get_src_port(c));
	CHECK(ntohs(rdma_get_src_port(child)) == 7010);
	CHECK(((struct sockaddr_in *)&child->route.addr.dst_addr)->sin_addr.s_addr ==
	      addr(client_ip, 0).sin_addr.s_addr);
	CHECK(rdma_ack_cm_event(ev) == 0);
	errno = 0;
	CHECK(rdma_ack_cm_event(ev) == -1 && errno == EINVAL); /* double ack */

	memset(&cp, 0, sizeof(cp));
	cp.private_data = "world";
	cp.private_data_len = 6;
	cp.qp_num = 0x456;
	CHECK(rdma_accept(child, &cp) == 0);
	ev = expect(cch, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
	CHECK(ev);
	CHECK(ev->id == c && ev->param.conn.private_data_len == 196);
	CHECK(memcmp(ev->param.conn.private_data, "world", 6) == 0);
	CHECK(ev->param.conn.qp_num == 0x456);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_establish(c) == 0);
	CHECK(ack_expect(sch, RDMA_CM_EVENT_ESTABLISHED, 0));

	/* rdma_init_qp_attr after the exchange: the CM's attributes, the
	 * peer's QPN, the ACK timeout option at RTS. */
	{
		struct ibv_qp_attr qa;
		uint8_t ack = 21;
		int mask = 0;

		memset(&qa, 0xee, sizeof(qa));
		qa.qp_state = IBV_QPS_INIT;
		CHECK(rdma_init_qp_attr(child, &qa, &mask) == 0);
		CHECK(qa.qp_state == IBV_QPS_INIT && (mask & IBV_QP_STATE) &&
		      (mask & IBV_QP_ACCESS_FLAGS) && (mask & IBV_QP_PORT) &&
		      (mask & IBV_QP_PKEY_INDEX) && qa.dest_qp_num == 0);
		qa.qp_state = IBV_QPS_RTR;
		CHECK(rdma_init_qp_attr(c, &qa, &mask) == 0);
		CHECK(qa.qp_state == IBV_QPS_RTR && (mask & IBV_QP_DEST_QPN) &&
		      (mask & IBV_QP_RQ_PSN) && (mask & IBV_QP_AV) && qa.dest_qp_num == 0x456);
		qa.qp_state = IBV_QPS_RTR;
		CHECK(rdma_init_qp_attr(child, &qa, &mask) == 0 && qa.dest_qp_num == 0x123);
		CHECK(rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack,
				      sizeof(ack)) == 0);
		qa.qp_state = IBV_QPS_RTS;
		CHECK(rdma_init_qp_attr(c, &qa, &mask) == 0);
		CHECK(qa.qp_state == IBV_QPS_RTS && (mask & IBV_QP_TIMEOUT) && qa.timeout == 21 &&
		      (mask & IBV_QP_SQ_PSN) && !(mask & IBV_QP_DEST_QPN));
	}

	CHECK(rdma_disconnect(c) == 0);
	CHECK(ack_expect(sch, RDMA_CM_EVENT_DISCONNECTED, 0));
	CHECK(rdma_disconnect(child) == 0);
	CHECK(ack_expect(cch, RDMA_CM_EVENT_DISCONNECTED, 0));
	/* Again, after the exchange: the kernel sends nothing and returns 0
	 * (perftest -R disconnects its ids twice). */
	CHECK(rdma_disconnect(c) == 0);
	CHECK(rdma_disconnect(child) == 0);

	CHECK(rdma_destroy_id(child) == 0);
	CHECK(rdma_destroy_id(c) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("ok connect/accept/establish/disconnect\n");
}

static void test_reject(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	char big[200];

	CHECK(sch && cch);
	/* Nobody listens on 7020: REJ "invalid service ID". */
	c = resolved(cch, 7020, RDMA_PS_TCP);
	CHECK(c);
	memset(&cp, 0, sizeof(cp));
	CHECK(rdma_connect(c, &cp) == 0);
	CHECK(ack_expect(cch, RDMA_CM_EVENT_REJECTED, 8));
	CHECK(rdma_destroy_id(c) == 0);

	l = listener(sch, 7021, RDMA_PS_TCP, NULL);
	CHECK(l);
	c = resolved(cch, 7021, RDMA_PS_TCP);
	CHECK(c);
	CHECK(rdma_connect(c, &cp) == 0);
	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	CHECK(ev);
	memset(big, 'r', sizeof(big));
	errno = 0;
	CHECK(rdma_reject(ev->id, big, 149) == -1 && errno == EINVAL);
	CHECK(rdma_reject(ev->id, "nope", 5) == 0);
	CHECK(rdma_destroy_id(ev->id) == 0); /* before the ack: accounted on the listener */
	CHECK(rdma_ack_cm_event(ev) == 0);
	ev = expect(cch, RDMA_CM_EVENT_REJECTED, 28);
	CHECK(ev);
	CHECK(ev->param.conn.private_data_len == 148);
	CHECK(memcmp(ev->param.conn.private_data, "nope", 5) == 0);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_destroy_id(c) == 0);

	/* A listener destroyed with a request nobody retrieved rejects it. */
	c = resolved(cch, 7021, RDMA_PS_TCP);
	CHECK(c);
	CHECK(rdma_connect(c, &cp) == 0);
	{
		struct pollfd p = { .fd = sch->fd, .events = POLLIN };

		CHECK(poll(&p, 1, 5000) == 1);
	}
	CHECK(rdma_destroy_id(l) == 0);
	ev = next_event(cch);
	CHECK(ev && ev->event == RDMA_CM_EVENT_REJECTED);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_destroy_id(c) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("ok rejected (8), reject with private data (28)\n");
}

/* True when `ch` has no event within `ms`. */
static int quiet(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	return poll(&p, 1, ms) == 0;
}

/*
 * rdma_disconnect's return values are the kernel's (cma.c rdma_disconnect,
 * ucma.c ucma_disconnect): EINVAL without an IB CM id (resolved but never
 * connected); once there is one, 0 whether a DREQ/DREP goes out or not
 * (REQ outstanding, request not accepted yet, rejected, DISCONNECTED
 * already reported, a second call), and no second DISCONNECTED.
 */
static void test_disconnect_returns(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c, *child;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;

	CHECK(sch && cch);
	/* Resolved, never connected: no CM id → EINVAL. */
	c = resolved(cch, 7030, RDMA_PS_TCP);
	CHECK(c);
	errno = 0;
	CHECK(rdma_disconnect(c) == -1 && errno == EINVAL);
	CHECK(rdma_destroy_id(c) == 0);
	/* A listener on an address has a CM id and a device: 0. */
	l = listener(sch, 7031, RDMA_PS_TCP, NULL);
	CHECK(l);
	CHECK(rdma_disconnect(l) == 0);

	/* REQ outstanding (active) and request not accepted (passive): 0, and
	 * the connection still completes afterwards. */
	c = resolved(cch, 7031, RDMA_PS_TCP);
	CHECK(c);
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x77;
	CHECK(rdma_connect(c, &cp) == 0);
	CHECK(rdma_disconnect(c) == 0);
	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	CHECK(ev);
	child = ev->id;
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_disconnect(child) == 0);
	CHECK(rdma_accept(child, &cp) == 0);
	CHECK(ack_expect(cch, RDMA_CM_EVENT_CONNECT_RESPONSE, 0));
	CHECK(rdma_establish(c) == 0);
	CHECK(ack_expect(sch, RDMA_CM_EVENT_ESTABLISHED, 0));

	/* Connected: the first call sends the DREQ; a second call is 0. */
	CHECK(rdma_disconnect(c) == 0);
	CHECK(rdma_disconnect(c) == 0);
	CHECK(ack_expect(sch, RDMA_CM_EVENT_DISCONNECTED, 0));
	/* After DISCONNECTED arrived: the DREP, then 0 again and again. */
	CHECK(rdma_disconnect(child) == 0);
	CHECK(ack_expect(cch, RDMA_CM_EVENT_DISCONNECTED, 0));
	CHECK(rdma_disconnect(child) == 0);
	CHECK(rdma_disconnect(c) == 0);
	/* DISCONNECTED once on each side. */
	CHECK(quiet(sch, 300) && quiet(cch, 0));
	CHECK(rdma_destroy_id(child) == 0);
	CHECK(rdma_destroy_id(c) == 0);

	/* Rejected: the CM id is still there, so 0 (and nothing is sent). */
	c = resolved(cch, 7031, RDMA_PS_TCP);
	CHECK(c);
	CHECK(rdma_connect(c, &cp) == 0);
	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	CHECK(ev);
	CHECK(rdma_reject(ev->id, NULL, 0) == 0);
	CHECK(rdma_disconnect(ev->id) == 0);
	CHECK(rdma_destroy_id(ev->id) == 0);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(ack_expect(cch, RDMA_CM_EVENT_REJECTED, 28));
	CHECK(rdma_disconnect(c) == 0);
	CHECK(quiet(cch, 200));
	CHECK(rdma_destroy_id(c) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("ok rdma_disconnect returns as the kernel (EINVAL without a CM id, else 0)\n");
}

static void test_ud(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;

	CHECK(sch && cch);
	l = listener(sch, 7030, RDMA_PS_UDP, NULL);
	CHECK(l);
	CHECK(l->qp_type == IBV_QPT_UD);
	c = resolved(cch, 7030, RDMA_PS_UDP);
	CHECK(c);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = "sidr";
	cp.private_data_len = 5;
	CHECK(rdma_connect(c, &cp) == 0);
	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	CHECK(ev);
	CHECK(ev->param.ud.private_data_len == 180);
	CHECK(memcmp(ev->param.ud.private_data, "sidr", 5) == 0);
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x789;
	CHECK(rdma_accept(ev->id, &cp) == 0);
	CHECK(rdma_destroy_id(ev->id) == 0);
	CHECK(rdma_ack_cm_event(ev) == 0);
	ev = expect(cch, RDMA_CM_EVENT_ESTABLISHED, 0);
	CHECK(ev);
	CHECK(ev->param.ud.qp_num == 0x789 && ev->param.ud.qkey == RDMA_UDP_QKEY);
	CHECK(ev->param.ud.private_data_len == 136);
	CHECK(ev->param.ud.ah_attr.is_global == 1);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_destroy_id(c) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("ok UD (SIDR)\n");
}

/*
 * Multicast argument checks as librdmacm makes them (rdma_join_multicast_ex's
 * attribute checks, ucma_addrlen, the kernel's state check, EADDRNOTAVAIL on
 * leaving a group never joined), and the refusal on a soft device, which has
 * no verbs context: ENOSYS.
 */
static void test_multicast(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *tcp;
	struct rdma_cm_join_mc_attr_ex mc;
	struct sockaddr_in group = addr("239.1.1.1", 0), src = addr(client_ip, 0);
	struct sockaddr_in fake;
	struct sockaddr_in6 any6;

	CHECK(ch);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0);
	/* Address: NULL or an unknown family → EINVAL. */
	CHECK(rdma_join_multicast(id, NULL, NULL) == -1 && errno == EINVAL);
	fake = group;
	fake.sin_family = AF_UNIX;
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&fake, NULL) == -1 && errno == EINVAL);
	CHECK(rdma_leave_multicast(id, NULL) == -1 && errno == EINVAL);
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&fake) == -1 && errno == EINVAL);
	/* Not bound to a device yet (the kernel's ADDR_BOUND/RESOLVED check). */
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&group, NULL) == -1 && errno == EINVAL);
	/* rdma_join_multicast_ex's attribute checks, in librdmacm's order. */
	memset(&mc, 0, sizeof(mc));
	mc.addr = (struct sockaddr *)&group;
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS |
		       RDMA_CM_JOIN_MC_ATTR_RESERVED;
	CHECK(rdma_join_multicast_ex(id, &mc, NULL) == -1 && errno == ENOTSUP);
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	CHECK(rdma_join_multicast_ex(id, &mc, NULL) == -1 && errno == EINVAL);
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	CHECK(rdma_join_multicast_ex(id, &mc, NULL) == -1 && errno == EINVAL);
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	mc.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	CHECK(rdma_join_multicast_ex(id, &mc, NULL) == -1 && errno == EINVAL);
	mc.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	mc.addr = NULL;
	CHECK(rdma_join_multicast_ex(id, &mc, NULL) == -1 && errno == EINVAL);
	mc.addr = (struct sockaddr *)&group;
	CHECK(rdma_join_multicast_ex(NULL, &mc, NULL) == -1 && errno == EINVAL);
	CHECK(rdma_join_multicast(NULL, (struct sockaddr *)&group, NULL) == -1 && errno == EINVAL);
	/* Bound to a soft device: no verbs, no multicast. */
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&src) == 0);
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&group, NULL) == -1 && errno == ENOSYS);
	CHECK(rdma_join_multicast_ex(id, &mc, NULL) == -1 && errno == ENOSYS);
	/* The wildcard group is refused before the device is looked at. */
	memset(&any6, 0, sizeof(any6));
	any6.sin6_family = AF_INET6;
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&any6, NULL) == -1 && errno == EINVAL);
	/* Leaving a group never joined. */
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&any6) == -1 && errno == EADDRNOTAVAIL);
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&group) == -1 && errno == EADDRNOTAVAIL);
	CHECK(rdma_leave_multicast(NULL, (struct sockaddr *)&group) == -1 && errno == EINVAL);
	/* Only UD ids join groups (the kernel's rule); a TCP id is RC. */
	CHECK(rdma_create_id(ch, &tcp, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(tcp, (struct sockaddr *)&src) == 0);
	CHECK(rdma_join_multicast(tcp, (struct sockaddr *)&group, NULL) == -1 && errno == EINVAL);
	CHECK(rdma_destroy_id(tcp) == 0);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	printf("ok multicast argument checks\n");
}

static void test_fd(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev = NULL;
	struct sockaddr_in src = addr(client_ip, 0), dst = addr(server_ip, 7040);
	struct pollfd p;

	CHECK(ch);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	/* O_NONBLOCK set after creation: EAGAIN instead of waiting. */
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN);
	p.fd = ch->fd;
	p.events = POLLIN;
	CHECK(poll(&p, 1, 0) == 0);
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 100) == 0);
	CHECK(poll(&p, 1, 1000) == 1 && (p.revents & POLLIN));
	CHECK(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(ev->id == id);
	/* Drained: not readable any more. */
	CHECK(poll(&p, 1, 0) == 0);
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	printf("ok event fd (poll, O_NONBLOCK)\n");
}

struct destroyer {
	struct rdma_cm_id *id;
	volatile int done;
	int ret;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;

	d->ret = rdma_destroy_id(d->id);
	__atomic_store_n(&d->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void test_destroy_waits_for_ack(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct sockaddr_in src = addr(client_ip, 0), dst = addr(server_ip, 7050);
	struct destroyer d;
	pthread_t t;

	CHECK(ch);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 100) == 0);
	ev = expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	CHECK(ev);
	d.id = id;
	d.done = 0;
	d.ret = -2;
	CHECK(pthread_create(&t, NULL, destroy_thread, &d) == 0);
	usleep(200 * 1000);
	CHECK(!__atomic_load_n(&d.done, __ATOMIC_SEQ_CST));
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(d.done && d.ret == 0);
	rdma_destroy_event_channel(ch);
	printf("ok destroy blocks until the event is acked\n");
}

static void *sync_server(void *arg)
{
	struct rdma_cm_id *l = arg, *child = NULL;
	struct rdma_conn_param cp;
	struct pollfd p;
	long ok = 0;

	if (rdma_get_request(l, &child))
		return (void *)1;
	if (!child->event || child->event->event != RDMA_CM_EVENT_CONNECT_REQUEST ||
	    memcmp(child->event->param.conn.private_data, "sync", 5) != 0)
		ok = 2;
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x99;
	/* Blocks until the RTU (ESTABLISHED). */
	if (!ok && rdma_accept(child, &cp))
		ok = 3;
	if (!ok && child->event->event != RDMA_CM_EVENT_ESTABLISHED)
		ok = 4;
	/* Wait for the peer's DREQ on the private channel, then answer it. */
	p.fd = child->channel->fd;
	p.events = POLLIN;
	if (!ok && poll(&p, 1, 5000) != 1)
		ok = 5;
	if (!ok && (rdma_disconnect(child) || child->event->event != RDMA_CM_EVENT_DISCONNECTED))
		ok = 6;
	rdma_destroy_id(child);
	return (void *)ok;
}

static void test_sync(void)
{
	struct rdma_cm_id *l, *c;
	struct rdma_conn_param cp;
	struct sockaddr_in src = addr(client_ip, 0), dst = addr(server_ip, 7060);
	pthread_t t;
	void *ret;

	l = listener(NULL, 7060, RDMA_PS_TCP, NULL);
	CHECK(l);
	CHECK(pthread_create(&t, NULL, sync_server, l) == 0);
	CHECK(rdma_create_id(NULL, &c, NULL, RDMA_PS_TCP) == 0);
	CHECK(c->channel != NULL);
	CHECK(rdma_resolve_addr(c, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0);
	CHECK(c->event && c->event->event == RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(c, 2000) == 0);
	CHECK(c->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = "sync";
	cp.private_data_len = 5;
	cp.qp_num = 0x77;
	CHECK(rdma_connect(c, &cp) == 0);
	CHECK(c->event->event == RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(c->event->param.conn.qp_num == 0x99);
	CHECK(rdma_establish(c) == 0);
	CHECK(rdma_disconnect(c) == 0);
	CHECK(c->event->event == RDMA_CM_EVENT_DISCONNECTED);
	CHECK(pthread_join(t, &ret) == 0);
	CHECK(ret == NULL);
	/* A second disconnect sends nothing: 0 at once, id->event unchanged
	 * (librdmacm would wait for an event that never comes). */
	{
		struct rdma_cm_event *last = c->event;

		CHECK(rdma_disconnect(c) == 0 && c->event == last);
	}
	CHECK(rdma_destroy_id(c) == 0);

	/* A refused synchronous connect: ECONNREFUSED. */
	dst = addr(server_ip, 7061);
	CHECK(rdma_create_id(NULL, &c, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(c, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0);
	CHECK(rdma_resolve_route(c, 2000) == 0);
	memset(&cp, 0, sizeof(cp));
	errno = 0;
	CHECK(rdma_connect(c, &cp) == -1 && errno == ECONNREFUSED);
	CHECK(c->event->event == RDMA_CM_EVENT_REJECTED && c->event->status == 8);
	CHECK(rdma_destroy_id(c) == 0);
	/* rdma_get_request needs a synchronous listener. */
	{
		struct rdma_event_channel *ch = rdma_create_event_channel();
		struct rdma_cm_id *al, *x;

		CHECK(ch);
		al = listener(ch, 7062, RDMA_PS_TCP, NULL);
		CHECK(al);
		errno = 0;
		CHECK(rdma_get_request(al, &x) == -1 && errno == EINVAL);
		CHECK(rdma_destroy_id(al) == 0);
		rdma_destroy_event_channel(ch);
	}
	CHECK(rdma_destroy_id(l) == 0);
	printf("ok synchronous mode\n");
}

static void test_ports(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *a, *b;
	struct sockaddr_in s = addr(server_ip, 7070), any = addr("0.0.0.0", 0);
	int one = 1;

	CHECK(ch);
	CHECK(rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(a, (struct sockaddr *)&s) == 0);
	errno = 0;
	CHECK(rdma_bind_addr(b, (struct sockaddr *)&s) == -1 && errno == EADDRINUSE);
	CHECK(rdma_destroy_id(b) == 0);
	CHECK(rdma_create_id(ch, &b, NULL, RDMA_PS_UDP) == 0);
	CHECK(rdma_bind_addr(b, (struct sockaddr *)&s) == 0); /* another port space */
	CHECK(rdma_destroy_id(b) == 0);
	CHECK(rdma_destroy_id(a) == 0);
	CHECK(rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)) == 0);
	CHECK(rdma_bind_addr(a, (struct sockaddr *)&any) == 0);
	CHECK(ntohs(rdma_get_src_port(a)) != 0); /* ephemeral */
	errno = 0;
	CHECK(rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)) == -1 &&
	      errno == EINVAL);
	CHECK(rdma_destroy_id(a) == 0);
	rdma_destroy_event_channel(ch);
	printf("ok port space\n");
}

static void *ep_server(void *arg)
{
	struct rdma_cm_id *l = arg, *child = NULL;
	struct rdma_conn_param cp;
	long ret = 0;

	if (rdma_get_request(l, &child))
		return (void *)1;
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x55;
	cp.private_data = "ep-rep";
	cp.private_data_len = 7;
	if (rdma_accept(child, &cp))
		ret = 2;
	rdma_destroy_ep(child);
	return (void *)ret;
}

static void test_endpoints(void)
{
	struct rdma_addrinfo hints, *res = NULL, *cres = NULL;
	struct rdma_cm_id *l, *c;
	struct rdma_conn_param cp;
	struct sockaddr_in src = addr(client_ip, 0);
	pthread_t t;
	void *ret;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo(server_ip, "7080", &hints, &res) == 0);
	CHECK(res->ai_src_addr && !res->ai_dst_addr && res->ai_qp_type == IBV_QPT_RC);
	CHECK(rdma_create_ep(&l, res, NULL, NULL) == 0);
	rdma_freeaddrinfo(res);
	CHECK(rdma_listen(l, 4) == 0);
	CHECK(pthread_create(&t, NULL, ep_server, l) == 0);

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	CHECK(rdma_getaddrinfo(server_ip, "7080", &hints, &cres) == 0);
	CHECK(cres->ai_dst_addr && cres->ai_src_addr);
	CHECK(rdma_create_ep(&c, cres, NULL, NULL) == 0);
	rdma_freeaddrinfo(cres);
	CHECK(c->event && c->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x44;
	CHECK(rdma_connect(c, &cp) == 0);
	CHECK(c->event->event == RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(memcmp(c->event->param.conn.private_data, "ep-rep", 7) == 0);
	CHECK(rdma_establish(c) == 0);
	CHECK(pthread_join(t, &ret) == 0);
	CHECK(ret == NULL);
	rdma_destroy_ep(c);

	/* A route given as path records (ai_route, ibacm's form): the one
	 * flagged GMP | PRIMARY | BIDIRECTIONAL is the route
	 * (RDMA_OPTION_IB_PATH), not one resolved from the addresses. */
	{
		struct ibv_path_data pd[2];
		struct ibv_path_record *r = &pd[1].path;
		struct rdma_cm_id *c2;

		memset(pd, 0, sizeof(pd));
		pd[0].flags = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY;
		pd[1].flags = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_BIDIRECTIONAL;
		r->dgid.raw[10] = r->dgid.raw[11] = 0xff;
		r->sgid.raw[10] = r->sgid.raw[11] = 0xff;
		CHECK(inet_pton(AF_INET, server_ip, &r->dgid.raw[12]) == 1);
		CHECK(inet_pton(AF_INET, client_ip, &r->sgid.raw[12]) == 1);
		r->flowlabel_hoplimit = htonl(0x12345u << 8 | 64);
		r->tclass = 0x28;
		r->reversible_numpath = 0x81;
		r->pkey = htons(0xffff);
		r->mtu = 2 << 6 | 3;
		r->rate = 2 << 6 | 3;
		r->packetlifetime = 2 << 6 | 16;
		CHECK(rdma_getaddrinfo(server_ip, "7080", &hints, &cres) == 0);
		cres->ai_route = pd;
		cres->ai_route_len = sizeof(pd);
		CHECK(pthread_create(&t, NULL, ep_server, l) == 0);
		CHECK(rdma_create_ep(&c2, cres, NULL, NULL) == 0);
		cres->ai_route = NULL; /* ours, not rdma_freeaddrinfo's */
		cres->ai_route_len = 0;
		rdma_freeaddrinfo(cres);
		CHECK(c2->event && c2->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
		CHECK(c2->route.num_paths == 1 && c2->route.path_rec->traffic_class == 0x28 &&
		      ntohl(c2->route.path_rec->flow_label) == 0x12345 &&
		      c2->route.path_rec->packet_life_time == 16);
		memset(&cp, 0, sizeof(cp));
		cp.qp_num = 0x45;
		CHECK(rdma_connect(c2, &cp) == 0);
		CHECK(c2->event->event == RDMA_CM_EVENT_CONNECT_RESPONSE);
		CHECK(rdma_establish(c2) == 0);
		CHECK(pthread_join(t, &ret) == 0);
		CHECK(ret == NULL);
		rdma_destroy_ep(c2);
	}
	rdma_destroy_ep(l);
	/* getaddrinfo's own errors come back as its code. */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	CHECK(rdma_getaddrinfo("not-an-address", "1", &hints, &res) == EAI_NONAME);
	printf("ok rdma_getaddrinfo, rdma_create_ep (also with ai_route), rdma_get_request\n");
}

static void test_migrate(void)
{
	struct rdma_event_channel *a = rdma_create_event_channel();
	struct rdma_event_channel *b = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in src = addr(client_ip, 0), dst = addr(server_ip, 7090);
	struct pollfd p;

	CHECK(a && b);
	CHECK(rdma_create_id(a, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 100) == 0);
	p.fd = a->fd;
	p.events = POLLIN;
	CHECK(poll(&p, 1, 1000) == 1);
	/* The unretrieved event moves with the id. */
	CHECK(rdma_migrate_id(id, b) == 0);
	CHECK(id->channel == b);
	CHECK(poll(&p, 1, 0) == 0);
	CHECK(ack_expect(b, RDMA_CM_EVENT_ADDR_RESOLVED, 0));
	CHECK(rdma_resolve_route(id, 100) == 0);
	CHECK(ack_expect(b, RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(a);
	rdma_destroy_event_channel(b);
	printf("ok rdma_migrate_id\n");
}

#define MANY 64

struct many_server {
	struct rdma_event_channel *ch;
	int established, disconnected;
	struct rdma_cm_id *children[MANY];
};

/* Accepts MANY requests and waits for each to establish and disconnect. */
static void *many_server_thread(void *arg)
{
	struct many_server *m = arg;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	int requests = 0;

	memset(&cp, 0, sizeof(cp));
	while (m->disconnected < MANY && (ev = next_event(m->ch))) {
		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			cp.qp_num = 0x1000 + (unsigned)requests;
			m->children[requests++] = ev->id;
			if (rdma_accept(ev->id, &cp))
				return (void *)1;
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			m->established++;
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			m->disconnected++;
			if (rdma_disconnect(ev->id))
				return (void *)2;
			break;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
	return m->established == MANY && m->disconnected == MANY ? NULL : (void *)3;
}

/* MANY connections at once on one channel per side, driven by events. */
static void test_many(void)
{
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct many_server m;
	struct rdma_cm_id *l, *ids[MANY];
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	struct sockaddr_in src = addr(client_ip, 0), dst = addr(server_ip, 7100);
	int i, connected = 0, disconnected = 0;
	pthread_t t;
	void *ret;

	memset(&m, 0, sizeof(m));
	m.ch = rdma_create_event_channel();
	CHECK(cch && m.ch);
	l = listener(m.ch, 7100, RDMA_PS_TCP, NULL);
	CHECK(l);
	CHECK(pthread_create(&t, NULL, many_server_thread, &m) == 0);
	for (i = 0; i < MANY; i++) {
		CHECK(rdma_create_id(cch, &ids[i], (void *)(long)i, RDMA_PS_TCP) == 0);
		CHECK(rdma_resolve_addr(ids[i], (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0);
	}
	memset(&cp, 0, sizeof(cp));
	while (disconnected < MANY && (ev = next_event(cch))) {
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type type = ev->event;
		int status = ev->status;

		CHECK(rdma_ack_cm_event(ev) == 0);
		CHECK(status == 0);
		switch (type) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			CHECK(rdma_resolve_route(id, 2000) == 0);
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			cp.qp_num = 0x2000 + (unsigned)(long)id->context;
			CHECK(rdma_connect(id, &cp) == 0);
			break;
		case RDMA_CM_EVENT_CONNECT_RESPONSE:
			CHECK(rdma_establish(id) == 0);
			if (++connected == MANY)
				for (i = 0; i < MANY; i++)
					CHECK(rdma_disconnect(ids[i]) == 0);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			disconnected++;
			break;
		default:
			break;
		}
	}
	CHECK(connected == MANY && disconnected == MANY);
	CHECK(pthread_join(t, &ret) == 0);
	CHECK(ret == NULL);
	for (i = 0; i < MANY; i++) {
		CHECK(rdma_destroy_id(ids[i]) == 0);
		CHECK(rdma_destroy_id(m.children[i]) == 0);
	}
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(m.ch);
	printf("ok %d connections at once, event-driven\n", MANY);
}

/*
 * fork(): the child of a process with ids owns none of them (librdmacm's
 * kernel objects refuse a child: EACCES); it creates its own channels and
 * ids and connects, while the parent's progress threads are busy with a
 * connect/reject loop and the parent's connection stays up.
 */
struct busy {
	struct rdma_event_channel *sch, *cch;
	int stop; /* __atomic */
	int rounds, failed;
};

static void *busy_thread(void *arg)
{
	struct busy *b = arg;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *c;

	memset(&cp, 0, sizeof(cp));
	while (!__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE) && !b->failed) {
		c = resolved(b->cch, 7091, RDMA_PS_TCP);
		if (!c || rdma_connect(c, &cp)) {
			b->failed = 1;
			break;
		}
		ev = expect(b->sch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
		if (!ev || rdma_reject(ev->id, NULL, 0) || rdma_destroy_id(ev->id) ||
		    rdma_ack_cm_event(ev) || !ack_expect(b->cch, RDMA_CM_EVENT_REJECTED, 28) ||
		    rdma_destroy_id(c))
			b->failed = 1;
		b->rounds++;
	}
	return NULL;
}

/* `ip` with 1 added to its third byte: addresses the parent does not hold. */
static const char *other_ip(const char *ip, char *buf)
{
	struct in_addr a;

	inet_pton(AF_INET, ip, &a);
	((unsigned char *)&a.s_addr)[2]++;
	return inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
}

/*
 * A QP-less connection from `cch` to the listener of `sch` on `port`,
 * established on both sides: the active id (NULL on failure), the passive
 * one in *child.
 */
static struct rdma_cm_id *established(struct rdma_event_channel *sch,
				      struct rdma_event_channel *cch, int port,
				      struct rdma_cm_id **child)
{
	struct rdma_cm_id *c = resolved(cch, port, RDMA_PS_TCP);
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;

	if (!c)
		return NULL;
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x42;
	if (rdma_connect(c, &cp) || !(ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 0))) {
		rdma_destroy_id(c);
		return NULL;
	}
	*child = ev->id;
	if (rdma_ack_cm_event(ev) || rdma_accept(*child, &cp) ||
	    !ack_expect(cch, RDMA_CM_EVENT_CONNECT_RESPONSE, 0) || rdma_establish(c) ||
	    !ack_expect(sch, RDMA_CM_EVENT_ESTABLISHED, 0)) {
		rdma_destroy_id(c);
		return NULL;
	}
	return c;
}

/* Disconnects an `established` pair (active side first) and destroys it. */
static int torn_down(struct rdma_event_channel *sch, struct rdma_event_channel *cch,
		     struct rdma_cm_id *c, struct rdma_cm_id *child)
{
	return rdma_disconnect(c) == 0 && ack_expect(sch, RDMA_CM_EVENT_DISCONNECTED, 0) &&
	       rdma_disconnect(child) == 0 && ack_expect(cch, RDMA_CM_EVENT_DISCONNECTED, 0) &&
	       rdma_destroy_id(child) == 0 && rdma_destroy_id(c) == 0;
}

/*
 * Set in a child of fork(): its memory holds the parent's library state,
 * whose owners (the parent's threads) do not exist in the child, so
 * LeakSanitizer's exit check (ASan build) would call it leaked. The
 * parent's own exit is checked as before.
 */
static int in_fork_child;

int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return in_fork_child;
}

/*
 * How a child of fork() ends: exit(), so the library's exit handler runs
 * with the parent's ids inherited. Not under ThreadSanitizer, which keeps
 * the parent's threads registered in the child and aborts ("dup thread
 * with used id") when the exit handler's thread reuses one's stack; the
 * plain and ASan runs check the exit.
 */
#if defined(__SANITIZE_THREAD__)
#define child_exit _exit
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define child_exit _exit
#endif
#endif
#ifndef child_exit
#define child_exit exit
#endif

/* What a child of fork() does (it runs CHECKs; failures → exit status). */
static void fork_child(struct rdma_event_channel *psch, struct rdma_event_channel *pcch,
		       struct rdma_cm_id *pc, struct rdma_cm_event *pev)
{
	static char sip[INET_ADDRSTRLEN], cip[INET_ADDRSTRLEN];
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *l, *c, *child, *id;
	struct rdma_cm_event *ev;
	int fd = psch->fd;

	/* The parent's objects: EACCES, as the kernel's rdma_cm gives. */
	errno = 0;
	CHECK(rdma_get_cm_event(pcch, &ev) == -1 && errno == EACCES);
	errno = 0;
	CHECK(rdma_disconnect(pc) == -1 && errno == EACCES);
	errno = 0;
	CHECK(rdma_create_id(pcch, &id, NULL, RDMA_PS_TCP) == -1 && errno == EACCES);
	errno = 0;
	CHECK(rdma_destroy_id(pc) == -1 && errno == EACCES);
	/* An event the parent retrieved: acked once (librdmacm's ack is the
	 * process's own memory), then unknown. */
	CHECK(rdma_ack_cm_event(pev) == 0);
	errno = 0;
	CHECK(rdma_ack_cm_event(pev) == -1 && errno == EINVAL);
	/* Destroying an inherited channel closes the child's copy of the fd. */
	rdma_destroy_event_channel(psch);
	errno = 0;
	CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);

	/* Its own: a fresh library state, new devices, a full connection. */
	server_ip = other_ip(server_ip, sip);
	client_ip = other_ip(client_ip, cip);
	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	CHECK(sch && cch);
	l = listener(sch, 7092, RDMA_PS_TCP, NULL);
	CHECK(l);
	c = established(sch, cch, 7092, &child);
	CHECK(c);
	CHECK(torn_down(sch, cch, c, child));
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

static void test_fork(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct busy b = { 0 };
	struct rdma_cm_id *l, *bl, *c, *child, *r;
	struct rdma_cm_event *pev;
	struct sockaddr_in src = addr(client_ip, 0), dst = addr(server_ip, 7093);
	pthread_t t;
	int i, status;
	pid_t pid;

	CHECK(sch && cch);
	/* The parent's connection. */
	l = listener(sch, 7090, RDMA_PS_TCP, NULL);
	CHECK(l);
	c = established(sch, cch, 7090, &child);
	CHECK(c);
	/* An event the parent holds unacked across the forks. */
	CHECK(rdma_create_id(cch, &r, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(r, (struct sockaddr *)&src, (struct sockaddr *)&dst, 100) == 0);
	pev = expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	CHECK(pev);

	/* Busy progress threads: a connect/reject loop on other channels. */
	b.sch = rdma_create_event_channel();
	b.cch = rdma_create_event_channel();
	CHECK(b.sch && b.cch);
	bl = listener(b.sch, 7091, RDMA_PS_TCP, NULL);
	CHECK(bl);
	CHECK(pthread_create(&t, NULL, busy_thread, &b) == 0);
	for (i = 0; i < 4; i++) {
		struct timespec ts = { 0, 5000000L * (i + 1) };

		nanosleep(&ts, NULL);
		fflush(NULL);
		pid = fork();
		if (pid == 0) {
			alarm(30); /* a deadlock in the child fails the test */
			failures = 0;
			in_fork_child = 1;
			fork_child(sch, cch, c, pev);
			/* exit() (child_exit): the library's exit teardown runs in
			 * the child, with the parent's ids inherited; it must leave
			 * them to the parent (checked below: the parent's
			 * connection is still up after four such exits). */
			child_exit(failures ? 1 : 0);
		}
		CHECK(pid > 0);
		CHECK(waitpid(pid, &status, 0) == pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fprintf(stderr, "fork child %d: status %#x\n", i, status);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	__atomic_store_n(&b.stop, 1, __ATOMIC_RELEASE);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(!b.failed && b.rounds > 0);

	/* The parent's event, connection and ids are unaffected: the
	 * children's exits sent nothing on them (no DISCONNECTED waiting). */
	CHECK(quiet(sch, 200) && quiet(cch, 0));
	CHECK(rdma_ack_cm_event(pev) == 0);
	CHECK(rdma_destroy_id(r) == 0);
	CHECK(torn_down(sch, cch, c, child));
	CHECK(rdma_destroy_id(l) == 0);
	CHECK(rdma_destroy_id(bl) == 0);
	rdma_destroy_event_channel(b.sch);
	rdma_destroy_event_channel(b.cch);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("ok fork (child: EACCES on inherited objects, its own connection; %d busy rounds)\n",
	       b.rounds);
}

/*
 * The peer process of test_exit (this binary run with --exit-peer): from
 * its own address, connects QP-less to server_ip:port and then exits
 * without rdma_disconnect or rdma_destroy_id, at once ("established") or
 * after the server's DREQ ("after-dreq"). Exit status 0 when it got that
 * far.
 */
static int exit_peer(const char *mode, int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *c;
	struct rdma_conn_param cp;

	if (!ch || !(c = resolved(ch, port, RDMA_PS_TCP)))
		return 3;
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x789;
	if (rdma_connect(c, &cp) || !ack_expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, 0) ||
	    rdma_establish(c))
		return 4;
	if (strcmp(mode, "after-dreq") == 0 &&
	    !ack_expect(ch, RDMA_CM_EVENT_DISCONNECTED, 0))
		return 5;
	exit(0);
}

/* Runs this binary as the exit peer from `ip`. */
static pid_t spawn_exit_peer(const char *ip, const char *mode, int port)
{
	char portstr[16];
	pid_t pid;

	snprintf(portstr, sizeof(portstr), "%d", port);
	pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", "rdmacm_api", "--exit-peer", server_ip, ip, mode,
		      portstr, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* The child's exit status within 10 s (-1: none, the child is killed). */
static int reap(pid_t pid)
{
	int st, i;

	for (i = 0; i < 1000; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

/*
 * A process exiting with a connection it never disconnected: the kernel
 * destroys its ids (DREQ when connected, DREP when a DREQ came), and so
 * must ibcm, whose CM lives in the process. The peer runs in another
 * process (this binary again) from its own address.
 */
static void test_exit(const char *peer_ip)
{
	static const char *const modes[] = { "established", "after-dreq" };
	int m;

	for (m = 0; m < 2; m++) {
		struct rdma_event_channel *sch = rdma_create_event_channel();
		struct rdma_cm_id *l, *child;
		struct rdma_cm_event *ev;
		struct rdma_conn_param cp;
		int port = 7110 + m;
		pid_t pid;

		CHECK(sch);
		l = listener(sch, port, RDMA_PS_TCP, NULL);
		CHECK(l);
		pid = spawn_exit_peer(peer_ip, modes[m], port);
		CHECK(pid > 0);
		ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
		if (!ev)
			reap(pid);
		CHECK(ev);
		child = ev->id;
		CHECK(rdma_ack_cm_event(ev) == 0);
		memset(&cp, 0, sizeof(cp));
		cp.qp_num = 0x987;
		CHECK(rdma_accept(child, &cp) == 0);
		CHECK(ack_expect(sch, RDMA_CM_EVENT_ESTABLISHED, 0));
		if (m == 0) {
			/* The peer's exit sends the DREQ; the DREP answers it. */
			CHECK(ack_expect(sch, RDMA_CM_EVENT_DISCONNECTED, 0));
			CHECK(rdma_disconnect(child) == 0);
		} else {
			/* Our DREQ; the peer exits and its exit sends the DREP
			 * (without it the DREQ would time out: status -110). */
			CHECK(rdma_disconnect(child) == 0);
			CHECK(ack_expect(sch, RDMA_CM_EVENT_DISCONNECTED, 0));
		}
		CHECK(reap(pid) == 0);
		CHECK(rdma_destroy_id(child) == 0);
		CHECK(rdma_destroy_id(l) == 0);
		rdma_destroy_event_channel(sch);
		printf("ok exit with a connection left %s\n", modes[m]);
	}
}

int main(int argc, char **argv)
{
	struct in_addr peer;
	char peer_ip[INET_ADDRSTRLEN];

	if (argc == 6 && strcmp(argv[1], "--exit-peer") == 0) {
		server_ip = argv[2];
		client_ip = argv[3];
		setenv("IBCM_RDMACM_DEVICE", "soft", 0);
		return exit_peer(argv[4], atoi(argv[5]));
	}
	if (argc != 3) {
		fprintf(stderr, "usage: %s <server-ip> <client-ip>\n", argv[0]);
		return 2;
	}
	server_ip = argv[1];
	client_ip = argv[2];
	setenv("IBCM_RDMACM_DEVICE", "soft", 0);
	/* The exit peer's own address (its soft device binds its own UDP
	 * socket): the client address + 64 in the last byte. */
	if (inet_pton(AF_INET, client_ip, &peer) != 1) {
		fprintf(stderr, "bad client address %s\n", client_ip);
		return 2;
	}
	((unsigned char *)&peer.s_addr)[3] += 64;
	inet_ntop(AF_INET, &peer, peer_ip, sizeof(peer_ip));
	test_errors();
	test_srq_errors();
	test_connect();
	test_reject();
	test_disconnect_returns();
	test_ud();
	test_multicast();
	test_fd();
	test_destroy_waits_for_ack();
	test_sync();
	test_ports();
	test_endpoints();
	test_migrate();
	test_many();
	test_fork();
	test_exit(peer_ip);
	if (failures) {
		fprintf(stderr, "%d failure(s)\n", failures);
		return 1;
	}
	printf("rdmacm_api: all passed\n");
	return 0;
}
