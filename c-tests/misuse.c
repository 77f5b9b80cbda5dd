/*
 * misuse.c - the C API misused on purpose: every entry point with NULL,
 * freed, foreign (not from the library) and wrong-state ids, lengths over
 * the limits, destroy from inside a callback, and many threads destroying
 * ids while their events are being delivered. Every call must return a
 * clear negative errno (or be a logged no-op for the void functions) and
 * nothing may crash, leak or race (run plain, under ASan/UBSan and TSan).
 *
 *   misuse SERVER_IP CLIENT_IP
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <rdma/ib_cm.h>
#include <ibcm.h>

#define SVC 0x0000000001062000ULL

static atomic_int failures, checks;
#define CHECK(cond, ...)                                                   \
	do {                                                               \
		checks++;                                                  \
		if (!(cond)) {                                             \
			failures++;                                        \
			fprintf(stderr, "misuse: FAIL %s:%d: ", __FILE__,   \
				__LINE__);                                 \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, "\n");                             \
		}                                                          \
	} while (0)

static struct ib_device *sdev, *cdev;
static union ib_gid server_gid;

static void msleep(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static int nop_handler(struct ib_cm_id *id, const struct ib_cm_event *ev)
{
	(void)id;
	(void)ev;
	return 0;
}

/* Every id-taking entry point on one bad pointer: all must say -EINVAL. */
static void all_calls_fail(struct ib_cm_id *id, const char *what)
{
	struct ib_cm_req_param req;
	struct ib_cm_rep_param rep;
	struct ib_cm_sidr_req_param sreq;
	struct ib_cm_sidr_rep_param srep;
	struct ib_qp_attr qa;
	int mask = 0;

	memset(&req, 0, sizeof(req));
	memset(&rep, 0, sizeof(rep));
	memset(&sreq, 0, sizeof(sreq));
	memset(&srep, 0, sizeof(srep));
	memset(&qa, 0, sizeof(qa));
	CHECK(ib_cm_listen(id, cpu_to_be64(SVC)) == -EINVAL, "%s: listen", what);
	CHECK(ib_send_cm_req(id, &req) == -EINVAL, "%s: REQ", what);
	CHECK(ib_send_cm_rep(id, &rep) == -EINVAL, "%s: REP", what);
	CHECK(ib_send_cm_rtu(id, NULL, 0) == -EINVAL, "%s: RTU", what);
	CHECK(ib_send_cm_dreq(id, NULL, 0) == -EINVAL, "%s: DREQ", what);
	CHECK(ib_send_cm_drep(id, NULL, 0) == -EINVAL, "%s: DREP", what);
	CHECK(ib_cm_notify(id, IB_EVENT_COMM_EST) == -EINVAL, "%s: notify", what);
	CHECK(ib_send_cm_rej(id, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0) == -EINVAL,
	      "%s: REJ", what);
	CHECK(ib_prepare_cm_mra(id) == -EINVAL, "%s: MRA", what);
	qa.qp_state = IB_QPS_INIT;
	CHECK(ib_cm_init_qp_attr(id, &qa, &mask) == -EINVAL, "%s: init_qp_attr", what);
	CHECK(ib_send_cm_sidr_req(id, &sreq) == -EINVAL, "%s: SIDR_REQ", what);
	CHECK(ib_send_cm_sidr_rep(id, &srep) == -EINVAL, "%s: SIDR_REP", what);
	ib_destroy_cm_id(id); /* logged, no effect */
}

