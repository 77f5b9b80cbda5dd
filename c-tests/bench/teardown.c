/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The disconnect step of rdma-core's cmtime (Debian 12's, rdma-core 44),
 * QP-less, on the host: a measurement of what a librdmacm does per
 * disconnect on each side, not a test (make bench-teardown).
 *
 *   usage: teardown <server-ip> <client-ip> [connections]   (default 1000)
 *          teardown server <server-ip> [connections]
 *          teardown client <server-ip> <client-ip> [connections]
 *
 * Built against rdma-core's <rdma/rdma_cma.h> and -lrdmacm; run on ibcm's
 * librdmacm.so.1 with IBCM_RDMACM_DEVICE=soft (two loopback addresses), in
 * process (IBCM_SERVICE=off) or through the host CM service. The first
 * form forks the server; `server` runs it alone (it prints "ready" once it
 * listens) and `client` the client, so that each can run under its own
 * profiler (c-tests/bench/teardown.sh). Both keep cmtime's threads:
 *
 *   server: an event thread (rdma_get_cm_event, hands each
 *           CONNECT_REQUEST to a request thread and each DISCONNECTED to
 *           a disconnect thread, acks) + the request thread (rdma_accept)
 *           + the disconnect thread (rdma_disconnect, rdma_destroy_qp,
 *           rdma_destroy_id: cmtime's disc_handler_thread);
 *   client: the main thread (connects N, then rdma_disconnect +
 *           rdma_destroy_qp for each, then sched_yield()s until N
 *           DISCONNECTED, as cmtime's run_client) + an event thread.
 *
 * The client then times cmtime's destroy step (rdma_destroy_id of every
 * disconnected id in turn: wall time, CPU and context switches per id;
 * with TEARDOWN_SERVICE_PID=PID also the context switches of every
 * thread of process PID, the host CM service, over the step).
 *
 * Printed per process: the disconnect step's wall time over N (the
 * client's: its first rdma_disconnect to its last DISCONNECTED, cmtime's
 * figure; the server's: its first DISCONNECTED to its last destroy), the
 * process's CPU time (user + system, all threads) and its context switches (voluntary / involuntary, getrusage)
 * over that step, per connection. TEARDOWN_GAP_US=G makes the client
 * sleep G µs after each disconnect (the pace of a slower client: in the
 * lab's guests cmtime's client spends milliseconds per connection in
 * rdma_disconnect + rdma_destroy_qp, so the server gets its DREQs one at
 * a time, not as one burst). Run both under `taskset -c 0` for the
 * single vCPU of the lab's guests. Each process calls getppid() once as
 * the step starts and once as it ends, so that a system-call trace
 * (`strace -f`) can be cut to the step.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#define PORT 7471

static int conns = 1000;
static struct rdma_event_channel *channel;

static void die(const char *what)
{
	fprintf(stderr, "teardown: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* A system call nothing else in the program makes, as a mark in a trace. */
static void mark(void)
{
	(void)syscall(SYS_getppid);
}

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((unsigned short)port);
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "teardown: not an IPv4 address: %s\n", ip);
		exit(2);
	}
	return a;
}

/* A queue of ids handed from the event thread to a work thread
 * (cmtime's work_list: a mutex, a condition variable, a list). */
struct work {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct rdma_cm_id **ids;
	int head, tail;
};

static void work_init(struct work *w)
{
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->ids = calloc((size_t)conns, sizeof(*w->ids));
	if (!w->ids)
		die("calloc");
	w->head = w->tail = 0;
}

static void work_put(struct work *w, struct rdma_cm_id *id)
{
	pthread_mutex_lock(&w->lock);
	if (w->tail >= conns) {
		fprintf(stderr, "teardown: more work than connections\n");
		exit(1);
	}
	w->ids[w->tail++] = id;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static struct rdma_cm_id *work_get(struct work *w)
{
	struct rdma_cm_id *id;

	pthread_mutex_lock(&w->lock);
	while (w->head == w->tail)
		pthread_cond_wait(&w->cond, &w->lock);
	id = w->ids[w->head++];
	pthread_mutex_unlock(&w->lock);
	return id;
}

/* Context switches (voluntary + involuntary) of every thread of process
 * `pid` so far, from /proc/PID/task/TID/status; -1 when unreadable. */
static long ctx_switches_of(const char *pid)
{
	char path[320], line[128];
	struct dirent *d;
	long total = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%s/task", pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((d = readdir(dir))) {
		FILE *f;
		long v;

		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/task/%s/status", pid, d->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
			    sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
				total += v;
		fclose(f);
	}
	closedir(dir);
	return total;
}

static double tv_us(const struct timeval *t)
{
	return (double)t->tv_sec * 1e6 + (double)t->tv_usec;
}

static void show(const char *who, double t0, double t1, struct rusage *r0,
		 struct rusage *r1)
{
	double cpu = tv_us(&r1->ru_utime) + tv_us(&r1->ru_stime) - tv_us(&r0->ru_utime) -
		     tv_us(&r0->ru_stime);

