/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Prints the ABI of ibcm's C headers as seen by the C compiler, one fact
 * per line, for tests/abi.rs to compare with the Rust mirrors in
 * src/abi.rs:
 *
 *   <type> - <sizeof> <alignof>          a struct or union
 *   <type> <member> <offset> <size>      a member (nested: a.b)
 *   <type> <member> bit:<first> <width>  a bitfield; <first> counts bits
 *                                        from the start of the struct,
 *                                        LSB first within each byte
 *   <NAME> <value>                       an enumerator or macro, as the
 *                                        C expression's value converted to
 *                                        unsigned 64 bits (decimal)
 *
 * <type> is the C tag without "struct"/"union".
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <rdma/ib_cm.h>
#include <ibcm.h>

#define TYPE(T, name) \
	printf("%s - %zu %zu\n", name, sizeof(T), (size_t)_Alignof(T))
#define MEM(T, name, m)                                                      \
	printf("%s %s %zu %zu\n", name, #m, offsetof(T, m),                  \
	       sizeof(((T *)0)->m))
#define K(x) printf("%s %llu\n", #x, (unsigned long long)(x))

static void bits(const char *type, const char *member,
		 const unsigned char *p, size_t size)
{
	size_t i, first = (size_t)-1, width = 0;

	for (i = 0; i < size * 8; i++) {
		if (p[i / 8] & (1u << (i % 8))) {
			if (first == (size_t)-1)
				first = i;
			width++;
		}
	}
	/* a bitfield is contiguous; report a gap as width 0 */
	if (first == (size_t)-1 || i < first + width)
		width = 0;
	for (i = first + 1; width && i < first + width; i++)
		if (!(p[i / 8] & (1u << (i % 8))))
			width = 0;
	printf("%s %s bit:%zu %zu\n", type, member, first, width);
}

