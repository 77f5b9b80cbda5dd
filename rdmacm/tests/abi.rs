//! The mirrors in `src/abi.rs` against rdma-core's headers. One table
//! below names each mirrored struct with its C type and the members to
//! check, and each constant with the Rust value it must equal. From it the
//! test writes a C program that prints what gcc says about the C side
//! (sizes, alignments, member offsets and sizes, constant values, one fact
//! a line) and the same lines from what Rust says about the mirror; every
//! line must be equal. Needs librdmacm-dev and libibverbs-dev
//! (scripts/deps.sh).

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

/// Each fact twice: the C statement that prints it and the line Rust
/// expects that statement to print.
#[derive(Default)]
struct Facts {
    c: String,
    rust: String,
}

impl Facts {
    /// `<type> - <sizeof> <alignof>`; `ctype` is the C spelling
    /// (`struct rdma_cm_id`), the line names it without the keyword.
    fn ty(&mut self, ctype: &str, size: usize, align: usize) {
        let name = label(ctype);
        writeln!(self.c, "\tTYPE({ctype}, \"{name}\");").unwrap();
        writeln!(self.rust, "{name} - {size} {align}").unwrap();
    }

    /// `<type> <member> <offset> <size>`.
    fn mem(&mut self, ctype: &str, member: &str, offset: usize, size: usize) {
        let name = label(ctype);
        writeln!(self.c, "\tMEM({ctype}, \"{name}\", {member});").unwrap();
        writeln!(self.rust, "{name} {member} {offset} {size}").unwrap();
    }

    /// `<NAME> <value>`.
    fn k(&mut self, name: &str, value: i64) {
        writeln!(self.c, "\tK({name});").unwrap();
        writeln!(self.rust, "{name} {value}").unwrap();
    }

    /// The C program that prints gcc's side of every fact.
    fn c_program(&self) -> String {
        format!(
            "#include <stddef.h>\n#include <stdio.h>\n\n\
             #include <infiniband/sa.h>\n#include <infiniband/verbs.h>\n#include <rdma/rdma_cma.h>\n\n\
             #define TYPE(T, name) printf(\"%s - %zu %zu\\n\", name, sizeof(T), (size_t)_Alignof(T))\n\
             #define MEM(T, name, m) printf(\"%s %s %zu %zu\\n\", name, #m, offsetof(T, m), sizeof(((T *)0)->m))\n\
             #define K(x) printf(\"%s %lld\\n\", #x, (long long)(x))\n\n\
             int main(void)\n{{\n{}\treturn 0;\n}}\n",
            self.c
        )
    }
}

/// `struct rdma_cm_id` → `rdma_cm_id`.
fn label(ctype: &str) -> &str {
    ctype
        .strip_prefix("struct ")
        .or_else(|| ctype.strip_prefix("union "))
        .unwrap_or(ctype)
}

/// `Mirror = "C type" { member, member.sub, rust_member = "c_member" }`:
/// the type's size and alignment, then each member's offset and size.
macro_rules! mirrors {
    ($facts:ident; $($t:ident = $ctype:literal {
        $($f:ident $(. $g:ident)* $(= $cm:literal)?),* $(,)?
    })*) => {$(
        $facts.ty($ctype, size_of::<$t>(), align_of::<$t>());
        $(
            $facts.mem(
                $ctype,
                [$($cm,)? concat!(stringify!($f) $(, ".", stringify!($g))*)][0],
                offset_of!($t, $f $(. $g)*),
                size_of_field(|v: &$t| unsafe { &v.$f $(. $g)* }),
            );
        )*
    )*};
}

/// `NAME = rust_value` or `NAME` (a Rust constant of the C name).
macro_rules! constants {
    ($facts:ident; $($c:ident $(= $v:expr)?),* $(,)?) => {
        $($facts.k(stringify!($c), constants!(@value $c $(= $v)?));)*
    };
    (@value $c:ident = $v:expr) => { ($v) as i64 };
    (@value $c:ident) => { ($c) as i64 };
}

