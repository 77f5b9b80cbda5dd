/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * verbs_client.c - a real RC connection set up by ibcm, data moved by libibverbs.
 *
 * Built against the installed ibcm (pkg-config) and libibverbs:
 *   cc verbs_client.c $(pkg-config --cflags --libs ibcm) -libverbs -o verbs_client
 *
 * usage:
 *   verbs_client [-d IBCM_DEV] [-D VERBS_DEV] [-p PORT] [-C COUNT] [-S SIZE] -c SERVER_IPV4
 *       connect to an rdma_cm (ucmatose -s) or ibcm (-s) server: REQ with the rdma_cm
 *       private-data header to service RDMA_PS_TCP:PORT, QP INIT/RTR/RTS from
 *       ib_cm_init_qp_attr, RTU; then the ucmatose data pattern: COUNT sends of SIZE
 *       bytes each way; then wait for the server's DREQ and answer it.
 *   verbs_client [...] -R -c SERVER_IPV4
 *       the same connection, then rping's protocol against `rping -s` (port 7174 unless -p):
 *       COUNT times: advertise a source buffer (the server RDMA READs it), then a sink buffer
 *       (the server RDMA WRITEs it back), compare the two; then DREQ -> DREP.
 *   verbs_client [...] -s
 *       the server side of the ucmatose pattern, with ibcm: listen, REQ -> QP to RTS -> REP, RTU,
 *       data, then DREQ -> DREP.
 *   verbs_client [-d IBCM_DEV] -o [-W IPV4]
 *       only open the device: print the result (errno) and the GID table; with -W, then wait
 *       (port events) until ibcm_query_gid shows ::ffff:IPV4 and ibcm_init_path uses it.
 *
 *   -d  ibcm device name (default rxe0; e.g. soft:10.77.0.2:4792@rxe0)
 *   -D  verbs device for the QP (default: the part after '@' of -d, else -d)
 *   -p  rdma_cm port (default 7471, ucmatose's); service ID = 0x0106 << 16 | PORT
 *   -C  messages each way (default 10), -S message size (default 100), -t timeout s (20)
 * exit status 0 on success.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/ib_cm.h>
#include <ibcm.h>

static const char *ibcm_dev = "rxe0", *verbs_dev, *wait_ip;
static int port = 7471, count = 10, size = 100, tmo = 20, rping;

#define DIE(...) do { printf("FAIL: " __VA_ARGS__); printf("\n"); exit(1); } while (0)

/* ---- events from ibcm callbacks to the main thread ---- */
struct ev {
	enum ib_cm_event_type type;
	struct ib_cm_id *id;
	int reason;
};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct ev evq[64];
static int evn;

static const char *ev_name(int t)
{
	static const char *n[] = {"REQ_ERROR", "REQ_RECEIVED", "REP_ERROR", "REP_RECEIVED",
		"RTU_RECEIVED", "USER_ESTABLISHED", "DREQ_ERROR", "DREQ_RECEIVED", "DREP_RECEIVED",
		"TIMEWAIT_EXIT", "MRA_RECEIVED", "REJ_RECEIVED", "LAP_ERROR", "LAP_RECEIVED",
		"APR_RECEIVED", "SIDR_REQ_ERROR", "SIDR_REQ_RECEIVED", "SIDR_REP_RECEIVED"};
	return t >= 0 && t < (int)(sizeof n / sizeof n[0]) ? n[t] : "?";
}

static int handler(struct ib_cm_id *id, const struct ib_cm_event *e)
{
	pthread_mutex_lock(&mu);
	if (evn < 64) {
		evq[evn].type = e->event;
		evq[evn].id = id;
		evq[evn].reason = e->event == IB_CM_REJ_RECEIVED ? (int)e->param.rej_rcvd.reason : 0;
		evn++;
	}
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	printf("cm event %s on id %p\n", ev_name(e->event), (void *)id);
	fflush(stdout);
	return 0;
}

/* waits for the next event (any type); returns 0 on timeout */
static int next_event(struct ev *out, int seconds)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += seconds;
	pthread_mutex_lock(&mu);
	while (!evn)
		if (pthread_cond_timedwait(&cv, &mu, &ts) == ETIMEDOUT)
			break;
	int got = evn > 0;
	if (got) {
		*out = evq[0];
		memmove(evq, evq + 1, --evn * sizeof evq[0]);
	}
	pthread_mutex_unlock(&mu);
	return got;
}

