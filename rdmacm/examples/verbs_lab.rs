//! The verbs half of the librdmacm drop-in on a real device (run in a
//! Soft-RoCE guest by `interop/verbs.sh rverbs`):
//!
//! `verbs_lab <local-ip> [<peer-ip>]`
//!
//! Loads libibverbs first, as an application linked with it would, then
//! checks that ibcm's devices are that same library's contexts; finds the
//! device/port/GID of `<local-ip>` (RoCE v2), the route to `<peer-ip>`;
//! takes the default PD; creates an RC QP (CQs with `cq_context == id`,
//! INIT at once) and walks it RTR → RTS → ERR with ibcm's CM attributes
//! (a loopback connection to itself); creates a UD QP on the caller's CQ
//! (RTS at once, Q_Key RDMA_UDP_QKEY), attaches it to a multicast MGID and
//! joins the IP group on the netdev, a basic SRQ, and an RC QP through the
//! provider's `create_qp_ex`; every state is read back with the
//! application's own `ibv_query_qp`. Then destroys everything and checks the PD went away.
//! Prints `VERBS LAB OK` and exits 0 when every check passed.

use ibcm::api::ibv::{self, IbvQp, IbvQpAttr, IbvQpInitAttr};
use ibcm::api::{AhAttr, GidType, PathRecType, QpAttr, qp_mask};
use ibcm_rdmacm::verbs::{self, QpInit, qps, qpt};
use std::ffi::{CStr, c_int, c_void};
use std::net::{IpAddr, SocketAddr};

type QueryQp = unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int, *mut IbvQpInitAttr) -> c_int;

/// The application's libibverbs (`dlopen` by SONAME, global, as the
/// dynamic linker loads a NEEDED library) and its `ibv_query_qp`.
fn app_libibverbs() -> (*mut c_void, QueryQp) {
    let h = unsafe {
        libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_GLOBAL,
        )
    };
    if h.is_null() {
        let e = unsafe { CStr::from_ptr(libc::dlerror()) };
        fail(&format!("cannot load libibverbs.so.1: {e:?}"));
    }
    let f = unsafe { libc::dlsym(h, c"ibv_query_qp".as_ptr()) };
    if f.is_null() {
        fail("libibverbs.so.1 has no ibv_query_qp");
    }
    (h, unsafe { std::mem::transmute::<*mut c_void, QueryQp>(f) })
}

fn fail(msg: &str) -> ! {
    println!("FAIL: {msg}");
    std::process::exit(1);
}

fn check(ok: bool, what: &str) {
    if ok {
        println!("ok: {what}");
    } else {
        fail(what);
    }
}

fn must<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => {
            println!("ok: {what}");
            v
        }
        Err(e) => fail(&format!("{what}: {e}")),
    }
}

