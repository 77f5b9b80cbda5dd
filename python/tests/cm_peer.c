/*
 * cm_peer: a C peer for the Python tests, driven line by line on stdin and
 * reporting on stdout, using only <rdma/ib_cm.h> and <ibcm.h>.
 *
 *   cm_peer soft:<ip>
 *
 * Ids are numbered from 1 in creation order (including the new ids of
 * incoming REQ / SIDR_REQ).  Data arguments are hex, "-" for none.
 * Commands, each answered by "OK [value]" or "ERR <negative errno>":
 *
 *   listen SVC                              -> OK id
 *   connect IP SVC PDATA LIFETIME RETRIES QPN PSN -> OK id  (REQ sent)
 *   rep ID PDATA QPN PSN
 *   rtu|dreq|drep ID PDATA
 *   rej ID REASON ARI PDATA
 *   mra ID
 *   notify ID EVENT
 *   sidr IP SVC PDATA                       -> OK id  (SIDR_REQ sent)
 *   sidrrep ID STATUS QPN QKEY INFO PDATA
 *   state ID                                -> OK state
 *   destroy ID
 *   quit
 *
 * Events, written as they arrive (pdata = the full fixed-size area):
 *   EV id NAME key=value ...
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/ib_cm.h>
#include <ibcm.h>

#define MAXID 512

static struct ib_device *dev;
static struct ib_cm_id *ids[MAXID + 1];
static int nids;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static const char *const names[] = {
	"REQ_ERROR", "REQ_RECEIVED", "REP_ERROR", "REP_RECEIVED", "RTU_RECEIVED",
	"USER_ESTABLISHED", "DREQ_ERROR", "DREQ_RECEIVED", "DREP_RECEIVED",
	"TIMEWAIT_EXIT", "MRA_RECEIVED", "REJ_RECEIVED", "LAP_ERROR", "LAP_RECEIVED",
	"APR_RECEIVED", "SIDR_REQ_ERROR", "SIDR_REQ_RECEIVED", "SIDR_REP_RECEIVED",
};

/* callers hold mu */
static int index_of(const struct ib_cm_id *id)
{
	for (int i = 1; i <= nids; i++)
		if (ids[i] == id)
			return i;
	return 0;
}

static int add_id(struct ib_cm_id *id)
{
	if (nids >= MAXID)
		return 0;
	ids[++nids] = id;
	return nids;
}

static void put_hex(const void *p, size_t n)
{
	const unsigned char *b = p;
	if (!p || !n) {
		fputc('-', stdout);
		return;
	}
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

/* hex text -> bytes; "-" -> none.  Returns the length or -1. */
static int get_hex(const char *s, unsigned char *out, size_t max)
{
	size_t n = strlen(s);
	if (strcmp(s, "-") == 0)
		return 0;
	if (n % 2 || n / 2 > max)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (unsigned char)v;
	}
	return (int)(n / 2);
}

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

static int handler(struct ib_cm_id *id, const struct ib_cm_event *e)
{
	int n;
	pthread_mutex_lock(&mu);
	if (e->event == IB_CM_REQ_RECEIVED || e->event == IB_CM_SIDR_REQ_RECEIVED)
		n = add_id(id);
	else
		n = index_of(id);
	printf("EV %d %s", n, e->event < sizeof(names) / sizeof(names[0]) ? names[e->event] : "?");
	switch (e->event) {
	case IB_CM_REQ_RECEIVED: {
		const struct ib_cm_req_event_param *r = &e->param.req_rcvd;
		printf(" listen=%d svc=%llx qpn=%x psn=%x rres=%u idepth=%u lcrt=%u rcrt=%u retry=%u rnr=%u state=%d",
		       index_of(r->listen_id), (unsigned long long)be64_to_cpu(id->service_id),
		       r->remote_qpn, r->starting_psn, r->responder_resources, r->initiator_depth,
		       r->local_cm_response_timeout, r->remote_cm_response_timeout, r->retry_count,
		       r->rnr_retry_count, id->state);
		break;
	}
	case IB_CM_REP_RECEIVED: {
		const struct ib_cm_rep_event_param *r = &e->param.rep_rcvd;
		printf(" qpn=%x psn=%x rnr=%u tad=%u", r->remote_qpn, r->starting_psn, r->rnr_retry_count,
		       r->target_ack_delay);
		break;
	}
	case IB_CM_REJ_RECEIVED:
		printf(" reason=%d ari=", e->param.rej_rcvd.reason);
		put_hex(e->param.rej_rcvd.ari, e->param.rej_rcvd.ari_length);
		break;
	case IB_CM_MRA_RECEIVED:
		printf(" timeout=%u", e->param.mra_rcvd.service_timeout);
		break;
	case IB_CM_SIDR_REQ_RECEIVED:
		printf(" listen=%d svc=%llx", index_of(e->param.sidr_req_rcvd.listen_id),
		       (unsigned long long)be64_to_cpu(e->param.sidr_req_rcvd.service_id));
		break;
	case IB_CM_SIDR_REP_RECEIVED: {
		const struct ib_cm_sidr_rep_event_param *r = &e->param.sidr_rep_rcvd;
		printf(" status=%d qpn=%x qkey=%x info=", r->status, r->qpn, r->qkey);
		put_hex(r->info, r->info_len);
		break;
	}
	case IB_CM_REQ_ERROR:
	case IB_CM_REP_ERROR:
	case IB_CM_DREQ_ERROR:
	case IB_CM_LAP_ERROR:
	case IB_CM_SIDR_REQ_ERROR:
		printf(" status=%d", e->param.send_status);
		break;
	default:
		break;
	}
	if (pdata_size(e->event)) {
		printf(" pdata=");
		put_hex(e->private_data, pdata_size(e->event));
	}
	printf("\n");
	fflush(stdout);
	pthread_mutex_unlock(&mu);
	return 0;
}