static struct ev wait_for(enum ib_cm_event_type want, const char *what)
{
	struct ev e;
	for (;;) {
		if (!next_event(&e, tmo))
			DIE("timeout waiting for %s", what);
		if (e.type == want)
			return e;
		if (e.type == IB_CM_REJ_RECEIVED)
			DIE("got REJ (reason %d) waiting for %s", e.reason, what);
		if (e.type == IB_CM_REQ_ERROR || e.type == IB_CM_REP_ERROR || e.type == IB_CM_DREQ_ERROR)
			DIE("got %s waiting for %s", ev_name(e.type), what);
		printf("(ignoring %s while waiting for %s)\n", ev_name(e.type), what);
	}
}

/* ---- verbs ---- */
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static struct ibv_mr *mr;
static char *buf;

static void verbs_setup(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		DIE("ibv_get_device_list: %s", strerror(errno));
	for (int i = 0; i < n && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), verbs_dev))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx)
		DIE("cannot open verbs device %s", verbs_dev);
	if (!(pd = ibv_alloc_pd(ctx)))
		DIE("ibv_alloc_pd");
	if (!(cq = ibv_create_cq(ctx, 2 * count + 2, NULL, NULL, 0)))
		DIE("ibv_create_cq");
	buf = calloc(count + 1, size);
	if (!(mr = ibv_reg_mr(pd, buf, (size_t)(count + 1) * size, IBV_ACCESS_LOCAL_WRITE)))
		DIE("ibv_reg_mr");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = count, .max_recv_wr = count, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (!(qp = ibv_create_qp(pd, &ia)))
		DIE("ibv_create_qp: %s", strerror(errno));
	printf("verbs: %s RC QP 0x%06x\n", verbs_dev, qp->qp_num);
}

/* kernel struct ib_qp_attr (from ib_cm_init_qp_attr) -> struct ibv_qp_attr; the
 * IB_QP_* and IB_ACCESS_* bits the CM uses have the IBV_* values. */
static void to_rts_step(struct ib_cm_id *id, enum ib_qp_state state, const char *name)
{
	struct ib_qp_attr k;
	int mask = 0;
	memset(&k, 0, sizeof k);
	k.qp_state = state;
	int r = ib_cm_init_qp_attr(id, &k, &mask);
	if (r)
		DIE("ib_cm_init_qp_attr(%s) = %d", name, r);
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = (enum ibv_qp_state)k.qp_state;
	a.path_mtu = (enum ibv_mtu)k.path_mtu;
	a.qkey = k.qkey;
	a.rq_psn = k.rq_psn;
	a.sq_psn = k.sq_psn;
	a.dest_qp_num = k.dest_qp_num;
	a.qp_access_flags = k.qp_access_flags & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	a.pkey_index = k.pkey_index;
	a.port_num = k.port_num;
	a.max_rd_atomic = k.max_rd_atomic;
	a.max_dest_rd_atomic = k.max_dest_rd_atomic;
	a.min_rnr_timer = k.min_rnr_timer;
	a.timeout = k.timeout;
	a.retry_cnt = k.retry_cnt;
	a.rnr_retry = k.rnr_retry;
	a.ah_attr.is_global = !!(k.ah_attr.ah_flags & IB_AH_GRH);
	memcpy(a.ah_attr.grh.dgid.raw, k.ah_attr.grh.dgid.raw, 16);
	a.ah_attr.grh.flow_label = k.ah_attr.grh.flow_label;
	a.ah_attr.grh.sgid_index = k.ah_attr.grh.sgid_index;
	a.ah_attr.grh.hop_limit = k.ah_attr.grh.hop_limit;
	a.ah_attr.grh.traffic_class = k.ah_attr.grh.traffic_class;
	a.ah_attr.sl = k.ah_attr.sl;
	a.ah_attr.static_rate = k.ah_attr.static_rate;
	a.ah_attr.port_num = k.ah_attr.port_num;
	if (k.ah_attr.type == RDMA_AH_ATTR_TYPE_IB) {
		a.ah_attr.dlid = k.ah_attr.ib.dlid;
		a.ah_attr.src_path_bits = k.ah_attr.ib.src_path_bits;
	}
	int vmask = mask & ((1 << 21) - 1);
	r = ibv_modify_qp(qp, &a, vmask);
	if (r)
		DIE("ibv_modify_qp(%s, mask 0x%x) = %d (%s)", name, vmask, r, strerror(r));
	char g[64];
	inet_ntop(AF_INET6, a.ah_attr.grh.dgid.raw, g, sizeof g);
	if (state == IB_QPS_RTR)
		printf("QP -> RTR (mask 0x%x: dest QPN 0x%06x, rq_psn 0x%06x, mtu %d, dgid %s, "
		       "sgid_index %d, hop_limit %d)\n", vmask, a.dest_qp_num, a.rq_psn, a.path_mtu, g,
		       a.ah_attr.grh.sgid_index, a.ah_attr.grh.hop_limit);
	else if (state == IB_QPS_RTS)
		printf("QP -> RTS (mask 0x%x: sq_psn 0x%06x, timeout %d, retry %d, rnr_retry %d)\n", vmask,
		       a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry);
	else
		printf("QP -> %s (mask 0x%x)\n", name, vmask);
}