/* Set the bitfield to all ones in a zeroed object and report its bits. */
#define BITS(T, name, m)                                                     \
	do {                                                                 \
		T v_;                                                        \
		memset(&v_, 0, sizeof(v_));                                  \
		v_.m = ones;                                                 \
		bits(name, #m, (const unsigned char *)&v_, sizeof(v_));      \
	} while (0)

static void dump_types(void)
{
	volatile unsigned int ones = ~0u;

	TYPE(union ib_gid, "ib_gid");
	MEM(union ib_gid, "ib_gid", raw);
	MEM(union ib_gid, "ib_gid", global);
	MEM(union ib_gid, "ib_gid", global.subnet_prefix);
	MEM(union ib_gid, "ib_gid", global.interface_id);

	TYPE(struct ib_gid_attr, "ib_gid_attr");
	MEM(struct ib_gid_attr, "ib_gid_attr", ndev);
	MEM(struct ib_gid_attr, "ib_gid_attr", device);
	MEM(struct ib_gid_attr, "ib_gid_attr", gid);
	MEM(struct ib_gid_attr, "ib_gid_attr", gid_type);
	MEM(struct ib_gid_attr, "ib_gid_attr", index);
	MEM(struct ib_gid_attr, "ib_gid_attr", port_num);

	TYPE(struct sa_path_rec_ib, "sa_path_rec_ib");
	MEM(struct sa_path_rec_ib, "sa_path_rec_ib", dlid);
	MEM(struct sa_path_rec_ib, "sa_path_rec_ib", slid);
	MEM(struct sa_path_rec_ib, "sa_path_rec_ib", raw_traffic);

	TYPE(struct sa_path_rec_roce, "sa_path_rec_roce");
	MEM(struct sa_path_rec_roce, "sa_path_rec_roce", route_resolved);
	MEM(struct sa_path_rec_roce, "sa_path_rec_roce", dmac);

	TYPE(struct sa_path_rec_opa, "sa_path_rec_opa");
	MEM(struct sa_path_rec_opa, "sa_path_rec_opa", dlid);
	MEM(struct sa_path_rec_opa, "sa_path_rec_opa", slid);
	MEM(struct sa_path_rec_opa, "sa_path_rec_opa", raw_traffic);
	MEM(struct sa_path_rec_opa, "sa_path_rec_opa", l2_8B);
	MEM(struct sa_path_rec_opa, "sa_path_rec_opa", l2_10B);
	MEM(struct sa_path_rec_opa, "sa_path_rec_opa", l2_9B);
	MEM(struct sa_path_rec_opa, "sa_path_rec_opa", l2_16B);
	MEM(struct sa_path_rec_opa, "sa_path_rec_opa", qos_type);
	MEM(struct sa_path_rec_opa, "sa_path_rec_opa", qos_priority);

	TYPE(struct sa_path_rec, "sa_path_rec");
	MEM(struct sa_path_rec, "sa_path_rec", dgid);
	MEM(struct sa_path_rec, "sa_path_rec", sgid);
	MEM(struct sa_path_rec, "sa_path_rec", service_id);
	MEM(struct sa_path_rec, "sa_path_rec", flow_label);
	MEM(struct sa_path_rec, "sa_path_rec", hop_limit);
	MEM(struct sa_path_rec, "sa_path_rec", traffic_class);
	MEM(struct sa_path_rec, "sa_path_rec", reversible);
	MEM(struct sa_path_rec, "sa_path_rec", numb_path);
	MEM(struct sa_path_rec, "sa_path_rec", pkey);
	MEM(struct sa_path_rec, "sa_path_rec", qos_class);
	MEM(struct sa_path_rec, "sa_path_rec", sl);
	MEM(struct sa_path_rec, "sa_path_rec", mtu_selector);
	MEM(struct sa_path_rec, "sa_path_rec", mtu);
	MEM(struct sa_path_rec, "sa_path_rec", rate_selector);
	MEM(struct sa_path_rec, "sa_path_rec", rate);
	MEM(struct sa_path_rec, "sa_path_rec", packet_life_time_selector);
	MEM(struct sa_path_rec, "sa_path_rec", packet_life_time);
	MEM(struct sa_path_rec, "sa_path_rec", preference);
	MEM(struct sa_path_rec, "sa_path_rec", ib);
	MEM(struct sa_path_rec, "sa_path_rec", roce);
	MEM(struct sa_path_rec, "sa_path_rec", opa);
	MEM(struct sa_path_rec, "sa_path_rec", rec_type);
	MEM(struct sa_path_rec, "sa_path_rec", flags);

	TYPE(struct ib_global_route, "ib_global_route");
	MEM(struct ib_global_route, "ib_global_route", sgid_attr);
	MEM(struct ib_global_route, "ib_global_route", dgid);
	MEM(struct ib_global_route, "ib_global_route", flow_label);
	MEM(struct ib_global_route, "ib_global_route", sgid_index);
	MEM(struct ib_global_route, "ib_global_route", hop_limit);
	MEM(struct ib_global_route, "ib_global_route", traffic_class);

	TYPE(struct ib_ah_attr, "ib_ah_attr");
	MEM(struct ib_ah_attr, "ib_ah_attr", dlid);
	MEM(struct ib_ah_attr, "ib_ah_attr", src_path_bits);

	TYPE(struct roce_ah_attr, "roce_ah_attr");
	MEM(struct roce_ah_attr, "roce_ah_attr", dmac);

	TYPE(struct opa_ah_attr, "opa_ah_attr");
	MEM(struct opa_ah_attr, "opa_ah_attr", dlid);
	MEM(struct opa_ah_attr, "opa_ah_attr", src_path_bits);
	MEM(struct opa_ah_attr, "opa_ah_attr", make_grd);

	TYPE(struct rdma_ah_attr, "rdma_ah_attr");
	MEM(struct rdma_ah_attr, "rdma_ah_attr", grh);
	MEM(struct rdma_ah_attr, "rdma_ah_attr", sl);
	MEM(struct rdma_ah_attr, "rdma_ah_attr", static_rate);
	MEM(struct rdma_ah_attr, "rdma_ah_attr", port_num);
	MEM(struct rdma_ah_attr, "rdma_ah_attr", ah_flags);
	MEM(struct rdma_ah_attr, "rdma_ah_attr", type);
	MEM(struct rdma_ah_attr, "rdma_ah_attr", ib);
	MEM(struct rdma_ah_attr, "rdma_ah_attr", roce);
	MEM(struct rdma_ah_attr, "rdma_ah_attr", opa);

	TYPE(struct ib_qp_cap, "ib_qp_cap");
	MEM(struct ib_qp_cap, "ib_qp_cap", max_send_wr);
	MEM(struct ib_qp_cap, "ib_qp_cap", max_recv_wr);
	MEM(struct ib_qp_cap, "ib_qp_cap", max_send_sge);
	MEM(struct ib_qp_cap, "ib_qp_cap", max_recv_sge);
	MEM(struct ib_qp_cap, "ib_qp_cap", max_inline_data);
	MEM(struct ib_qp_cap, "ib_qp_cap", max_rdma_ctxs);

	TYPE(struct ib_qp_attr, "ib_qp_attr");
	MEM(struct ib_qp_attr, "ib_qp_attr", qp_state);
	MEM(struct ib_qp_attr, "ib_qp_attr", cur_qp_state);
	MEM(struct ib_qp_attr, "ib_qp_attr", path_mtu);
	MEM(struct ib_qp_attr, "ib_qp_attr", path_mig_state);
	MEM(struct ib_qp_attr, "ib_qp_attr", qkey);
	MEM(struct ib_qp_attr, "ib_qp_attr", rq_psn);
	MEM(struct ib_qp_attr, "ib_qp_attr", sq_psn);
	MEM(struct ib_qp_attr, "ib_qp_attr", dest_qp_num);
	MEM(struct ib_qp_attr, "ib_qp_attr", qp_access_flags);
	MEM(struct ib_qp_attr, "ib_qp_attr", cap);
	MEM(struct ib_qp_attr, "ib_qp_attr", ah_attr);
	MEM(struct ib_qp_attr, "ib_qp_attr", alt_ah_attr);
	MEM(struct ib_qp_attr, "ib_qp_attr", pkey_index);
	MEM(struct ib_qp_attr, "ib_qp_attr", alt_pkey_index);
	MEM(struct ib_qp_attr, "ib_qp_attr", en_sqd_async_notify);
	MEM(struct ib_qp_attr, "ib_qp_attr", sq_draining);
	MEM(struct ib_qp_attr, "ib_qp_attr", max_rd_atomic);
	MEM(struct ib_qp_attr, "ib_qp_attr", max_dest_rd_atomic);
	MEM(struct ib_qp_attr, "ib_qp_attr", min_rnr_timer);
	MEM(struct ib_qp_attr, "ib_qp_attr", port_num);
	MEM(struct ib_qp_attr, "ib_qp_attr", timeout);
	MEM(struct ib_qp_attr, "ib_qp_attr", retry_cnt);
	MEM(struct ib_qp_attr, "ib_qp_attr", rnr_retry);
	MEM(struct ib_qp_attr, "ib_qp_attr", alt_port_num);
	MEM(struct ib_qp_attr, "ib_qp_attr", alt_timeout);
	MEM(struct ib_qp_attr, "ib_qp_attr", rate_limit);
	MEM(struct ib_qp_attr, "ib_qp_attr", xmit_slave);

	TYPE(struct rdma_ucm_ece, "rdma_ucm_ece");
	MEM(struct rdma_ucm_ece, "rdma_ucm_ece", vendor_id);
	MEM(struct rdma_ucm_ece, "rdma_ucm_ece", attr_mod);

	TYPE(struct ib_mad_hdr, "ib_mad_hdr");
	MEM(struct ib_mad_hdr, "ib_mad_hdr", base_version);
	MEM(struct ib_mad_hdr, "ib_mad_hdr", mgmt_class);
	MEM(struct ib_mad_hdr, "ib_mad_hdr", class_version);
	MEM(struct ib_mad_hdr, "ib_mad_hdr", method);
	MEM(struct ib_mad_hdr, "ib_mad_hdr", status);
	MEM(struct ib_mad_hdr, "ib_mad_hdr", class_specific);
	MEM(struct ib_mad_hdr, "ib_mad_hdr", tid);
	MEM(struct ib_mad_hdr, "ib_mad_hdr", attr_id);
	MEM(struct ib_mad_hdr, "ib_mad_hdr", resv);
	MEM(struct ib_mad_hdr, "ib_mad_hdr", attr_mod);

	TYPE(struct ib_mad, "ib_mad");
	MEM(struct ib_mad, "ib_mad", mad_hdr);
	MEM(struct ib_mad, "ib_mad", data);

	TYPE(struct ib_class_port_info, "ib_class_port_info");
	MEM(struct ib_class_port_info, "ib_class_port_info", base_version);
	MEM(struct ib_class_port_info, "ib_class_port_info", class_version);
	MEM(struct ib_class_port_info, "ib_class_port_info", capability_mask);
	MEM(struct ib_class_port_info, "ib_class_port_info", cap_mask2_resp_time);
	MEM(struct ib_class_port_info, "ib_class_port_info", redirect_gid);
	MEM(struct ib_class_port_info, "ib_class_port_info", redirect_tcslfl);
	MEM(struct ib_class_port_info, "ib_class_port_info", redirect_lid);
	MEM(struct ib_class_port_info, "ib_class_port_info", redirect_pkey);
	MEM(struct ib_class_port_info, "ib_class_port_info", redirect_qp);
	MEM(struct ib_class_port_info, "ib_class_port_info", redirect_qkey);
	MEM(struct ib_class_port_info, "ib_class_port_info", trap_gid);
	MEM(struct ib_class_port_info, "ib_class_port_info", trap_tcslfl);
	MEM(struct ib_class_port_info, "ib_class_port_info", trap_lid);
	MEM(struct ib_class_port_info, "ib_class_port_info", trap_pkey);
	MEM(struct ib_class_port_info, "ib_class_port_info", trap_hlqp);
	MEM(struct ib_class_port_info, "ib_class_port_info", trap_qkey);

	TYPE(struct ib_cm_id, "ib_cm_id");
	MEM(struct ib_cm_id, "ib_cm_id", cm_handler);
	MEM(struct ib_cm_id, "ib_cm_id", context);
	MEM(struct ib_cm_id, "ib_cm_id", device);
	MEM(struct ib_cm_id, "ib_cm_id", service_id);
	MEM(struct ib_cm_id, "ib_cm_id", state);
	MEM(struct ib_cm_id, "ib_cm_id", lap_state);
	MEM(struct ib_cm_id, "ib_cm_id", local_id);
	MEM(struct ib_cm_id, "ib_cm_id", remote_id);
	MEM(struct ib_cm_id, "ib_cm_id", remote_cm_qpn);

	TYPE(struct ib_cm_req_event_param, "ib_cm_req_event_param");
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", listen_id);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", bth_pkey);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", port);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", primary_path);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", alternate_path);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", ppath_sgid_attr);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", remote_ca_guid);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", remote_qkey);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", remote_qpn);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", qp_type);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", starting_psn);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", responder_resources);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", initiator_depth);
	BITS(struct ib_cm_req_event_param, "ib_cm_req_event_param", local_cm_response_timeout);
	BITS(struct ib_cm_req_event_param, "ib_cm_req_event_param", flow_control);
	BITS(struct ib_cm_req_event_param, "ib_cm_req_event_param", remote_cm_response_timeout);
	BITS(struct ib_cm_req_event_param, "ib_cm_req_event_param", retry_count);
	BITS(struct ib_cm_req_event_param, "ib_cm_req_event_param", rnr_retry_count);
	BITS(struct ib_cm_req_event_param, "ib_cm_req_event_param", srq);
	MEM(struct ib_cm_req_event_param, "ib_cm_req_event_param", ece);

	TYPE(struct ib_cm_rep_event_param, "ib_cm_rep_event_param");
	MEM(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", remote_ca_guid);
	MEM(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", remote_qkey);
	MEM(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", remote_qpn);
	MEM(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", starting_psn);
	MEM(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", responder_resources);
	MEM(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", initiator_depth);
	BITS(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", target_ack_delay);
	BITS(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", failover_accepted);
	BITS(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", flow_control);
	BITS(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", rnr_retry_count);
	BITS(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", srq);
	MEM(struct ib_cm_rep_event_param, "ib_cm_rep_event_param", ece);

	TYPE(struct ib_cm_rej_event_param, "ib_cm_rej_event_param");
	MEM(struct ib_cm_rej_event_param, "ib_cm_rej_event_param", reason);
	MEM(struct ib_cm_rej_event_param, "ib_cm_rej_event_param", ari);
	MEM(struct ib_cm_rej_event_param, "ib_cm_rej_event_param", ari_length);

	TYPE(struct ib_cm_mra_event_param, "ib_cm_mra_event_param");
	MEM(struct ib_cm_mra_event_param, "ib_cm_mra_event_param", service_timeout);

	TYPE(struct ib_cm_lap_event_param, "ib_cm_lap_event_param");
	MEM(struct ib_cm_lap_event_param, "ib_cm_lap_event_param", alternate_path);

	TYPE(struct ib_cm_apr_event_param, "ib_cm_apr_event_param");
	MEM(struct ib_cm_apr_event_param, "ib_cm_apr_event_param", ap_status);
	MEM(struct ib_cm_apr_event_param, "ib_cm_apr_event_param", apr_info);
	MEM(struct ib_cm_apr_event_param, "ib_cm_apr_event_param", info_len);

	TYPE(struct ib_cm_sidr_req_event_param, "ib_cm_sidr_req_event_param");
	MEM(struct ib_cm_sidr_req_event_param, "ib_cm_sidr_req_event_param", listen_id);
	MEM(struct ib_cm_sidr_req_event_param, "ib_cm_sidr_req_event_param", service_id);
	MEM(struct ib_cm_sidr_req_event_param, "ib_cm_sidr_req_event_param", sgid_attr);
	MEM(struct ib_cm_sidr_req_event_param, "ib_cm_sidr_req_event_param", bth_pkey);
	MEM(struct ib_cm_sidr_req_event_param, "ib_cm_sidr_req_event_param", port);
	MEM(struct ib_cm_sidr_req_event_param, "ib_cm_sidr_req_event_param", pkey);

	TYPE(struct ib_cm_sidr_rep_event_param, "ib_cm_sidr_rep_event_param");
	MEM(struct ib_cm_sidr_rep_event_param, "ib_cm_sidr_rep_event_param", status);
	MEM(struct ib_cm_sidr_rep_event_param, "ib_cm_sidr_rep_event_param", qkey);
	MEM(struct ib_cm_sidr_rep_event_param, "ib_cm_sidr_rep_event_param", qpn);
	MEM(struct ib_cm_sidr_rep_event_param, "ib_cm_sidr_rep_event_param", info);
	MEM(struct ib_cm_sidr_rep_event_param, "ib_cm_sidr_rep_event_param", sgid_attr);
	MEM(struct ib_cm_sidr_rep_event_param, "ib_cm_sidr_rep_event_param", info_len);

	TYPE(struct ib_cm_event, "ib_cm_event");
	MEM(struct ib_cm_event, "ib_cm_event", event);
	MEM(struct ib_cm_event, "ib_cm_event", param);
	MEM(struct ib_cm_event, "ib_cm_event", param.req_rcvd);
	MEM(struct ib_cm_event, "ib_cm_event", param.rep_rcvd);
	MEM(struct ib_cm_event, "ib_cm_event", param.rej_rcvd);
	MEM(struct ib_cm_event, "ib_cm_event", param.mra_rcvd);
	MEM(struct ib_cm_event, "ib_cm_event", param.lap_rcvd);
	MEM(struct ib_cm_event, "ib_cm_event", param.apr_rcvd);
	MEM(struct ib_cm_event, "ib_cm_event", param.sidr_req_rcvd);
	MEM(struct ib_cm_event, "ib_cm_event", param.sidr_rep_rcvd);
	MEM(struct ib_cm_event, "ib_cm_event", param.send_status);
	MEM(struct ib_cm_event, "ib_cm_event", private_data);

	TYPE(struct ib_cm_req_param, "ib_cm_req_param");
	MEM(struct ib_cm_req_param, "ib_cm_req_param", primary_path);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", primary_path_inbound);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", primary_path_outbound);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", alternate_path);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", ppath_sgid_attr);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", service_id);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", qp_num);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", qp_type);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", starting_psn);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", private_data);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", private_data_len);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", responder_resources);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", initiator_depth);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", remote_cm_response_timeout);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", flow_control);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", local_cm_response_timeout);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", retry_count);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", rnr_retry_count);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", max_cm_retries);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", srq);
	MEM(struct ib_cm_req_param, "ib_cm_req_param", ece);

	TYPE(struct ib_cm_rep_param, "ib_cm_rep_param");
	MEM(struct ib_cm_rep_param, "ib_cm_rep_param", qp_num);
	MEM(struct ib_cm_rep_param, "ib_cm_rep_param", starting_psn);
	MEM(struct ib_cm_rep_param, "ib_cm_rep_param", private_data);
	MEM(struct ib_cm_rep_param, "ib_cm_rep_param", private_data_len);
	MEM(struct ib_cm_rep_param, "ib_cm_rep_param", responder_resources);
	MEM(struct ib_cm_rep_param, "ib_cm_rep_param", initiator_depth);
	MEM(struct ib_cm_rep_param, "ib_cm_rep_param", failover_accepted);
	MEM(struct ib_cm_rep_param, "ib_cm_rep_param", flow_control);
	MEM(struct ib_cm_rep_param, "ib_cm_rep_param", rnr_retry_count);
	MEM(struct ib_cm_rep_param, "ib_cm_rep_param", srq);
	MEM(struct ib_cm_rep_param, "ib_cm_rep_param", ece);

	TYPE(struct ib_cm_sidr_req_param, "ib_cm_sidr_req_param");
	MEM(struct ib_cm_sidr_req_param, "ib_cm_sidr_req_param", path);
	MEM(struct ib_cm_sidr_req_param, "ib_cm_sidr_req_param", sgid_attr);
	MEM(struct ib_cm_sidr_req_param, "ib_cm_sidr_req_param", service_id);
	MEM(struct ib_cm_sidr_req_param, "ib_cm_sidr_req_param", timeout_ms);
	MEM(struct ib_cm_sidr_req_param, "ib_cm_sidr_req_param", private_data);
	MEM(struct ib_cm_sidr_req_param, "ib_cm_sidr_req_param", private_data_len);
	MEM(struct ib_cm_sidr_req_param, "ib_cm_sidr_req_param", max_cm_retries);

	TYPE(struct ib_cm_sidr_rep_param, "ib_cm_sidr_rep_param");
	MEM(struct ib_cm_sidr_rep_param, "ib_cm_sidr_rep_param", qp_num);
	MEM(struct ib_cm_sidr_rep_param, "ib_cm_sidr_rep_param", qkey);
	MEM(struct ib_cm_sidr_rep_param, "ib_cm_sidr_rep_param", status);
	MEM(struct ib_cm_sidr_rep_param, "ib_cm_sidr_rep_param", info);
	MEM(struct ib_cm_sidr_rep_param, "ib_cm_sidr_rep_param", info_length);
	MEM(struct ib_cm_sidr_rep_param, "ib_cm_sidr_rep_param", private_data);
	MEM(struct ib_cm_sidr_rep_param, "ib_cm_sidr_rep_param", private_data_len);
	MEM(struct ib_cm_sidr_rep_param, "ib_cm_sidr_rep_param", ece);
}

static void dump_constants(void)
{
	/* ib_verbs.h */
	K(IB_GID_TYPE_IB); K(IB_GID_TYPE_ROCE); K(IB_GID_TYPE_ROCE_UDP_ENCAP);
	K(IB_GID_TYPE_SIZE);
	K(ROCE_V2_UDP_DPORT);

	K(IB_EVENT_CQ_ERR); K(IB_EVENT_QP_FATAL); K(IB_EVENT_QP_REQ_ERR);
	K(IB_EVENT_QP_ACCESS_ERR); K(IB_EVENT_COMM_EST); K(IB_EVENT_SQ_DRAINED);
	K(IB_EVENT_PATH_MIG); K(IB_EVENT_PATH_MIG_ERR); K(IB_EVENT_DEVICE_FATAL);
	K(IB_EVENT_PORT_ACTIVE); K(IB_EVENT_PORT_ERR); K(IB_EVENT_LID_CHANGE);
	K(IB_EVENT_PKEY_CHANGE); K(IB_EVENT_SM_CHANGE); K(IB_EVENT_SRQ_ERR);
	K(IB_EVENT_SRQ_LIMIT_REACHED); K(IB_EVENT_QP_LAST_WQE_REACHED);
	K(IB_EVENT_CLIENT_REREGISTER); K(IB_EVENT_GID_CHANGE);
	K(IB_EVENT_WQ_FATAL); K(IB_EVENT_DEVICE_SPEED_CHANGE);

	K(IB_QPT_SMI); K(IB_QPT_GSI); K(IB_QPT_RC); K(IB_QPT_UC); K(IB_QPT_UD);
	K(IB_QPT_RAW_IPV6); K(IB_QPT_RAW_ETHERTYPE); K(IB_QPT_RAW_PACKET);
	K(IB_QPT_XRC_INI); K(IB_QPT_XRC_TGT); K(IB_QPT_MAX); K(IB_QPT_DRIVER);
	K(IB_QPT_RESERVED1); K(IB_QPT_RESERVED2); K(IB_QPT_RESERVED3);
	K(IB_QPT_RESERVED4); K(IB_QPT_RESERVED5); K(IB_QPT_RESERVED6);
	K(IB_QPT_RESERVED7); K(IB_QPT_RESERVED8); K(IB_QPT_RESERVED9);
	K(IB_QPT_RESERVED10);

	K(IB_WC_SUCCESS); K(IB_WC_LOC_LEN_ERR); K(IB_WC_LOC_QP_OP_ERR);
	K(IB_WC_LOC_EEC_OP_ERR); K(IB_WC_LOC_PROT_ERR); K(IB_WC_WR_FLUSH_ERR);
	K(IB_WC_MW_BIND_ERR); K(IB_WC_BAD_RESP_ERR); K(IB_WC_LOC_ACCESS_ERR);
	K(IB_WC_REM_INV_REQ_ERR); K(IB_WC_REM_ACCESS_ERR); K(IB_WC_REM_OP_ERR);
	K(IB_WC_RETRY_EXC_ERR); K(IB_WC_RNR_RETRY_EXC_ERR);
	K(IB_WC_LOC_RDD_VIOL_ERR); K(IB_WC_REM_INV_RD_REQ_ERR);
	K(IB_WC_REM_ABORT_ERR); K(IB_WC_INV_EECN_ERR); K(IB_WC_INV_EEC_STATE_ERR);
	K(IB_WC_FATAL_ERR); K(IB_WC_RESP_TIMEOUT_ERR); K(IB_WC_GENERAL_ERR);

	K(IB_MTU_256); K(IB_MTU_512); K(IB_MTU_1024); K(IB_MTU_2048);
	K(IB_MTU_4096); K(OPA_MTU_8192); K(OPA_MTU_10240);

	K(IB_RATE_PORT_CURRENT); K(IB_RATE_2_5_GBPS); K(IB_RATE_5_GBPS);
	K(IB_RATE_10_GBPS); K(IB_RATE_20_GBPS); K(IB_RATE_30_GBPS);
	K(IB_RATE_40_GBPS); K(IB_RATE_60_GBPS); K(IB_RATE_80_GBPS);
	K(IB_RATE_120_GBPS); K(IB_RATE_14_GBPS); K(IB_RATE_56_GBPS);
	K(IB_RATE_112_GBPS); K(IB_RATE_168_GBPS); K(IB_RATE_25_GBPS);
	K(IB_RATE_100_GBPS); K(IB_RATE_200_GBPS); K(IB_RATE_300_GBPS);
	K(IB_RATE_28_GBPS); K(IB_RATE_50_GBPS); K(IB_RATE_400_GBPS);
	K(IB_RATE_600_GBPS); K(IB_RATE_800_GBPS); K(IB_RATE_1600_GBPS);

	K(IB_QPS_RESET); K(IB_QPS_INIT); K(IB_QPS_RTR); K(IB_QPS_RTS);
	K(IB_QPS_SQD); K(IB_QPS_SQE); K(IB_QPS_ERR);

	K(IB_MIG_MIGRATED); K(IB_MIG_REARM); K(IB_MIG_ARMED);

	K(IB_QP_STATE); K(IB_QP_CUR_STATE); K(IB_QP_EN_SQD_ASYNC_NOTIFY);
	K(IB_QP_ACCESS_FLAGS); K(IB_QP_PKEY_INDEX); K(IB_QP_PORT); K(IB_QP_QKEY);
	K(IB_QP_AV); K(IB_QP_PATH_MTU); K(IB_QP_TIMEOUT); K(IB_QP_RETRY_CNT);
	K(IB_QP_RNR_RETRY); K(IB_QP_RQ_PSN); K(IB_QP_MAX_QP_RD_ATOMIC);
	K(IB_QP_ALT_PATH); K(IB_QP_MIN_RNR_TIMER); K(IB_QP_SQ_PSN);
	K(IB_QP_MAX_DEST_RD_ATOMIC); K(IB_QP_PATH_MIG_STATE); K(IB_QP_CAP);
	K(IB_QP_DEST_QPN); K(IB_QP_RESERVED1); K(IB_QP_RESERVED2);
	K(IB_QP_RESERVED3); K(IB_QP_RESERVED4); K(IB_QP_RATE_LIMIT);
	K(IB_QP_ATTR_STANDARD_BITS);

	K(IB_ACCESS_LOCAL_WRITE); K(IB_ACCESS_REMOTE_WRITE);
	K(IB_ACCESS_REMOTE_READ); K(IB_ACCESS_REMOTE_ATOMIC); K(IB_ACCESS_MW_BIND);
	K(IB_ZERO_BASED); K(IB_ACCESS_ON_DEMAND); K(IB_ACCESS_HUGETLB);
	K(IB_ACCESS_RELAXED_ORDERING); K(IB_ACCESS_FLUSH_GLOBAL);
	K(IB_ACCESS_FLUSH_PERSISTENT); K(IB_ACCESS_OPTIONAL);
	K(IB_ACCESS_SUPPORTED);

	K(RDMA_AH_ATTR_TYPE_UNDEFINED); K(RDMA_AH_ATTR_TYPE_IB);
	K(RDMA_AH_ATTR_TYPE_ROCE); K(RDMA_AH_ATTR_TYPE_OPA);
	K(IB_AH_GRH);
	K(IB_LID_PERMISSIVE); K(IB_MULTICAST_LID_BASE); K(IB_MULTICAST_QPN);
	K(IB_QPN_MASK); K(ETH_ALEN);

	/* ib_sa.h */
	K(IB_PATH_GMP); K(IB_PATH_PRIMARY); K(IB_PATH_ALTERNATE);
	K(IB_PATH_OUTBOUND); K(IB_PATH_INBOUND); K(IB_PATH_INBOUND_REVERSE);
	K(IB_PATH_BIDIRECTIONAL);
	K(SA_PATH_REC_TYPE_IB); K(SA_PATH_REC_TYPE_ROCE_V1);
	K(SA_PATH_REC_TYPE_ROCE_V2); K(SA_PATH_REC_TYPE_OPA);
	K(IB_SA_GT); K(IB_SA_LT); K(IB_SA_EQ); K(IB_SA_BEST);

	/* rdma_cm.h */
	K(RDMA_PS_IPOIB); K(RDMA_PS_IB); K(RDMA_PS_TCP); K(RDMA_PS_UDP);

	/* ib_mad.h */
	K(IB_MGMT_BASE_VERSION); K(OPA_MGMT_BASE_VERSION); K(OPA_SM_CLASS_VERSION);
	K(IB_MGMT_CLASS_SUBN_LID_ROUTED); K(IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE);
	K(IB_MGMT_CLASS_SUBN_ADM); K(IB_MGMT_CLASS_PERF_MGMT); K(IB_MGMT_CLASS_BM);
	K(IB_MGMT_CLASS_DEVICE_MGMT); K(IB_MGMT_CLASS_CM); K(IB_MGMT_CLASS_SNMP);
	K(IB_MGMT_CLASS_DEVICE_ADM); K(IB_MGMT_CLASS_BOOT_MGMT);
	K(IB_MGMT_CLASS_BIS); K(IB_MGMT_CLASS_CONG_MGMT);
	K(IB_MGMT_CLASS_VENDOR_RANGE2_START); K(IB_MGMT_CLASS_VENDOR_RANGE2_END);
	K(IB_OPENIB_OUI);
	K(IB_MGMT_METHOD_GET); K(IB_MGMT_METHOD_SET); K(IB_MGMT_METHOD_GET_RESP);
	K(IB_MGMT_METHOD_SEND); K(IB_MGMT_METHOD_TRAP); K(IB_MGMT_METHOD_REPORT);
	K(IB_MGMT_METHOD_REPORT_RESP); K(IB_MGMT_METHOD_TRAP_REPRESS);
	K(IB_MGMT_METHOD_RESP); K(IB_MGMT_MAX_METHODS);
	K(IB_MGMT_MAD_STATUS_SUCCESS); K(IB_MGMT_MAD_STATUS_BUSY);
	K(IB_MGMT_MAD_STATUS_REDIRECT_REQD); K(IB_MGMT_MAD_STATUS_BAD_VERSION);
	K(IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD);
	K(IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB);
	K(IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE);
	K(IB_QP0); K(IB_QP1); K(IB_QP1_QKEY); K(IB_QP_SET_QKEY);
	K(IB_DEFAULT_PKEY_PARTIAL); K(IB_DEFAULT_PKEY_FULL);
	K(IB_MGMT_MAD_HDR); K(IB_MGMT_MAD_DATA); K(IB_MGMT_RMPP_HDR);
	K(IB_MGMT_RMPP_DATA); K(IB_MGMT_VENDOR_HDR); K(IB_MGMT_VENDOR_DATA);
	K(IB_MGMT_SA_HDR); K(IB_MGMT_SA_DATA); K(IB_MGMT_DEVICE_HDR);
	K(IB_MGMT_DEVICE_DATA); K(IB_MGMT_MAD_SIZE); K(OPA_MGMT_MAD_DATA);
	K(OPA_MGMT_RMPP_DATA); K(OPA_MGMT_MAD_SIZE);
	K(IB_MGMT_CLASSPORTINFO_ATTR_ID);
	K(IB_CLASS_PORT_INFO_RESP_TIME_MASK);
	K(IB_CLASS_PORT_INFO_RESP_TIME_FIELD_SIZE);

	/* ib_cm.h */
	K(IB_CM_IDLE); K(IB_CM_LISTEN); K(IB_CM_REQ_SENT); K(IB_CM_REQ_RCVD);
	K(IB_CM_MRA_REQ_SENT); K(IB_CM_MRA_REQ_RCVD); K(IB_CM_REP_SENT);
	K(IB_CM_REP_RCVD); K(IB_CM_MRA_REP_SENT); K(IB_CM_MRA_REP_RCVD);
	K(IB_CM_ESTABLISHED); K(IB_CM_DREQ_SENT); K(IB_CM_DREQ_RCVD);
	K(IB_CM_TIMEWAIT); K(IB_CM_SIDR_REQ_SENT); K(IB_CM_SIDR_REQ_RCVD);

	K(IB_CM_LAP_UNINIT); K(IB_CM_LAP_IDLE); K(IB_CM_LAP_SENT);
	K(IB_CM_LAP_RCVD); K(IB_CM_MRA_LAP_SENT); K(IB_CM_MRA_LAP_RCVD);

	K(IB_CM_REQ_ERROR); K(IB_CM_REQ_RECEIVED); K(IB_CM_REP_ERROR);
	K(IB_CM_REP_RECEIVED); K(IB_CM_RTU_RECEIVED); K(IB_CM_USER_ESTABLISHED);
	K(IB_CM_DREQ_ERROR); K(IB_CM_DREQ_RECEIVED); K(IB_CM_DREP_RECEIVED);
	K(IB_CM_TIMEWAIT_EXIT); K(IB_CM_MRA_RECEIVED); K(IB_CM_REJ_RECEIVED);
	K(IB_CM_LAP_ERROR); K(IB_CM_LAP_RECEIVED); K(IB_CM_APR_RECEIVED);
	K(IB_CM_SIDR_REQ_ERROR); K(IB_CM_SIDR_REQ_RECEIVED);
	K(IB_CM_SIDR_REP_RECEIVED);

	K(IB_CM_REQ_PRIVATE_DATA_SIZE); K(IB_CM_MRA_PRIVATE_DATA_SIZE);
	K(IB_CM_REJ_PRIVATE_DATA_SIZE); K(IB_CM_REP_PRIVATE_DATA_SIZE);
	K(IB_CM_RTU_PRIVATE_DATA_SIZE); K(IB_CM_DREQ_PRIVATE_DATA_SIZE);
	K(IB_CM_DREP_PRIVATE_DATA_SIZE); K(IB_CM_REJ_ARI_LENGTH);
	K(IB_CM_LAP_PRIVATE_DATA_SIZE); K(IB_CM_APR_PRIVATE_DATA_SIZE);
	K(IB_CM_APR_INFO_LENGTH); K(IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE);
	K(IB_CM_SIDR_REP_PRIVATE_DATA_SIZE); K(IB_CM_SIDR_REP_INFO_LENGTH);

	K(IB_CM_REJ_NO_QP); K(IB_CM_REJ_NO_EEC); K(IB_CM_REJ_NO_RESOURCES);
	K(IB_CM_REJ_TIMEOUT); K(IB_CM_REJ_UNSUPPORTED);
	K(IB_CM_REJ_INVALID_COMM_ID); K(IB_CM_REJ_INVALID_COMM_INSTANCE);
	K(IB_CM_REJ_INVALID_SERVICE_ID); K(IB_CM_REJ_INVALID_TRANSPORT_TYPE);
	K(IB_CM_REJ_STALE_CONN); K(IB_CM_REJ_RDC_NOT_EXIST);
	K(IB_CM_REJ_INVALID_GID); K(IB_CM_REJ_INVALID_LID);
	K(IB_CM_REJ_INVALID_SL); K(IB_CM_REJ_INVALID_TRAFFIC_CLASS);
	K(IB_CM_REJ_INVALID_HOP_LIMIT); K(IB_CM_REJ_INVALID_PACKET_RATE);
	K(IB_CM_REJ_INVALID_ALT_GID); K(IB_CM_REJ_INVALID_ALT_LID);
	K(IB_CM_REJ_INVALID_ALT_SL); K(IB_CM_REJ_INVALID_ALT_TRAFFIC_CLASS);
	K(IB_CM_REJ_INVALID_ALT_HOP_LIMIT); K(IB_CM_REJ_INVALID_ALT_PACKET_RATE);
	K(IB_CM_REJ_PORT_CM_REDIRECT); K(IB_CM_REJ_PORT_REDIRECT);
	K(IB_CM_REJ_INVALID_MTU); K(IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES);
	K(IB_CM_REJ_CONSUMER_DEFINED); K(IB_CM_REJ_INVALID_RNR_RETRY);
	K(IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID); K(IB_CM_REJ_INVALID_CLASS_VERSION);
	K(IB_CM_REJ_INVALID_FLOW_LABEL); K(IB_CM_REJ_INVALID_ALT_FLOW_LABEL);
	K(IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED);

	K(IB_CM_APR_SUCCESS); K(IB_CM_APR_INVALID_COMM_ID);
	K(IB_CM_APR_UNSUPPORTED); K(IB_CM_APR_REJECT); K(IB_CM_APR_REDIRECT);
	K(IB_CM_APR_IS_CURRENT); K(IB_CM_APR_INVALID_QPN_EECN);
	K(IB_CM_APR_INVALID_LID); K(IB_CM_APR_INVALID_GID);
	K(IB_CM_APR_INVALID_FLOW_LABEL); K(IB_CM_APR_INVALID_TCLASS);
	K(IB_CM_APR_INVALID_HOP_LIMIT); K(IB_CM_APR_INVALID_PACKET_RATE);
	K(IB_CM_APR_INVALID_SL);

	K(IB_SIDR_SUCCESS); K(IB_SIDR_UNSUPPORTED); K(IB_SIDR_REJECT);
	K(IB_SIDR_NO_QP); K(IB_SIDR_REDIRECT); K(IB_SIDR_UNSUPPORTED_VERSION);

	K(CM_REQ_ATTR_ID); K(CM_MRA_ATTR_ID); K(CM_REJ_ATTR_ID);
	K(CM_REP_ATTR_ID); K(CM_RTU_ATTR_ID); K(CM_DREQ_ATTR_ID);
	K(CM_DREP_ATTR_ID); K(CM_SIDR_REQ_ATTR_ID); K(CM_SIDR_REP_ATTR_ID);
	K(CM_LAP_ATTR_ID); K(CM_APR_ATTR_ID);

	K(IB_SERVICE_ID_AGN_MASK); K(IB_CM_ASSIGN_SERVICE_ID);
	K(IB_CMA_SERVICE_ID); K(IB_CMA_SERVICE_ID_MASK);
	K(IB_SDP_SERVICE_ID); K(IB_SDP_SERVICE_ID_MASK);

	/* ibcm_kernel_types.h */
	K(MAX_ERRNO);
}

int main(void)
{
	dump_types();
	dump_constants();
	return 0;
}
