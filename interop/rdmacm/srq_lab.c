/*
 * interop/rdmacm/srq_lab.c - an RC connection whose receives go through shared receive
 * queues made by rdma_cm (the "srq" scenario of interop/rdmacm/scenarios).
 *
 * Built by interop/rdmacm.sh against the host's <rdma/rdma_cma.h> and -lrdmacm, so it runs on
 * the guest's librdmacm (kernel CM) or on ibcm's (preloaded) unchanged. Both sides use the
 * synchronous rdma_cm API (rdma_getaddrinfo, rdma_create_ep) and the rdma_verbs.h helpers:
 *
 *   server (-s ADDR): rdma_get_request, then on the new id rdma_create_srq (NULL PD: the id's),
 *                     rdma_create_qp without an SRQ in its attributes (it must take id->srq),
 *                     N receives posted with rdma_post_recv (they go to id->srq), rdma_accept;
 *                     N messages received through the SRQ, N sent back; rdma_disconnect.
 *   client (-c ADDR): the same SRQ + QP on its resolved id before rdma_connect (so its REQ
 *                     carries the SRQ bit); N sent, N received through its SRQ.
 *
 * Every message is checked (text and length; each receive buffer used once), each side prints
 * "srq_lab: received N messages through the SRQ" and then
 * "srq_lab: SRQ destroyed" after rdma_destroy_qp + rdma_destroy_srq (id->srq NULL again), and
 * exits 0 only when all of it held. usage: srq_lab -s|-c ADDR [-p PORT] [-n N]
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define MSG 64
#define MAXN 64

static int n_msgs = 10;
static char recv_buf[MAXN][MSG];
static char send_buf[MAXN][MSG];

#define FAIL(...)                                                                  \
	do {                                                                       \
		fprintf(stderr, "srq_lab: " __VA_ARGS__);                          \
		fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));      \
		return 1;                                                          \
	} while (0)

/* The SRQ, then the QP on it, on `id` (a CONNECT_REQUEST child or a resolved id). */
static int srq_and_qp(struct rdma_cm_id *id)
{
	struct ibv_srq_init_attr sa;
	struct ibv_qp_init_attr qa;

	memset(&sa, 0, sizeof(sa));
	sa.attr.max_wr = n_msgs;
	sa.attr.max_sge = 1;
	if (rdma_create_srq(id, NULL, &sa))
		FAIL("rdma_create_srq");
	if (!id->srq || sa.attr.max_wr < (unsigned)n_msgs)
		FAIL("rdma_create_srq: id->srq %p, max_wr %u", (void *)id->srq, sa.attr.max_wr);
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = n_msgs;
	qa.cap.max_recv_wr = n_msgs;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.sq_sig_all = 1;
	if (rdma_create_qp(id, NULL, &qa))
		FAIL("rdma_create_qp");
	if (id->qp->srq != id->srq)
		FAIL("the QP is not on id->srq (qp->srq %p, id->srq %p)", (void *)id->qp->srq,
		     (void *)id->srq);
	if (!id->recv_cq || !id->send_cq || id->pd != id->qp->pd)
		FAIL("rdma_create_qp: CQs %p/%p, pd %p/%p", (void *)id->send_cq,
		     (void *)id->recv_cq, (void *)id->pd, (void *)id->qp->pd);
	return 0;
}

static int post_recvs(struct rdma_cm_id *id, struct ibv_mr *mr)
{
	for (int i = 0; i < n_msgs; i++)
		if (rdma_post_recv(id, (void *)(uintptr_t)i, recv_buf[i], MSG, mr))
			FAIL("rdma_post_recv %d", i);
	return 0;
}

/* N receives, each in its own buffer, each "srq-<dir>-<k>" for a distinct k < N. */
static int receive_all(struct rdma_cm_id *id, const char *dir)
{
	int seen_buf[MAXN] = {0}, seen_msg[MAXN] = {0};
	struct ibv_wc wc;
	char want[MSG];

	for (int i = 0; i < n_msgs; i++) {
		int k = -1, got = rdma_get_recv_comp(id, &wc);

		if (got <= 0)
			FAIL("rdma_get_recv_comp %d", i);
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV)
			FAIL("receive %d: status %s, opcode %d", i, ibv_wc_status_str(wc.status),
			     wc.opcode);
		if (wc.wr_id >= (uint64_t)n_msgs || seen_buf[wc.wr_id]++)
			FAIL("receive %d: buffer %llu unknown or used twice", i,
			     (unsigned long long)wc.wr_id);
		if (sscanf(recv_buf[wc.wr_id], "srq-%*[a-z2]-%d", &k) != 1 || k < 0 ||
		    k >= n_msgs || seen_msg[k]++)
			FAIL("receive %d: unexpected message \"%.20s\"", i, recv_buf[wc.wr_id]);
		snprintf(want, sizeof(want), "srq-%s-%d", dir, k);
		if (strcmp(recv_buf[wc.wr_id], want) || wc.byte_len != strlen(want) + 1)
			FAIL("receive %d: \"%.20s\" (%u bytes), expected \"%s\"", i,
			     recv_buf[wc.wr_id], wc.byte_len, want);
	}
	printf("srq_lab: received %d messages through the SRQ\n", n_msgs);
	return 0;
}