static void post_recvs(void)
{
	for (int i = 0; i < count; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(buf + (size_t)(i + 1) * size), .length = size,
				       .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1000 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(qp, &wr, &bad))
			DIE("ibv_post_recv");
	}
}

/* ucmatose's data pattern: COUNT sends, then wait for COUNT send and COUNT recv completions */
static void exchange(void)
{
	snprintf(buf, size, "hello from ibcm verbs_client (pid %d)", getpid());
	for (int i = 0; i < count; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = size, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
		if (ibv_post_send(qp, &wr, &bad))
			DIE("ibv_post_send");
	}
	int sends = 0, recvs = 0;
	time_t end = time(NULL) + tmo;
	while ((sends < count || recvs < count) && time(NULL) < end) {
		struct ibv_wc wc[8];
		int n = ibv_poll_cq(cq, 8, wc);
		if (n < 0)
			DIE("ibv_poll_cq");
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				DIE("completion wr_id %" PRIu64 ": %s", wc[i].wr_id,
				    ibv_wc_status_str(wc[i].status));
			if (wc[i].opcode & IBV_WC_RECV) {
				if (!recvs) {
					const unsigned char *m =
						(const unsigned char *)buf + (wc[i].wr_id - 999) * size;
					printf("first message received: %d bytes, starting %02x %02x %02x %02x"
					       " %02x %02x %02x %02x\n", wc[i].byte_len, m[0], m[1], m[2], m[3],
					       m[4], m[5], m[6], m[7]);
				}
				recvs++;
			} else {
				sends++;
			}
		}
		if (!n)
			usleep(1000);
	}
	if (sends < count || recvs < count)
		DIE("data: %d/%d sends, %d/%d recvs completed", sends, count, recvs, count);
	printf("DATA OK: %d sends and %d receives of %d bytes completed\n", sends, recvs, size);
}


/* ---- rping's protocol (client side), rdma-core librdmacm/examples/rping.c ---- */
struct rping_info {
	uint64_t buf;	/* big endian */
	uint32_t rkey;	/* big endian */
	uint32_t size;	/* big endian */
};

/* waits for one completion of each kind asked for */
static void wait_wcs(int sends, int recvs, const char *what)
{
	time_t end = time(NULL) + tmo;
	while ((sends > 0 || recvs > 0) && time(NULL) < end) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			DIE("ibv_poll_cq");
		if (!n) {
			usleep(200);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS)
			DIE("%s: completion %s", what, ibv_wc_status_str(wc.status));
		if (wc.opcode & IBV_WC_RECV)
			recvs--;
		else
			sends--;
	}
	if (sends > 0 || recvs > 0)
		DIE("%s: timeout", what);
}