static void null_and_foreign(void)
{
	struct ibcm_counters c;
	struct sa_path_rec path;
	union ib_gid gid;
	struct ib_cm_id *id;
	struct ib_cm_id stack_id;
	struct ib_cm_id *heap_id = calloc(1, sizeof(*heap_id) + 64);

	all_calls_fail(NULL, "NULL");
	memset(&stack_id, 0, sizeof(stack_id));
	stack_id.device = cdev;
	all_calls_fail(&stack_id, "stack id");
	memset(heap_id, 0xa5, sizeof(*heap_id) + 64);
	all_calls_fail(heap_id, "garbage heap id");
	free(heap_id);
	all_calls_fail((struct ib_cm_id *)(uintptr_t)0x1000, "wild pointer");

	/* Freed ids. */
	id = ib_create_cm_id(cdev, nop_handler, NULL);
	CHECK(!IS_ERR(id), "create");
	ib_destroy_cm_id(id);
	all_calls_fail(id, "freed id");

	/* Devices. */
	id = ib_create_cm_id(NULL, nop_handler, NULL);
	CHECK(IS_ERR(id) && PTR_ERR(id) == -EINVAL, "create on NULL device");
	id = ib_create_cm_id((struct ib_device *)&stack_id, nop_handler, NULL);
	CHECK(IS_ERR(id) && PTR_ERR(id) == -EINVAL, "create on foreign device");
	id = ib_cm_insert_listen(NULL, nop_handler, cpu_to_be64(SVC));
	CHECK(IS_ERR(id), "insert_listen on NULL device");
	CHECK(ibcm_get_counters(NULL, &c, sizeof(c)) == -EINVAL, "counters NULL device");
	CHECK(ibcm_get_counters(cdev, NULL, sizeof(c)) == -EINVAL, "counters NULL out");
	CHECK(ibcm_get_counters((struct ib_device *)&stack_id, &c, sizeof(c)) == -EINVAL,
	      "counters foreign device");
	CHECK(ibcm_get_counters(cdev, &c, 8) == 8, "counters, short size");
	CHECK(ibcm_init_path(NULL, 1, &server_gid, &path) == -EINVAL, "init_path NULL dev");
	CHECK(ibcm_init_path(cdev, 1, NULL, &path) == -EINVAL, "init_path NULL gid");
	CHECK(ibcm_init_path(cdev, 1, &server_gid, NULL) == -EINVAL, "init_path NULL out");
	CHECK(ibcm_init_path(cdev, 99, &server_gid, &path) < 0, "init_path bad port");
	CHECK(ibcm_query_gid(NULL, 1, 0, &gid) < 0, "query_gid NULL dev");
	CHECK(ibcm_query_gid(cdev, 1, 0, NULL) < 0, "query_gid NULL out");
	CHECK(ibcm_query_gid(cdev, 1, 100000, &gid) < 0, "query_gid bad index");
	CHECK(ibcm_query_gid(cdev, 1, -1, &gid) < 0, "query_gid negative index");
	CHECK(ibcm_gid_from_string(NULL, &gid) == -EINVAL, "gid_from_string NULL");
	CHECK(ibcm_gid_from_string("127.0.0.1", NULL) == -EINVAL, "gid_from_string NULL out");
	CHECK(ibcm_gid_from_string("not an address", &gid) == -EINVAL, "gid_from_string junk");
	CHECK(ibcm_reject_msg(-1) != NULL && ibcm_reject_msg(1 << 30) != NULL, "reject_msg range");
	CHECK(!IS_ERR_OR_NULL(ibcm_open_device("bogus:1")) == 0, "open bogus device");
	CHECK(IS_ERR(ibcm_open_device("soft:300.1.1.1")), "open bad address");
	ibcm_close_device(NULL);                               /* no-op */
	ibcm_close_device((struct ib_device *)&stack_id);       /* no-op */
}