	printf("%s: disconnect %.1f us/conn, CPU %.1f us/conn, context switches %.2f voluntary + %.2f involuntary per conn (%d conns)\n",
	       who, (t1 - t0) / conns, cpu / conns, (double)(r1->ru_nvcsw - r0->ru_nvcsw) / conns,
	       (double)(r1->ru_nivcsw - r0->ru_nivcsw) / conns, conns);
	fflush(stdout);
}

/* ---- server ---- */

static struct work req_work, disc_work;
static atomic_int disc_seen, disc_done;
static double srv_t0;
static struct rusage srv_r0;

static void *req_thread(void *arg)
{
	struct rdma_conn_param p;

	(void)arg;
	memset(&p, 0, sizeof(p));
	p.responder_resources = 1;
	p.initiator_depth = 1;
	for (int i = 0; i < conns; i++) {
		struct rdma_cm_id *id = work_get(&req_work);

		/* No QP: a distinct QP number per connection, or the peer
		 * takes the second for a stale one (REJ reason 10). */
		p.qp_num = (uint32_t)(0x1000 + i);
		if (rdma_accept(id, &p))
			die("rdma_accept");
	}
	return NULL;
}

static void *disc_thread(void *arg)
{
	(void)arg;
	for (int i = 0; i < conns; i++) {
		struct rdma_cm_id *id = work_get(&disc_work);

		rdma_disconnect(id);
		rdma_destroy_qp(id);
		if (rdma_destroy_id(id))
			die("rdma_destroy_id");
		atomic_fetch_add(&disc_done, 1);
	}
	return NULL;
}

/* Listens, tells `ready_fd` (one byte; "ready\n" when it is stdout), serves
 * N connections to their teardown. */
static int server(const char *ip, int ready_fd)
{
	struct sockaddr_in a = addr_of(ip, PORT);
	struct rdma_cm_id *listen_id;
	pthread_t rt, dt;
	struct rusage r1;
	char c = 1;

	channel = rdma_create_event_channel();
	if (!channel)
		die("rdma_create_event_channel");
	if (rdma_create_id(channel, &listen_id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(listen_id, (struct sockaddr *)&a))
		die("rdma_bind_addr");
	if (rdma_listen(listen_id, 1024))
		die("rdma_listen");
	work_init(&req_work);
	work_init(&disc_work);
	if (pthread_create(&rt, NULL, req_thread, NULL) ||
	    pthread_create(&dt, NULL, disc_thread, NULL))
		die("pthread_create");
	if (ready_fd == STDOUT_FILENO) {
		printf("ready\n");
		fflush(stdout);
	} else {
		if (write(ready_fd, &c, 1) != 1)
			die("write");
		close(ready_fd);
	}
	/* The event thread. */
	while (atomic_load(&disc_seen) < conns) {
		struct rdma_cm_event *ev;

		if (rdma_get_cm_event(channel, &ev))
			die("rdma_get_cm_event");
		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			work_put(&req_work, ev->id);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			if (atomic_fetch_add(&disc_seen, 1) == 0) {
				mark();
				getrusage(RUSAGE_SELF, &srv_r0);
				srv_t0 = now_us();
			}
			work_put(&disc_work, ev->id);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			break;
		default:
			fprintf(stderr, "teardown: server: unexpected event %s (status %d)\n",
				rdma_event_str(ev->event), ev->status);
			exit(1);
		}
		rdma_ack_cm_event(ev);
	}
	pthread_join(dt, NULL);
	getrusage(RUSAGE_SELF, &r1);
	mark();
	show("server", srv_t0, now_us(), &srv_r0, &r1);
	pthread_join(rt, NULL);
	rdma_destroy_id(listen_id);
	rdma_destroy_event_channel(channel);
	return 0;
}

/* ---- client ---- */

static atomic_int established, disconnected, next_qpn = 0x1000;

static void *client_events(void *arg)
{
	(void)arg;
	for (;;) {
		struct rdma_cm_event *ev;
		struct rdma_conn_param p;

		if (rdma_get_cm_event(channel, &ev))
			die("rdma_get_cm_event");
		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (rdma_resolve_route(ev->id, 2000))
				die("rdma_resolve_route");
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			memset(&p, 0, sizeof(p));
			p.responder_resources = 1;
			p.initiator_depth = 1;
			p.retry_count = 2;
			p.qp_num = (uint32_t)atomic_fetch_add(&next_qpn, 1);
			if (rdma_connect(ev->id, &p))
				die("rdma_connect");
			break;
		case RDMA_CM_EVENT_CONNECT_RESPONSE:
			/* QP-less: the application sends the RTU. */
			if (rdma_establish(ev->id))
				die("rdma_establish");
			atomic_fetch_add(&established, 1);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			atomic_fetch_add(&established, 1);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			atomic_fetch_add(&disconnected, 1);
			break;
		case RDMA_CM_EVENT_TIMEWAIT_EXIT:
			break;
		default:
			fprintf(stderr, "teardown: client: unexpected event %s (status %d)\n",
				rdma_event_str(ev->event), ev->status);
			exit(1);
		}
		rdma_ack_cm_event(ev);
	}
	return NULL;
}