static int send_all(struct rdma_cm_id *id, struct ibv_mr *mr, const char *dir)
{
	struct ibv_wc wc;

	for (int i = 0; i < n_msgs; i++) {
		int len = snprintf(send_buf[i], MSG, "srq-%s-%d", dir, i) + 1;

		if (rdma_post_send(id, NULL, send_buf[i], len, mr, IBV_SEND_SIGNALED))
			FAIL("rdma_post_send %d", i);
		if (rdma_get_send_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS)
			FAIL("send %d: %s", i, ibv_wc_status_str(wc.status));
	}
	printf("srq_lab: sent %d messages\n", n_msgs);
	return 0;
}

static int teardown(struct rdma_cm_id *id, struct ibv_mr *rmr, struct ibv_mr *smr)
{
	rdma_disconnect(id);
	rdma_dereg_mr(rmr);
	rdma_dereg_mr(smr);
	rdma_destroy_qp(id);
	rdma_destroy_srq(id);
	if (id->srq)
		FAIL("rdma_destroy_srq left id->srq %p", (void *)id->srq);
	printf("srq_lab: SRQ destroyed\n");
	rdma_destroy_ep(id);
	return 0;
}

static int run(int server, const char *addr, const char *port)
{
	struct rdma_addrinfo hints, *res;
	struct rdma_cm_id *listen_id = NULL, *id;
	struct ibv_mr *rmr, *smr;
	int r;

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	if (server)
		hints.ai_flags = RAI_PASSIVE;
	r = rdma_getaddrinfo(addr, port, &hints, &res);
	if (r)
		FAIL("rdma_getaddrinfo %s:%s: %s", addr, port, gai_strerror(r));
	r = rdma_create_ep(server ? &listen_id : &id, res, NULL, NULL);
	rdma_freeaddrinfo(res);
	if (r)
		FAIL("rdma_create_ep");
	if (server) {
		if (rdma_listen(listen_id, 1))
			FAIL("rdma_listen");
		printf("srq_lab: listening on %s:%s\n", addr, port);
		fflush(stdout);
		if (rdma_get_request(listen_id, &id))
			FAIL("rdma_get_request");
	}
	if (srq_and_qp(id))
		return 1;
	rmr = rdma_reg_msgs(id, recv_buf, sizeof(recv_buf));
	smr = rdma_reg_msgs(id, send_buf, sizeof(send_buf));
	if (!rmr || !smr)
		FAIL("rdma_reg_msgs");
	if (post_recvs(id, rmr))
		return 1;
	if (server) {
		if (rdma_accept(id, NULL))
			FAIL("rdma_accept");
		if (receive_all(id, "c2s") || send_all(id, smr, "s2c"))
			return 1;
	} else {
		if (rdma_connect(id, NULL))
			FAIL("rdma_connect");
		if (send_all(id, smr, "c2s") || receive_all(id, "s2c"))
			return 1;
	}
	if (teardown(id, rmr, smr))
		return 1;
	if (listen_id)
		rdma_destroy_ep(listen_id);
	return 0;
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *port = "7476";
	int op, server = -1, r;

	while ((op = getopt(argc, argv, "s:c:p:n:")) != -1) {
		switch (op) {
		case 's':
		case 'c':
			server = op == 's';
			addr = optarg;
			break;
		case 'p':
			port = optarg;
			break;
		case 'n':
			n_msgs = atoi(optarg);
			break;
		default:
			server = -1;
			break;
		}
	}
	if (server < 0 || n_msgs < 1 || n_msgs > MAXN) {
		fprintf(stderr, "usage: %s -s|-c ADDR [-p PORT] [-n 1..%d]\n", argv[0], MAXN);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	r = run(server, addr, port);
	printf("srq_lab: end %d\n", r);
	return r;
}
