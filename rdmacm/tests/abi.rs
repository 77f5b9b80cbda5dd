//! The mirrors in `src/abi.rs` against rdma-core's headers: gcc compiles
//! `c-tests/rdmacm_abi_dump.c` (sizes, alignments, member offsets and
//! sizes, constants of `<rdma/rdma_cma.h>` and the verbs/SA structs it
//! embeds); every line must equal what Rust says about the mirror.
//! Needs librdmacm-dev and libibverbs-dev (scripts/deps.sh).

#![allow(clippy::unnecessary_cast, unused_unsafe)]

use ibcm::cma::{self, RdmaCmEventType, port_space};
use ibcm_rdmacm::abi::*;
use ibcm_rdmacm::mcast::{self, RdmaCmJoinMcAttrEx};
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::Path;
use std::process::Command;

fn size_of_field<T, F>(_: impl Fn(&T) -> &F) -> usize {
    size_of::<F>()
}

fn rust_facts() -> String {
    let mut s = String::new();
    macro_rules! ty {
        ($t:ty, $name:expr) => {
            writeln!(s, "{} - {} {}", $name, size_of::<$t>(), align_of::<$t>()).unwrap()
        };
    }
    macro_rules! mem {
        ($t:ty, $name:expr, $c:expr, $($f:ident).+) => {
            writeln!(
                s,
                "{} {} {} {}",
                $name,
                $c,
                offset_of!($t, $($f).+),
                size_of_field(|v: &$t| unsafe { &v.$($f).+ })
            )
            .unwrap()
        };
    }
    macro_rules! k {
        ($c:ident, $v:expr) => {
            writeln!(s, "{} {}", stringify!($c), ($v) as i64).unwrap()
        };
    }
    ty!(IbvGid, "ibv_gid");
    ty!(RdmaIbAddr, "rdma_ib_addr");
    mem!(RdmaIbAddr, "rdma_ib_addr", "sgid", sgid);
    mem!(RdmaIbAddr, "rdma_ib_addr", "dgid", dgid);
    mem!(RdmaIbAddr, "rdma_ib_addr", "pkey", pkey);
    ty!(RdmaAddr, "rdma_addr");
    mem!(RdmaAddr, "rdma_addr", "src_storage", src);
    mem!(RdmaAddr, "rdma_addr", "dst_storage", dst);
    mem!(RdmaAddr, "rdma_addr", "addr.ibaddr", ibaddr);
    ty!(RdmaRoute, "rdma_route");
    mem!(RdmaRoute, "rdma_route", "addr", addr);
    mem!(RdmaRoute, "rdma_route", "path_rec", path_rec);
    mem!(RdmaRoute, "rdma_route", "num_paths", num_paths);
    ty!(RdmaEventChannel, "rdma_event_channel");
    mem!(RdmaEventChannel, "rdma_event_channel", "fd", fd);
    ty!(RdmaCmId, "rdma_cm_id");
    mem!(RdmaCmId, "rdma_cm_id", "verbs", verbs);
    mem!(RdmaCmId, "rdma_cm_id", "channel", channel);
    mem!(RdmaCmId, "rdma_cm_id", "context", context);
    mem!(RdmaCmId, "rdma_cm_id", "qp", qp);
    mem!(RdmaCmId, "rdma_cm_id", "route", route);
    mem!(RdmaCmId, "rdma_cm_id", "ps", ps);
    mem!(RdmaCmId, "rdma_cm_id", "port_num", port_num);
    mem!(RdmaCmId, "rdma_cm_id", "event", event);
    mem!(RdmaCmId, "rdma_cm_id", "send_cq_channel", send_cq_channel);
    mem!(RdmaCmId, "rdma_cm_id", "send_cq", send_cq);
    mem!(RdmaCmId, "rdma_cm_id", "recv_cq_channel", recv_cq_channel);
    mem!(RdmaCmId, "rdma_cm_id", "recv_cq", recv_cq);
    mem!(RdmaCmId, "rdma_cm_id", "srq", srq);
    mem!(RdmaCmId, "rdma_cm_id", "pd", pd);
    mem!(RdmaCmId, "rdma_cm_id", "qp_type", qp_type);
    ty!(RdmaConnParam, "rdma_conn_param");
    mem!(
        RdmaConnParam,
        "rdma_conn_param",
        "private_data",
        private_data
    );
    mem!(
        RdmaConnParam,
        "rdma_conn_param",
        "private_data_len",
        private_data_len
    );
    mem!(
        RdmaConnParam,
        "rdma_conn_param",
        "responder_resources",
        responder_resources
    );
    mem!(
        RdmaConnParam,
        "rdma_conn_param",
        "initiator_depth",
        initiator_depth
    );
    mem!(
        RdmaConnParam,
        "rdma_conn_param",
        "flow_control",
        flow_control
    );
    mem!(RdmaConnParam, "rdma_conn_param", "retry_count", retry_count);
    mem!(
        RdmaConnParam,
        "rdma_conn_param",
        "rnr_retry_count",
        rnr_retry_count
    );
    mem!(RdmaConnParam, "rdma_conn_param", "srq", srq);
    mem!(RdmaConnParam, "rdma_conn_param", "qp_num", qp_num);
    ty!(IbvGlobalRoute, "ibv_global_route");
    mem!(IbvGlobalRoute, "ibv_global_route", "dgid", dgid);
    mem!(IbvGlobalRoute, "ibv_global_route", "flow_label", flow_label);
    mem!(IbvGlobalRoute, "ibv_global_route", "sgid_index", sgid_index);
    mem!(IbvGlobalRoute, "ibv_global_route", "hop_limit", hop_limit);
    mem!(
        IbvGlobalRoute,
        "ibv_global_route",
        "traffic_class",
        traffic_class
    );
    ty!(IbvAhAttr, "ibv_ah_attr");
    mem!(IbvAhAttr, "ibv_ah_attr", "grh", grh);
    mem!(IbvAhAttr, "ibv_ah_attr", "dlid", dlid);
    mem!(IbvAhAttr, "ibv_ah_attr", "sl", sl);
    mem!(IbvAhAttr, "ibv_ah_attr", "src_path_bits", src_path_bits);
    mem!(IbvAhAttr, "ibv_ah_attr", "static_rate", static_rate);
    mem!(IbvAhAttr, "ibv_ah_attr", "is_global", is_global);
    mem!(IbvAhAttr, "ibv_ah_attr", "port_num", port_num);
    ty!(RdmaUdParam, "rdma_ud_param");
    mem!(RdmaUdParam, "rdma_ud_param", "private_data", private_data);
    mem!(
        RdmaUdParam,
        "rdma_ud_param",
        "private_data_len",
        private_data_len
    );
    mem!(RdmaUdParam, "rdma_ud_param", "ah_attr", ah_attr);
    mem!(RdmaUdParam, "rdma_ud_param", "qp_num", qp_num);
    mem!(RdmaUdParam, "rdma_ud_param", "qkey", qkey);
    ty!(RdmaCmJoinMcAttrEx, "rdma_cm_join_mc_attr_ex");
    mem!(
        RdmaCmJoinMcAttrEx,
        "rdma_cm_join_mc_attr_ex",
        "comp_mask",
        comp_mask
    );
    mem!(
        RdmaCmJoinMcAttrEx,
        "rdma_cm_join_mc_attr_ex",
        "join_flags",
        join_flags
    );
    mem!(RdmaCmJoinMcAttrEx, "rdma_cm_join_mc_attr_ex", "addr", addr);
    ty!(RdmaCmEvent, "rdma_cm_event");
    mem!(RdmaCmEvent, "rdma_cm_event", "id", id);
    mem!(RdmaCmEvent, "rdma_cm_event", "listen_id", listen_id);
    mem!(RdmaCmEvent, "rdma_cm_event", "event", event);
    mem!(RdmaCmEvent, "rdma_cm_event", "status", status);
    mem!(RdmaCmEvent, "rdma_cm_event", "param", param);
    mem!(RdmaCmEvent, "rdma_cm_event", "param.conn", param.conn);
    mem!(RdmaCmEvent, "rdma_cm_event", "param.ud", param.ud);
    ty!(IbvSaPathRec, "ibv_sa_path_rec");
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "dgid", dgid);
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "sgid", sgid);
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "dlid", dlid);
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "slid", slid);
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "raw_traffic", raw_traffic);
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "flow_label", flow_label);
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "hop_limit", hop_limit);
    mem!(
        IbvSaPathRec,
        "ibv_sa_path_rec",
        "traffic_class",
        traffic_class
    );
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "reversible", reversible);
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "numb_path", numb_path);
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "pkey", pkey);
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "sl", sl);
    mem!(
        IbvSaPathRec,
        "ibv_sa_path_rec",
        "mtu_selector",
        mtu_selector
    );
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "mtu", mtu);
    mem!(
        IbvSaPathRec,
        "ibv_sa_path_rec",
        "rate_selector",
        rate_selector
    );
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "rate", rate);
    mem!(
        IbvSaPathRec,
        "ibv_sa_path_rec",
        "packet_life_time_selector",
        packet_life_time_selector
    );
    mem!(
        IbvSaPathRec,
        "ibv_sa_path_rec",
        "packet_life_time",
        packet_life_time
    );
    mem!(IbvSaPathRec, "ibv_sa_path_rec", "preference", preference);
    ty!(RdmaAddrinfo, "rdma_addrinfo");
    mem!(RdmaAddrinfo, "rdma_addrinfo", "ai_flags", ai_flags);
    mem!(RdmaAddrinfo, "rdma_addrinfo", "ai_family", ai_family);
    mem!(RdmaAddrinfo, "rdma_addrinfo", "ai_qp_type", ai_qp_type);
    mem!(
        RdmaAddrinfo,
        "rdma_addrinfo",
        "ai_port_space",
        ai_port_space
    );
    mem!(RdmaAddrinfo, "rdma_addrinfo", "ai_src_len", ai_src_len);
    mem!(RdmaAddrinfo, "rdma_addrinfo", "ai_dst_len", ai_dst_len);
    mem!(RdmaAddrinfo, "rdma_addrinfo", "ai_src_addr", ai_src_addr);
    mem!(RdmaAddrinfo, "rdma_addrinfo", "ai_dst_addr", ai_dst_addr);
    mem!(
        RdmaAddrinfo,
        "rdma_addrinfo",
        "ai_src_canonname",
        ai_src_canonname
    );
    mem!(
        RdmaAddrinfo,
        "rdma_addrinfo",
        "ai_dst_canonname",
        ai_dst_canonname
    );
    mem!(RdmaAddrinfo, "rdma_addrinfo", "ai_route_len", ai_route_len);
    mem!(RdmaAddrinfo, "rdma_addrinfo", "ai_route", ai_route);
    mem!(
        RdmaAddrinfo,
        "rdma_addrinfo",
        "ai_connect_len",
        ai_connect_len
    );
    mem!(RdmaAddrinfo, "rdma_addrinfo", "ai_connect", ai_connect);
    mem!(RdmaAddrinfo, "rdma_addrinfo", "ai_next", ai_next);
    ty!(IbvQpCap, "ibv_qp_cap");
    mem!(IbvQpCap, "ibv_qp_cap", "max_send_wr", max_send_wr);
    mem!(IbvQpCap, "ibv_qp_cap", "max_recv_wr", max_recv_wr);
    mem!(IbvQpCap, "ibv_qp_cap", "max_send_sge", max_send_sge);
    mem!(IbvQpCap, "ibv_qp_cap", "max_recv_sge", max_recv_sge);
    mem!(IbvQpCap, "ibv_qp_cap", "max_inline_data", max_inline_data);
    ty!(IbvQpInitAttr, "ibv_qp_init_attr");
    mem!(IbvQpInitAttr, "ibv_qp_init_attr", "qp_context", qp_context);
    mem!(IbvQpInitAttr, "ibv_qp_init_attr", "send_cq", send_cq);
    mem!(IbvQpInitAttr, "ibv_qp_init_attr", "recv_cq", recv_cq);
    mem!(IbvQpInitAttr, "ibv_qp_init_attr", "srq", srq);
    mem!(IbvQpInitAttr, "ibv_qp_init_attr", "cap", cap);
    mem!(IbvQpInitAttr, "ibv_qp_init_attr", "qp_type", qp_type);
    mem!(IbvQpInitAttr, "ibv_qp_init_attr", "sq_sig_all", sq_sig_all);
    ty!(IbvQpAttr, "ibv_qp_attr");
    mem!(IbvQpAttr, "ibv_qp_attr", "qp_state", qp_state);
    mem!(IbvQpAttr, "ibv_qp_attr", "cur_qp_state", cur_qp_state);
    mem!(IbvQpAttr, "ibv_qp_attr", "path_mtu", path_mtu);
    mem!(IbvQpAttr, "ibv_qp_attr", "path_mig_state", path_mig_state);
    mem!(IbvQpAttr, "ibv_qp_attr", "qkey", qkey);
    mem!(IbvQpAttr, "ibv_qp_attr", "rq_psn", rq_psn);
    mem!(IbvQpAttr, "ibv_qp_attr", "sq_psn", sq_psn);
    mem!(IbvQpAttr, "ibv_qp_attr", "dest_qp_num", dest_qp_num);
    mem!(IbvQpAttr, "ibv_qp_attr", "qp_access_flags", qp_access_flags);
    mem!(IbvQpAttr, "ibv_qp_attr", "cap", cap);
    mem!(IbvQpAttr, "ibv_qp_attr", "ah_attr", ah_attr);
    mem!(IbvQpAttr, "ibv_qp_attr", "alt_ah_attr", alt_ah_attr);
    mem!(IbvQpAttr, "ibv_qp_attr", "pkey_index", pkey_index);
    mem!(IbvQpAttr, "ibv_qp_attr", "alt_pkey_index", alt_pkey_index);
    mem!(
        IbvQpAttr,
        "ibv_qp_attr",
        "en_sqd_async_notify",
        en_sqd_async_notify
    );
    mem!(IbvQpAttr, "ibv_qp_attr", "sq_draining", sq_draining);
    mem!(IbvQpAttr, "ibv_qp_attr", "max_rd_atomic", max_rd_atomic);
    mem!(
        IbvQpAttr,
        "ibv_qp_attr",
        "max_dest_rd_atomic",
        max_dest_rd_atomic
    );
    mem!(IbvQpAttr, "ibv_qp_attr", "min_rnr_timer", min_rnr_timer);
    mem!(IbvQpAttr, "ibv_qp_attr", "port_num", port_num);
    mem!(IbvQpAttr, "ibv_qp_attr", "timeout", timeout);
    mem!(IbvQpAttr, "ibv_qp_attr", "retry_cnt", retry_cnt);
    mem!(IbvQpAttr, "ibv_qp_attr", "rnr_retry", rnr_retry);
    mem!(IbvQpAttr, "ibv_qp_attr", "alt_port_num", alt_port_num);
    mem!(IbvQpAttr, "ibv_qp_attr", "alt_timeout", alt_timeout);
    mem!(IbvQpAttr, "ibv_qp_attr", "rate_limit", rate_limit);
    ty!(IbvEce, "ibv_ece");
    mem!(IbvEce, "ibv_ece", "vendor_id", vendor_id);
    mem!(IbvEce, "ibv_ece", "options", options);
    mem!(IbvEce, "ibv_ece", "comp_mask", comp_mask);
    k!(RDMA_PS_IPOIB, port_space::IPOIB);
    k!(RDMA_PS_TCP, port_space::TCP);
    k!(RDMA_PS_UDP, port_space::UDP);
    k!(RDMA_PS_IB, port_space::IB);
    k!(RDMA_UDP_QKEY, cma::RDMA_UDP_QKEY);
    k!(RDMA_CM_JOIN_MC_ATTR_ADDRESS, mcast::JOIN_MC_ATTR_ADDRESS);
    k!(
        RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
        mcast::JOIN_MC_ATTR_JOIN_FLAGS
    );
    k!(RDMA_CM_JOIN_MC_ATTR_RESERVED, mcast::JOIN_MC_ATTR_RESERVED);
    k!(RDMA_MC_JOIN_FLAG_FULLMEMBER, mcast::MC_JOIN_FLAG_FULLMEMBER);
    k!(
        RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
        mcast::MC_JOIN_FLAG_SENDONLY_FULLMEMBER
    );
    k!(RDMA_MC_JOIN_FLAG_RESERVED, mcast::MC_JOIN_FLAG_RESERVED);
    k!(
        RDMA_CM_EVENT_ADDR_RESOLVED,
        RdmaCmEventType::AddrResolved as u32
    );
    k!(
        RDMA_CM_EVENT_CONNECT_REQUEST,
        RdmaCmEventType::ConnectRequest as u32
    );
    k!(RDMA_CM_EVENT_REJECTED, RdmaCmEventType::Rejected as u32);
    k!(
        RDMA_CM_EVENT_ESTABLISHED,
        RdmaCmEventType::Established as u32
    );
    k!(
        RDMA_CM_EVENT_TIMEWAIT_EXIT,
        RdmaCmEventType::TimewaitExit as u32
    );
    k!(IBV_QPT_RC, IBV_QPT_RC);
    k!(IBV_QPT_UC, IBV_QPT_UC);
    k!(IBV_QPT_UD, IBV_QPT_UD);
    k!(IBV_QPS_INIT, IBV_QPS_INIT);
    k!(IBV_QPS_RTR, IBV_QPS_RTR);
    k!(IBV_QPS_RTS, IBV_QPS_RTS);
    k!(IBV_QP_STATE, IBV_QP_STATE);
    k!(IBV_QP_ACCESS_FLAGS, IBV_QP_ACCESS_FLAGS);
    k!(IBV_QP_PKEY_INDEX, IBV_QP_PKEY_INDEX);
    k!(IBV_QP_PORT, IBV_QP_PORT);
    k!(IBV_QP_QKEY, IBV_QP_QKEY);
    k!(IBV_QP_TIMEOUT, IBV_QP_TIMEOUT);
    k!(RAI_PASSIVE, RAI_PASSIVE);
    k!(RAI_NUMERICHOST, RAI_NUMERICHOST);
    k!(RAI_NOROUTE, RAI_NOROUTE);
    k!(RAI_FAMILY, RAI_FAMILY);
    k!(RDMA_OPTION_ID, RDMA_OPTION_ID);
    k!(RDMA_OPTION_IB, RDMA_OPTION_IB);
    k!(RDMA_OPTION_ID_TOS, RDMA_OPTION_ID_TOS);
    k!(RDMA_OPTION_ID_REUSEADDR, RDMA_OPTION_ID_REUSEADDR);
    k!(RDMA_OPTION_ID_AFONLY, RDMA_OPTION_ID_AFONLY);
    k!(RDMA_OPTION_ID_ACK_TIMEOUT, RDMA_OPTION_ID_ACK_TIMEOUT);
    k!(RDMA_OPTION_IB_PATH, RDMA_OPTION_IB_PATH);
    k!(RDMA_MAX_RESP_RES, RDMA_MAX_RESP_RES);
    k!(RDMA_MAX_INIT_DEPTH, RDMA_MAX_INIT_DEPTH);
    k!(IBV_EVENT_COMM_EST, IBV_EVENT_COMM_EST);
    k!(AF_IB, AF_IB);
    s
}

#[test]
fn mirrors_match_rdma_cma_h() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if !Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        assert!(
            std::env::var("CI").is_err(),
            "<rdma/rdma_cma.h> is missing: scripts/deps.sh installs librdmacm-dev"
        );
        eprintln!("skipped: <rdma/rdma_cma.h> not installed (apt-get install librdmacm-dev)");
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rdmacm-abi");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(format!("dump-{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg(root.join("c-tests/rdmacm_abi_dump.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = Command::new(&exe).output().expect("run the dump");
    let c = String::from_utf8(c.stdout).unwrap();
    let rust = rust_facts();
    let (cl, rl): (Vec<_>, Vec<_>) = (c.lines().collect(), rust.lines().collect());
    assert_eq!(cl.len(), rl.len(), "C and Rust list different facts");
    for (a, b) in cl.iter().zip(&rl) {
        assert_eq!(a, b, "gcc says {a:?}, the Rust mirror {b:?}");
    }
}