static int client(const char *sip, const char *cip)
{
	struct sockaddr_in s = addr_of(sip, PORT), c = addr_of(cip, 0);
	struct rdma_cm_id **ids = calloc((size_t)conns, sizeof(*ids));
	struct rusage r0, r1;
	pthread_t et;
	double t0, t1, tc;
	int gap_us = 0;
	const char *svc;
	long svc0, svc1;

	if (!ids)
		die("calloc");
	if (getenv("TEARDOWN_GAP_US"))
		gap_us = atoi(getenv("TEARDOWN_GAP_US"));
	channel = rdma_create_event_channel();
	if (!channel)
		die("rdma_create_event_channel");
	if (pthread_create(&et, NULL, client_events, NULL))
		die("pthread_create");
	tc = now_us();
	for (int i = 0; i < conns; i++) {
		if (rdma_create_id(channel, &ids[i], NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_resolve_addr(ids[i], (struct sockaddr *)&c, (struct sockaddr *)&s, 2000))
			die("rdma_resolve_addr");
	}
	while (atomic_load(&established) < conns)
		sched_yield();
	printf("client: connect %.1f us/conn\n", (now_us() - tc) / conns);
	/* cmtime's disconnect step. */
	mark();
	getrusage(RUSAGE_SELF, &r0);
	t0 = now_us();
	for (int i = 0; i < conns; i++) {
		rdma_disconnect(ids[i]);
		rdma_destroy_qp(ids[i]);
		if (gap_us)
			usleep((useconds_t)gap_us);
	}
	while (atomic_load(&disconnected) < conns)
		sched_yield();
	t1 = now_us();
	getrusage(RUSAGE_SELF, &r1);
	mark();
	show("client", t0, t1, &r0, &r1);
	/* cmtime's destroy step: every id disconnected, destroyed in turn. */
	svc = getenv("TEARDOWN_SERVICE_PID");
	svc0 = svc ? ctx_switches_of(svc) : -1;
	getrusage(RUSAGE_SELF, &r0);
	t0 = now_us();
	for (int i = 0; i < conns; i++)
		if (rdma_destroy_id(ids[i]))
			die("rdma_destroy_id");
	t1 = now_us();
	getrusage(RUSAGE_SELF, &r1);
	svc1 = svc ? ctx_switches_of(svc) : -1;
	printf("client: destroy %.1f us/conn, CPU %.1f us/conn, %.2f context switches/conn",
	       (t1 - t0) / conns,
	       (tv_us(&r1.ru_utime) + tv_us(&r1.ru_stime) - tv_us(&r0.ru_utime) -
		tv_us(&r0.ru_stime)) / conns,
	       (double)(r1.ru_nvcsw + r1.ru_nivcsw - r0.ru_nvcsw - r0.ru_nivcsw) / conns);
	if (svc0 >= 0 && svc1 >= 0)
		printf(" (the service's: %.2f)", (double)(svc1 - svc0) / conns);
	printf("\n");
	return 0;
}

static int count_arg(const char *a)
{
	int n = atoi(a);

	if (n < 1 || n > 100000) {
		fprintf(stderr, "teardown: connections: 1 to 100000\n");
		exit(2);
	}
	return n;
}

static int usage(void)
{
	fprintf(stderr, "usage: teardown <server-ip> <client-ip> [connections]\n"
			"       teardown server <server-ip> [connections]\n"
			"       teardown client <server-ip> <client-ip> [connections]\n");
	return 2;
}

int main(int argc, char **argv)
{
	int ready[2], status;
	pid_t pid;
	char c;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "server")) {
		if (argc < 3 || argc > 4)
			return usage();
		if (argc == 4)
			conns = count_arg(argv[3]);
		return server(argv[2], STDOUT_FILENO);
	}
	if (argc >= 2 && !strcmp(argv[1], "client")) {
		if (argc < 4 || argc > 5)
			return usage();
		if (argc == 5)
			conns = count_arg(argv[4]);
		return client(argv[2], argv[3]);
	}
	if (argc < 3 || argc > 4)
		return usage();
	if (argc == 4)
		conns = count_arg(argv[3]);
	if (pipe(ready))
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(ready[0]);
		_exit(server(argv[1], ready[1]));
	}
	close(ready[1]);
	if (read(ready[0], &c, 1) != 1) {
		fprintf(stderr, "teardown: the server did not start\n");
		return 1;
	}
	client(argv[1], argv[2]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "teardown: the server failed\n");
		return 1;
	}
	return 0;
}
