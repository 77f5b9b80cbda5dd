/*
 * Two processes talk through ibcm over the software fabric, using only the
 * kernel's <rdma/ib_cm.h> API plus the <ibcm.h> glue:
 *
 *   cm_scenarios [SERVER_IP CLIENT_IP]
 *
 * forks a server (device soft:SERVER_IP) and a client (soft:CLIENT_IP) and
 * runs every scenario: connect with private data in every message and a
 * disconnect from either side, REJ with ARI, unknown service, REQ timeout,
 * SIDR, MRA from a slow server, COMM_EST via ib_cm_notify, a handler that
 * returns non-zero, ib_cm_init_qp_attr for INIT/RTR/RTS, ibcm_reject_msg.
 * Exit status 0 when both processes pass.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/ib_cm.h>
#include <ibcm.h>

#define SVC_BASE 0x0000000001061000ULL
enum scenario {
	SC_PDATA_CLIENT_DISC = 1,
	SC_PDATA_SERVER_DISC,
	SC_REJECT_ARI,
	SC_MRA,
	SC_COMM_EST,
	SC_HANDLER_NONZERO,
	SC_SIDR,
	SC_COUNT
};

static void msleep(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int failures;
static const char *who = "?";

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "[%s] FAIL %s:%d: ", who, __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                      \
			fputc('\n', stderr);                               \
			failures++;                                        \
		}                                                          \
	} while (0)

/* ------------------------------------------------------------------ events */

#define MAXEV 256
struct rec {
	struct ib_cm_id *id;
	enum ib_cm_event_type type;
	int reason;
	u8 pdata[IB_CM_MRA_PRIVATE_DATA_SIZE + 2];
	u8 info[IB_CM_REJ_ARI_LENGTH];
	u8 info_len;
	u32 qpn, qkey, status, psn, remote_qpn;
	__be64 service_id;
	struct ib_cm_id *listen_id;
};
static struct rec evs[MAXEV];
static int nev;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static size_t pdata_size(enum ib_cm_event_type t)
{
	switch (t) {
	case IB_CM_REQ_RECEIVED: return IB_CM_REQ_PRIVATE_DATA_SIZE;
	case IB_CM_REP_RECEIVED: return IB_CM_REP_PRIVATE_DATA_SIZE;
	case IB_CM_RTU_RECEIVED: return IB_CM_RTU_PRIVATE_DATA_SIZE;
	case IB_CM_DREQ_RECEIVED: return IB_CM_DREQ_PRIVATE_DATA_SIZE;
	case IB_CM_DREP_RECEIVED: return IB_CM_DREP_PRIVATE_DATA_SIZE;
	case IB_CM_REJ_RECEIVED: return IB_CM_REJ_PRIVATE_DATA_SIZE;
	case IB_CM_MRA_RECEIVED: return IB_CM_MRA_PRIVATE_DATA_SIZE;
	case IB_CM_SIDR_REQ_RECEIVED: return IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE;
	case IB_CM_SIDR_REP_RECEIVED: return IB_CM_SIDR_REP_PRIVATE_DATA_SIZE;
	default: return 0;
	}
}