/// The QP as the application's `ibv_query_qp` reports it.
fn app_query(q: QueryQp, qp: *mut IbvQp, mask: c_int) -> IbvQpAttr {
    let mut a = IbvQpAttr::default();
    let mut init = IbvQpInitAttr::default();
    let r = unsafe { q(qp, &mut a, mask, &mut init) };
    if r != 0 {
        fail(&format!("ibv_query_qp: {r}"));
    }
    a
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 {
        eprintln!("usage: verbs_lab <local-ip> [<peer-ip>]");
        std::process::exit(2);
    }
    let local: IpAddr = args[1].parse().unwrap_or_else(|_| fail("bad local IP"));
    let peer: Option<IpAddr> = args
        .get(2)
        .map(|s| s.parse().unwrap_or_else(|_| fail("bad peer IP")));
    let (app_handle, app_query_qp) = app_libibverbs();
    // ibcm's dlopen by SONAME must find the very same object.
    let again = unsafe {
        libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD,
        )
    };
    check(again == app_handle, "libibverbs.so.1 is loaded once");
    unsafe { libc::dlclose(again) };

    // --- devices ---------------------------------------------------------
    let devs = must(verbs::devices(), "devices()");
    for d in devs {
        let f = d.facts();
        println!(
            "device {} ctx {:p}: {} port(s), max_qp_rd_atom {}, max_qp_init_rd_atom {}",
            d.name(),
            d.context(),
            f.ports.len(),
            f.max_qp_rd_atom,
            f.max_qp_init_rd_atom
        );
        for p in &f.ports {
            for g in &p.gids {
                println!(
                    "  port {} gid[{}] {} {:?} ndev {:?}",
                    p.port_num, g.index, g.gid, g.gid_type, g.ndev
                );
            }
        }
    }
    let devs2 = must(verbs::devices(), "devices() again");
    check(
        devs.len() == devs2.len()
            && devs
                .iter()
                .zip(devs2)
                .all(|(a, b)| a.context() == b.context()),
        "the same ibv_context singletons on every call",
    );

    // --- address → device -------------------------------------------------
    let b = must(verbs::find_by_ip(local, None), "find_by_ip(local)");
    println!(
        "{local}: {} port {} gid[{}] {} {:?} ndev {:?} pkey_index {}",
        b.device.name(),
        b.port_num,
        b.gid_index,
        b.gid,
        b.gid_type,
        b.ndev,
        b.pkey_index
    );
    check(b.gid == verbs::ip_gid(local), "the GID is the IP's GID");
    check(b.gid_type == GidType::RoceV2, "RoCE v2 GID chosen");
    check(
        verbs::device_of(b.device.context()).is_some_and(|d| std::ptr::eq(d, b.device)),
        "device_of(ctx)",
    );
    check(
        verbs::find_by_ip("192.0.2.99".parse().unwrap(), None).err()
            == Some(ibcm::api::Errno::ENODEV),
        "an address on no RDMA device: ENODEV",
    );
    let port = b
        .device
        .port(b.port_num)
        .unwrap_or_else(|| fail("port vanished"));
    let mut hop_limit = 64;
    let mut path_mtu = port.active_mtu;
    if let Some(peer) = peer {
        let r = must(
            verbs::route_to(SocketAddr::new(peer, 0), None),
            "route_to(peer)",
        );
        println!("route to {peer}: {r:?}");
        check(r.src == local, "the kernel's source address is ours");
        if let Some(ndev) = &b.ndev {
            check(
                &r.ifname == ndev,
                "the route leaves through the GID's netdev",
            );
        }
        hop_limit = r.hop_limit;
        path_mtu = path_mtu.min(r.mtu);
    }

    // --- default PD ---------------------------------------------------------
    let ctx = b.device.context();
    let pd = must(b.device.pd_get(), "default PD");
    let pd2 = must(b.device.pd_get(), "default PD, second reference");
    check(pd == pd2, "one default PD per device");
    check(unsafe { ibv::pd_context(pd) } == ctx, "pd->context == ctx");

    // --- RC QP: CQs created, INIT at once --------------------------------------
    let mut id_rc = 0u64; // stands for the rdma_cm_id
    let id_rc_ptr = (&mut id_rc as *mut u64).cast::<c_void>();
    let basic = IbvQpInitAttr {
        cap: ibv::IbvQpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: qpt::RC,
        ..IbvQpInitAttr::default()
    };
    let mut attr = ibv::IbvQpInitAttrEx::from_basic(&basic, pd);
    let init = QpInit::Fresh {
        port_num: b.port_num,
        pkey_index: b.pkey_index,
    };
    let rc = must(
        unsafe { verbs::create_qp(ctx, id_rc_ptr, &mut attr, init) },
        "create_qp(RC)",
    );
    let view = unsafe { ibv::qp_view(rc.qp) };
    println!("RC QP {:#x}", view.qp_num);
    check(
        !rc.send_cq.is_null() && !rc.recv_cq.is_null() && rc.send_cq != rc.recv_cq,
        "send and recv CQs created",
    );
    check(
        attr.send_cq == rc.send_cq && attr.recv_cq == rc.recv_cq,
        "CQs written back into the attributes",
    );
    check(
        unsafe { ibv::cq_user_context(rc.send_cq) } == id_rc_ptr
            && unsafe { ibv::cq_user_context(rc.recv_cq) } == id_rc_ptr,
        "cq_context == id",
    );
    check(
        unsafe { ibv::cq_channel(rc.send_cq) } == rc.send_cq_channel
            && unsafe { ibv::cq_channel(rc.recv_cq) } == rc.recv_cq_channel
            && rc.send_cq_channel != rc.recv_cq_channel
            && unsafe { ibv::comp_channel_fd(rc.send_cq_channel) } >= 0,
        "one completion channel per CQ",
    );
    check(
        view.pd == pd && view.context == ctx && view.send_cq == rc.send_cq,
        "qp->pd, qp->context, qp->send_cq",
    );
    let m = ibv::qp_attr_mask::STATE
        | ibv::qp_attr_mask::ACCESS_FLAGS
        | ibv::qp_attr_mask::PORT
        | ibv::qp_attr_mask::PKEY_INDEX;
    let q = app_query(app_query_qp, rc.qp, m);
    check(
        q.qp_state == qps::INIT,
        "RC QP in INIT (application's ibv_query_qp)",
    );
    check(
        q.qp_access_flags == 0 && q.port_num == b.port_num && q.pkey_index == b.pkey_index,
        "INIT: access flags 0, port, P_Key index",
    );

    // ECE as librdmacm handles it: queried at creation, applied before RTR.
    let ece = must(unsafe { verbs::qp_ece(rc.qp) }, "qp_ece (ibv_query_ece)");
    println!("local ECE {ece:?}");
    must(
        unsafe { verbs::apply_remote_ece(rc.qp, &ece) },
        "apply_remote_ece(own ECE)",
    );

    // RTR/RTS with the CM's attributes, a connection to itself.
    let ah = AhAttr {
        port_num: b.port_num,
        has_grh: true,
        dgid: b.gid,
        sgid_index: b.gid_index,
        hop_limit,
        traffic_class: 0,
        flow_label: 0x1234,
        rec_type: PathRecType::RoceV2,
        ..AhAttr::default()
    };
    let rtr = QpAttr {
        mask: qp_mask::STATE
            | qp_mask::AV
            | qp_mask::PATH_MTU
            | qp_mask::DEST_QPN
            | qp_mask::RQ_PSN
            | qp_mask::MAX_DEST_RD_ATOMIC
            | qp_mask::MIN_RNR_TIMER,
        qp_state: qps::RTR,
        ah_attr: ah,
        path_mtu,
        dest_qp_num: view.qp_num,
        rq_psn: 0x1000,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    must(unsafe { verbs::modify_qp_cm(rc.qp, &rtr) }, "RC → RTR");
    let q = app_query(
        app_query_qp,
        rc.qp,
        ibv::qp_attr_mask::STATE
            | ibv::qp_attr_mask::AV
            | ibv::qp_attr_mask::DEST_QPN
            | ibv::qp_attr_mask::PATH_MTU,
    );
    check(q.qp_state == qps::RTR, "RC QP in RTR");
    check(
        q.dest_qp_num == view.qp_num && q.path_mtu == path_mtu as u32,
        "RTR: dest QPN and path MTU",
    );
    check(
        q.ah_attr.is_global == 1
            && q.ah_attr.grh.dgid == b.gid.0
            && q.ah_attr.grh.sgid_index as u16 == b.gid_index,
        "RTR: GRH with dgid and sgid_index",
    );
    let rts = QpAttr {
        mask: qp_mask::STATE
            | qp_mask::TIMEOUT
            | qp_mask::RETRY_CNT
            | qp_mask::RNR_RETRY
            | qp_mask::SQ_PSN
            | qp_mask::MAX_QP_RD_ATOMIC,
        qp_state: qps::RTS,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 0x1000,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    must(unsafe { verbs::modify_qp_cm(rc.qp, &rts) }, "RC → RTS");
    let q = app_query(
        app_query_qp,
        rc.qp,
        ibv::qp_attr_mask::STATE | ibv::qp_attr_mask::TIMEOUT,
    );
    check(q.qp_state == qps::RTS && q.timeout == 14, "RC QP in RTS");
    must(unsafe { verbs::to_error(rc.qp) }, "RC → ERR");
    check(
        must(unsafe { verbs::qp_state(rc.qp) }, "qp_state") == qps::ERR,
        "RC QP in ERR",
    );

    // --- UD QP on the caller's CQ: RTS at once, RDMA_UDP_QKEY -------------------
    let mut id_ud = 0u64;
    let id_ud_ptr = (&mut id_ud as *mut u64).cast::<c_void>();
    let own_cq = must(
        unsafe { ibv::create_cq(ctx, 16, std::ptr::null_mut(), std::ptr::null_mut(), 0) },
        "caller's CQ",
    );
    let basic_ud = IbvQpInitAttr {
        send_cq: own_cq,
        recv_cq: own_cq,
        qp_type: qpt::UD,
        ..basic
    };
    let mut attr_ud = ibv::IbvQpInitAttrEx::from_basic(&basic_ud, pd);
    let ud = must(
        unsafe { verbs::create_qp(ctx, id_ud_ptr, &mut attr_ud, init) },
        "create_qp(UD)",
    );
    check(
        ud.send_cq.is_null()
            && ud.recv_cq.is_null()
            && ud.send_cq_channel.is_null()
            && attr_ud.send_cq == own_cq,
        "the caller's CQ is used, none created",
    );
    let q = app_query(
        app_query_qp,
        ud.qp,
        ibv::qp_attr_mask::STATE | ibv::qp_attr_mask::QKEY | ibv::qp_attr_mask::SQ_PSN,
    );
    check(
        q.qp_state == qps::RTS && q.qkey == verbs::RDMA_UDP_QKEY && q.sq_psn == 0,
        "UD QP in RTS with RDMA_UDP_QKEY, sq_psn 0",
    );

    // --- multicast: the group's MGID on the UD QP, the IP-level join --------------
    let group: IpAddr = "239.77.0.9".parse().unwrap();
    let mgid = verbs::mcast_mgid(group, b.gid_type);
    check(
        mgid.to_string() == "::ffff:239.77.0.9",
        "RoCE v2 MGID of 239.77.0.9",
    );
    must(
        unsafe { verbs::attach_mcast(ud.qp, &mgid, 0) },
        "ibv_attach_mcast(UD QP, MGID)",
    );
    must(
        unsafe { verbs::detach_mcast(ud.qp, &mgid, 0) },
        "ibv_detach_mcast",
    );
    if let Some(peer) = peer {
        let r = must(
            verbs::route_to(SocketAddr::new(peer, 0), None),
            "route for the join",
        );
        let igmp = || std::fs::read_to_string("/proc/net/igmp").unwrap_or_default();
        let hex = "09004DEF"; // 239.77.0.9 as /proc/net/igmp prints it
        let m = must(
            verbs::join_ip_group(group, local, r.ifindex),
            "IP-level join",
        );
        check(igmp().contains(hex), "the group is joined on the netdev");
        drop(m);
        check(!igmp().contains(hex), "and left");
    }

    // --- a basic SRQ on the default PD ----------------------------------------------
    let mut srq_attr = ibv::IbvSrqInitAttr {
        srq_context: id_ud_ptr,
        attr: ibv::IbvSrqAttr {
            max_wr: 16,
            max_sge: 1,
            srq_limit: 0,
        },
    };
    let srq = must(
        unsafe { ibv::create_srq(pd, &mut srq_attr) },
        "ibv_create_srq",
    );
    check(srq_attr.attr.max_wr >= 16, "SRQ limits granted");
    must(unsafe { ibv::destroy_srq(srq) }, "ibv_destroy_srq");

    // --- the provider's create_qp_ex (comp_mask beyond PD) -----------------------
    const CREATE_FLAGS: u32 = 1 << 2; // IBV_QP_INIT_ATTR_CREATE_FLAGS
    let mut attr_ex = ibv::IbvQpInitAttrEx::from_basic(&basic, pd);
    attr_ex.comp_mask |= CREATE_FLAGS;
    let mut id_ex = 0u64;
    match unsafe { verbs::create_qp(ctx, (&mut id_ex as *mut u64).cast(), &mut attr_ex, init) } {
        Ok(ex) => {
            let q = app_query(app_query_qp, ex.qp, ibv::qp_attr_mask::STATE);
            check(q.qp_state == qps::INIT, "create_qp_ex path: RC QP in INIT");
            must(
                unsafe { verbs::destroy_qp(&ex) },
                "destroy the create_qp_ex QP",
            );
        }
        Err(e) if e.0 == libc::EOPNOTSUPP => {
            println!("note: {} has no create_qp_ex operation", b.device.name())
        }
        Err(e) => fail(&format!("create_qp_ex path: {e}")),
    }

    // --- bad input ----------------------------------------------------------
    let mut no_pd = ibv::IbvQpInitAttrEx::from_basic(&basic, std::ptr::null_mut());
    check(
        unsafe { verbs::create_qp(ctx, id_rc_ptr, &mut no_pd, init) }.err()
            == Some(ibcm::api::Errno::EINVAL),
        "no PD: EINVAL",
    );
    let other_pd = must(unsafe { ibv::alloc_pd(ctx) }, "a second PD");
    let mut foreign = ibv::IbvQpInitAttrEx::from_basic(&basic, other_pd);
    // A PD of this context is fine; one claiming another context is not.
    let fake_ctx = (ctx as usize + 8) as *mut ibv::IbvContext;
    check(
        unsafe { verbs::create_qp(fake_ctx, id_rc_ptr, &mut foreign, init) }.err()
            == Some(ibcm::api::Errno::EINVAL),
        "pd->context != ctx: EINVAL",
    );
    must(unsafe { ibv::dealloc_pd(other_pd) }, "free the second PD");

    // --- teardown -----------------------------------------------------------
    must(
        unsafe { verbs::destroy_qp(&rc) },
        "destroy_qp(RC) with its CQs",
    );
    must(unsafe { verbs::destroy_qp(&ud) }, "destroy_qp(UD)");
    must(
        unsafe { ibv::destroy_cq(own_cq) },
        "the caller's CQ outlives it",
    );
    b.device.pd_put();
    check(b.device.pd_current() == (pd, 1), "PD kept while referenced");
    b.device.pd_put();
    check(
        b.device.pd_current().0.is_null(),
        "PD deallocated with the last reference",
    );
    let pd3 = must(b.device.pd_get(), "default PD again");
    b.device.pd_put();
    check(!pd3.is_null(), "a fresh default PD");
    println!("VERBS LAB OK");
}
