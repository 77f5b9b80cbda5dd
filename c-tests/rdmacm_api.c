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
 * data both ways and the reported lengths (56, 196); REJECTED status 8
 * with no listener; reject with private data (status 28, length 148);
 * UD / SIDR (180, qkey); the event fd (poll, O_NONBLOCK → EAGAIN);
 * destroy blocking until the event is acked (from another thread);
 * listener destroy with an unretrieved request; synchronous mode
 * (rdma_get_request, blocking calls, id->event); rdma_getaddrinfo,
 * rdma_create_ep; rdma_migrate_id; 64 connections at once on one
 * channel per side (event-driven); ids left connected at process exit
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
#include <unistd.h>

#include <sys/wait.h>

#include <rdma/rdma_cma.h>

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
	rdma_destroy_ep(l);
	/* getaddrinfo's own errors come back as its code. */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	CHECK(rdma_getaddrinfo("not-an-address", "1", &hints, &res) == EAI_NONAME);
	printf("ok rdma_getaddrinfo, rdma_create_ep, rdma_get_request\n");
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
	test_connect();
	test_reject();
	test_ud();
	test_fd();
	test_destroy_waits_for_ack();
	test_sync();
	test_ports();
	test_endpoints();
	test_migrate();
	test_many();
	test_exit(peer_ip);
	if (failures) {
		fprintf(stderr, "%d failure(s)\n", failures);
		return 1;
	}
	printf("rdmacm_api: all passed\n");
	return 0;
}