static void record(struct ib_cm_id *id, const struct ib_cm_event *e)
{
	pthread_mutex_lock(&mu);
	if (nev < MAXEV) {
		struct rec *r = &evs[nev++];
		memset(r, 0, sizeof(*r));
		r->id = id;
		r->type = e->event;
		if (e->private_data)
			memcpy(r->pdata, e->private_data, pdata_size(e->event));
		switch (e->event) {
		case IB_CM_REJ_RECEIVED:
			r->reason = e->param.rej_rcvd.reason;
			r->info_len = e->param.rej_rcvd.ari_length;
			memcpy(r->info, e->param.rej_rcvd.ari, r->info_len);
			break;
		case IB_CM_REQ_RECEIVED:
			r->listen_id = e->param.req_rcvd.listen_id;
			r->remote_qpn = e->param.req_rcvd.remote_qpn;
			r->psn = e->param.req_rcvd.starting_psn;
			r->service_id = id->service_id;
			break;
		case IB_CM_REP_RECEIVED:
			r->remote_qpn = e->param.rep_rcvd.remote_qpn;
			r->psn = e->param.rep_rcvd.starting_psn;
			break;
		case IB_CM_MRA_RECEIVED:
			r->status = e->param.mra_rcvd.service_timeout;
			break;
		case IB_CM_SIDR_REQ_RECEIVED:
			r->listen_id = e->param.sidr_req_rcvd.listen_id;
			r->service_id = e->param.sidr_req_rcvd.service_id;
			break;
		case IB_CM_SIDR_REP_RECEIVED:
			r->status = e->param.sidr_rep_rcvd.status;
			r->qpn = e->param.sidr_rep_rcvd.qpn;
			r->qkey = e->param.sidr_rep_rcvd.qkey;
			r->info_len = e->param.sidr_rep_rcvd.info_len;
			memcpy(r->info, e->param.sidr_rep_rcvd.info, r->info_len);
			break;
		case IB_CM_REQ_ERROR:
		case IB_CM_REP_ERROR:
		case IB_CM_DREQ_ERROR:
		case IB_CM_SIDR_REQ_ERROR:
			r->status = e->param.send_status;
			break;
		default:
			break;
		}
	}
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* Waits for (and consumes) the first recorded event of @type on @id (any id
 * when NULL). Returns a copy, or type -1 on timeout. */
/*
 * Set (CM_SCENARIOS_SLOW in the environment: the Makefile's valgrind run)
 * where a process may stall for seconds, valgrind translating the
 * library's code on a loaded host: each wait below, which only bounds a
 * hang, is 10 times longer, and so are the children's alarms; the CM
 * timeouts of the plain connections are 8 times longer (PLT). What each
 * scenario checks is the same.
 */
static int slow;

static struct rec wait_ev(struct ib_cm_id *id, int type, int ms)
{
	struct rec out;
	struct timespec dl;
	if (slow)
		ms *= 10;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&mu);
	for (;;) {
		for (int i = 0; i < nev; i++) {
			if ((int)evs[i].type == type && (!id || evs[i].id == id)) {
				out = evs[i];
				memmove(&evs[i], &evs[i + 1], (size_t)(nev - i - 1) * sizeof(evs[0]));
				nev--;
				pthread_mutex_unlock(&mu);
				return out;
			}
		}
		if (pthread_cond_timedwait(&cv, &mu, &dl) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&mu);
	memset(&out, 0, sizeof(out));
	out.type = (enum ib_cm_event_type)-1;
	return out;
}

static void fill(u8 *buf, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = (u8)(seed * 31 + (int)i * 7 + 1);
}

static int same(const u8 *a, int seed, size_t n)
{
	u8 want[256];
	fill(want, n, seed);
	return memcmp(a, want, n) == 0;
}

/* ------------------------------------------------------------------ server */

static struct ib_device *sdev;
static struct ib_cm_id *slisten[SC_COUNT];
static int handler_nonzero_calls;

struct delayed_rep {
	struct ib_cm_id *id;
};

static void fill_rep(struct ib_cm_rep_param *rep, u8 *pd, int seed)
{
	memset(rep, 0, sizeof(*rep));
	fill(pd, IB_CM_REP_PRIVATE_DATA_SIZE, seed);
	rep->qp_num = 0x220;
	rep->starting_psn = 0x5a5a5a;
	rep->private_data = pd;
	rep->private_data_len = IB_CM_REP_PRIVATE_DATA_SIZE;
	rep->responder_resources = 4;
	rep->initiator_depth = 4;
	rep->rnr_retry_count = 7;
}

static void *late_rep(void *arg)
{
	struct delayed_rep *d = arg;
	struct ib_cm_rep_param rep;
	u8 pd[IB_CM_REP_PRIVATE_DATA_SIZE];
	msleep(300); /* past the client's 24 ms REQ timeout */
	fill_rep(&rep, pd, 2);
	CHECK(ib_send_cm_rep(d->id, &rep) == 0, "late REP");
	free(d);
	return NULL;
}

/* Records the event after acting on it, so the main thread (which waits
 * for recorded events) never races the handler on the same id. */
static int server_handler_inner(struct ib_cm_id *id, const struct ib_cm_event *e);
static int server_handler(struct ib_cm_id *id, const struct ib_cm_event *e)
{
	int ret = server_handler_inner(id, e);
	record(id, e);
	return ret;
}

static int server_handler_inner(struct ib_cm_id *id, const struct ib_cm_event *e)
{
	struct ib_cm_rep_param rep;
	u8 pd[IB_CM_REP_PRIVATE_DATA_SIZE];
	int sc;

	switch (e->event) {
	case IB_CM_REQ_RECEIVED:
		sc = (int)(be64_to_cpu(id->service_id) - SVC_BASE);
		CHECK(id->state == IB_CM_REQ_RCVD, "new id state %d", id->state);
		CHECK(id->context == (void *)(long)sc, "inherited context");
		CHECK(e->param.req_rcvd.listen_id == slisten[sc], "listen_id");
		CHECK(slisten[sc]->state == IB_CM_LISTEN && slisten[sc]->remote_id == 0 &&
		      slisten[sc]->local_id != id->local_id, "listener fields untouched");
		CHECK(e->param.req_rcvd.primary_path != NULL, "primary path");
		CHECK(e->param.req_rcvd.alternate_path == NULL, "no alternate path");
		CHECK(e->param.req_rcvd.port == 1, "port");
		CHECK(e->param.req_rcvd.ppath_sgid_attr != NULL &&
		      e->param.req_rcvd.ppath_sgid_attr->port_num == 1, "sgid attr");
		CHECK(e->param.req_rcvd.remote_qpn == 0x110, "remote qpn %#x",
		      e->param.req_rcvd.remote_qpn);
		CHECK(e->param.req_rcvd.qp_type == IB_QPT_RC, "qp type");
		CHECK(e->param.req_rcvd.retry_count == 5, "retry count bitfield");
		CHECK(e->param.req_rcvd.rnr_retry_count == 6, "rnr retry bitfield");
		CHECK(e->param.req_rcvd.remote_cm_response_timeout == 12, "remote resp timeout");
		switch (sc) {
		case SC_PDATA_CLIENT_DISC:
		case SC_PDATA_SERVER_DISC:
		case SC_COMM_EST: {
			int seed = sc == SC_COMM_EST ? 1 : sc;
			CHECK(same(e->private_data, seed, IB_CM_REQ_PRIVATE_DATA_SIZE),
			      "REQ private data");
			/* init_qp_attr before accepting: INIT on the passive side. */
			struct ib_qp_attr qa;
			int mask = 0;
			memset(&qa, 0xee, sizeof(qa));
			qa.qp_state = IB_QPS_INIT;
			CHECK(ib_cm_init_qp_attr(id, &qa, &mask) == 0, "init INIT");
			CHECK(mask == (IB_QP_STATE | IB_QP_ACCESS_FLAGS | IB_QP_PKEY_INDEX |
				       IB_QP_PORT), "INIT mask %#x", mask);
			CHECK(qa.qp_access_flags == (IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |
						     IB_ACCESS_REMOTE_ATOMIC),
			      "INIT access %#x", qa.qp_access_flags);
			CHECK(qa.port_num == 1 && qa.pkey_index == 0, "INIT port/pkey");
			fill_rep(&rep, pd, sc == SC_COMM_EST ? 2 : sc + 100);
			CHECK(ib_send_cm_rep(id, &rep) == 0, "send REP");
			CHECK(id->state == IB_CM_REP_SENT, "REP_SENT");
			memset(&qa, 0, sizeof(qa));
			qa.qp_state = IB_QPS_RTR;
			CHECK(ib_cm_init_qp_attr(id, &qa, &mask) == 0, "init RTR");
			CHECK(mask == (IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU | IB_QP_DEST_QPN |
				       IB_QP_RQ_PSN | IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER),
			      "RTR mask %#x", mask);
			CHECK(qa.dest_qp_num == 0x110 && qa.rq_psn == 0x5a5a5a &&
			      qa.max_dest_rd_atomic == 4 && qa.path_mtu == IB_MTU_1024,
			      "RTR values qpn %#x psn %#x rd %d mtu %d", qa.dest_qp_num,
			      qa.rq_psn, qa.max_dest_rd_atomic, qa.path_mtu);
			CHECK(qa.ah_attr.ah_flags & IB_AH_GRH, "RoCE AH has a GRH");
			CHECK(qa.ah_attr.type == RDMA_AH_ATTR_TYPE_ROCE, "RoCE AH type");
			memset(&qa, 0, sizeof(qa));
			qa.qp_state = IB_QPS_RTS;
			CHECK(ib_cm_init_qp_attr(id, &qa, &mask) == 0, "init RTS");
			CHECK(mask == (IB_QP_STATE | IB_QP_SQ_PSN | IB_QP_RETRY_CNT | IB_QP_RNR_RETRY |
				       IB_QP_MAX_QP_RD_ATOMIC | IB_QP_TIMEOUT), "RTS mask %#x", mask);
			CHECK(qa.sq_psn == 0x123456 && qa.retry_cnt == 5 && qa.rnr_retry == 6 &&
			      qa.max_rd_atomic == 4, "RTS values");
			qa.qp_state = IB_QPS_SQD;
			CHECK(ib_cm_init_qp_attr(id, &qa, &mask) == -EINVAL, "init SQD");
			break;
		}
		case SC_REJECT_ARI: {
			u8 ari[IB_CM_REJ_ARI_LENGTH], rpd[IB_CM_REJ_PRIVATE_DATA_SIZE];
			fill(ari, 9, 33);
			fill(rpd, sizeof(rpd), 34);
			int rr = ib_send_cm_rej(id, IB_CM_REJ_CONSUMER_DEFINED, ari, 9, rpd,
						sizeof(rpd));
			CHECK(rr == 0, "send REJ: %d", rr);
			CHECK(id->state == IB_CM_IDLE, "IDLE after REJ (%d)", id->state);
			/* The id is the consumer's: destroy it later from main. */
			break;
		}
		case SC_MRA: {
			struct delayed_rep *d = malloc(sizeof(*d));
			pthread_t t;
			CHECK(ib_prepare_cm_mra(id) == 0, "prepare MRA");
			CHECK(id->state == IB_CM_MRA_REQ_SENT, "MRA_REQ_SENT");
			d->id = id;
			pthread_create(&t, NULL, late_rep, d);
			pthread_detach(t);
			break;
		}
		case SC_HANDLER_NONZERO:
			handler_nonzero_calls++;
			return -1; /* destroy the new id: REJ(consumer defined) */
		default:
			CHECK(0, "REQ on service %d", sc);
		}
		break;
	case IB_CM_SIDR_REQ_RECEIVED: {
		struct ib_cm_sidr_rep_param sr;
		u8 info[20], spd[IB_CM_SIDR_REP_PRIVATE_DATA_SIZE];
		CHECK(same(e->private_data, 40, IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE), "SIDR_REQ pdata");
		CHECK(e->param.sidr_req_rcvd.listen_id == slisten[SC_SIDR], "SIDR listen_id");
		CHECK(id->state == IB_CM_SIDR_REQ_RCVD, "SIDR_REQ_RCVD");
		memset(&sr, 0, sizeof(sr));
		fill(info, sizeof(info), 41);
		fill(spd, sizeof(spd), 42);
		sr.qp_num = 0x777;
		sr.qkey = 0x01234567;
		sr.status = IB_SIDR_SUCCESS;
		sr.info = info;
		sr.info_length = sizeof(info);
		sr.private_data = spd;
		sr.private_data_len = sizeof(spd);
		CHECK(ib_send_cm_sidr_rep(id, &sr) == 0, "SIDR_REP");
		CHECK(id->state == IB_CM_IDLE, "IDLE after SIDR_REP");
		break;
	}
	case IB_CM_RTU_RECEIVED:
		/* As with the kernel, a DREQ right behind the RTU may already
		 * have moved the id on when this callback runs. */
		CHECK(id->state == IB_CM_ESTABLISHED || id->state == IB_CM_DREQ_RCVD,
		      "ESTABLISHED on RTU (%d)", id->state);
		break;
	case IB_CM_DREQ_RECEIVED: {
		u8 dpd[IB_CM_DREP_PRIVATE_DATA_SIZE];
		fill(dpd, sizeof(dpd), 15);
		CHECK(ib_send_cm_drep(id, dpd, sizeof(dpd)) == 0, "send DREP");
		CHECK(id->state == IB_CM_TIMEWAIT, "TIMEWAIT after DREP");
		break;
	}
	default:
		break;
	}
	return 0;
}

static int run_server(const char *ip, int ready_fd, int done_fd)
{
	char name[64];
	who = "server";
	snprintf(name, sizeof(name), "soft:%s", ip);
	sdev = ibcm_open_device(name);
	if (IS_ERR(sdev)) {
		fprintf(stderr, "[server] open %s: %ld\n", name, PTR_ERR(sdev));
		return 1;
	}
	for (int sc = 1; sc < SC_COUNT; sc++) {
		slisten[sc] = ib_create_cm_id(sdev, server_handler, (void *)(long)sc);
		CHECK(!IS_ERR(slisten[sc]), "create listener");
		CHECK(ib_cm_listen(slisten[sc], cpu_to_be64(SVC_BASE + (u64)sc)) == 0, "listen");
		CHECK(slisten[sc]->state == IB_CM_LISTEN, "LISTEN state");
	}
	/* Duplicate listen: -EBUSY. Bad 0x02 service ID: -EINVAL. */
	struct ib_cm_id *dup = ib_create_cm_id(sdev, server_handler, NULL);
	CHECK(ib_cm_listen(dup, cpu_to_be64(SVC_BASE + 1)) == -EBUSY, "dup listen");
	CHECK(ib_cm_listen(dup, cpu_to_be64(0x0200000000000005ULL)) == -EINVAL, "bad sid");
	CHECK(ib_cm_listen(dup, IB_CM_ASSIGN_SERVICE_ID) == 0, "assign sid");
	CHECK((be64_to_cpu(dup->service_id) >> 56) == 0x02, "assigned sid %llx",
	      (unsigned long long)be64_to_cpu(dup->service_id));
	ib_destroy_cm_id(dup);
	if (write(ready_fd, "r", 1) != 1)
		return 1;

	/* Scenario-specific server-side checks, in the client's order. */
	struct rec r;
	struct ib_cm_id *conn;

	/* 1: connect, client disconnects. */
	r = wait_ev(NULL, IB_CM_REQ_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_REQ_RECEIVED, "1: REQ");
	conn = r.id;
	r = wait_ev(conn, IB_CM_RTU_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_RTU_RECEIVED && same(r.pdata, 3, IB_CM_RTU_PRIVATE_DATA_SIZE),
	      "1: RTU with private data");
	r = wait_ev(conn, IB_CM_DREQ_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_DREQ_RECEIVED && same(r.pdata, 14, IB_CM_DREQ_PRIVATE_DATA_SIZE),
	      "1: DREQ with private data");
	r = wait_ev(conn, IB_CM_TIMEWAIT_EXIT, 5000);
	CHECK((int)r.type == IB_CM_TIMEWAIT_EXIT, "1: timewait exit");
	ib_destroy_cm_id(conn);

	/* 2: connect, server disconnects. */
	r = wait_ev(NULL, IB_CM_REQ_RECEIVED, 5000);
	conn = r.id;
	r = wait_ev(conn, IB_CM_RTU_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_RTU_RECEIVED, "2: RTU");
	{
		u8 dpd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
		fill(dpd, sizeof(dpd), 24);
		CHECK(ib_send_cm_dreq(conn, dpd, sizeof(dpd)) == 0, "2: send DREQ");
		CHECK(ib_send_cm_dreq(conn, NULL, 0) == -EINVAL, "2: DREQ twice");
	}
	r = wait_ev(conn, IB_CM_DREP_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_DREP_RECEIVED && same(r.pdata, 25, IB_CM_DREP_PRIVATE_DATA_SIZE),
	      "2: DREP with private data");
	r = wait_ev(conn, IB_CM_TIMEWAIT_EXIT, 5000);
	CHECK((int)r.type == IB_CM_TIMEWAIT_EXIT, "2: timewait exit");
	ib_destroy_cm_id(conn);

	/* 3: REJ with ARI (sent from the handler). */
	r = wait_ev(NULL, IB_CM_REQ_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_REQ_RECEIVED, "3: REQ");
	ib_destroy_cm_id(r.id);

	/* 4: MRA: REP sent late, then RTU. */
	r = wait_ev(NULL, IB_CM_REQ_RECEIVED, 5000);
	conn = r.id;
	r = wait_ev(conn, IB_CM_RTU_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_RTU_RECEIVED, "4: RTU after MRA");
	r = wait_ev(conn, IB_CM_DREQ_RECEIVED, 5000);
	r = wait_ev(conn, IB_CM_TIMEWAIT_EXIT, 5000);
	ib_destroy_cm_id(conn);

	/* 5: COMM_EST: the client holds its RTU back. */
	r = wait_ev(NULL, IB_CM_REQ_RECEIVED, 5000);
	conn = r.id;
	msleep(100);
	CHECK(conn->state == IB_CM_REP_SENT, "5: still REP_SENT (%d)", conn->state);
	CHECK(ib_cm_notify(conn, IB_EVENT_COMM_EST) == 0, "5: notify COMM_EST");
	CHECK(conn->state == IB_CM_ESTABLISHED, "5: ESTABLISHED");
	r = wait_ev(conn, IB_CM_USER_ESTABLISHED, 5000);
	CHECK((int)r.type == IB_CM_USER_ESTABLISHED, "5: USER_ESTABLISHED event");
	CHECK(ib_cm_notify(conn, IB_EVENT_COMM_EST) == -EISCONN, "5: -EISCONN");
	CHECK(ib_cm_notify(conn, IB_EVENT_QP_FATAL) == -EINVAL, "5: other event");
	CHECK(ib_cm_notify(conn, IB_EVENT_PATH_MIG) == 0, "5: PATH_MIG");
	r = wait_ev(conn, IB_CM_DREQ_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_DREQ_RECEIVED, "5: DREQ");
	r = wait_ev(conn, IB_CM_TIMEWAIT_EXIT, 5000);
	ib_destroy_cm_id(conn);

	/* 6: handler returned non-zero: the id is gone, the client got REJ 28. */
	/* 7: SIDR handled in the handler. */

	/* Wait for the client to finish. */
	char c;
	if (read(done_fd, &c, 1) != 1)
		CHECK(0, "client vanished");
	msleep(100);
	CHECK(handler_nonzero_calls == 1, "6: handler called %d times", handler_nonzero_calls);
	r = wait_ev(NULL, IB_CM_SIDR_REQ_RECEIVED, 100);
	CHECK((int)r.type == IB_CM_SIDR_REQ_RECEIVED, "7: SIDR_REQ seen");
	ib_destroy_cm_id(r.id);
	for (int sc = 1; sc < SC_COUNT; sc++)
		ib_destroy_cm_id(slisten[sc]);
	ibcm_close_device(sdev);
	fprintf(stderr, "[server] %s (%d failures)\n", failures ? "FAILED" : "ok", failures);
	return failures != 0;
}

/* ------------------------------------------------------------------ client */

static struct ib_device *cdev;
static union ib_gid server_gid;
static int client_hold_rtu;

static int client_handler_inner(struct ib_cm_id *id, const struct ib_cm_event *e);
static int client_handler(struct ib_cm_id *id, const struct ib_cm_event *e)
{
	int ret = client_handler_inner(id, e);
	record(id, e);
	return ret;
}

static int client_handler_inner(struct ib_cm_id *id, const struct ib_cm_event *e)
{
	switch (e->event) {
	case IB_CM_REP_RECEIVED: {
		u8 pd[IB_CM_RTU_PRIVATE_DATA_SIZE];
		CHECK(id->state == IB_CM_REP_RCVD, "REP_RCVD");
		CHECK(e->param.rep_rcvd.remote_qpn == 0x220, "REP remote qpn");
		CHECK(e->param.rep_rcvd.starting_psn == 0x5a5a5a, "REP psn");
		CHECK(e->param.rep_rcvd.rnr_retry_count == 7, "REP rnr bitfield");
		CHECK(e->param.rep_rcvd.target_ack_delay == 15, "target ack delay");
		if (client_hold_rtu)
			break;
		fill(pd, sizeof(pd), 3);
		CHECK(ib_send_cm_rtu(id, pd, sizeof(pd)) == 0, "send RTU");
		CHECK(id->state == IB_CM_ESTABLISHED, "ESTABLISHED after RTU");
		break;
	}
	case IB_CM_DREQ_RECEIVED: {
		u8 pd[IB_CM_DREP_PRIVATE_DATA_SIZE];
		fill(pd, sizeof(pd), 25);
		CHECK(ib_send_cm_drep(id, pd, sizeof(pd)) == 0, "send DREP");
		break;
	}
	default:
		break;
	}
	return 0;
}

/* Packet life time of the REQs that only have to connect: REQ timeout
 * 2*convert(14)+convert(12) ≈ 151 ms, 16 tries ≈ 2.4 s, so a server slowed
 * by valgrind on a loaded machine answers in time (with 8 the 290 ms of
 * tries ran out before its first REP there). Scenarios about timing
 * choose their own. */
#define PLT (slow ? 17 : 14)

static struct ib_cm_id *connect_to(int sc, int pdata_seed, u8 lifetime, u8 retries)
{
	struct ib_cm_req_param req;
	struct sa_path_rec path;
	u8 pd[IB_CM_REQ_PRIVATE_DATA_SIZE];
	struct ib_cm_id *id = ib_create_cm_id(cdev, client_handler, NULL);

	CHECK(!IS_ERR(id), "create id");
	CHECK(id->state == IB_CM_IDLE && id->remote_cm_qpn == 1 && id->device == cdev, "new id");
	CHECK(ibcm_init_path(cdev, 1, &server_gid, &path) == 0, "init path");
	path.packet_life_time = lifetime;
	memset(&req, 0, sizeof(req));
	fill(pd, sizeof(pd), pdata_seed);
	req.primary_path = &path;
	req.service_id = cpu_to_be64(SVC_BASE + (u64)sc);
	req.qp_num = 0x110;
	req.qp_type = IB_QPT_RC;
	req.starting_psn = 0x123456;
	req.private_data = pd;
	req.private_data_len = sizeof(pd);
	req.responder_resources = 4;
	req.initiator_depth = 4;
	req.remote_cm_response_timeout = 12;
	req.local_cm_response_timeout = 12;
	req.retry_count = 5;
	req.rnr_retry_count = 6;
	req.max_cm_retries = retries;
	/* Over the limit first. */
	req.private_data_len = IB_CM_REQ_PRIVATE_DATA_SIZE + 1;
	CHECK(ib_send_cm_req(id, &req) == -EINVAL, "REQ pdata over limit");
	req.private_data_len = sizeof(pd);
	CHECK(ib_send_cm_req(id, &req) == 0, "send REQ");
	/* The answer may already be here on a fast fabric: then its event
	 * follows the id's fields (through the CM service, a little later). */
	for (int i = 0; i < 100 && id->state == IB_CM_IDLE && retries >= 15; i++) {
		pthread_mutex_lock(&mu);
		int seen = nev;
		pthread_mutex_unlock(&mu);
		if (seen > 0)
			break;
		msleep(10);
	}
	pthread_mutex_lock(&mu);
	int seen = nev;
	pthread_mutex_unlock(&mu);
	CHECK(id->state != IB_CM_IDLE || seen > 0 || retries < 15, "left IDLE");
	return id;
}

static void disconnect_and_wait(struct ib_cm_id *id, int seed)
{
	u8 pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
	struct rec r;
	fill(pd, sizeof(pd), seed);
	CHECK(ib_send_cm_dreq(id, pd, sizeof(pd)) == 0, "send DREQ");
	CHECK(id->state == IB_CM_DREQ_SENT || id->state == IB_CM_TIMEWAIT, "DREQ_SENT");
	r = wait_ev(id, IB_CM_DREP_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_DREP_RECEIVED && same(r.pdata, 15, IB_CM_DREP_PRIVATE_DATA_SIZE),
	      "DREP with private data");
	r = wait_ev(id, IB_CM_TIMEWAIT_EXIT, 5000);
	CHECK((int)r.type == IB_CM_TIMEWAIT_EXIT, "timewait exit");
	CHECK(id->state == IB_CM_IDLE, "IDLE after timewait");
}

static int run_client(const char *ip, const char *server_ip, int done_fd)
{
	char name[64];
	struct rec r;
	struct ib_cm_id *id;

	who = "client";
	snprintf(name, sizeof(name), "soft:%s", ip);
	cdev = ibcm_open_device(name);
	if (IS_ERR(cdev)) {
		fprintf(stderr, "[client] open %s: %ld\n", name, PTR_ERR(cdev));
		return 1;
	}
	CHECK(ibcm_gid_from_string(server_ip, &server_gid) == 0, "gid from string");
	CHECK(ibcm_gid_from_string("not an ip", &server_gid) == -EINVAL ||
	      ibcm_gid_from_string(server_ip, &server_gid) == 0, "bad gid string");
	ibcm_gid_from_string(server_ip, &server_gid);
	{
		union ib_gid g;
		CHECK(ibcm_query_gid(cdev, 1, 0, &g) == 0, "query gid");
		CHECK(g.raw[10] == 0xff && g.raw[11] == 0xff, "IPv4-mapped GID");
		CHECK(ibcm_query_gid(cdev, 2, 0, &g) == -EINVAL, "port 2");
		CHECK(ibcm_query_gid(cdev, 1, 1, &g) == -EINVAL, "index 1");
	}

	/* 1: private data in every message, client disconnects. */
	id = connect_to(SC_PDATA_CLIENT_DISC, SC_PDATA_CLIENT_DISC, PLT, 15);
	r = wait_ev(id, IB_CM_REP_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_REP_RECEIVED && same(r.pdata, 101, IB_CM_REP_PRIVATE_DATA_SIZE),
	      "1: REP with private data");
	{
		struct ib_qp_attr qa;
		int mask;
		memset(&qa, 0, sizeof(qa));
		qa.qp_state = IB_QPS_RTR;
		CHECK(ib_cm_init_qp_attr(id, &qa, &mask) == 0, "1: client RTR");
		CHECK(qa.dest_qp_num == 0x220 && qa.rq_psn == 0x123456, "1: client RTR values");
		qa.qp_state = IB_QPS_RTS;
		CHECK(ib_cm_init_qp_attr(id, &qa, &mask) == 0, "1: client RTS");
		CHECK(qa.sq_psn == 0x5a5a5a && qa.rnr_retry == 7 && qa.retry_cnt == 5,
		      "1: client RTS values");
	}
	msleep(50);
	disconnect_and_wait(id, 14);
	ib_destroy_cm_id(id);

	/* 2: the server disconnects. */
	id = connect_to(SC_PDATA_SERVER_DISC, SC_PDATA_SERVER_DISC, PLT, 15);
	r = wait_ev(id, IB_CM_REP_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_REP_RECEIVED, "2: REP");
	r = wait_ev(id, IB_CM_DREQ_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_DREQ_RECEIVED && same(r.pdata, 24, IB_CM_DREQ_PRIVATE_DATA_SIZE),
	      "2: DREQ from the server");
	r = wait_ev(id, IB_CM_TIMEWAIT_EXIT, 5000);
	CHECK((int)r.type == IB_CM_TIMEWAIT_EXIT, "2: timewait exit");
	ib_destroy_cm_id(id);

	/* 3: REJ with ARI and private data. */
	id = connect_to(SC_REJECT_ARI, 3, PLT, 15);
	r = wait_ev(id, IB_CM_REJ_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_REJ_RECEIVED, "3: REJ");
	CHECK(r.reason == IB_CM_REJ_CONSUMER_DEFINED, "3: reason %d", r.reason);
	CHECK(r.info_len == 9 && same(r.info, 33, 9), "3: ARI");
	CHECK(same(r.pdata, 34, IB_CM_REJ_PRIVATE_DATA_SIZE), "3: REJ private data");
	CHECK(id->state == IB_CM_IDLE, "3: IDLE after REJ");
	ib_destroy_cm_id(id);

	/* Unknown service: REJ 8 from the server's CM. */
	id = connect_to(99, 9, PLT, 15);
	r = wait_ev(id, IB_CM_REJ_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_REJ_RECEIVED && r.reason == IB_CM_REJ_INVALID_SERVICE_ID,
	      "unknown service: REJ %d", r.reason);
	ib_destroy_cm_id(id);

	/* 4: MRA: REQ timeout 2*convert(8)+convert(12) = 18 ms, server answers
	 * after 300 ms: its MRA on our retransmitted REQ keeps us waiting.
	 * 15 retries (≈ 290 ms before REQ_ERROR) leave the server's MRA time
	 * to arrive when valgrind on a loaded machine delays its handler; with
	 * 3 (72 ms) the REQ timed out there before any MRA was sent. */
	id = connect_to(SC_MRA, 4, 8, 15);
	r = wait_ev(id, IB_CM_MRA_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_MRA_RECEIVED && r.status == 24, "4: MRA (timeout %u)", r.status);
	CHECK(id->state == IB_CM_MRA_REQ_RCVD || id->state == IB_CM_REP_RCVD ||
	      id->state == IB_CM_ESTABLISHED, "4: MRA_REQ_RCVD (%d)", id->state);
	r = wait_ev(id, IB_CM_REP_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_REP_RECEIVED, "4: REP after MRA");
	disconnect_and_wait(id, 44);
	ib_destroy_cm_id(id);

	/* 5: COMM_EST: hold the RTU; the server notifies; our late RTU is
	 * ignored there. */
	client_hold_rtu = 1;
	/* Packet life 14: the server's REP retries span 16 x 144 ms, far
	 * beyond the 300 ms hold, even on a loaded machine. */
	id = connect_to(SC_COMM_EST, 1, 14, 15);
	r = wait_ev(id, IB_CM_REP_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_REP_RECEIVED, "5: REP");
	msleep(300);
	client_hold_rtu = 0;
	CHECK(ib_send_cm_rtu(id, NULL, 0) == 0, "5: late RTU");
	msleep(50);
	disconnect_and_wait(id, 45);
	ib_destroy_cm_id(id);

	/* 6: the server's handler returns non-zero: REJ(consumer defined). */
	id = connect_to(SC_HANDLER_NONZERO, 6, PLT, 15);
	r = wait_ev(id, IB_CM_REJ_RECEIVED, 5000);
	CHECK((int)r.type == IB_CM_REJ_RECEIVED && r.reason == IB_CM_REJ_CONSUMER_DEFINED,
	      "6: REJ %d", r.reason);
	ib_destroy_cm_id(id);

	/* 7: SIDR. */
	{
		struct ib_cm_sidr_req_param sp;
		struct sa_path_rec path;
		u8 pd[IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE];
		id = ib_create_cm_id(cdev, client_handler, NULL);
		CHECK(ibcm_init_path(cdev, 1, &server_gid, &path) == 0, "7: path");
		memset(&sp, 0, sizeof(sp));
		fill(pd, sizeof(pd), 40);
		sp.path = &path;
		sp.service_id = cpu_to_be64(SVC_BASE + SC_SIDR);
		/* Long enough that a server slowed down (valgrind on a loaded
		 * host) is not retried; a retry is answered again, and that
		 * second SIDR_REP must not pass for the answer to another
		 * request: each request below has its own id. */
		sp.timeout_ms = 1000;
		sp.max_cm_retries = 5;
		sp.private_data = pd;
		sp.private_data_len = sizeof(pd);
		CHECK(ib_send_cm_sidr_req(id, &sp) == 0, "7: SIDR_REQ");
		CHECK(id->state == IB_CM_SIDR_REQ_SENT || id->state == IB_CM_IDLE, "7: SIDR_REQ_SENT");
		r = wait_ev(id, IB_CM_SIDR_REP_RECEIVED, 5000);
		CHECK((int)r.type == IB_CM_SIDR_REP_RECEIVED, "7: SIDR_REP");
		CHECK(r.status == IB_SIDR_SUCCESS && r.qpn == 0x777 && r.qkey == 0x01234567,
		      "7: SIDR_REP fields");
		CHECK(r.info_len == 20 && same(r.info, 41, 20), "7: SIDR info");
		CHECK(same(r.pdata, 42, IB_CM_SIDR_REP_PRIVATE_DATA_SIZE), "7: SIDR_REP pdata");
		CHECK(id->state == IB_CM_IDLE, "7: IDLE after SIDR_REP");
		ib_destroy_cm_id(id);
		/* Unknown service: status 1. */
		id = ib_create_cm_id(cdev, client_handler, NULL);
		CHECK(!IS_ERR(id), "7: second id");
		sp.service_id = cpu_to_be64(SVC_BASE + 98);
		CHECK(ib_send_cm_sidr_req(id, &sp) == 0, "7: SIDR_REQ again");
		r = wait_ev(id, IB_CM_SIDR_REP_RECEIVED, 5000);
		CHECK((int)r.type == IB_CM_SIDR_REP_RECEIVED && r.status == IB_SIDR_UNSUPPORTED,
		      "7: SIDR unsupported %u", r.status);
		ib_destroy_cm_id(id);
	}

	/* REQ timeout: nobody at .254 of the server's /24 (the run's own
	 * addresses, Makefile TEST_NET; REQ_ERROR after 1+2 tries of
	 * 2*convert(8)+convert(12) = 18 ms). */
	{
		union ib_gid nobody;
		ibcm_gid_from_string(server_ip, &nobody);
		nobody.raw[15] = 254;
		server_gid = nobody;
		id = connect_to(SC_PDATA_CLIENT_DISC, 1, 8, 2);
		CHECK(id->state == IB_CM_REQ_SENT, "REQ_SENT");
		{
			struct ib_cm_req_param again;
			memset(&again, 0, sizeof(again));
			CHECK(ib_send_cm_req(id, &again) == -EINVAL, "REQ without a path");
		}
		r = wait_ev(id, IB_CM_REQ_ERROR, 5000);
		CHECK((int)r.type == IB_CM_REQ_ERROR && r.status == IB_WC_RESP_TIMEOUT_ERR,
		      "REQ_ERROR with RESP_TIMEOUT_ERR (%d)", (int)r.type);
		CHECK(id->state == IB_CM_IDLE, "IDLE after REQ_ERROR");
		ib_destroy_cm_id(id);
	}

	/* Counters tell what happened. */
	{
		struct ibcm_counters c;
		memset(&c, 0, sizeof(c));
		CHECK(ibcm_get_counters(cdev, &c, sizeof(c)) == (int)sizeof(c), "counters");
		CHECK(c.tx[IBCM_ATTR_REQ] >= 8, "REQs sent %llu", (unsigned long long)c.tx[IBCM_ATTR_REQ]);
		CHECK(c.rej_rx[IB_CM_REJ_INVALID_SERVICE_ID] == 1, "REJ 8 counted");
		CHECK(c.rej_rx[IB_CM_REJ_CONSUMER_DEFINED] == 2, "REJ 28 counted %llu",
		      (unsigned long long)c.rej_rx[IB_CM_REJ_CONSUMER_DEFINED]);
		CHECK(c.timeouts[IBCM_ATTR_REQ] == 1, "REQ timeout counted");
		CHECK(c.tx_retries[IBCM_ATTR_REQ] >= 3, "REQ retries counted");
		/* (A SIDR_REQ the client retried while the server was slow is
		 * answered twice.) */
		CHECK(c.rx[IBCM_ATTR_MRA] >= 1 && c.rx[IBCM_ATTR_SIDR_REP] >= 2, "MRA, SIDR_REP");
		CHECK(c.live_ids == 0 && c.pending_timers == 0, "nothing live %llu %llu",
		      (unsigned long long)c.live_ids, (unsigned long long)c.pending_timers);
		CHECK(c.tx_datagrams == c.tx[IBCM_ATTR_REQ] + c.tx[IBCM_ATTR_RTU] +
				       c.tx[IBCM_ATTR_DREQ] + c.tx[IBCM_ATTR_DREP] +
				       c.tx[IBCM_ATTR_REJ] + c.tx[IBCM_ATTR_SIDR_REQ],
		      "datagrams = MADs");
		CHECK(ibcm_get_counters(cdev, NULL, sizeof(c)) == -EINVAL, "counters NULL");
		CHECK(ibcm_get_counters(NULL, &c, sizeof(c)) == -EINVAL, "counters no device");
		CHECK(ibcm_get_counters(cdev, &c, 8) == 8, "counters short size");
	}

	/* Misuse: NULL and bad arguments. */
	CHECK(ib_cm_listen(NULL, 0) == -EINVAL, "listen NULL");
	CHECK(ib_send_cm_rtu(NULL, NULL, 0) == -EINVAL, "rtu NULL");
	CHECK(IS_ERR(ib_create_cm_id(NULL, client_handler, NULL)), "create on NULL device");
	CHECK(PTR_ERR(ib_create_cm_id((struct ib_device *)&who, client_handler, NULL)) == -EINVAL,
	      "create on a foreign pointer");
	CHECK(IS_ERR(ibcm_open_device("soft:not-an-ip")), "bad device name");
	{
		/* In-process a device belongs to one opener; through the host
		 * CM service (IBCM_SERVICE=required) it is shared. */
		const char *svc = getenv("IBCM_SERVICE");
		struct ib_device *again = ibcm_open_device(name);
		if (svc && strcmp(svc, "required") == 0) {
			CHECK(!IS_ERR(again), "second open through the service");
			if (!IS_ERR(again))
				ibcm_close_device(again);
		} else {
			CHECK(PTR_ERR(again) == -EADDRINUSE, "device in use");
		}
	}
	CHECK(strcmp(ibcm_reject_msg(IB_CM_REJ_STALE_CONN), "stale conn") == 0, "reject msg");
	CHECK(strcmp(ibcm_reject_msg(34), "unrecognized reason") == 0, "reject msg 34");
	CHECK(strcmp(ibcm_reject_msg(-1), "unrecognized reason") == 0, "reject msg -1");

	ibcm_close_device(cdev);
	if (write(done_fd, "d", 1) != 1)
		return 1;
	fprintf(stderr, "[client] %s (%d failures)\n", failures ? "FAILED" : "ok", failures);
	return failures != 0;
}

int main(int argc, char **argv)
{
	const char *sip = argc > 2 ? argv[1] : "127.0.0.2";
	const char *cip = argc > 2 ? argv[2] : "127.0.0.3";
	int ready[2], done[2], st1, st2;
	pid_t server, client;

	slow = getenv("CM_SCENARIOS_SLOW") != NULL;

	if (pipe(ready) || pipe(done))
		return 1;
	server = fork();
	if (server == 0) {
		alarm(slow ? 600 : 60);
		exit(run_server(sip, ready[1], done[0]));
	}
	/* Only the server writes "ready": with our copy closed, a server that
	 * exits first (its device did not open) ends the read instead of
	 * leaving us blocked in it. */
	close(ready[1]);
	char c;
	if (read(ready[0], &c, 1) != 1) {
		fprintf(stderr, "server did not start\n");
		kill(server, SIGKILL);
		return 1;
	}
	client = fork();
	if (client == 0) {
		alarm(slow ? 600 : 60);
		exit(run_client(cip, sip, done[1]));
	}
	waitpid(client, &st2, 0);
	if (!WIFEXITED(st2) || WEXITSTATUS(st2) != 0) {
		/* Unblock the server if the client died early. */
		if (write(done[1], "x", 1) != 1)
			perror("write");
	}
	waitpid(server, &st1, 0);
	int ok = WIFEXITED(st1) && WEXITSTATUS(st1) == 0 && WIFEXITED(st2) && WEXITSTATUS(st2) == 0;
	printf("cm_scenarios: %s (server status %#x, client status %#x)\n", ok ? "PASS" : "FAIL",
	       st1, st2);
	return ok ? 0 : 1;
}