static void wrong_state_and_limits(void)
{
	struct ib_cm_id *id = ib_create_cm_id(cdev, nop_handler, NULL);
	struct ib_cm_rep_param rep;
	struct ib_cm_req_param req;
	struct ib_cm_sidr_rep_param srep;
	struct sa_path_rec path;
	struct ib_qp_attr qa;
	u8 big[512];
	int mask;

	CHECK(!IS_ERR(id), "create");
	memset(big, 7, sizeof(big));
	memset(&rep, 0, sizeof(rep));
	memset(&srep, 0, sizeof(srep));
	memset(&qa, 0, sizeof(qa));
	/* IDLE: nothing but listen/REQ/SIDR_REQ makes sense. */
	CHECK(ib_send_cm_rep(id, &rep) == -EINVAL, "REP on IDLE");
	CHECK(ib_send_cm_rtu(id, NULL, 0) == -EINVAL, "RTU on IDLE");
	CHECK(ib_send_cm_dreq(id, NULL, 0) == -EINVAL, "DREQ on IDLE");
	CHECK(ib_send_cm_drep(id, NULL, 0) == -EINVAL, "DREP on IDLE");
	CHECK(ib_prepare_cm_mra(id) == -EINVAL, "MRA on IDLE");
	CHECK(ib_send_cm_sidr_rep(id, &srep) == -EINVAL, "SIDR_REP on IDLE");
	CHECK(ib_cm_notify(id, IB_EVENT_COMM_EST) == -EINVAL, "notify on IDLE");
	qa.qp_state = IB_QPS_RTR;
	CHECK(ib_cm_init_qp_attr(id, &qa, &mask) == -EINVAL, "init_qp_attr on IDLE");
	CHECK(ib_cm_init_qp_attr(id, NULL, &mask) == -EINVAL, "init_qp_attr NULL attr");
	CHECK(ib_send_cm_req(id, NULL) == -EINVAL, "REQ NULL param");
	/* Lengths over the limits are refused before anything is read. */
	CHECK(ib_send_cm_rtu(id, big, IB_CM_RTU_PRIVATE_DATA_SIZE + 1) == -EINVAL, "RTU len");
	CHECK(ib_send_cm_dreq(id, big, IB_CM_DREQ_PRIVATE_DATA_SIZE + 1) == -EINVAL, "DREQ len");
	CHECK(ib_send_cm_drep(id, big, IB_CM_DREP_PRIVATE_DATA_SIZE + 1) == -EINVAL, "DREP len");
	CHECK(ib_send_cm_rej(id, IB_CM_REJ_CONSUMER_DEFINED, big, IB_CM_REJ_ARI_LENGTH + 1,
			     NULL, 0) == -EINVAL, "REJ ARI len");
	CHECK(ib_send_cm_rej(id, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, big,
			     IB_CM_REJ_PRIVATE_DATA_SIZE + 1) == -EINVAL, "REJ pdata len");
	CHECK(ib_send_cm_rtu(id, NULL, 10) == -EINVAL, "RTU NULL data with a length");
	/* A REQ with too much private data, then with no path. */
	CHECK(ibcm_init_path(cdev, 1, &server_gid, &path) == 0, "init path");
	memset(&req, 0, sizeof(req));
	req.primary_path = &path;
	req.service_id = cpu_to_be64(SVC);
	req.qp_num = 0x99;
	req.qp_type = IB_QPT_RC;
	req.private_data = big;
	req.private_data_len = IB_CM_REQ_PRIVATE_DATA_SIZE + 1;
	req.remote_cm_response_timeout = 12;
	req.local_cm_response_timeout = 12;
	req.max_cm_retries = 2;
	CHECK(ib_send_cm_req(id, &req) == -EINVAL, "REQ pdata len");
	req.private_data_len = 255;
	CHECK(ib_send_cm_req(id, &req) == -EINVAL, "REQ pdata len 255");
	req.private_data_len = 0;
	req.primary_path = NULL;
	CHECK(ib_send_cm_req(id, &req) == -EINVAL, "REQ without path");
	/* Listening twice, or listening then connecting. */
	CHECK(ib_cm_listen(id, cpu_to_be64(SVC + 1)) == 0, "listen");
	CHECK(ib_cm_listen(id, cpu_to_be64(SVC + 2)) == -EINVAL, "listen twice");
	req.primary_path = &path;
	CHECK(ib_send_cm_req(id, &req) == -EINVAL, "REQ on a listener");
	ib_destroy_cm_id(id);
	/* The same service twice on one device. */
	id = ib_create_cm_id(cdev, nop_handler, NULL);
	CHECK(ib_cm_listen(id, cpu_to_be64(SVC + 3)) == 0, "listen");
	{
		struct ib_cm_id *id2 = ib_create_cm_id(cdev, nop_handler, NULL);
		CHECK(ib_cm_listen(id2, cpu_to_be64(SVC + 3)) == -EBUSY, "listen on a taken service");
		ib_destroy_cm_id(id2);
	}
	ib_destroy_cm_id(id);
}

