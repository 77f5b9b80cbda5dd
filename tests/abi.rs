//! The C headers in `include/` and the Rust mirrors in `src/abi.rs`
//! must describe the same ABI.  This test compiles `c-tests/abi_dump.c`
//! with the C compiler (`$CC`, default `gcc`), runs it, and compares every
//! line it prints (sizes, alignments, member offsets and sizes, bitfield
//! positions, constant values) with what Rust says about the mirrors.  Both
//! sides must list exactly the same facts.
//!
//! It also compiles and runs `c-tests/abi_static.c` (the headers against
//! the kernel's numbers) and checks that every header compiles on its own
//! under `-std=c11 -pedantic`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use ibcm::abi::*;

// ---------------------------------------------------------------------------
// Running the C compiler
// ---------------------------------------------------------------------------

fn project_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn scratch_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("abi-test");
    std::fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

fn c_compiler() -> String {
    std::env::var("CC")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "gcc".to_string())
}

const CFLAGS: &[&str] = &["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"];

/// Compiles `source` (with `-I include`) into `output`; panics with the
/// compiler's messages on failure.
fn compile(source: &Path, output: &Path, extra: &[&str]) {
    let cc = c_compiler();
    let include = project_dir().join("include");
    let result = Command::new(&cc)
        .args(CFLAGS)
        .args(extra)
        .arg("-I")
        .arg(&include)
        .arg(source)
        .arg("-o")
        .arg(output)
        .output();
    let out = match result {
        Ok(out) => out,
        Err(e) => panic!(
            "cannot run the C compiler `{cc}` ({e}); the ABI test needs gcc \
             (or set CC to a C11 compiler)"
        ),
    };
    assert!(
        out.status.success(),
        "`{cc}` failed to compile {}:\n{}{}",
        source.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles and runs a C program from `c-tests/`, returning its stdout.
fn build_and_run(name: &str) -> String {
    let source = project_dir().join("c-tests").join(format!("{name}.c"));
    let exe = scratch_dir().join(format!("{name}-{}", std::process::id()));
    compile(&source, &exe, &[]);
    let out = Command::new(&exe)
        .output()
        .expect("run the compiled C test");
    let _ = std::fs::remove_file(&exe);
    let stdout = String::from_utf8(out.stdout).expect("C output is UTF-8");
    assert!(
        out.status.success(),
        "{name} exited with {}:\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

// ---------------------------------------------------------------------------
// Facts
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fact {
    /// sizeof, alignof
    Type(usize, usize),
    /// offset, size
    Member(usize, usize),
    /// first bit (from the start of the struct, LSB first), width
    Bits(usize, usize),
    /// value as unsigned 64 bits
    Const(u64),
}

type Facts = BTreeMap<String, Fact>;

fn num(s: &str, line: &str) -> u64 {
    s.parse()
        .unwrap_or_else(|_| panic!("bad number {s:?} in abi_dump line {line:?}"))
}

/// Parses the output of `c-tests/abi_dump.c` (format documented there).
fn parse_c(text: &str) -> Facts {
    let mut facts = Facts::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (key, fact) = match f.as_slice() {
            [name, value] => (format!("const {name}"), Fact::Const(num(value, line))),
            [ty, "-", size, align] => (
                (*ty).to_string(),
                Fact::Type(num(size, line) as usize, num(align, line) as usize),
            ),
            [ty, member, bits, width] if bits.starts_with("bit:") => (
                format!("{ty}.{member}"),
                Fact::Bits(num(&bits[4..], line) as usize, num(width, line) as usize),
            ),
            [ty, member, off, size] => (
                format!("{ty}.{member}"),
                Fact::Member(num(off, line) as usize, num(size, line) as usize),
            ),
            _ => panic!("unexpected abi_dump line {line:?}"),
        };
        assert!(
            facts.insert(key.clone(), fact).is_none(),
            "duplicate abi_dump fact {key}"
        );
    }
    facts
}

/// Size of the pointee, without a value.
fn size_of_pointee<F>(_: *const F) -> usize {
    size_of::<F>()
}

/// `(offset, size)` of a member path.
macro_rules! member {
    ($t:ty, $($f:tt).+) => {{
        let u = std::mem::MaybeUninit::<$t>::uninit();
        let p = u.as_ptr();
        // SAFETY: only the member's address is computed; nothing is read.
        let size = size_of_pointee(unsafe { std::ptr::addr_of!((*p).$($f).+) });
        Fact::Member(offset_of!($t, $($f).+), size)
    }};
}

/// Records a type: `ty!(facts, "c_name", RustType, [same-named members],
/// { "c.member" => rust.path, ... })`; `[a b] facts, …` (a list macro's
/// expansion) adds the members `a` and `b`.
macro_rules! ty {
    // A run of members from one of ibcm's list macros (`src/members.rs`).
    ([$($b:ident)*] $facts:ident, $c:literal, $t:ty, [$($f:ident),* $(,)?]) => {
        ty!($facts, $c, $t, [$($f,)* $($b),*])
    };
    ($facts:ident, $c:literal, $t:ty, [$($f:ident),* $(,)?] $(, { $($cm:literal => $($g:tt).+),* $(,)? })?) => {{
        add(&mut $facts, $c.to_string(), Fact::Type(size_of::<$t>(), align_of::<$t>()));
        $( add(&mut $facts, format!("{}.{}", $c, stringify!($f)), member!($t, $f)); )*
        $($( add(&mut $facts, format!("{}.{}", $c, $cm), member!($t, $($g).+)); )*)?
    }};
}

/// Records bitfields through their setters: `bits!(facts, "c_name",
/// RustType, { "member" => set_member, ... })`.
macro_rules! bits {
    ($facts:ident, $c:literal, $t:ty, { $($cm:literal => $set:ident),* $(,)? }) => {{
        $( add(&mut $facts, format!("{}.{}", $c, $cm), bit_range::<$t>(|p| p.$set(0xFF))); )*
    }};
}

/// Records constants under their own names.
macro_rules! consts {
    ($facts:ident; $($n:ident),* $(,)?) => {{
        $( add(&mut $facts, format!("const {}", stringify!($n)), Fact::Const($n as u64)); )*
    }};
}

fn add(facts: &mut Facts, key: String, fact: Fact) {
    assert!(
        facts.insert(key.clone(), fact).is_none(),
        "duplicate Rust fact {key}"
    );
}

/// Sets a bitfield to all ones (via `set`) in a zero-filled `T` and
/// reports which bits changed, as abi_dump.c does.
fn bit_range<T>(set: impl FnOnce(&mut T)) -> Fact {
    let n = size_of::<T>();
    assert!(align_of::<T>() <= 8);
    let mut buf = vec![0u64; n.div_ceil(8)];
    // SAFETY: the buffer is zeroed, 8-aligned and large enough; an
    // all-zero T is valid for every mirror type.
    set(unsafe { &mut *(buf.as_mut_ptr() as *mut T) });
    // SAFETY: the first n bytes of the buffer are initialised.
    let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, n) };
    let set_bits: Vec<usize> = (0..n * 8)
        .filter(|i| bytes[i / 8] & (1 << (i % 8)) != 0)
        .collect();
    match (set_bits.first(), set_bits.last()) {
        (Some(&first), Some(&last)) if last - first + 1 == set_bits.len() => {
            Fact::Bits(first, set_bits.len())
        }
        (Some(&first), _) => Fact::Bits(first, 0),
        _ => Fact::Bits(usize::MAX, 0),
    }
}

/// Everything the Rust mirrors say, keyed like `parse_c`.
fn rust_facts() -> Facts {
    let mut f = Facts::new();

    ty!(f, "ib_gid", IbGid, [raw, global],
        { "global.subnet_prefix" => global.subnet_prefix,
          "global.interface_id" => global.interface_id });
    ty!(
        f,
        "ib_gid_attr",
        IbGidAttr,
        [ndev, device, gid, gid_type, index, port_num]
    );
    ty!(f, "sa_path_rec_ib", SaPathRecIb, [dlid, slid, raw_traffic]);
    ty!(f, "sa_path_rec_roce", SaPathRecRoce, [route_resolved, dmac]);
    ty!(
        f,
        "sa_path_rec_opa",
        SaPathRecOpa,
        [
            dlid,
            slid,
            raw_traffic,
            l2_8B,
            l2_10B,
            l2_9B,
            l2_16B,
            qos_type,
            qos_priority
        ]
    );
    ty!(f, "sa_path_rec", SaPathRec,
        [dgid, sgid, service_id, flow_label, hop_limit, traffic_class, reversible,
         numb_path, pkey, qos_class, sl, mtu_selector, mtu, rate_selector, rate,
         packet_life_time_selector, packet_life_time, preference, rec_type, flags],
        { "ib" => u.ib, "roce" => u.roce, "opa" => u.opa });
    ty!(
        f,
        "ib_global_route",
        IbGlobalRoute,
        [
            sgid_attr,
            dgid,
            flow_label,
            sgid_index,
            hop_limit,
            traffic_class
        ]
    );
    ty!(f, "ib_ah_attr", IbAhAttr, [dlid, src_path_bits]);
    ty!(f, "roce_ah_attr", RoceAhAttr, [dmac]);
    ty!(f, "opa_ah_attr", OpaAhAttr, [dlid, src_path_bits, make_grd]);
    ty!(f, "rdma_ah_attr", RdmaAhAttr, [grh, sl, static_rate, port_num, ah_flags],
        { "type" => r#type, "ib" => u.ib, "roce" => u.roce, "opa" => u.opa });
    ty!(
        f,
        "ib_qp_cap",
        IbQpCap,
        [
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data,
            max_rdma_ctxs
        ]
    );
    ty!(
        f,
        "ib_qp_attr",
        IbQpAttr,
        [
            qp_state,
            cur_qp_state,
            path_mtu,
            path_mig_state,
            qkey,
            rq_psn,
            sq_psn,
            dest_qp_num,
            qp_access_flags,
            cap,
            ah_attr,
            alt_ah_attr,
            pkey_index,
            alt_pkey_index,
            en_sqd_async_notify,
            sq_draining,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
            alt_port_num,
            alt_timeout,
            rate_limit,
            xmit_slave
        ]
    );
    ty!(f, "rdma_ucm_ece", RdmaUcmEce, [vendor_id, attr_mod]);
    ty!(
        f,
        "ib_mad_hdr",
        IbMadHdr,
        [
            base_version,
            mgmt_class,
            class_version,
            method,
            status,
            class_specific,
            tid,
            attr_id,
            resv,
            attr_mod
        ]
    );
    ty!(f, "ib_mad", IbMad, [mad_hdr, data]);
    ty!(
        f,
        "ib_class_port_info",
        IbClassPortInfo,
        [
            base_version,
            class_version,
            capability_mask,
            cap_mask2_resp_time,
            redirect_gid,
            redirect_tcslfl,
            redirect_lid,
            redirect_pkey,
            redirect_qp,
            redirect_qkey,
            trap_gid,
            trap_tcslfl,
            trap_lid,
            trap_pkey,
            trap_hlqp,
            trap_qkey
        ]
    );

    ty!(
        f,
        "ib_cm_id",
        IbCmId,
        [
            cm_handler,
            context,
            device,
            service_id,
            state,
            lap_state,
            local_id,
            remote_id,
            remote_cm_qpn
        ]
    );
    ty!(
        f,
        "ib_cm_req_event_param",
        IbCmReqEventParam,
        [
            listen_id,
            bth_pkey,
            port,
            primary_path,
            alternate_path,
            ppath_sgid_attr,
            remote_ca_guid,
            remote_qkey,
            remote_qpn,
            qp_type,
            starting_psn,
            responder_resources,
            initiator_depth,
            ece
        ]
    );
    bits!(f, "ib_cm_req_event_param", IbCmReqEventParam, {
        "local_cm_response_timeout" => set_local_cm_response_timeout,
        "flow_control" => set_flow_control,
        "remote_cm_response_timeout" => set_remote_cm_response_timeout,
        "retry_count" => set_retry_count,
        "rnr_retry_count" => set_rnr_retry_count,
        "srq" => set_srq,
    });
    ty!(
        f,
        "ib_cm_rep_event_param",
        IbCmRepEventParam,
        [
            remote_ca_guid,
            remote_qkey,
            remote_qpn,
            starting_psn,
            responder_resources,
            initiator_depth,
            ece
        ]
    );
    bits!(f, "ib_cm_rep_event_param", IbCmRepEventParam, {
        "target_ack_delay" => set_target_ack_delay,
        "failover_accepted" => set_failover_accepted,
        "flow_control" => set_flow_control,
        "rnr_retry_count" => set_rnr_retry_count,
        "srq" => set_srq,
    });
    ty!(
        f,
        "ib_cm_rej_event_param",
        IbCmRejEventParam,
        [reason, ari, ari_length]
    );
    ty!(
        f,
        "ib_cm_mra_event_param",
        IbCmMraEventParam,
        [service_timeout]
    );
    ty!(
        f,
        "ib_cm_lap_event_param",
        IbCmLapEventParam,
        [alternate_path]
    );
    ty!(
        f,
        "ib_cm_apr_event_param",
        IbCmAprEventParam,
        [ap_status, apr_info, info_len]
    );
    ty!(
        f,
        "ib_cm_sidr_req_event_param",
        IbCmSidrReqEventParam,
        [listen_id, service_id, sgid_attr, bth_pkey, port, pkey]
    );
    ty!(
        f,
        "ib_cm_sidr_rep_event_param",
        IbCmSidrRepEventParam,
        [status, qkey, qpn, info, sgid_attr, info_len]
    );
    ty!(f, "ib_cm_event", IbCmEvent, [event, param, private_data],
        { "param.req_rcvd" => param.req_rcvd, "param.rep_rcvd" => param.rep_rcvd,
          "param.rej_rcvd" => param.rej_rcvd, "param.mra_rcvd" => param.mra_rcvd,
          "param.lap_rcvd" => param.lap_rcvd, "param.apr_rcvd" => param.apr_rcvd,
          "param.sidr_req_rcvd" => param.sidr_req_rcvd,
          "param.sidr_rep_rcvd" => param.sidr_rep_rcvd,
          "param.send_status" => param.send_status });
    // The one-byte runs come from the list macros the mirrors are declared
    // with; abi_dump.c names each member on its own.
    ibcm::req_param_bytes!(ty! {
        f,
        "ib_cm_req_param",
        IbCmReqParam,
        [
            primary_path,
            primary_path_inbound,
            primary_path_outbound,
            alternate_path,
            ppath_sgid_attr,
            service_id,
            qp_num,
            qp_type,
            starting_psn,
            private_data,
            private_data_len,
            ece
        ]
    });
    ibcm::rep_param_bytes!(ty! {
        f,
        "ib_cm_rep_param",
        IbCmRepParam,
        [qp_num, starting_psn, private_data, private_data_len, ece]
    });
    ty!(
        f,
        "ib_cm_sidr_req_param",
        IbCmSidrReqParam,
        [
            path,
            sgid_attr,
            service_id,
            timeout_ms,
            private_data,
            private_data_len,
            max_cm_retries
        ]
    );
    ty!(
        f,
        "ib_cm_sidr_rep_param",
        IbCmSidrRepParam,
        [
            qp_num,
            qkey,
            status,
            info,
            info_length,
            private_data,
            private_data_len,
            ece
        ]
    );

    // ib_verbs.h
    consts!(f; IB_GID_TYPE_IB, IB_GID_TYPE_ROCE, IB_GID_TYPE_ROCE_UDP_ENCAP,
        IB_GID_TYPE_SIZE, ROCE_V2_UDP_DPORT);
    consts!(f; IB_EVENT_CQ_ERR, IB_EVENT_QP_FATAL, IB_EVENT_QP_REQ_ERR,
        IB_EVENT_QP_ACCESS_ERR, IB_EVENT_COMM_EST, IB_EVENT_SQ_DRAINED, IB_EVENT_PATH_MIG,
        IB_EVENT_PATH_MIG_ERR, IB_EVENT_DEVICE_FATAL, IB_EVENT_PORT_ACTIVE,
        IB_EVENT_PORT_ERR, IB_EVENT_LID_CHANGE, IB_EVENT_PKEY_CHANGE, IB_EVENT_SM_CHANGE,
        IB_EVENT_SRQ_ERR, IB_EVENT_SRQ_LIMIT_REACHED, IB_EVENT_QP_LAST_WQE_REACHED,
        IB_EVENT_CLIENT_REREGISTER, IB_EVENT_GID_CHANGE, IB_EVENT_WQ_FATAL,
        IB_EVENT_DEVICE_SPEED_CHANGE);
    consts!(f; IB_QPT_SMI, IB_QPT_GSI, IB_QPT_RC, IB_QPT_UC, IB_QPT_UD, IB_QPT_RAW_IPV6,
        IB_QPT_RAW_ETHERTYPE, IB_QPT_RAW_PACKET, IB_QPT_XRC_INI, IB_QPT_XRC_TGT,
        IB_QPT_MAX, IB_QPT_DRIVER, IB_QPT_RESERVED1, IB_QPT_RESERVED2, IB_QPT_RESERVED3,
        IB_QPT_RESERVED4, IB_QPT_RESERVED5, IB_QPT_RESERVED6, IB_QPT_RESERVED7,
        IB_QPT_RESERVED8, IB_QPT_RESERVED9, IB_QPT_RESERVED10);
    consts!(f; IB_WC_SUCCESS, IB_WC_LOC_LEN_ERR, IB_WC_LOC_QP_OP_ERR,
        IB_WC_LOC_EEC_OP_ERR, IB_WC_LOC_PROT_ERR, IB_WC_WR_FLUSH_ERR, IB_WC_MW_BIND_ERR,
        IB_WC_BAD_RESP_ERR, IB_WC_LOC_ACCESS_ERR, IB_WC_REM_INV_REQ_ERR,
        IB_WC_REM_ACCESS_ERR, IB_WC_REM_OP_ERR, IB_WC_RETRY_EXC_ERR,
        IB_WC_RNR_RETRY_EXC_ERR, IB_WC_LOC_RDD_VIOL_ERR, IB_WC_REM_INV_RD_REQ_ERR,
        IB_WC_REM_ABORT_ERR, IB_WC_INV_EECN_ERR, IB_WC_INV_EEC_STATE_ERR, IB_WC_FATAL_ERR,
        IB_WC_RESP_TIMEOUT_ERR, IB_WC_GENERAL_ERR);
    consts!(f; IB_MTU_256, IB_MTU_512, IB_MTU_1024, IB_MTU_2048, IB_MTU_4096,
        OPA_MTU_8192, OPA_MTU_10240);
    consts!(f; IB_RATE_PORT_CURRENT, IB_RATE_2_5_GBPS, IB_RATE_5_GBPS, IB_RATE_10_GBPS,
        IB_RATE_20_GBPS, IB_RATE_30_GBPS, IB_RATE_40_GBPS, IB_RATE_60_GBPS,
        IB_RATE_80_GBPS, IB_RATE_120_GBPS, IB_RATE_14_GBPS, IB_RATE_56_GBPS,
        IB_RATE_112_GBPS, IB_RATE_168_GBPS, IB_RATE_25_GBPS, IB_RATE_100_GBPS,
        IB_RATE_200_GBPS, IB_RATE_300_GBPS, IB_RATE_28_GBPS, IB_RATE_50_GBPS,
        IB_RATE_400_GBPS, IB_RATE_600_GBPS, IB_RATE_800_GBPS, IB_RATE_1600_GBPS);
    consts!(f; IB_QPS_RESET, IB_QPS_INIT, IB_QPS_RTR, IB_QPS_RTS, IB_QPS_SQD, IB_QPS_SQE,
        IB_QPS_ERR);
    consts!(f; IB_MIG_MIGRATED, IB_MIG_REARM, IB_MIG_ARMED);
    consts!(f; IB_QP_STATE, IB_QP_CUR_STATE, IB_QP_EN_SQD_ASYNC_NOTIFY,
        IB_QP_ACCESS_FLAGS, IB_QP_PKEY_INDEX, IB_QP_PORT, IB_QP_QKEY, IB_QP_AV,
        IB_QP_PATH_MTU, IB_QP_TIMEOUT, IB_QP_RETRY_CNT, IB_QP_RNR_RETRY, IB_QP_RQ_PSN,
        IB_QP_MAX_QP_RD_ATOMIC, IB_QP_ALT_PATH, IB_QP_MIN_RNR_TIMER, IB_QP_SQ_PSN,
        IB_QP_MAX_DEST_RD_ATOMIC, IB_QP_PATH_MIG_STATE, IB_QP_CAP, IB_QP_DEST_QPN,
        IB_QP_RESERVED1, IB_QP_RESERVED2, IB_QP_RESERVED3, IB_QP_RESERVED4,
        IB_QP_RATE_LIMIT, IB_QP_ATTR_STANDARD_BITS);
    consts!(f; IB_ACCESS_LOCAL_WRITE, IB_ACCESS_REMOTE_WRITE, IB_ACCESS_REMOTE_READ,
        IB_ACCESS_REMOTE_ATOMIC, IB_ACCESS_MW_BIND, IB_ZERO_BASED, IB_ACCESS_ON_DEMAND,
        IB_ACCESS_HUGETLB, IB_ACCESS_RELAXED_ORDERING, IB_ACCESS_FLUSH_GLOBAL,
        IB_ACCESS_FLUSH_PERSISTENT, IB_ACCESS_OPTIONAL, IB_ACCESS_SUPPORTED);
    consts!(f; RDMA_AH_ATTR_TYPE_UNDEFINED, RDMA_AH_ATTR_TYPE_IB, RDMA_AH_ATTR_TYPE_ROCE,
        RDMA_AH_ATTR_TYPE_OPA, IB_AH_GRH, IB_LID_PERMISSIVE, IB_MULTICAST_LID_BASE,
        IB_MULTICAST_QPN, IB_QPN_MASK, ETH_ALEN);

    // ib_sa.h, rdma_cm.h
    consts!(f; IB_PATH_GMP, IB_PATH_PRIMARY, IB_PATH_ALTERNATE, IB_PATH_OUTBOUND,
        IB_PATH_INBOUND, IB_PATH_INBOUND_REVERSE, IB_PATH_BIDIRECTIONAL,
        SA_PATH_REC_TYPE_IB, SA_PATH_REC_TYPE_ROCE_V1, SA_PATH_REC_TYPE_ROCE_V2,
        SA_PATH_REC_TYPE_OPA, IB_SA_GT, IB_SA_LT, IB_SA_EQ, IB_SA_BEST);
    consts!(f; RDMA_PS_IPOIB, RDMA_PS_IB, RDMA_PS_TCP, RDMA_PS_UDP);

    // ib_mad.h
    consts!(f; IB_MGMT_BASE_VERSION, OPA_MGMT_BASE_VERSION, OPA_SM_CLASS_VERSION,
        IB_MGMT_CLASS_SUBN_LID_ROUTED, IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE,
        IB_MGMT_CLASS_SUBN_ADM, IB_MGMT_CLASS_PERF_MGMT, IB_MGMT_CLASS_BM,
        IB_MGMT_CLASS_DEVICE_MGMT, IB_MGMT_CLASS_CM, IB_MGMT_CLASS_SNMP,
        IB_MGMT_CLASS_DEVICE_ADM, IB_MGMT_CLASS_BOOT_MGMT, IB_MGMT_CLASS_BIS,
        IB_MGMT_CLASS_CONG_MGMT, IB_MGMT_CLASS_VENDOR_RANGE2_START,
        IB_MGMT_CLASS_VENDOR_RANGE2_END, IB_OPENIB_OUI);
    consts!(f; IB_MGMT_METHOD_GET, IB_MGMT_METHOD_SET, IB_MGMT_METHOD_GET_RESP,
        IB_MGMT_METHOD_SEND, IB_MGMT_METHOD_TRAP, IB_MGMT_METHOD_REPORT,
        IB_MGMT_METHOD_REPORT_RESP, IB_MGMT_METHOD_TRAP_REPRESS, IB_MGMT_METHOD_RESP,
        IB_MGMT_MAX_METHODS);
    consts!(f; IB_MGMT_MAD_STATUS_SUCCESS, IB_MGMT_MAD_STATUS_BUSY,
        IB_MGMT_MAD_STATUS_REDIRECT_REQD, IB_MGMT_MAD_STATUS_BAD_VERSION,
        IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD, IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB,
        IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE);
    consts!(f; IB_QP0, IB_QP1, IB_QP1_QKEY, IB_QP_SET_QKEY, IB_DEFAULT_PKEY_PARTIAL,
        IB_DEFAULT_PKEY_FULL);
    consts!(f; IB_MGMT_MAD_HDR, IB_MGMT_MAD_DATA, IB_MGMT_RMPP_HDR, IB_MGMT_RMPP_DATA,
        IB_MGMT_VENDOR_HDR, IB_MGMT_VENDOR_DATA, IB_MGMT_SA_HDR, IB_MGMT_SA_DATA,
        IB_MGMT_DEVICE_HDR, IB_MGMT_DEVICE_DATA, IB_MGMT_MAD_SIZE, OPA_MGMT_MAD_DATA,
        OPA_MGMT_RMPP_DATA, OPA_MGMT_MAD_SIZE, IB_MGMT_CLASSPORTINFO_ATTR_ID,
        IB_CLASS_PORT_INFO_RESP_TIME_MASK, IB_CLASS_PORT_INFO_RESP_TIME_FIELD_SIZE);

    // ib_cm.h
    consts!(f; IB_CM_IDLE, IB_CM_LISTEN, IB_CM_REQ_SENT, IB_CM_REQ_RCVD,
        IB_CM_MRA_REQ_SENT, IB_CM_MRA_REQ_RCVD, IB_CM_REP_SENT, IB_CM_REP_RCVD,
        IB_CM_MRA_REP_SENT, IB_CM_MRA_REP_RCVD, IB_CM_ESTABLISHED, IB_CM_DREQ_SENT,
        IB_CM_DREQ_RCVD, IB_CM_TIMEWAIT, IB_CM_SIDR_REQ_SENT, IB_CM_SIDR_REQ_RCVD);
    consts!(f; IB_CM_LAP_UNINIT, IB_CM_LAP_IDLE, IB_CM_LAP_SENT, IB_CM_LAP_RCVD,
        IB_CM_MRA_LAP_SENT, IB_CM_MRA_LAP_RCVD);
    consts!(f; IB_CM_REQ_ERROR, IB_CM_REQ_RECEIVED, IB_CM_REP_ERROR, IB_CM_REP_RECEIVED,
        IB_CM_RTU_RECEIVED, IB_CM_USER_ESTABLISHED, IB_CM_DREQ_ERROR, IB_CM_DREQ_RECEIVED,
        IB_CM_DREP_RECEIVED, IB_CM_TIMEWAIT_EXIT, IB_CM_MRA_RECEIVED, IB_CM_REJ_RECEIVED,
        IB_CM_LAP_ERROR, IB_CM_LAP_RECEIVED, IB_CM_APR_RECEIVED, IB_CM_SIDR_REQ_ERROR,
        IB_CM_SIDR_REQ_RECEIVED, IB_CM_SIDR_REP_RECEIVED);
    consts!(f; IB_CM_REQ_PRIVATE_DATA_SIZE, IB_CM_MRA_PRIVATE_DATA_SIZE,
        IB_CM_REJ_PRIVATE_DATA_SIZE, IB_CM_REP_PRIVATE_DATA_SIZE,
        IB_CM_RTU_PRIVATE_DATA_SIZE, IB_CM_DREQ_PRIVATE_DATA_SIZE,
        IB_CM_DREP_PRIVATE_DATA_SIZE, IB_CM_REJ_ARI_LENGTH, IB_CM_LAP_PRIVATE_DATA_SIZE,
        IB_CM_APR_PRIVATE_DATA_SIZE, IB_CM_APR_INFO_LENGTH,
        IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE, IB_CM_SIDR_REP_PRIVATE_DATA_SIZE,
        IB_CM_SIDR_REP_INFO_LENGTH);
    consts!(f; IB_CM_REJ_NO_QP, IB_CM_REJ_NO_EEC, IB_CM_REJ_NO_RESOURCES,
        IB_CM_REJ_TIMEOUT, IB_CM_REJ_UNSUPPORTED, IB_CM_REJ_INVALID_COMM_ID,
        IB_CM_REJ_INVALID_COMM_INSTANCE, IB_CM_REJ_INVALID_SERVICE_ID,
        IB_CM_REJ_INVALID_TRANSPORT_TYPE, IB_CM_REJ_STALE_CONN, IB_CM_REJ_RDC_NOT_EXIST,
        IB_CM_REJ_INVALID_GID, IB_CM_REJ_INVALID_LID, IB_CM_REJ_INVALID_SL,
        IB_CM_REJ_INVALID_TRAFFIC_CLASS, IB_CM_REJ_INVALID_HOP_LIMIT,
        IB_CM_REJ_INVALID_PACKET_RATE, IB_CM_REJ_INVALID_ALT_GID,
        IB_CM_REJ_INVALID_ALT_LID, IB_CM_REJ_INVALID_ALT_SL,
        IB_CM_REJ_INVALID_ALT_TRAFFIC_CLASS, IB_CM_REJ_INVALID_ALT_HOP_LIMIT,
        IB_CM_REJ_INVALID_ALT_PACKET_RATE, IB_CM_REJ_PORT_CM_REDIRECT,
        IB_CM_REJ_PORT_REDIRECT, IB_CM_REJ_INVALID_MTU,
        IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES, IB_CM_REJ_CONSUMER_DEFINED,
        IB_CM_REJ_INVALID_RNR_RETRY, IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID,
        IB_CM_REJ_INVALID_CLASS_VERSION, IB_CM_REJ_INVALID_FLOW_LABEL,
        IB_CM_REJ_INVALID_ALT_FLOW_LABEL, IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED);
    consts!(f; IB_CM_APR_SUCCESS, IB_CM_APR_INVALID_COMM_ID, IB_CM_APR_UNSUPPORTED,
        IB_CM_APR_REJECT, IB_CM_APR_REDIRECT, IB_CM_APR_IS_CURRENT,
        IB_CM_APR_INVALID_QPN_EECN, IB_CM_APR_INVALID_LID, IB_CM_APR_INVALID_GID,
        IB_CM_APR_INVALID_FLOW_LABEL, IB_CM_APR_INVALID_TCLASS,
        IB_CM_APR_INVALID_HOP_LIMIT, IB_CM_APR_INVALID_PACKET_RATE, IB_CM_APR_INVALID_SL);
    consts!(f; IB_SIDR_SUCCESS, IB_SIDR_UNSUPPORTED, IB_SIDR_REJECT, IB_SIDR_NO_QP,
        IB_SIDR_REDIRECT, IB_SIDR_UNSUPPORTED_VERSION);
    consts!(f; CM_REQ_ATTR_ID, CM_MRA_ATTR_ID, CM_REJ_ATTR_ID, CM_REP_ATTR_ID,
        CM_RTU_ATTR_ID, CM_DREQ_ATTR_ID, CM_DREP_ATTR_ID, CM_SIDR_REQ_ATTR_ID,
        CM_SIDR_REP_ATTR_ID, CM_LAP_ATTR_ID, CM_APR_ATTR_ID);
    consts!(f; IB_SERVICE_ID_AGN_MASK, IB_CM_ASSIGN_SERVICE_ID, IB_CMA_SERVICE_ID,
        IB_CMA_SERVICE_ID_MASK, IB_SDP_SERVICE_ID, IB_SDP_SERVICE_ID_MASK);

    // ibcm_kernel_types.h
    consts!(f; MAX_ERRNO);

    f
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn c_headers_and_rust_mirrors_agree() {
    let c = parse_c(&build_and_run("abi_dump"));
    let rust = rust_facts();

    let mut report = String::new();
    for (key, cf) in &c {
        match rust.get(key) {
            None => writeln!(report, "only in C:    {key} = {cf:?}").unwrap(),
            Some(rf) if rf != cf => {
                writeln!(report, "mismatch:     {key}: C {cf:?}, Rust {rf:?}").unwrap()
            }
            Some(_) => {}
        }
    }
    for (key, rf) in &rust {
        if !c.contains_key(key) {
            writeln!(report, "only in Rust: {key} = {rf:?}").unwrap();
        }
    }
    assert!(
        report.is_empty(),
        "C headers and src/abi.rs disagree:\n{report}"
    );
    // Sanity: the dump really covered the interesting parts.
    assert!(c.len() > 600, "abi_dump printed only {} facts", c.len());
    assert_eq!(c["ib_cm_event"], Fact::Type(96, 8));
    assert_eq!(c["ib_cm_req_event_param.srq"], Fact::Bits(68 * 8 + 3, 1));
}

/// The protocol tables of the library (`wire::rej_reason`, `sidr_status`,
/// `apr_status`, `engine::EventType`) name exactly the enumerators of the
/// header, by value and name. The Python package's enums and texts are
/// checked against the same header (`python/tests/test_enums.py`) and the
/// library (`test_errors.py`), so a drift on any side fails a test.
#[test]
fn protocol_tables_name_what_the_header_names() {
    use ibcm::engine::EventType;
    use ibcm::wire::{apr_status, rej_reason, sidr_status};
    let c = parse_c(&build_and_run("abi_dump"));
    // The header's constants of one enum: its prefix, minus the other
    // names that share it (event types, sizes of its message's areas).
    let enumerators = |prefix: &str, others: &[&str]| -> BTreeMap<String, u64> {
        c.iter()
            .filter_map(|(k, f)| match (k.strip_prefix("const "), f) {
                (Some(name), Fact::Const(v)) => Some((name, *v)),
                _ => None,
            })
            .filter(|(name, _)| name.starts_with(prefix) && !others.contains(name))
            .map(|(name, v)| (name.to_string(), v))
            .collect()
    };
    let mut report = String::new();

    let reasons = enumerators(
        "IB_CM_REJ_",
        &[
            "IB_CM_REJ_RECEIVED",
            "IB_CM_REJ_PRIVATE_DATA_SIZE",
            "IB_CM_REJ_ARI_LENGTH",
        ],
    );
    let header: Vec<u64> = {
        let mut v: Vec<u64> = reasons.values().copied().collect();
        v.sort();
        v
    };
    let ours: Vec<u64> = rej_reason::ALL.iter().map(|&(v, _)| v as u64).collect();
    if header != ours {
        writeln!(
            report,
            "REJ reasons: header {header:?}, wire::rej_reason::ALL {ours:?}"
        )
        .unwrap();
    }
    for (name, &v) in &reasons {
        if rej_reason::text_str(v as i64) == "unrecognized reason" {
            writeln!(report, "{name} = {v} has no ibcm_reject_msg text").unwrap();
        }
    }

    // (prefix, other names with that prefix, the library's names by value)
    type Status<'a> = (&'a str, &'a [&'a str], fn(u8) -> &'static str);
    let statuses: [Status; 2] = [
        ("IB_SIDR_", &[], sidr_status::name),
        (
            "IB_CM_APR_",
            &[
                "IB_CM_APR_RECEIVED",
                "IB_CM_APR_PRIVATE_DATA_SIZE",
                "IB_CM_APR_INFO_LENGTH",
            ],
            apr_status::name,
        ),
    ];
    for (prefix, others, name_of) in statuses {
        let header = enumerators(prefix, others);
        for (name, &v) in &header {
            if name_of(v as u8) != name {
                writeln!(
                    report,
                    "{name} = {v}: the library names it {}",
                    name_of(v as u8)
                )
                .unwrap();
            }
        }
        let named = (0..=255u8).filter(|&v| name_of(v) != "unknown").count();
        if named != header.len() {
            writeln!(
                report,
                "{prefix}*: the header has {}, the library names {named}",
                header.len()
            )
            .unwrap();
        }
    }

    let events = enumerators("IB_CM_", &[]);
    for (i, ev) in EventType::ALL.iter().enumerate() {
        let name = format!("IB_CM_{}", ev.name());
        if *ev as usize != i || events.get(&name) != Some(&(i as u64)) {
            writeln!(
                report,
                "{name}: header {:?}, library {}",
                events.get(&name),
                *ev as u32
            )
            .unwrap();
        }
    }
    // Both ways: every event enumerator of the header is in ALL.
    let is_event = |n: &&String| {
        n.ends_with("_RECEIVED")
            || n.ends_with("_ERROR")
            || *n == "IB_CM_USER_ESTABLISHED"
            || *n == "IB_CM_TIMEWAIT_EXIT"
    };
    let ours: Vec<String> = EventType::ALL
        .iter()
        .map(|e| format!("IB_CM_{}", e.name()))
        .collect();
    for name in events.keys().filter(is_event) {
        if !ours.contains(name) {
            writeln!(report, "{name} is not in EventType::ALL").unwrap();
        }
    }
    assert!(
        report.is_empty(),
        "protocol tables and the header disagree:\n{report}"
    );
}

#[test]
fn c_static_abi_checks_pass() {
    let out = build_and_run("abi_static");
    assert!(
        out.contains("all checks passed"),
        "abi_static output:\n{out}"
    );
}

#[test]
fn every_header_compiles_on_its_own() {
    let dir = scratch_dir();
    let headers = [
        "rdma/ibcm_kernel_types.h",
        "rdma/ib_verbs.h",
        "rdma/ib_mad.h",
        "rdma/ib_sa.h",
        "rdma/rdma_cm.h",
        "rdma/ib_cm.h",
        "ibcm.h",
    ];
    for (i, header) in headers.iter().enumerate() {
        let src = dir.join(format!("alone-{}-{i}.c", std::process::id()));
        // Twice, to check the include guards.
        std::fs::write(
            &src,
            format!("#include <{header}>\n#include <{header}>\nint main(void) {{ return 0; }}\n"),
        )
        .unwrap();
        let obj = src.with_extension("o");
        compile(&src, &obj, &["-c"]);
        let _ = std::fs::remove_file(&src);
        let _ = std::fs::remove_file(&obj);
    }

    // The kernel UAPI header (rdma-core / linux-libc-dev) may precede ours.
    let src = dir.join(format!("uapi-first-{}.c", std::process::id()));
    std::fs::write(
        &src,
        "#if defined(__has_include)\n\
         #if __has_include(<rdma/rdma_user_cm.h>)\n\
         #include <rdma/rdma_user_cm.h>\n\
         #endif\n\
         #endif\n\
         #include <rdma/ib_cm.h>\n\
         #include <ibcm.h>\n\
         int main(void) { struct rdma_ucm_ece e = { 1, 2 }; \
         return (int)(e.vendor_id + e.attr_mod) - 3 + IB_PATH_GMP - 1; }\n",
    )
    .unwrap();
    let obj = src.with_extension("o");
    compile(&src, &obj, &["-c"]);
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&obj);
}