static struct ib_cm_id *lookup(const char *s)
{
	int i = atoi(s);
	struct ib_cm_id *id = NULL;
	pthread_mutex_lock(&mu);
	if (i >= 1 && i <= nids)
		id = ids[i];
	pthread_mutex_unlock(&mu);
	return id;
}

static void reply(int rc)
{
	pthread_mutex_lock(&mu);
	if (rc < 0)
		printf("ERR %d\n", rc);
	else
		printf("OK %d\n", rc);
	fflush(stdout);
	pthread_mutex_unlock(&mu);
}

static int new_id(void)
{
	struct ib_cm_id *id = ib_create_cm_id(dev, handler, NULL);
	int n;
	if (IS_ERR(id))
		return (int)PTR_ERR(id);
	pthread_mutex_lock(&mu);
	n = add_id(id);
	pthread_mutex_unlock(&mu);
	return n;
}

static int path_to(const char *ip, struct sa_path_rec *path)
{
	union ib_gid g;
	int rc = ibcm_gid_from_string(ip, &g);
	return rc ? rc : ibcm_init_path(dev, 1, &g, path);
}

static int run(char **a, int n)
{
	unsigned char d1[256], d2[256];
	int l1, l2, rc;
	struct ib_cm_id *id = n > 1 ? lookup(a[1]) : NULL;

	if (!strcmp(a[0], "listen") && n == 2) {
		int i = new_id();
		if (i <= 0)
			return i ? i : -ENOMEM;
		rc = ib_cm_listen(ids[i], cpu_to_be64(strtoull(a[1], NULL, 16)));
		return rc ? rc : i;
	}
	if (!strcmp(a[0], "connect") && n == 8) {
		struct sa_path_rec path;
		struct ib_cm_req_param r;
		int i;
		if ((rc = path_to(a[1], &path)))
			return rc;
		if ((l1 = get_hex(a[3], d1, sizeof(d1))) < 0)
			return -EINVAL;
		path.packet_life_time = (u8)atoi(a[4]);
		memset(&r, 0, sizeof(r));
		r.primary_path = &path;
		r.service_id = cpu_to_be64(strtoull(a[2], NULL, 16));
		r.qp_num = (u32)strtoul(a[6], NULL, 16);
		r.qp_type = IB_QPT_RC;
		r.starting_psn = (u32)strtoul(a[7], NULL, 16);
		r.private_data = l1 ? d1 : NULL;
		r.private_data_len = (u8)l1;
		r.responder_resources = 4;
		r.initiator_depth = 4;
		r.remote_cm_response_timeout = 14;
		r.local_cm_response_timeout = 14;
		r.retry_count = 5;
		r.rnr_retry_count = 6;
		r.max_cm_retries = (u8)atoi(a[5]);
		i = new_id();
		if (i <= 0)
			return i ? i : -ENOMEM;
		rc = ib_send_cm_req(ids[i], &r);
		return rc ? rc : i;
	}
	if (!strcmp(a[0], "sidr") && n == 4) {
		struct sa_path_rec path;
		struct ib_cm_sidr_req_param r;
		int i;
		if ((rc = path_to(a[1], &path)))
			return rc;
		if ((l1 = get_hex(a[3], d1, sizeof(d1))) < 0)
			return -EINVAL;
		memset(&r, 0, sizeof(r));
		r.path = &path;
		r.service_id = cpu_to_be64(strtoull(a[2], NULL, 16));
		r.timeout_ms = 200;
		r.max_cm_retries = 3;
		r.private_data = l1 ? d1 : NULL;
		r.private_data_len = (u8)l1;
		i = new_id();
		if (i <= 0)
			return i ? i : -ENOMEM;
		rc = ib_send_cm_sidr_req(ids[i], &r);
		return rc ? rc : i;
	}
	if (!id)
		return -ENOENT;
	if (!strcmp(a[0], "rep") && n == 5) {
		struct ib_cm_rep_param r;
		if ((l1 = get_hex(a[2], d1, sizeof(d1))) < 0)
			return -EINVAL;
		memset(&r, 0, sizeof(r));
		r.qp_num = (u32)strtoul(a[3], NULL, 16);
		r.starting_psn = (u32)strtoul(a[4], NULL, 16);
		r.private_data = l1 ? d1 : NULL;
		r.private_data_len = (u8)l1;
		r.responder_resources = 4;
		r.initiator_depth = 4;
		r.rnr_retry_count = 7;
		return ib_send_cm_rep(id, &r);
	}
	if ((!strcmp(a[0], "rtu") || !strcmp(a[0], "dreq") || !strcmp(a[0], "drep")) && n == 3) {
		if ((l1 = get_hex(a[2], d1, sizeof(d1))) < 0)
			return -EINVAL;
		if (a[0][1] == 't')
			return ib_send_cm_rtu(id, l1 ? d1 : NULL, (u8)l1);
		if (a[0][3] == 'q')
			return ib_send_cm_dreq(id, l1 ? d1 : NULL, (u8)l1);
		return ib_send_cm_drep(id, l1 ? d1 : NULL, (u8)l1);
	}
	if (!strcmp(a[0], "rej") && n == 5) {
		if ((l1 = get_hex(a[3], d1, sizeof(d1))) < 0 || (l2 = get_hex(a[4], d2, sizeof(d2))) < 0)
			return -EINVAL;
		return ib_send_cm_rej(id, (enum ib_cm_rej_reason)atoi(a[2]), l1 ? d1 : NULL, (u8)l1,
				      l2 ? d2 : NULL, (u8)l2);
	}
	if (!strcmp(a[0], "mra") && n == 2)
		return ib_prepare_cm_mra(id);
	if (!strcmp(a[0], "notify") && n == 3)
		return ib_cm_notify(id, (enum ib_event_type)atoi(a[2]));
	if (!strcmp(a[0], "sidrrep") && n == 7) {
		struct ib_cm_sidr_rep_param r;
		if ((l1 = get_hex(a[5], d1, sizeof(d1))) < 0 || (l2 = get_hex(a[6], d2, sizeof(d2))) < 0)
			return -EINVAL;
		memset(&r, 0, sizeof(r));
		r.status = (enum ib_cm_sidr_status)atoi(a[2]);
		r.qp_num = (u32)strtoul(a[3], NULL, 16);
		r.qkey = (u32)strtoul(a[4], NULL, 16);
		r.info = l1 ? d1 : NULL;
		r.info_length = (u8)l1;
		r.private_data = l2 ? d2 : NULL;
		r.private_data_len = (u8)l2;
		return ib_send_cm_sidr_rep(id, &r);
	}
	if (!strcmp(a[0], "state") && n == 2)
		return id->state;
	if (!strcmp(a[0], "destroy") && n == 2) {
		ib_destroy_cm_id(id);
		pthread_mutex_lock(&mu);
		ids[atoi(a[1])] = NULL;
		pthread_mutex_unlock(&mu);
		return 0;
	}
	return -ENOSYS;
}

int main(int argc, char **argv)
{
	char line[2048];

	if (argc != 2) {
		fprintf(stderr, "usage: cm_peer soft:<ip>\n");
		return 2;
	}
	dev = ibcm_open_device(argv[1]);
	if (IS_ERR(dev)) {
		printf("ERR %ld\n", PTR_ERR(dev));
		return 1;
	}
	reply(0); /* ready */
	while (fgets(line, sizeof(line), stdin)) {
		char *a[16];
		int n = 0;
		for (char *t = strtok(line, " \t\r\n"); t && n < 16; t = strtok(NULL, " \t\r\n"))
			a[n++] = t;
		if (!n)
			continue;
		if (!strcmp(a[0], "quit"))
			break;
		reply(run(a, n));
	}
	for (int i = 1; i <= nids; i++)
		if (ids[i])
			ib_destroy_cm_id(ids[i]);
	ibcm_close_device(dev);
	return 0;
}
