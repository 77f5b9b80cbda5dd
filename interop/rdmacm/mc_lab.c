/*
 * interop/rdmacm/mc_lab.c - when rdma_cm attaches a QP to a multicast group (the "mc-attach"
 * scenario of interop/rdmacm/scenarios): librdmacm attaches the id's QP when the application
 * retrieves RDMA_CM_EVENT_MULTICAST_JOIN (rdma_get_cm_event -> ucma_process_join), not when it
 * calls rdma_join_multicast, so a QP created between the two is attached. This program creates
 * its QP exactly there and then receives the group's datagrams on it without attaching anything
 * itself: it receives them only if the library attached the QP at the event's retrieval.
 *
 * Built by interop/rdmacm.sh against the host's <rdma/rdma_cma.h> and -lrdmacm, so it runs on
 * the guest's librdmacm (kernel CM) or on ibcm's (preloaded) unchanged.
 *
 *   mc_lab -b ADDR -m GROUP [-n N] [-t SECONDS]
 *
 * RDMA_PS_UDP id bound to ADDR; rdma_join_multicast(GROUP); then rdma_create_qp (UD, the id's
 * PD, CQs made by the library) and N receives posted; then rdma_get_cm_event: MULTICAST_JOIN
 * expected ("mc_lab: MULTICAST_JOIN retrieved after the QP was created"), acked; then
 * "mc_lab: receiving data transfers" and up to SECONDS (default 30) to receive N datagrams
 * (a sender: `mckey -m GROUP -s`, 10 messages); "mc_lab: received N messages"; then
 * rdma_leave_multicast ("mc_lab: left GROUP"), the QP, the id and the channel go. Exit
 * status 0 only when all of it held.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define GRH 40
#define MSG 512
#define MAXN 64

static char bufs[MAXN][GRH + MSG];

#define FAIL(...)                                                                  \
	do {                                                                       \
		fprintf(stderr, "mc_lab: " __VA_ARGS__);                           \
		fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));      \
		return 1;                                                          \
	} while (0)

static int addr_of(const char *host, struct sockaddr_storage *ss)
{
	struct addrinfo hints, *res;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	hints.ai_flags = AI_NUMERICHOST;
	if (getaddrinfo(host, NULL, &hints, &res))
		return -1;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const char *bind_host = NULL, *group_host = NULL;
	struct sockaddr_storage bind_addr, group;
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct ibv_qp_init_attr qa;
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int n = 10, secs = 30, got = 0, op, i;
	double end;

	while ((op = getopt(argc, argv, "b:m:n:t:")) != -1) {
		switch (op) {
		case 'b': bind_host = optarg; break;
		case 'm': group_host = optarg; break;
		case 'n': n = atoi(optarg); break;
		case 't': secs = atoi(optarg); break;
		default: goto usage;
		}
	}
	if (!bind_host || !group_host || n < 1 || n > MAXN || secs < 1)
		goto usage;
	if (addr_of(bind_host, &bind_addr) || addr_of(group_host, &group)) {
		fprintf(stderr, "mc_lab: -b and -m take IPv4 addresses\n");
		return 2;
	}

	ch = rdma_create_event_channel();
	if (!ch)
		FAIL("rdma_create_event_channel");
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_UDP))
		FAIL("rdma_create_id");
	if (rdma_bind_addr(id, (struct sockaddr *)&bind_addr))
		FAIL("rdma_bind_addr %s", bind_host);
	if (rdma_join_multicast(id, (struct sockaddr *)&group, NULL))
		FAIL("rdma_join_multicast %s", group_host);

	/* Between the join and the retrieval of its event: the QP and its receives. */
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_UD;
	qa.cap.max_send_wr = 1;
	qa.cap.max_recv_wr = n;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &qa))
		FAIL("rdma_create_qp");
	mr = rdma_reg_msgs(id, bufs, sizeof(bufs));
	if (!mr)
		FAIL("rdma_reg_msgs");
	for (i = 0; i < n; i++)
		if (rdma_post_recv(id, bufs[i], bufs[i], sizeof(bufs[i]), mr))
			FAIL("rdma_post_recv %d", i);

	if (rdma_get_cm_event(ch, &ev))
		FAIL("rdma_get_cm_event");
	if (ev->event != RDMA_CM_EVENT_MULTICAST_JOIN || ev->status) {
		fprintf(stderr, "mc_lab: %s (status %d), expected RDMA_CM_EVENT_MULTICAST_JOIN\n",
			rdma_event_str(ev->event), ev->status);
		return 1;
	}
	rdma_ack_cm_event(ev);
	printf("mc_lab: MULTICAST_JOIN retrieved after the QP was created\n");
	printf("mc_lab: receiving data transfers\n");
	fflush(stdout);

	end = now() + secs;
	while (got < n && now() < end) {
		int r = ibv_poll_cq(id->recv_cq, 1, &wc);

		if (r < 0)
			FAIL("ibv_poll_cq");
		if (r == 0) {
			usleep(1000);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "mc_lab: receive %d: %s\n", got, ibv_wc_status_str(wc.status));
			return 1;
		}
		got++;
	}
	printf("mc_lab: received %d messages\n", got);
	if (got < n) {
		fprintf(stderr, "mc_lab: %d of %d messages in %d s: the QP did not receive the group's "
			"datagrams (not attached?)\n", got, n, secs);
		return 1;
	}

	if (rdma_leave_multicast(id, (struct sockaddr *)&group))
		FAIL("rdma_leave_multicast");
	printf("mc_lab: left %s\n", group_host);
	rdma_dereg_mr(mr);
	rdma_destroy_qp(id);
	if (rdma_destroy_id(id))
		FAIL("rdma_destroy_id");
	rdma_destroy_event_channel(ch);
	printf("mc_lab: end 0\n");
	return 0;

usage:
	fprintf(stderr, "usage: mc_lab -b ADDR -m GROUP [-n N (1-%d)] [-t SECONDS]\n", MAXN);
	return 2;
}