/* ---- destroy from inside a callback, and the server for the threads ---- */

static atomic_int in_cb_destroys, req_events, server_reps;

static struct ib_cm_id *the_listener;
static atomic_int listener_events;

static int server_handler(struct ib_cm_id *id, const struct ib_cm_event *ev)
{
	struct ib_cm_rep_param rep;

	if (id == the_listener) {
		/* A listener gets no events of its own (its REQs create ids). */
		atomic_fetch_add(&listener_events, 1);
		fprintf(stderr, "misuse: FAIL: event %d delivered to the listener\n", ev->event);
		return 0;
	}

	switch (ev->event) {
	case IB_CM_REQ_RECEIVED:
		atomic_fetch_add(&req_events, 1);
		if (ev->private_data && ((const u8 *)ev->private_data)[0] == 0xdd) {
			/* Destroying our own id here is refused (it would
			 * deadlock in the kernel); returning non-zero does it. */
			ib_destroy_cm_id(id);
			atomic_fetch_add(&in_cb_destroys, 1);
			return -ECONNREFUSED;
		}
		memset(&rep, 0, sizeof(rep));
		rep.qp_num = 0x200 + (u32)atomic_fetch_add(&server_reps, 1);
		rep.starting_psn = 1;
		rep.responder_resources = 1;
		rep.initiator_depth = 1;
		rep.rnr_retry_count = 7;
		return ib_send_cm_rep(id, &rep) ? 1 : 0;
	case IB_CM_DREQ_RECEIVED:
		ib_send_cm_drep(id, NULL, 0);
		return 0;
	case IB_CM_TIMEWAIT_EXIT:
	case IB_CM_REP_ERROR:
	case IB_CM_REJ_RECEIVED:
		return 1;
	default:
		return 0;
	}
}

static atomic_int client_events, rejects_seen;

static int client_handler(struct ib_cm_id *id, const struct ib_cm_event *ev)
{
	atomic_fetch_add(&client_events, 1);
	switch (ev->event) {
	case IB_CM_REP_RECEIVED:
		ib_send_cm_rtu(id, NULL, 0);
		break;
	case IB_CM_REJ_RECEIVED:
		atomic_fetch_add(&rejects_seen, 1);
		break;
	case IB_CM_DREQ_RECEIVED:
		ib_send_cm_drep(id, NULL, 0);
		break;
	default:
		break;
	}
	return 0;
}

static struct ib_cm_id *connect_once(u8 first_byte, u32 qpn)
{
	struct ib_cm_req_param req;
	struct sa_path_rec path;
	u8 pd[8] = { first_byte };
	struct ib_cm_id *id = ib_create_cm_id(cdev, client_handler, NULL);
	int err;

	if (IS_ERR(id))
		return id;
	err = ibcm_init_path(cdev, 1, &server_gid, &path);
	CHECK(err == 0, "init path for the REQ: %d", err);
	if (err) {
		ib_destroy_cm_id(id);
		return ERR_PTR(err);
	}
	memset(&req, 0, sizeof(req));
	req.primary_path = &path;
	req.service_id = cpu_to_be64(SVC);
	req.qp_num = qpn;
	req.qp_type = IB_QPT_RC;
	req.starting_psn = 1;
	req.private_data = pd;
	req.private_data_len = sizeof(pd);
	req.responder_resources = 1;
	req.initiator_depth = 1;
	req.remote_cm_response_timeout = 14;
	req.local_cm_response_timeout = 14;
	req.retry_count = 7;
	req.rnr_retry_count = 7;
	req.max_cm_retries = 3;
	CHECK(ib_send_cm_req(id, &req) == 0, "REQ");
	return id;
}