static void rping_client(void)
{
	const int sz = 64;
	char *start = calloc(1, sz), *sink = calloc(1, sz);
	struct rping_info *rx = calloc(1, sizeof *rx), *tx = calloc(1, sizeof *tx);
	struct ibv_mr *m_start = ibv_reg_mr(pd, start, sz, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_mr *m_sink = ibv_reg_mr(pd, sink, sz, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *m_rx = ibv_reg_mr(pd, rx, sizeof *rx, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *m_tx = ibv_reg_mr(pd, tx, sizeof *tx, 0);
	if (!m_start || !m_sink || !m_rx || !m_tx)
		DIE("ibv_reg_mr");
	char c0 = 65;
	for (int ping = 0; ping < count; ping++) {
		int cc = snprintf(start, sz, "rdma-ping-%d: ", ping);
		char c = c0;
		for (int i = cc; i < sz; i++) {
			start[i] = c++;
			if (c > 122)
				c = 65;
		}
		if (++c0 > 122)
			c0 = 65;
		start[sz - 1] = 0;
		memset(sink, 0, sz);
		for (int step = 0; step < 2; step++) {
			struct ibv_sge rsge = { .addr = (uintptr_t)rx, .length = sizeof *rx, .lkey = m_rx->lkey };
			struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rsge, .num_sge = 1 }, *rbad;
			if (ibv_post_recv(qp, &rwr, &rbad))
				DIE("ibv_post_recv");
			struct ibv_mr *m = step ? m_sink : m_start;
			tx->buf = htobe64((uintptr_t)m->addr);
			tx->rkey = htobe32(m->rkey);
			tx->size = htobe32(sz);
			struct ibv_sge sge = { .addr = (uintptr_t)tx, .length = sizeof *tx, .lkey = m_tx->lkey };
			struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
			if (ibv_post_send(qp, &wr, &bad))
				DIE("ibv_post_send");
			/* step 0: the server RDMA READs start and says go; step 1: it RDMA WRITEs sink */
			wait_wcs(1, 1, step ? "rping write advert" : "rping read advert");
		}
		if (memcmp(start, sink, sz))
			DIE("rping %d: data mismatch: sent \"%s\", got back \"%s\"", ping, start, sink);
		printf("ping data: %s\n", sink);
	}
	printf("DATA OK: %d rping round trips (server RDMA READ + RDMA WRITE of %d bytes) verified\n",
	       count, sz);
}

static __be64 service_id(void)
{
	return cpu_to_be64(0x0000000001060000ULL | (uint16_t)port); /* RDMA_PS_TCP << 16 | port */
}

static void print_gids(struct ib_device *dev);

/* -o -W: the GID of a new address must appear through the device's port events */
static int wait_gid(struct ib_device *dev)
{
	union ib_gid want, g, peer;
	struct sa_path_rec path;
	char s[64];
	if (ibcm_gid_from_string(wait_ip, &want))
		DIE("bad address %s", wait_ip);
	printf("WAITING for GID %s\n", wait_ip);
	for (int t = 0; t < tmo * 10; t++) {
		for (int i = 0; i < 64; i++) {
			if (ibcm_query_gid(dev, 1, i, &g) || memcmp(g.raw, want.raw, 16))
				continue;
			/* a path to a peer on the new subnet starts at an IPv4 GID of the port */
			memcpy(&peer, &want, 16);
			peer.raw[15] ^= 1;
			if (ibcm_init_path(dev, 1, &peer, &path))
				DIE("ibcm_init_path");
			inet_ntop(AF_INET6, path.sgid.raw, s, sizeof s);
			if (memcmp(path.sgid.raw, want.raw, 16))
				DIE("a path to the new subnet starts at %s, not at the new GID", s);
			printf("GID EVENT OK: %s at index %d after %.1f s; a path to its subnet starts "
			       "there (sgid %s)\n", wait_ip, i, t / 10.0, s);
			print_gids(dev);
			return 0;
		}
		usleep(100000);
	}
	DIE("GID %s did not appear within %d s", wait_ip, tmo);
}

static void print_gids(struct ib_device *dev)
{
	for (int i = 0; i < 16; i++) {
		union ib_gid g;
		char s[64];
		if (ibcm_query_gid(dev, 1, i, &g))
			continue;
		inet_ntop(AF_INET6, g.raw, s, sizeof s);
		printf("ibcm_query_gid(port 1, index %d) = %s\n", i, s);
	}
}

static int run_client(struct ib_device *dev, const char *server)
{
	union ib_gid dgid;
	struct sa_path_rec path;
	char s[64], d[64];
	if (ibcm_gid_from_string(server, &dgid))
		DIE("bad server address %s", server);
	int r = ibcm_init_path(dev, 1, &dgid, &path);
	if (r)
		DIE("ibcm_init_path = %d", r);
	inet_ntop(AF_INET6, path.sgid.raw, s, sizeof s);
	inet_ntop(AF_INET6, path.dgid.raw, d, sizeof d);
	printf("path: sgid %s dgid %s rec_type %d hop_limit %d tclass %d mtu %d rate %d pkey 0x%04x\n", s,
	       d, path.rec_type, path.hop_limit, path.traffic_class, path.mtu, path.rate,
	       be16_to_cpu(path.pkey));
	verbs_setup();
	struct ib_cm_id *id = ib_create_cm_id(dev, handler, NULL);
	if (IS_ERR(id))
		DIE("ib_create_cm_id = %ld", PTR_ERR(id));

	/* rdma_cm private data header (struct cma_hdr): version 0, IP version 4,
	 * source port, source and destination IPv4 in the last 4 bytes of 16 each */
	uint8_t pdata[56];
	memset(pdata, 0, sizeof pdata);
	uint16_t sport = 40000 + getpid() % 20000;
	pdata[0] = 0x00;
	pdata[1] = 4 << 4;
	pdata[2] = sport >> 8;
	pdata[3] = sport & 0xff;
	memcpy(pdata + 4 + 12, path.sgid.raw + 12, 4);
	memcpy(pdata + 20 + 12, dgid.raw + 12, 4);

	struct ib_cm_req_param req;
	memset(&req, 0, sizeof req);
	srand(getpid() ^ time(NULL));
	req.primary_path = &path;
	req.service_id = service_id();
	req.qp_num = qp->qp_num;
	req.qp_type = IB_QPT_RC;
	req.starting_psn = rand() & 0xffffff;
	req.private_data = pdata;
	req.private_data_len = sizeof pdata;
	req.responder_resources = 1;
	req.initiator_depth = 1;
	req.remote_cm_response_timeout = 20;
	req.local_cm_response_timeout = 20;
	req.flow_control = 1;
	req.retry_count = 7;
	req.rnr_retry_count = 7;
	req.max_cm_retries = 15;
	r = ib_send_cm_req(id, &req);
	if (r)
		DIE("ib_send_cm_req = %d", r);
	printf("REQ sent: service id 0x%016" PRIx64 ", QPN 0x%06x, PSN 0x%06x\n",
	       (uint64_t)be64_to_cpu(req.service_id), req.qp_num, req.starting_psn);
	wait_for(IB_CM_REP_RECEIVED, "REP");
	to_rts_step(id, IB_QPS_INIT, "INIT");
	to_rts_step(id, IB_QPS_RTR, "RTR");
	if (!rping)
		post_recvs();
	to_rts_step(id, IB_QPS_RTS, "RTS");
	r = ib_send_cm_rtu(id, NULL, 0);
	if (r)
		DIE("ib_send_cm_rtu = %d", r);
	printf("CONNECTED (RTU sent)\n");
	if (rping) {
		rping_client();
		r = ib_send_cm_dreq(id, NULL, 0);
		if (r)
			DIE("ib_send_cm_dreq = %d", r);
		wait_for(IB_CM_DREP_RECEIVED, "DREP");
		printf("DISCONNECTED (DREQ sent, DREP received)\n");
		ib_destroy_cm_id(id);
		return 0;
	}
	exchange();
	wait_for(IB_CM_DREQ_RECEIVED, "the server's DREQ");
	r = ib_send_cm_drep(id, NULL, 0);
	if (r)
		DIE("ib_send_cm_drep = %d", r);
	printf("DISCONNECTED (DREQ received, DREP sent)\n");
	ib_destroy_cm_id(id);
	return 0;
}

static int run_server(struct ib_device *dev)
{
	verbs_setup();
	struct ib_cm_id *listen = ib_create_cm_id(dev, handler, NULL);
	if (IS_ERR(listen))
		DIE("ib_create_cm_id = %ld", PTR_ERR(listen));
	int r = ib_cm_listen(listen, service_id());
	if (r)
		DIE("ib_cm_listen = %d", r);
	printf("LISTENING on service id 0x%016" PRIx64 "\n", (uint64_t)be64_to_cpu(service_id()));
	fflush(stdout);
	struct ev e = wait_for(IB_CM_REQ_RECEIVED, "a REQ");
	srand(getpid() ^ time(NULL));
	tmo = 20;
	struct ib_cm_id *id = e.id;
	/* INIT and receives now; RTR once the REP is sent: as in the kernel, the
	 * passive side's receive PSN is the REP's starting PSN */
	to_rts_step(id, IB_QPS_INIT, "INIT");
	post_recvs();
	struct ib_cm_rep_param rep;
	memset(&rep, 0, sizeof rep);
	rep.qp_num = qp->qp_num;
	rep.starting_psn = rand() & 0xffffff;
	rep.responder_resources = 1;
	rep.initiator_depth = 1;
	rep.flow_control = 1;
	rep.rnr_retry_count = 7;
	r = ib_send_cm_rep(id, &rep);
	if (r)
		DIE("ib_send_cm_rep = %d", r);
	printf("REP sent\n");
	to_rts_step(id, IB_QPS_RTR, "RTR");
	to_rts_step(id, IB_QPS_RTS, "RTS");
	wait_for(IB_CM_RTU_RECEIVED, "RTU");
	printf("CONNECTED (RTU received)\n");
	exchange();
	r = ib_send_cm_dreq(id, NULL, 0);
	if (r)
		DIE("ib_send_cm_dreq = %d", r);
	wait_for(IB_CM_DREP_RECEIVED, "DREP");
	printf("DISCONNECTED (DREQ sent, DREP received)\n");
	ib_destroy_cm_id(id);
	ib_destroy_cm_id(listen);
	return 0;
}

int main(int argc, char **argv)
{
	int c, mode = 0;
	const char *server = NULL;
	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((c = getopt(argc, argv, "d:D:p:C:S:t:c:soRW:")) != -1) {
		switch (c) {
		case 'd': ibcm_dev = optarg; break;
		case 'D': verbs_dev = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'C': count = atoi(optarg); break;
		case 'S': size = atoi(optarg); break;
		case 't': tmo = atoi(optarg); break;
		case 'c': mode = 'c'; server = optarg; break;
		case 's': mode = 's'; break;
		case 'o': mode = 'o'; break;
		case 'R': rping = 1; break;
		case 'W': wait_ip = optarg; break;
		default: fprintf(stderr, "see the header of verbs_client.c\n"); return 2;
		}
	}
	if (!mode || count < 1 || size < 64) {
		fprintf(stderr, "usage: verbs_client [-d dev] [-D verbs dev] [-p port] -c IP | -s | -o\n");
		return 2;
	}
	if (rping && port == 7471)
		port = 7174; /* rping's default port */
	if (!verbs_dev) {
		const char *at = strrchr(ibcm_dev, '@');
		verbs_dev = at ? at + 1 : ibcm_dev;
	}
	struct ib_device *dev = ibcm_open_device(ibcm_dev);
	if (IS_ERR(dev)) {
		long e = PTR_ERR(dev);
		printf("ibcm_open_device(\"%s\") = %ld (%s)\n", ibcm_dev, e, strerror((int)-e));
		return mode == 'o' ? (int)-e : 3;
	}
	printf("ibcm_open_device(\"%s\") ok\n", ibcm_dev);
	print_gids(dev);
	if (mode == 'o' && wait_ip)
		return wait_gid(dev);
	if (mode == 'o')
		return 0;
	int r = mode == 'c' ? run_client(dev, server) : run_server(dev);
	ibcm_close_device(dev);
	return r;
}