fn facts() -> Facts {
    let mut f = Facts::default();
    mirrors! { f;
        IbvGid = "union ibv_gid" {}
        RdmaIbAddr = "struct rdma_ib_addr" { sgid, dgid, pkey }
        RdmaAddr = "struct rdma_addr" {
            src = "src_storage", dst = "dst_storage", ibaddr = "addr.ibaddr"
        }
        RdmaRoute = "struct rdma_route" { addr, path_rec, num_paths }
        RdmaEventChannel = "struct rdma_event_channel" { fd }
        RdmaCmId = "struct rdma_cm_id" {
            verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq,
            recv_cq_channel, recv_cq, srq, pd, qp_type
        }
        RdmaConnParam = "struct rdma_conn_param" {
            private_data, private_data_len, responder_resources, initiator_depth, flow_control,
            retry_count, rnr_retry_count, srq, qp_num
        }
        IbvGlobalRoute = "struct ibv_global_route" {
            dgid, flow_label, sgid_index, hop_limit, traffic_class
        }
        IbvAhAttr = "struct ibv_ah_attr" {
            grh, dlid, sl, src_path_bits, static_rate, is_global, port_num
        }
        RdmaUdParam = "struct rdma_ud_param" {
            private_data, private_data_len, ah_attr, qp_num, qkey
        }
        RdmaCmJoinMcAttrEx = "struct rdma_cm_join_mc_attr_ex" { comp_mask, join_flags, addr }
        RdmaCmEvent = "struct rdma_cm_event" {
            id, listen_id, event, status, param, param.conn, param.ud
        }
        IbvSaPathRec = "struct ibv_sa_path_rec" {
            dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class, reversible,
            numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate, packet_life_time_selector,
            packet_life_time, preference
        }
        RdmaAddrinfo = "struct rdma_addrinfo" {
            ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr,
            ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route, ai_connect_len,
            ai_connect, ai_next
        }
        IbvQpCap = "struct ibv_qp_cap" {
            max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data
        }
        IbvQpInitAttr = "struct ibv_qp_init_attr" {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all
        }
        IbvQpAttr = "struct ibv_qp_attr" {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
            qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
            en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
            port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit
        }
        IbvEce = "struct ibv_ece" { vendor_id, options, comp_mask }
    }
    constants! { f;
        RDMA_PS_IPOIB = port_space::IPOIB,
        RDMA_PS_TCP = port_space::TCP,
        RDMA_PS_UDP = port_space::UDP,
        RDMA_PS_IB = port_space::IB,
        RDMA_UDP_QKEY = cma::RDMA_UDP_QKEY,
        RDMA_CM_JOIN_MC_ATTR_ADDRESS = mcast::JOIN_MC_ATTR_ADDRESS,
        RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS = mcast::JOIN_MC_ATTR_JOIN_FLAGS,
        RDMA_CM_JOIN_MC_ATTR_RESERVED = mcast::JOIN_MC_ATTR_RESERVED,
        RDMA_MC_JOIN_FLAG_FULLMEMBER = mcast::MC_JOIN_FLAG_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER = mcast::MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_RESERVED = mcast::MC_JOIN_FLAG_RESERVED,
        RDMA_CM_EVENT_ADDR_RESOLVED = RdmaCmEventType::AddrResolved as u32,
        RDMA_CM_EVENT_CONNECT_REQUEST = RdmaCmEventType::ConnectRequest as u32,
        RDMA_CM_EVENT_REJECTED = RdmaCmEventType::Rejected as u32,
        RDMA_CM_EVENT_ESTABLISHED = RdmaCmEventType::Established as u32,
        RDMA_CM_EVENT_TIMEWAIT_EXIT = RdmaCmEventType::TimewaitExit as u32,
        IBV_QPT_RC,
        IBV_QPT_UC,
        IBV_QPT_UD,
        IBV_QPS_INIT,
        IBV_QPS_RTR,
        IBV_QPS_RTS,
        IBV_QP_STATE,
        IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX,
        IBV_QP_PORT,
        IBV_QP_QKEY,
        IBV_QP_TIMEOUT,
        RAI_PASSIVE,
        RAI_NUMERICHOST,
        RAI_NOROUTE,
        RAI_FAMILY,
        RDMA_OPTION_ID,
        RDMA_OPTION_IB,
        RDMA_OPTION_ID_TOS,
        RDMA_OPTION_ID_REUSEADDR,
        RDMA_OPTION_ID_AFONLY,
        RDMA_OPTION_ID_ACK_TIMEOUT,
        RDMA_OPTION_IB_PATH,
        RDMA_MAX_RESP_RES,
        RDMA_MAX_INIT_DEPTH,
        IBV_EVENT_COMM_EST,
        AF_IB,
    }
    f
}

#[test]
fn mirrors_match_rdma_cma_h() {
    if !Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        assert!(
            std::env::var("CI").is_err(),
            "<rdma/rdma_cma.h> is missing: scripts/deps.sh installs librdmacm-dev"
        );
        eprintln!("skipped: <rdma/rdma_cma.h> not installed (apt-get install librdmacm-dev)");
        return;
    }
    let facts = facts();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rdmacm-abi");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(format!("dump-{}", std::process::id()));
    let c_file = exe.with_extension("c");
    std::fs::write(&c_file, facts.c_program()).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg(&c_file)
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
    let (cl, rl): (Vec<_>, Vec<_>) = (c.lines().collect(), facts.rust.lines().collect());
    assert_eq!(cl.len(), rl.len(), "C and Rust list different facts");
    for (a, b) in cl.iter().zip(&rl) {
        assert_eq!(a, b, "gcc says {a:?}, the Rust mirror {b:?}");
    }
}
