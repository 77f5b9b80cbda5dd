/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Prints the ABI of rdma-core's <rdma/rdma_cma.h> (and the verbs/SA
 * structs it embeds) as gcc sees it, one fact per line, for
 * rdmacm/tests/abi.rs to compare with the mirrors in rdmacm/src/abi.rs:
 *
 *   <type> - <sizeof> <alignof>
 *   <type> <member> <offset> <size>
 *   <NAME> <value>
 */
#include <stddef.h>
#include <stdio.h>

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define TYPE(T, name) \
	printf("%s - %zu %zu\n", name, sizeof(T), (size_t)_Alignof(T))
#define MEM(T, name, m) \
	printf("%s %s %zu %zu\n", name, #m, offsetof(T, m), sizeof(((T *)0)->m))
#define K(x) printf("%s %lld\n", #x, (long long)(x))

int main(void)
{
	TYPE(union ibv_gid, "ibv_gid");
	TYPE(struct rdma_ib_addr, "rdma_ib_addr");
	MEM(struct rdma_ib_addr, "rdma_ib_addr", sgid);
	MEM(struct rdma_ib_addr, "rdma_ib_addr", dgid);
	MEM(struct rdma_ib_addr, "rdma_ib_addr", pkey);
	TYPE(struct rdma_addr, "rdma_addr");
	MEM(struct rdma_addr, "rdma_addr", src_storage);
	MEM(struct rdma_addr, "rdma_addr", dst_storage);
	MEM(struct rdma_addr, "rdma_addr", addr.ibaddr);
	TYPE(struct rdma_route, "rdma_route");
	MEM(struct rdma_route, "rdma_route", addr);
	MEM(struct rdma_route, "rdma_route", path_rec);
	MEM(struct rdma_route, "rdma_route", num_paths);
	TYPE(struct rdma_event_channel, "rdma_event_channel");
	MEM(struct rdma_event_channel, "rdma_event_channel", fd);
	TYPE(struct rdma_cm_id, "rdma_cm_id");
	MEM(struct rdma_cm_id, "rdma_cm_id", verbs);
	MEM(struct rdma_cm_id, "rdma_cm_id", channel);
	MEM(struct rdma_cm_id, "rdma_cm_id", context);
	MEM(struct rdma_cm_id, "rdma_cm_id", qp);
	MEM(struct rdma_cm_id, "rdma_cm_id", route);
	MEM(struct rdma_cm_id, "rdma_cm_id", ps);
	MEM(struct rdma_cm_id, "rdma_cm_id", port_num);
	MEM(struct rdma_cm_id, "rdma_cm_id", event);
	MEM(struct rdma_cm_id, "rdma_cm_id", send_cq_channel);
	MEM(struct rdma_cm_id, "rdma_cm_id", send_cq);
	MEM(struct rdma_cm_id, "rdma_cm_id", recv_cq_channel);
	MEM(struct rdma_cm_id, "rdma_cm_id", recv_cq);
	MEM(struct rdma_cm_id, "rdma_cm_id", srq);
	MEM(struct rdma_cm_id, "rdma_cm_id", pd);
	MEM(struct rdma_cm_id, "rdma_cm_id", qp_type);
	TYPE(struct rdma_conn_param, "rdma_conn_param");
	MEM(struct rdma_conn_param, "rdma_conn_param", private_data);
	MEM(struct rdma_conn_param, "rdma_conn_param", private_data_len);
	MEM(struct rdma_conn_param, "rdma_conn_param", responder_resources);
	MEM(struct rdma_conn_param, "rdma_conn_param", initiator_depth);
	MEM(struct rdma_conn_param, "rdma_conn_param", flow_control);
	MEM(struct rdma_conn_param, "rdma_conn_param", retry_count);
	MEM(struct rdma_conn_param, "rdma_conn_param", rnr_retry_count);
	MEM(struct rdma_conn_param, "rdma_conn_param", srq);
	MEM(struct rdma_conn_param, "rdma_conn_param", qp_num);
	TYPE(struct ibv_global_route, "ibv_global_route");
	MEM(struct ibv_global_route, "ibv_global_route", dgid);
	MEM(struct ibv_global_route, "ibv_global_route", flow_label);
	MEM(struct ibv_global_route, "ibv_global_route", sgid_index);
	MEM(struct ibv_global_route, "ibv_global_route", hop_limit);
	MEM(struct ibv_global_route, "ibv_global_route", traffic_class);
	TYPE(struct ibv_ah_attr, "ibv_ah_attr");
	MEM(struct ibv_ah_attr, "ibv_ah_attr", grh);
	MEM(struct ibv_ah_attr, "ibv_ah_attr", dlid);
	MEM(struct ibv_ah_attr, "ibv_ah_attr", sl);
	MEM(struct ibv_ah_attr, "ibv_ah_attr", src_path_bits);
	MEM(struct ibv_ah_attr, "ibv_ah_attr", static_rate);
	MEM(struct ibv_ah_attr, "ibv_ah_attr", is_global);
	MEM(struct ibv_ah_attr, "ibv_ah_attr", port_num);
	TYPE(struct rdma_ud_param, "rdma_ud_param");
	MEM(struct rdma_ud_param, "rdma_ud_param", private_data);
	MEM(struct rdma_ud_param, "rdma_ud_param", private_data_len);
	MEM(struct rdma_ud_param, "rdma_ud_param", ah_attr);
	MEM(struct rdma_ud_param, "rdma_ud_param", qp_num);
	MEM(struct rdma_ud_param, "rdma_ud_param", qkey);
	TYPE(struct rdma_cm_join_mc_attr_ex, "rdma_cm_join_mc_attr_ex");
	MEM(struct rdma_cm_join_mc_attr_ex, "rdma_cm_join_mc_attr_ex", comp_mask);
	MEM(struct rdma_cm_join_mc_attr_ex, "rdma_cm_join_mc_attr_ex", join_flags);
	MEM(struct rdma_cm_join_mc_attr_ex, "rdma_cm_join_mc_attr_ex", addr);
	TYPE(struct rdma_cm_event, "rdma_cm_event");
	MEM(struct rdma_cm_event, "rdma_cm_event", id);
	MEM(struct rdma_cm_event, "rdma_cm_event", listen_id);
	MEM(struct rdma_cm_event, "rdma_cm_event", event);
	MEM(struct rdma_cm_event, "rdma_cm_event", status);
	MEM(struct rdma_cm_event, "rdma_cm_event", param);
	MEM(struct rdma_cm_event, "rdma_cm_event", param.conn);
	MEM(struct rdma_cm_event, "rdma_cm_event", param.ud);
	TYPE(struct ibv_sa_path_rec, "ibv_sa_path_rec");
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", dgid);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", sgid);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", dlid);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", slid);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", raw_traffic);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", flow_label);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", hop_limit);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", traffic_class);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", reversible);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", numb_path);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", pkey);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", sl);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", mtu_selector);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", mtu);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", rate_selector);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", rate);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", packet_life_time_selector);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", packet_life_time);
	MEM(struct ibv_sa_path_rec, "ibv_sa_path_rec", preference);
	TYPE(struct rdma_addrinfo, "rdma_addrinfo");
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_flags);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_family);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_qp_type);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_port_space);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_src_len);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_dst_len);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_src_addr);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_dst_addr);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_src_canonname);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_dst_canonname);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_route_len);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_route);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_connect_len);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_connect);
	MEM(struct rdma_addrinfo, "rdma_addrinfo", ai_next);
	TYPE(struct ibv_qp_cap, "ibv_qp_cap");
	MEM(struct ibv_qp_cap, "ibv_qp_cap", max_send_wr);
	MEM(struct ibv_qp_cap, "ibv_qp_cap", max_recv_wr);
	MEM(struct ibv_qp_cap, "ibv_qp_cap", max_send_sge);
	MEM(struct ibv_qp_cap, "ibv_qp_cap", max_recv_sge);
	MEM(struct ibv_qp_cap, "ibv_qp_cap", max_inline_data);
	TYPE(struct ibv_qp_init_attr, "ibv_qp_init_attr");
	MEM(struct ibv_qp_init_attr, "ibv_qp_init_attr", qp_context);
	MEM(struct ibv_qp_init_attr, "ibv_qp_init_attr", send_cq);
	MEM(struct ibv_qp_init_attr, "ibv_qp_init_attr", recv_cq);
	MEM(struct ibv_qp_init_attr, "ibv_qp_init_attr", srq);
	MEM(struct ibv_qp_init_attr, "ibv_qp_init_attr", cap);
	MEM(struct ibv_qp_init_attr, "ibv_qp_init_attr", qp_type);
	MEM(struct ibv_qp_init_attr, "ibv_qp_init_attr", sq_sig_all);
	TYPE(struct ibv_qp_attr, "ibv_qp_attr");
	MEM(struct ibv_qp_attr, "ibv_qp_attr", qp_state);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", cur_qp_state);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", path_mtu);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", path_mig_state);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", qkey);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", rq_psn);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", sq_psn);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", dest_qp_num);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", qp_access_flags);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", cap);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", ah_attr);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", alt_ah_attr);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", pkey_index);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", alt_pkey_index);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", en_sqd_async_notify);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", sq_draining);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", max_rd_atomic);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", max_dest_rd_atomic);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", min_rnr_timer);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", port_num);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", timeout);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", retry_cnt);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", rnr_retry);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", alt_port_num);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", alt_timeout);
	MEM(struct ibv_qp_attr, "ibv_qp_attr", rate_limit);
	TYPE(struct ibv_ece, "ibv_ece");
	MEM(struct ibv_ece, "ibv_ece", vendor_id);
	MEM(struct ibv_ece, "ibv_ece", options);
	MEM(struct ibv_ece, "ibv_ece", comp_mask);
	K(RDMA_PS_IPOIB);
	K(RDMA_PS_TCP);
	K(RDMA_PS_UDP);
	K(RDMA_PS_IB);
	K(RDMA_UDP_QKEY);
	K(RDMA_CM_JOIN_MC_ATTR_ADDRESS);
	K(RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS);
	K(RDMA_CM_JOIN_MC_ATTR_RESERVED);
	K(RDMA_MC_JOIN_FLAG_FULLMEMBER);
	K(RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER);
	K(RDMA_MC_JOIN_FLAG_RESERVED);
	K(RDMA_CM_EVENT_ADDR_RESOLVED);
	K(RDMA_CM_EVENT_CONNECT_REQUEST);
	K(RDMA_CM_EVENT_REJECTED);
	K(RDMA_CM_EVENT_ESTABLISHED);
	K(RDMA_CM_EVENT_TIMEWAIT_EXIT);
	K(IBV_QPT_RC);
	K(IBV_QPT_UC);
	K(IBV_QPT_UD);
	K(IBV_QPS_INIT);
	K(IBV_QPS_RTR);
	K(IBV_QPS_RTS);
	K(IBV_QP_STATE);
	K(IBV_QP_ACCESS_FLAGS);
	K(IBV_QP_PKEY_INDEX);
	K(IBV_QP_PORT);
	K(IBV_QP_QKEY);
	K(IBV_QP_TIMEOUT);
	K(RAI_PASSIVE);
	K(RAI_NUMERICHOST);
	K(RAI_NOROUTE);
	K(RAI_FAMILY);
	K(RDMA_OPTION_ID);
	K(RDMA_OPTION_IB);
	K(RDMA_OPTION_ID_TOS);
	K(RDMA_OPTION_ID_REUSEADDR);
	K(RDMA_OPTION_ID_AFONLY);
	K(RDMA_OPTION_ID_ACK_TIMEOUT);
	K(RDMA_OPTION_IB_PATH);
	K(RDMA_MAX_RESP_RES);
	K(RDMA_MAX_INIT_DEPTH);
	K(IBV_EVENT_COMM_EST);
	K(AF_IB);
	return 0;
}