static void destroy_in_callback(struct ib_cm_id *listener)
{
	struct ib_cm_id *id;
	int i;

	(void)listener;
	for (i = 0; i < 5; i++) {
		id = connect_once(0xdd, 0x300 + (u32)i);
		CHECK(!IS_ERR(id), "create");
		if (IS_ERR(id))
			continue;
		for (int t = 0; t < 300 && atomic_load(&in_cb_destroys) <= i; t++)
			msleep(10);
		ib_destroy_cm_id(id);
	}
	CHECK(atomic_load(&in_cb_destroys) >= 5, "REQ callbacks that tried to destroy: %d",
	      atomic_load(&in_cb_destroys));
}

/* ---- many threads destroying ids while events are delivered ---- */

#define THREADS 8
#define PER_THREAD 150

static void *racer(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	for (int i = 0; i < PER_THREAD; i++) {
		struct ib_cm_id *id = connect_once(0, 0x1000 + (u32)((uintptr_t)arg * 1000 + (u32)i));
		CHECK(!IS_ERR(id), "create");
		if (IS_ERR(id))
			continue;
		/* Destroy at a random moment: before the REP, while it is
		 * delivered, after the RTU, or after a DREQ. */
		int r = (int)(rand_r(&seed) % 5);
		if (r == 1)
			sched_yield();
		else if (r == 2)
			msleep(1);
		else if (r >= 3) {
			msleep(2 + (int)(rand_r(&seed) % 5));
			if (r == 4)
				ib_send_cm_dreq(id, NULL, 0);
		}
		ib_destroy_cm_id(id);
		/* And every call on it afterwards is refused. */
		CHECK(ib_send_cm_dreq(id, NULL, 0) == -EINVAL, "DREQ after destroy");
	}
	return NULL;
}

static void concurrent_destroy(void)
{
	pthread_t t[THREADS];
	for (uintptr_t i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, racer, (void *)(i + 1));
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
}

/*
 * The capture calls: bad paths, double start/stop, then a capture left
 * running for the whole test (every MAD of the misuse scenarios, under
 * the sanitizers), stopped and checked at the end.
 */
static char pcap_path[64];

static void pcap_errors_and_start(void)
{
	CHECK(ibcm_pcap_stop() == -ENOENT, "pcap_stop without a capture");
	CHECK(ibcm_pcap_start(NULL, 0) == -EINVAL, "pcap_start NULL path");
	CHECK(ibcm_pcap_start("", 0) == -EINVAL, "pcap_start empty path");
	CHECK(ibcm_pcap_start("/nonexistent-dir/x.pcapng", 0) == -ENOENT,
	      "pcap_start unopenable path");
	snprintf(pcap_path, sizeof(pcap_path), "/tmp/ibcm-misuse-%ld.pcapng", (long)getpid());
	CHECK(ibcm_pcap_start(pcap_path, 0) == 0, "pcap_start");
	CHECK(ibcm_pcap_start(pcap_path, 0) == -EBUSY, "pcap_start twice");
}

/*
 * A child made by fork() while the capture runs (the writer thread and
 * the event loops exist only in the parent) must leave the parent's
 * capture alone: no capture of its own to stop, and exit() must neither
 * hang (joining a thread it does not have) nor write to the file.
 */
static void pcap_fork(void)
{
	int status = 0, fds[2];
	char verdict = 0;
	pid_t pid;

	if (pipe(fds) != 0) {
		CHECK(0, "pipe");
		return;
	}
	pid = fork();
	if (pid == 0) {
		char v = ibcm_pcap_stop() == -ENOENT ? 'y' : 'n';

		alarm(20); /* a hang in exit() ends as SIGALRM */
		if (write(fds[1], &v, 1) != 1)
			_exit(4);
#ifdef __SANITIZE_ADDRESS__
		/* LeakSanitizer would report the parent's threads' memory
		 * at the exit of a forked child: skip the exit handlers. */
		_exit(0);
#else
		exit(0);
#endif
	}
	close(fds[1]);
	CHECK(pid > 0, "fork");
	if (pid > 0) {
		CHECK(read(fds[0], &verdict, 1) == 1 && verdict == 'y',
		      "forked child: ibcm_pcap_stop() must be -ENOENT (got '%c')", verdict);
		CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
		CHECK(WIFEXITED(status), "forked child with a capture running: status %#x",
		      status);
	}
	close(fds[0]);
}

static void pcap_stop_and_check(void)
{
	FILE *f;
	long size = -1;

	pcap_fork();
	CHECK(ibcm_pcap_stop() == 0, "pcap_stop");
	CHECK(ibcm_pcap_stop() == -ENOENT, "pcap_stop twice");
	f = fopen(pcap_path, "rb");
	if (f) {
		fseek(f, 0, SEEK_END);
		size = ftell(f);
		fclose(f);
	}
	/* Section header, two interfaces and many 300-odd-byte records. */
	CHECK(size > 10000, "capture file %s: %ld bytes", pcap_path, size);
	unlink(pcap_path);
}

static struct ibcm_counters counters(struct ib_device *d)
{
	struct ibcm_counters c;
	memset(&c, 0, sizeof(c));
	ibcm_get_counters(d, &c, sizeof(c));
	return c;
}

int main(int argc, char **argv)
{
	char sname[64], cname[64];
	struct ib_cm_id *listener;
	struct ibcm_counters sc, cc;
	int t;

	if (argc != 3) {
		fprintf(stderr, "usage: misuse SERVER_IP CLIENT_IP\n");
		return 2;
	}
	snprintf(sname, sizeof(sname), "soft:%s", argv[1]);
	snprintf(cname, sizeof(cname), "soft:%s", argv[2]);
	pcap_errors_and_start();
	sdev = ibcm_open_device(sname);
	cdev = ibcm_open_device(cname);
	if (IS_ERR(sdev) || IS_ERR(cdev)) {
		fprintf(stderr, "misuse: cannot open devices\n");
		return 1;
	}
	CHECK(ibcm_gid_from_string(argv[1], &server_gid) == 0, "gid");

	null_and_foreign();
	wrong_state_and_limits();

	listener = ib_create_cm_id(sdev, server_handler, NULL);
	CHECK(!IS_ERR(listener) && ib_cm_listen(listener, cpu_to_be64(SVC)) == 0, "listen");
	the_listener = listener;
	destroy_in_callback(listener);
	concurrent_destroy();

	/* Everything ends: no id and no timer left on either device. */
	for (t = 0; t < 1000; t++) {
		sc = counters(sdev);
		cc = counters(cdev);
		if (sc.live_ids == 1 && cc.live_ids == 0 && cc.pending_timers == 0 &&
		    sc.pending_timers == 0)
			break;
		msleep(10);
	}
	CHECK(sc.live_ids == 1 && cc.live_ids == 0, "live ids: server %llu client %llu",
	      (unsigned long long)sc.live_ids, (unsigned long long)cc.live_ids);
	CHECK(sc.pending_timers == 0 && cc.pending_timers == 0, "timers: %llu %llu",
	      (unsigned long long)sc.pending_timers, (unsigned long long)cc.pending_timers);
	CHECK(atomic_load(&listener_events) == 0, "events delivered to the listener: %d",
	      atomic_load(&listener_events));
	ib_destroy_cm_id(listener);
	ib_destroy_cm_id(listener); /* twice: logged no-op */
	ibcm_close_device(cdev);
	ibcm_close_device(sdev);
	pcap_stop_and_check();
	printf("misuse: %d REQ events, %d client events, %d destroys refused in callbacks\n",
	       atomic_load(&req_events), atomic_load(&client_events),
	       atomic_load(&in_cb_destroys));
	printf("misuse: %d passed, %d failed\n", atomic_load(&checks) - atomic_load(&failures), atomic_load(&failures));
	return failures ? 1 : 0;
}
