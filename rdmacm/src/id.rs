//! `struct rdma_cm_id` and everything done to one: creation, addresses and
//! ports, route, listen/connect/accept/reject/disconnect on an
//! `ibcm::api::CmId`, the IB CM → rdma_cm event translation (produced by
//! ibcm's threads through one `RustHandler`), accounting for
//! `rdma_ack_cm_event`, synchronous mode and destroy.

use crate::abi::*;
use crate::channel::{self, Channel, EventBox, lock};
use crate::ports::{Binding, PortSpace};
use crate::select;
use crate::verbs;
use ibcm::api::{
    CmId, Device, Ece, Errno, Event, EventParam, EventType, Gid, PathRec, PathRecType, RepParams,
    ReqParams, RustHandler, SidrRepParams, SidrReqParams, listen_id, qp_mask,
};
use ibcm::cma::{self, IpHeader, RdmaCmEventType as R, port_space};
use ibcm::log::DEBUG;
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};

/// IB CM response timeout and retries rdma_cm uses
/// (`CMA_CM_RESPONSE_TIMEOUT`, `CMA_MAX_CM_RETRIES`).
pub const CM_RESPONSE_TIMEOUT: u8 = 20;
pub const MAX_CM_RETRIES: u8 = 15;

/// `IB_CM_REJ_CONSUMER_DEFINED`, `IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED`.
pub const REJ_CONSUMER_DEFINED: u32 = 28;
pub const REJ_VENDOR_OPTION_NOT_SUPPORTED: u32 = 35;
/// `IB_SIDR_REJECT`.
pub const SIDR_REJECT: u32 = 1;

/// Private-data limits of the messages rdma_cm sends for the user.
pub const MAX_REP_PDATA: usize = 196;
pub const MAX_REJ_PDATA: usize = 148;
pub const MAX_SIDR_REP_PDATA: usize = 136;
pub const MAX_DREQ_PDATA: usize = 220;

/// Where an id is (kernel `enum rdma_cm_state`, as far as it matters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum St {
    Idle,
    AddrBound,
    /// `rdma_resolve_addr` through the host CM service: its ephemeral port
    /// is on the way (`ADDR_RESOLVED` or `ADDR_ERROR` when it comes).
    AddrQuery,
    AddrResolved,
    RouteResolved,
    /// REQ / SIDR_REQ sent.
    Connect,
    /// REP received: its CONNECT_RESPONSE is queued. Without a QP
    /// `rdma_establish` sends the RTU; with one, the event's retrieval
    /// does (`connect_retrieved`).
    ConnectResponse,
    Listen,
    /// A listener's child before accept/reject.
    Request,
    /// REP sent, waiting for the RTU.
    Accepted,
    Connected,
    Disconnected,
    /// Rejected, unreachable or refused: the id can only be destroyed.
    Failed,
}

pub struct IdState {
    pub channel: Arc<Channel>,
    pub sync: bool,
    pub ps: u16,
    pub st: St,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// The port this id holds in the port space.
    pub lease: Option<u16>,
    pub dev: Option<Arc<Device>>,
    /// The verbs device (`id->verbs`) and the reference this id holds on
    /// its default PD (`id->pd`); `None` on a software device.
    pub vdev: Option<&'static verbs::Device>,
    pub pd: *mut c_void,
    /// The source GID's index on the verbs port (UD address handles).
    pub gid_index: u8,
    /// What `rdma_create_qp` made (`id->qp` and its CQs/channels) and the
    /// QP's PD.
    pub qpres: Option<verbs::QpResources>,
    /// Tests: a QP that is not there, whose move to RTS gives this.
    #[cfg(test)]
    pub test_qp: Option<Result<(), Errno>>,
    pub qp_pd: *mut c_void,
    /// What `rdma_create_srq[_ex]` made (`id->srq`, an XRC SRQ's CQ).
    pub srq: Option<verbs::SrqResources>,
    pub port_num: u8,
    pub cm: Option<CmId>,
    /// A wildcard listener's CM ids on its other devices (`cm` is the
    /// first): one per RDMA device, or per address of one when the kernel
    /// CM is loaded (`select::wildcard_devices`).
    pub more_cms: Vec<CmId>,
    pub path: Option<PathRec>,
    path_rec: Option<Box<IbvSaPathRec>>,
    pub tos: Option<u8>,
    pub reuseaddr: bool,
    pub afonly: bool,
    pub ack_timeout: Option<u8>,
    completed: u64,
    /// Threads in [`IdPriv::wait_acked`]: an ack wakes them only when
    /// there are any (a condvar's notify is a system call each time).
    ack_waiters: u32,
    /// `rdma_create_ep`'s `ai_connect`, prepended to the next connect's
    /// private data.
    pub connect_prefix: Vec<u8>,
    pub local_ece: Option<Ece>,
    pub remote_ece: Ece,
    pub disconnected: bool,
    pub dreq_received: bool,
    /// Its CONNECT_RESPONSE was retrieved as CONNECT_ERROR (librdmacm's
    /// `connect_error`): the REJECTED and DISCONNECTED events that follow
    /// are not reported ([`crate::channel::Channel::pop`]).
    pub connect_error: bool,
    pub remote_qpn: u32,
    /// From the peer's REQ, in our view (as the CONNECT_REQUEST reports
    /// them): (responder resources, initiator depth).
    pub peer_resources: (u8, u8),
    pub psn: u32,
    /// `rdma_create_ep` on a passive id: the PD and QP attributes
    /// `rdma_get_request` uses.
    pub ep_pd: *mut c_void,
    pub ep_qp_attr: Option<IbvQpInitAttr>,
    /// `rdma_resolve_addrinfo`'s result for `rdma_query_addrinfo`.
    pub addrinfo: Option<crate::addrinfo::Owned>,
    /// Pipelined `rdma_resolve_addr`s made on this id: the number of the
    /// one in ADDR_QUERY (an answer or a timeout for an older one is
    /// stale).
    addr_query: u64,
    /// The one in ADDR_QUERY had `timeout_ms` ≤ 0: its wait for the
    /// service goes on per service timeout while the service makes
    /// progress (`addr_timed_out`).
    addr_watch: Option<ibcm::portspace::BindWatch>,
}

// Raw pointers in IdState are the application's (PD, attributes).
unsafe impl Send for IdState {}

/// An id: `struct rdma_cm_id` first (its address is the application's
/// pointer), then ibcm's state.
#[repr(C)]
pub struct IdPriv {
    public: UnsafeCell<RdmaCmId>,
    pub st: Mutex<IdState>,
    acked: Condvar,
    reported: AtomicU64,
    destroyed: AtomicBool,
}

unsafe impl Send for IdPriv {}
unsafe impl Sync for IdPriv {}

/// Ids the application holds (and children not yet reported), by address.
fn ids() -> &'static Mutex<ibcm::engine::ids::FastMap<usize, Arc<IdPriv>>> {
    &crate::fork::globals().ids
}

/// Ids by their ibcm `ib_cm_id` address, for the event handler.
fn by_cm() -> &'static Mutex<ibcm::engine::ids::FastMap<usize, Weak<IdPriv>>> {
    &crate::fork::globals().by_cm
}

/// The port spaces: the host's through the CM service, or the
/// process's own (`ports::space`).
pub fn ports() -> &'static dyn PortSpace {
    crate::ports::space()
}

/// The one handler every ibcm id of this library has.
fn handler() -> RustHandler {
    static H: OnceLock<RustHandler> = OnceLock::new();
    H.get_or_init(|| Arc::new(on_cm_event)).clone()
}

/// The id behind an application pointer (`EINVAL` for NULL, freed or
/// foreign pointers; `EACCES` for the parent's ids in a child of fork()).
pub fn lookup(p: *mut RdmaCmId) -> Result<Arc<IdPriv>, Errno> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    let found = lock(ids()).get(&(p as usize)).cloned();
    found.ok_or_else(|| crate::fork::unknown_id(p as usize))
}

/// A random 24-bit starting PSN per connection, as the kernel draws one
/// (`get_random_u32`): the kernel's randomness, 64 values a `getrandom`
/// (one system call per 64 connections instead of one each — it was one
/// of the passive side's ≈ 28 per connection in the lab). Each thread
/// keeps its own values; a child of `fork()` (new library state,
/// `fork::globals`) never uses its parent's.
fn random_psn() -> u32 {
    use std::cell::RefCell;
    struct Pool {
        owner: usize,
        vals: [u32; 64],
        left: usize,
    }
    thread_local! {
        static POOL: RefCell<Pool> = const { RefCell::new(Pool { owner: 0, vals: [0; 64], left: 0 }) };
    }
    let owner = crate::fork::globals() as *const _ as usize;
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.owner != owner || p.left == 0 {
            let bytes = std::mem::size_of_val(&p.vals);
            // SAFETY: getrandom writes at most `bytes` bytes into `vals`.
            let n =
                unsafe { libc::getrandom(p.vals.as_mut_ptr().cast(), bytes, libc::GRND_NONBLOCK) };
            if n != bytes as isize {
                // No entropy yet (early boot): one value from the clock and
                // the address space, as before.
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                p.vals[0] = std::process::id() ^ t ^ (owner as u32);
                p.left = 1;
            } else {
                p.left = p.vals.len();
            }
            p.owner = owner;
        }
        p.left -= 1;
        let i = p.left;
        p.vals[i] & 0x00ff_ffff
    })
}

/// The QP type of a port space (`rdma_create_id`).
pub fn qp_type_of(ps: u16) -> c_int {
    match ps {
        port_space::UDP | port_space::IPOIB => IBV_QPT_UD,
        _ => IBV_QPT_RC,
    }
}

pub fn valid_ps(ps: c_int) -> bool {
    u16::try_from(ps).is_ok_and(|ps| {
        matches!(
            ps,
            port_space::TCP | port_space::UDP | port_space::IB | port_space::IPOIB
        )
    })
}

// ---------------------------------------------------------------------------
// Socket addresses
// ---------------------------------------------------------------------------

/// Reads a `sockaddr` (AF_INET / AF_INET6) from the application.
///
/// # Safety
/// `sa` must be NULL or point at a readable sockaddr of its family's size.
pub unsafe fn read_sockaddr(sa: *const libc::sockaddr) -> Result<SocketAddr, Errno> {
    if sa.is_null() {
        return Err(Errno::EINVAL);
    }
    unsafe {
        match (*sa).sa_family as c_int {
            libc::AF_INET => {
                let s = &*(sa as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
                Ok(SocketAddr::new(IpAddr::V4(ip), u16::from_be(s.sin_port)))
            }
            libc::AF_INET6 => {
                let s = &*(sa as *const libc::sockaddr_in6);
                let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
                Ok(SocketAddr::new(IpAddr::V6(ip), u16::from_be(s.sin6_port)))
            }
            AF_IB => Err(Errno(libc::EAFNOSUPPORT)),
            _ => Err(Errno(libc::EAFNOSUPPORT)),
        }
    }
}

/// Writes `a` as a sockaddr_in / sockaddr_in6 into `out` (zeroing it).
pub fn write_sockaddr(out: &mut SockaddrStorage, a: Option<SocketAddr>) {
    out.bytes = [0; 128];
    let Some(a) = a else { return };
    let p = out.bytes.as_mut_ptr();
    // SAFETY: the storage is 128 bytes, 8-aligned: room for either.
    unsafe {
        match a {
            SocketAddr::V4(v) => {
                let s = &mut *(p as *mut libc::sockaddr_in);
                s.sin_family = libc::AF_INET as u16;
                s.sin_port = v.port().to_be();
                s.sin_addr.s_addr = u32::from(*v.ip()).to_be();
            }
            SocketAddr::V6(v) => {
                let s = &mut *(p as *mut libc::sockaddr_in6);
                s.sin6_family = libc::AF_INET6 as u16;
                s.sin6_port = v.port().to_be();
                s.sin6_addr.s6_addr = v.ip().octets();
                s.sin6_flowinfo = v.flowinfo();
                s.sin6_scope_id = v.scope_id();
            }
        }
    }
}

fn gid_of(ip: IpAddr) -> Gid {
    Gid::from(ip)
}

fn sa_path_rec(p: &PathRec) -> IbvSaPathRec {
    IbvSaPathRec {
        dgid: IbvGid { raw: p.dgid.0 },
        sgid: IbvGid { raw: p.sgid.0 },
        dlid: (p.dlid as u16).to_be(),
        slid: (p.slid as u16).to_be(),
        raw_traffic: p.raw_traffic as c_int,
        flow_label: p.flow_label.to_be(),
        hop_limit: p.hop_limit,
        traffic_class: p.traffic_class,
        reversible: p.reversible as c_int,
        numb_path: p.numb_path,
        pkey: p.pkey.to_be(),
        sl: p.sl,
        mtu_selector: p.mtu_selector,
        mtu: p.mtu,
        rate_selector: p.rate_selector,
        rate: p.rate,
        packet_life_time_selector: p.packet_life_time_selector,
        packet_life_time: p.packet_life_time,
        preference: p.preference,
    }
}

/// The address handle a UD peer is reached with (`ib_init_ah_attr_from_path`).
fn ah_from_path(p: &PathRec, port_num: u8, sgid_index: u8) -> IbvAhAttr {
    let grh = p.rec_type != PathRecType::Ib || p.hop_limit > 1;
    IbvAhAttr {
        grh: IbvGlobalRoute {
            dgid: p.dgid.0,
            flow_label: p.flow_label,
            sgid_index,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            ..IbvGlobalRoute::default()
        },
        dlid: p.dlid as u16,
        sl: p.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: grh as u8,
        port_num,
        ..IbvAhAttr::default()
    }
}

// ---------------------------------------------------------------------------
// IdPriv
// ---------------------------------------------------------------------------

impl IdPriv {
    pub(crate) fn new(
        channel: Arc<Channel>,
        sync: bool,
        ps: u16,
        qpt: c_int,
        context: *mut c_void,
    ) -> Arc<Self> {
        // SAFETY: all-zero is a valid RdmaCmId (null pointers, zeros).
        let mut public: RdmaCmId = unsafe { std::mem::zeroed() };
        public.channel = channel.public_ptr();
        public.context = context;
        public.ps = ps as c_int;
        public.qp_type = qpt;
        Arc::new(IdPriv {
            public: UnsafeCell::new(public),
            st: Mutex::new(IdState {
                channel,
                sync,
                ps,
                st: St::Idle,
                src: None,
                dst: None,
                lease: None,
                dev: None,
                vdev: None,
                pd: std::ptr::null_mut(),
                gid_index: 0,
                qpres: None,
                #[cfg(test)]
                test_qp: None,
                srq: None,
                qp_pd: std::ptr::null_mut(),
                port_num: 0,
                cm: None,
                more_cms: Vec::new(),
                path: None,
                path_rec: None,
                tos: None,
                reuseaddr: false,
                afonly: false,
                ack_timeout: None,
                completed: 0,
                ack_waiters: 0,
                connect_prefix: Vec::new(),
                local_ece: None,
                remote_ece: Ece::default(),
                disconnected: false,
                dreq_received: false,
                connect_error: false,
                remote_qpn: 0,
                peer_resources: (0, 0),
                psn: random_psn(),
                ep_pd: std::ptr::null_mut(),
                ep_qp_attr: None,
                addrinfo: None,
                addr_query: 0,
                addr_watch: None,
            }),
            acked: Condvar::new(),
            reported: AtomicU64::new(0),
            destroyed: AtomicBool::new(false),
        })
    }

    pub fn public_ptr(&self) -> *mut RdmaCmId {
        self.public.get()
    }

    /// Who holds the id's port in the port space (`Binding::owner`): its
    /// address.
    pub fn port_owner(&self) -> u64 {
        self.public_ptr() as u64
    }

    /// The public struct, for reading fields the application may have set
    /// (context, qp, pd).
    pub fn public(&self) -> &RdmaCmId {
        // SAFETY: a shared view of plain data; writers are this library
        // (under `st`) and the application (its own fields).
        unsafe { &*self.public.get() }
    }

    /// Writes public fields.
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn public_mut(&self) -> &mut RdmaCmId {
        // SAFETY: callers hold `st` (or own the id exclusively).
        unsafe { &mut *self.public.get() }
    }

    pub fn note_reported(&self) {
        self.reported.fetch_add(1, Ordering::SeqCst);
    }

    pub fn note_completed(&self) {
        let mut s = lock(&self.st);
        s.completed += 1;
        let wake = s.ack_waiters > 0;
        drop(s);
        if wake {
            self.acked.notify_all();
        }
    }

    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::SeqCst)
    }

    /// Waits until every event reported on this id has been acked.
    fn wait_acked(&self) {
        let mut s = lock(&self.st);
        s.ack_waiters += 1;
        while s.completed < self.reported.load(Ordering::SeqCst) {
            s = self.acked.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.ack_waiters -= 1;
    }

    /// Mirrors addresses, GIDs, port and path into the public struct.
    fn sync_public(&self, s: &IdState) {
        let p = self.public_mut();
        write_sockaddr(&mut p.route.addr.src, s.src);
        write_sockaddr(&mut p.route.addr.dst, s.dst);
        p.route.addr.ibaddr.sgid = IbvGid {
            raw: s
                .src
                .filter(|a| !a.ip().is_unspecified())
                .map_or([0; 16], |a| gid_of(a.ip()).0),
        };
        p.route.addr.ibaddr.dgid = IbvGid {
            raw: s.dst.map_or([0; 16], |a| gid_of(a.ip()).0),
        };
        p.route.addr.ibaddr.pkey = if s.dev.is_some() {
            0xffffu16.to_be()
        } else {
            0
        };
        p.port_num = s.port_num;
        p.verbs = s.vdev.map_or(std::ptr::null_mut(), |d| d.context().cast());
        p.pd = if s.qpres.is_some() { s.qp_pd } else { s.pd };
        p.route.path_rec = s
            .path_rec
            .as_ref()
            .map_or(std::ptr::null_mut(), |b| &**b as *const _ as *mut _);
        p.route.num_paths = s.path_rec.is_some() as c_int;
    }

    fn set_path(&self, s: &mut IdState, path: PathRec) {
        s.path = Some(path);
        s.path_rec = Some(Box::new(sa_path_rec(&path)));
        self.sync_public(s);
    }
}

/// Queues an event of `subject` accounted on `acct` on `acct`'s channel;
/// false when either id is being destroyed (the event is dropped).
pub(crate) fn enqueue(acct: &Arc<IdPriv>, ev: Box<EventBox>) -> bool {
    // Under the id's lock: a destroy or a migration of the id cannot come
    // between the check and the queueing.
    let s = lock(&acct.st);
    !(acct.is_destroyed() || ev.subject.is_destroyed()) && s.channel.push(ev)
}

/// Queues an event of `id` itself.
fn post(id: &Arc<IdPriv>, kind: c_int, status: c_int) -> bool {
    enqueue(id, EventBox::new(id, id, kind, status))
}

// ---------------------------------------------------------------------------
// Creation and destruction
// ---------------------------------------------------------------------------

/// `rdma_create_id` (`channel` NULL: synchronous mode with a private
/// channel).
pub fn create(
    channel: Option<Arc<Channel>>,
    context: *mut c_void,
    ps: u16,
    qpt: c_int,
) -> Result<Arc<IdPriv>, Errno> {
    let (ch, sync) = match channel {
        Some(c) => (c, false),
        None => (Channel::new()?, true),
    };
    let id = IdPriv::new(ch, sync, ps, qpt, context);
    lock(ids()).insert(id.public_ptr() as usize, id.clone());
    arm_exit_teardown();
    Ok(id)
}

// ---------------------------------------------------------------------------
// Process exit
// ---------------------------------------------------------------------------

/// How long process exit waits for the answers to the DREQs it sent
/// (`exit_teardown`).
pub const EXIT_LINGER: std::time::Duration = std::time::Duration::from_millis(500);

/// Registers `exit_teardown` with `atexit` once per process.
fn arm_exit_teardown() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        extern "C" fn at_exit() {
            // On a thread of its own: the exiting thread's thread-locals
            // are already destroyed when atexit handlers run (glibc runs
            // the TLS destructors first), and ibcm's send path uses some.
            // A panic there stays in that thread.
            match std::thread::Builder::new()
                .name("ibcm-exit".into())
                .spawn(|| {
                    exit_teardown(EXIT_LINGER);
                    crate::select::send_last_counters();
                }) {
                Ok(h) => {
                    let _ = h.join();
                }
                Err(e) => ibcm_log!(
                    DEBUG,
                    "librdmacm (ibcm): exit: no thread for the teardown ({e}); ids left"
                ),
            }
        }
        // SAFETY: registering a plain function with no arguments.
        if unsafe { libc::atexit(at_exit) } != 0 {
            ibcm_log!(
                DEBUG,
                "librdmacm (ibcm): atexit failed: ids left at exit go without DREQ/DREP"
            );
        }
    });
}

/// What the kernel does when a process exits with rdma_cm ids it never
/// destroyed (its ucma fd is closed and every id destroyed): connected ids
/// send a DREQ, ids that received one answer with a DREP, pending
/// connections are rejected, listeners stop. Programs rely on it —
/// perftest `-R` never disconnects or destroys the id of its
/// parameter-exchange connection. ibcm's CM lives in the process, so this
/// runs from `atexit`: a DREQ goes to every connected id, the process
/// waits up to `linger` for the peers' answers (a peer exiting at the same
/// moment sends a crossing DREQ that must find this CM alive to be
/// answered), then every id is destroyed (DREP to a received DREQ, REJ to
/// a pending connection, listeners gone). Nothing is waited for when the
/// id table is locked (exit called from inside the library). A child of
/// `fork()` inherits the `atexit` entry but reads its own fresh registry
/// (`crate::fork`): it tears down the ids it created, never its parent's.
pub fn exit_teardown(linger: std::time::Duration) {
    let live: Vec<Arc<IdPriv>> = match ids().try_lock() {
        Ok(m) => m.values().cloned().collect(),
        Err(_) => {
            ibcm_log!(
                DEBUG,
                "librdmacm (ibcm): exit: the id table is busy; ids left as they are"
            );
            return;
        }
    };
    if live.is_empty() {
        return;
    }
    let mut waiting = Vec::new();
    for id in &live {
        let cm = {
            let Ok(s) = id.st.try_lock() else { continue };
            let connected = matches!(s.st, St::Connected | St::ConnectResponse | St::Accepted);
            if !connected || s.disconnected || s.dreq_received {
                continue;
            }
            s.cm.clone()
        };
        // Only an established CM id takes a DREQ; the others are rejected
        // by their destroy below.
        if let Some(cm) = cm
            && cm.send_dreq(&[]).is_ok()
        {
            waiting.push(id.clone());
        }
    }
    if !waiting.is_empty() {
        ibcm_log!(
            DEBUG,
            "librdmacm (ibcm): exit: {} connection(s) left established: DREQ sent",
            waiting.len()
        );
        let deadline = std::time::Instant::now() + linger;
        while std::time::Instant::now() < deadline
            && waiting.iter().any(|id| !lock(&id.st).disconnected)
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    for id in &live {
        if !id.is_destroyed() {
            teardown(id);
        }
    }
}

fn register_cm(id: &Arc<IdPriv>, cm: &CmId) {
    lock(by_cm()).insert(cm.c_ptr() as usize, Arc::downgrade(id));
}

/// Tears an id down without waiting for acks (children nobody was told
/// about; the first half of `rdma_destroy_id`).
fn teardown(id: &Arc<IdPriv>) {
    id.destroyed.store(true, Ordering::SeqCst);
    lock(ids()).remove(&(id.public_ptr() as usize));
    crate::mcast::forget(id);
    let (cm, lease, ps, ch) = {
        let mut s = lock(&id.st);
        // The SRQ made through this id goes with it (before its PD's
        // reference); one a QP still uses stays (logged).
        if let Some(r) = s.srq.take() {
            crate::qp::srq_released(id, &r);
        }
        if let Some(d) = s.vdev.take() {
            d.pd_put();
            s.pd = std::ptr::null_mut();
        }
        let mut cms: Vec<CmId> = s.cm.take().into_iter().collect();
        cms.append(&mut s.more_cms);
        (cms, s.lease.take(), s.ps, s.channel.clone())
    };
    let owner = id.port_owner();
    // Through the host CM service the port's release rides in the message
    // of the CM id's DESTROY (one send per destroy, not two); it goes on
    // its own when it cannot (docs/SERVICE.md, "Destroy in one message").
    let mut release = match lease {
        Some(port) if !cm.is_empty() => ports().release_ticket(ps, port, owner),
        _ => None,
    };
    let mut released = false;
    for cm in cm {
        // No callback runs for this id after this returns.
        let r = match release.take() {
            Some(t) => {
                let (r, back) = cm.destroy_releasing(t);
                released = back.is_none();
                release = back;
                r
            }
            None => cm.destroy(),
        };
        if let Err(e) = r {
            ibcm_log!(DEBUG, "librdmacm (ibcm): destroying the CM id: {e}");
        }
        lock(by_cm()).remove(&(cm.c_ptr() as usize));
    }
    if let Some(port) = lease
        && !released
    {
        ports().release(ps, port, owner);
    }
    // Unretrieved events go; the unretrieved requests of a listener take
    // their children with them.
    for e in ch.take_for(id) {
        if Arc::ptr_eq(&e.acct, id) && !Arc::ptr_eq(&e.subject, id) {
            teardown(&e.subject);
        }
    }
}

/// `rdma_destroy_id`: blocks until the id's reported events are acked.
pub fn destroy(id: &Arc<IdPriv>) -> Result<(), Errno> {
    if id.is_destroyed() {
        return Err(Errno::EINVAL);
    }
    teardown(id);
    let (sync, ch) = {
        let s = lock(&id.st);
        (s.sync, s.channel.clone())
    };
    let last = std::mem::replace(&mut id.public_mut().event, std::ptr::null_mut());
    if !last.is_null() {
        let _ = channel::ack(last);
    }
    id.wait_acked();
    if sync {
        ch.close();
    }
    Ok(())
}

/// `rdma_migrate_id`.
pub fn migrate(id: &Arc<IdPriv>, to: Option<Arc<Channel>>) -> Result<(), Errno> {
    let (new, sync) = match to {
        Some(c) => (c, false),
        None => (Channel::new()?, true),
    };
    // Events already reported must be acked first (librdmacm waits).
    id.wait_acked();
    let mut s = lock(&id.st);
    let old = std::mem::replace(&mut s.channel, new.clone());
    let was_sync = s.sync;
    s.sync = sync;
    id.public_mut().channel = new.public_ptr();
    for e in old.take_for(id) {
        new.push(e);
    }
    drop(s);
    if was_sync {
        old.close();
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Synchronous mode
// ---------------------------------------------------------------------------

/// `ucma_complete`: on a synchronous id, acks the previous event, waits
/// for the next, keeps it in `id->event` and turns a bad status into an
/// errno.
pub fn complete(id: &Arc<IdPriv>) -> Result<(), Errno> {
    let (sync, ch) = {
        let s = lock(&id.st);
        (s.sync, s.channel.clone())
    };
    if !sync {
        return Ok(());
    }
    let last = std::mem::replace(&mut id.public_mut().event, std::ptr::null_mut());
    if !last.is_null() {
        let _ = channel::ack(last);
    }
    let b = ch.pop()?;
    let (kind, status) = (b.ev.event, b.ev.status);
    id.public_mut().event = channel::hand_out(b);
    match status {
        0 => Ok(()),
        _ if kind == R::Rejected as c_int => Err(Errno(libc::ECONNREFUSED)),
        s if s < 0 => Err(Errno(-s)),
        s => Err(Errno(s)),
    }
}

// ---------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------

/// Points the id at verbs device `b` (`id->verbs`, `id->port_num`) with a
/// reference on its default PD (`id->pd`, librdmacm's `ucma_get_device`),
/// returning the one held on a previous device; `None` lets go.
fn set_verbs(id: &IdPriv, s: &mut IdState, b: Option<&verbs::Binding>) -> Result<(), Errno> {
    let same = match (s.vdev, b) {
        (Some(old), Some(b)) => std::ptr::eq(old, b.device),
        _ => false,
    };
    if !same {
        if let Some(b) = b {
            s.pd = b.device.pd_get()?.cast();
        }
        if let Some(old) = s.vdev.take() {
            old.pd_put();
        }
        s.vdev = b.map(|b| b.device);
        if b.is_none() {
            s.pd = std::ptr::null_mut();
        }
    }
    if let Some(b) = b {
        s.port_num = b.port_num;
        s.gid_index = b.gid_index as u8;
    }
    id.sync_public(s);
    Ok(())
}

/// `rdma_bind_addr`.
pub fn bind(id: &Arc<IdPriv>, addr: SocketAddr) -> Result<(), Errno> {
    let mut s = lock(&id.st);
    if s.st != St::Idle {
        return Err(Errno::EINVAL);
    }
    bind_locked(id, &mut s, addr)
}

fn bind_locked(id: &Arc<IdPriv>, s: &mut IdState, addr: SocketAddr) -> Result<(), Errno> {
    let ip = addr.ip();
    // A specific address binds the id to the device serving it.
    let (dev, vb) = if ip.is_unspecified() {
        (None, None)
    } else {
        let (d, b) = select::device_for(Some(ip))?;
        (Some(d), b)
    };
    let port = ports().bind(s.ps, addr.port(), binding(id, s, ip))?;
    bound_locked(id, s, ip, port, dev, vb)
}

/// The binding an id asks for at `ip`.
fn binding(id: &IdPriv, s: &IdState, ip: IpAddr) -> Binding {
    Binding {
        reuse: s.reuseaddr,
        afonly: s.afonly,
        ..Binding::plain(ip, id.port_owner())
    }
}

/// The id holds `port` at `ip` (on the device serving `ip` when given):
/// ADDR_BOUND. On an error the port is released.
fn bound_locked(
    id: &Arc<IdPriv>,
    s: &mut IdState,
    ip: IpAddr,
    port: u16,
    dev: Option<Arc<Device>>,
    vb: Option<verbs::Binding>,
) -> Result<(), Errno> {
    if dev.is_some() {
        if let Err(e) = set_verbs(id, s, vb.as_ref()) {
            ports().release(s.ps, port, id.port_owner());
            return Err(e);
        }
    }
    s.lease = Some(port);
    s.src = Some(SocketAddr::new(ip, port));
    if let Some(d) = dev {
        s.dev = Some(d);
        if vb.is_none() {
            s.port_num = 1;
        }
    }
    s.st = St::AddrBound;
    id.sync_public(s);
    Ok(())
}

/// `rdma_resolve_addr`: binds (ephemeral port, routing-table source) if
/// needed and reports ADDR_RESOLVED or ADDR_ERROR. Through the host CM
/// service an implicit ephemeral bind does not wait for the service
/// (`resolve_pipelined`): ADDR_ERROR `-ETIMEDOUT` if the service has not
/// answered within `timeout_ms` (≤ 0: the service's own rule, as for a
/// round trip: a period of `IBCM_SERVICE_TIMEOUT_MS` at a time while the
/// service makes progress, up to `IBCM_SERVICE_BUSY_MAX_MS`).
pub fn resolve_addr(
    id: &Arc<IdPriv>,
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout_ms: c_int,
) -> Result<(), Errno> {
    let result = {
        let mut s = lock(&id.st);
        if !matches!(s.st, St::Idle | St::AddrBound) {
            return Err(Errno::EINVAL);
        }
        if s.st == St::Idle {
            let src = match src {
                Some(a) => a,
                None => SocketAddr::new(
                    if dst.is_ipv4() {
                        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
                    } else {
                        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
                    },
                    0,
                ),
            };
            if src.is_ipv4() != dst.is_ipv4() {
                return Err(Errno::EINVAL);
            }
            if src.port() == 0 && resolve_pipelined(id, &mut s, src.ip(), dst, timeout_ms)? {
                drop(s);
                return complete(id);
            }
            bind_locked(id, &mut s, src)?;
        }
        route_locked(id, &mut s, dst)
    };
    match result {
        Ok(()) => post(id, R::AddrResolved as c_int, 0),
        Err(e) => post(id, R::AddrError as c_int, -e.0),
    };
    complete(id)
}

/// `rdma_resolve_addr`'s implicit ephemeral bind at `ip` through the host
/// CM service: sent without waiting (the port space's
/// `bind_pipelined`; its synchronous errors are a bind's), the id in
/// ADDR_QUERY until the port comes, then bound and resolved as the
/// synchronous path does (`addr_bound`), unless `timeout_ms` passes
/// first (`addr_timed_out`). False: this port space binds at once (the
/// caller does).
fn resolve_pipelined(
    id: &Arc<IdPriv>,
    s: &mut IdState,
    ip: IpAddr,
    dst: SocketAddr,
    timeout_ms: c_int,
) -> Result<bool, Errno> {
    // The checks of a bind to a specific address come first, as there.
    if !ip.is_unspecified() {
        select::device_for(Some(ip))?;
    }
    s.addr_query += 1;
    let query = s.addr_query;
    let me = id.clone();
    let done: ibcm::portspace::Done = Box::new(move |r| addr_bound(&me, r, ip, dst, query));
    match ports().bind_pipelined(s.ps, binding(id, s, ip), done) {
        None => Ok(false),
        Some(Err(e)) => Err(e),
        Some(Ok(())) => {
            // `done` cannot run before this: it takes the id's lock.
            s.st = St::AddrQuery;
            // A positive `timeout_ms` is the user's deadline; with none
            // (≤ 0) the wait is the service's, as a round trip's: one
            // `IBCM_SERVICE_TIMEOUT_MS` period at a time while the service
            // makes progress (docs/RDMACM.md, "Resolve timeouts").
            s.addr_watch = None;
            let after = match u64::try_from(timeout_ms) {
                Ok(ms) if ms > 0 => std::time::Duration::from_millis(ms),
                _ => {
                    s.addr_watch = ports().bind_watch();
                    ibcm::api::service_timeout()
                }
            };
            if let Err(e) = crate::deadline::arm(id, query, after, addr_timed_out) {
                // No timeout can be kept: the query is abandoned (its
                // answer will be stale) and the call fails.
                s.st = St::Idle;
                return Err(e);
            }
            Ok(true)
        }
    }
}

/// Pipelined `rdma_resolve_addr`s the service did not answer within their
/// `timeout_ms` (ADDR_ERROR `-ETIMEDOUT` reported), and answers that came
/// after that (dropped, their port released).
static ADDR_TIMEOUTS: AtomicU64 = AtomicU64::new(0);
static LATE_ADDR_ANSWERS: AtomicU64 = AtomicU64::new(0);
/// A timeout was logged since the last answer in time (one line per
/// episode of a silent service, not one per id).
static TIMEOUT_LOGGED: AtomicBool = AtomicBool::new(false);

/// How many pipelined `rdma_resolve_addr`s of this process timed out
/// waiting for the host CM service.
pub fn addr_timeouts() -> u64 {
    ADDR_TIMEOUTS.load(Ordering::Relaxed)
}

/// How many answers of the host CM service came for a pipelined
/// `rdma_resolve_addr` that had already timed out (dropped: no event).
pub fn late_addr_answers() -> u64 {
    LATE_ADDR_ANSWERS.load(Ordering::Relaxed)
}

/// `timeout_ms` of pipelined resolve `query` passed (on the timer
/// thread; with `timeout_ms` ≤ 0, a period of the service's timeout that
/// ended without progress of the service, `BindWatch`): if the id still
/// waits for that answer, ADDR_ERROR
/// `-ETIMEDOUT`, as the kernel's address resolution reports a timeout.
/// The id goes back to IDLE (no port was bound: the kernel's id would be
/// ADDR_BOUND with its port; here it is usable for another
/// `rdma_resolve_addr` or a `rdma_bind_addr`); the answer, if it comes, is
/// stale (`addr_bound`).
fn addr_timed_out(id: &Arc<IdPriv>, query: u64) {
    let waiting =
        |s: &IdState| !id.is_destroyed() && s.st == St::AddrQuery && s.addr_query == query;
    let mut s = lock(&id.st);
    if !waiting(&s) {
        return;
    }
    let mut note = String::new();
    if let Some(mut w) = s.addr_watch.take() {
        // `timeout_ms` ≤ 0: a service still making progress is waited for
        // one more period (its `/proc` read outside the id's lock).
        drop(s);
        let working = w.working("rdma_resolve_addr", "a pipelined bind (PORT_BIND)");
        s = lock(&id.st);
        if !waiting(&s) {
            return;
        }
        if working {
            let after = w
                .check_at()
                .saturating_duration_since(std::time::Instant::now());
            s.addr_watch = Some(w);
            if crate::deadline::arm(id, query, after, addr_timed_out).is_ok() {
                return;
            }
            // No deadline can be kept: it times out now.
            s.addr_watch = None;
        } else {
            note = w.note();
        }
    }
    s.st = St::Idle;
    drop(s);
    ADDR_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
    if !TIMEOUT_LOGGED.swap(true, Ordering::Relaxed) {
        ibcm::log::always(
            ibcm::log::WARN,
            format_args!(
                "rdma_resolve_addr: the CM service did not answer within the timeout: ADDR_ERROR -ETIMEDOUT (a hung service{note}; its late answer will be dropped)"
            ),
        );
    }
    post(id, R::AddrError as c_int, -libc::ETIMEDOUT);
}

/// The port of pipelined `rdma_resolve_addr` number `query` came (on the
/// port link's reader thread): bind, resolve, report.
fn addr_bound(id: &Arc<IdPriv>, r: Result<u16, Errno>, ip: IpAddr, dst: SocketAddr, query: u64) {
    let mut s = lock(&id.st);
    let owner = id.port_owner();
    if id.is_destroyed() || s.st != St::AddrQuery || s.addr_query != query {
        // Destroyed meanwhile, or timed out (ADDR_ERROR reported): the
        // port goes (the id holds no lease of this query to release).
        if let Ok(port) = r {
            ports().release(s.ps, port, owner);
        }
        if !id.is_destroyed() {
            LATE_ADDR_ANSWERS.fetch_add(1, Ordering::Relaxed);
            ibcm_log!(
                DEBUG,
                "rdma_resolve_addr: an answer of the CM service after the timeout dropped ({r:?})"
            );
        }
        return;
    }
    TIMEOUT_LOGGED.store(false, Ordering::Relaxed);
    s.addr_watch = None;
    let result = r.and_then(|port| {
        let (dev, vb) = if ip.is_unspecified() {
            (None, None)
        } else {
            match select::device_for(Some(ip)) {
                Ok((d, b)) => (Some(d), b),
                Err(e) => {
                    ports().release(s.ps, port, owner);
                    return Err(e);
                }
            }
        };
        bound_locked(id, &mut s, ip, port, dev, vb)
    });
    let result = match result {
        Ok(()) => route_locked(id, &mut s, dst),
        Err(e) => {
            // No port: back to IDLE, as a failed bind leaves it.
            s.st = St::Idle;
            Err(e)
        }
    };
    drop(s);
    match result {
        Ok(()) => post(id, R::AddrResolved as c_int, 0),
        Err(e) => post(id, R::AddrError as c_int, -e.0),
    };
}

/// The resolution of a bound id towards `dst` (ADDR_RESOLVED); an error
/// is the ADDR_ERROR event's.
fn route_locked(id: &Arc<IdPriv>, s: &mut IdState, dst: SocketAddr) -> Result<(), Errno> {
    let bound = s.src.ok_or(Errno::EINVAL)?;
    // A wildcard binding takes the routing table's source for dst.
    let src_ip = if bound.ip().is_unspecified() {
        match select::mode() {
            select::Mode::Fixed(ref n) => {
                fixed_device_ip(n).or_else(|| select::route_source(dst.ip()))
            }
            _ => select::route_source(dst.ip()),
        }
    } else {
        Some(bound.ip())
    };
    let ip = src_ip.ok_or(Errno(libc::ENETUNREACH))?;
    let (dev, vb) = select::device_for(Some(ip))?;
    set_verbs(id, s, vb.as_ref())?;
    s.src = Some(SocketAddr::new(ip, bound.port()));
    s.dst = Some(dst);
    s.dev = Some(dev);
    if vb.is_none() {
        s.port_num = 1;
    }
    s.st = St::AddrResolved;
    id.sync_public(s);
    Ok(())
}

/// The IP of a fixed `soft:<ip>[...]` device name.
fn fixed_device_ip(name: &str) -> Option<IpAddr> {
    let rest = name.strip_prefix("soft:")?;
    let rest = rest.split('@').next()?;
    if let Ok(sa) = rest.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    rest.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// `rdma_resolve_route`: the path built locally as the kernel builds it
/// for RoCE (`cma_resolve_iboe_route`).
pub fn resolve_route(id: &Arc<IdPriv>) -> Result<(), Errno> {
    {
        let mut s = lock(&id.st);
        if s.st != St::AddrResolved {
            return Err(Errno::EINVAL);
        }
        let (Some(dev), Some(src), Some(dst)) = (s.dev.clone(), s.src, s.dst) else {
            return Err(Errno::EINVAL);
        };
        let mut path = dev.init_path(s.port_num as u32, gid_of(dst.ip()))?;
        path.traffic_class = s.tos.unwrap_or(0);
        path.packet_life_time = match s.ack_timeout {
            Some(t) => t.saturating_sub(1),
            None => crate::select::roce_packet_life_time(),
        };
        if path.rec_type == PathRecType::RoceV2 {
            let (sp, dp) = (src.port() as u32, dst.port() as u32);
            path.flow_label = match dst {
                SocketAddr::V6(v) if v.flowinfo() & 0xfffff != 0 => v.flowinfo() & 0xfffff,
                _ => (sp.wrapping_mul(31).wrapping_add(dp)) & 0xfffff,
            };
        }
        path.sl = 0;
        path.service_id = cma::service_id(s.ps, dst.port());
        id.set_path(&mut s, path);
        s.st = St::RouteResolved;
    }
    post(id, R::RouteResolved as c_int, 0);
    complete(id)
}

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

/// The `flags` of the `struct ibv_path_data` that `RDMA_OPTION_IB_PATH`
/// takes as the route: `IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY |
/// IBV_PATH_FLAG_BIDIRECTIONAL` (the kernel's `IB_PATH_*`, 1 | 2 | 40).
pub const IB_PATH_ROUTE_FLAGS: u32 = 1 | 2 | (8 | 32);
/// `sizeof(struct ibv_path_data)`: `flags`, a reserved word, the 64-byte
/// path record as the SA sends it.
pub const IB_PATH_DATA_LEN: usize = 72;

/// The path of an SA PathRecord (IBA 15.2.5.16, 64 bytes, network order;
/// the kernel's `ib_sa_unpack_path`) over `base` (the device's own facts:
/// record type, resolved route), with rdma_cm's `service_id`.
pub fn path_from_record(r: &[u8], base: PathRec, service_id: u64) -> PathRec {
    let be16 = |i: usize| u16::from_be_bytes([r[i], r[i + 1]]);
    let w = u32::from_be_bytes([r[44], r[45], r[46], r[47]]);
    let qs = be16(52);
    PathRec {
        service_id,
        dgid: Gid(r[8..24].try_into().expect("16 bytes")),
        sgid: Gid(r[24..40].try_into().expect("16 bytes")),
        dlid: be16(40) as u32,
        slid: be16(42) as u32,
        raw_traffic: (w >> 31) as u8,
        flow_label: (w >> 8) & 0xf_ffff,
        hop_limit: w as u8,
        traffic_class: r[48],
        reversible: r[49] >> 7,
        numb_path: r[49] & 0x7f,
        pkey: be16(50),
        qos_class: qs >> 4,
        sl: (qs & 0xf) as u8,
        mtu_selector: r[54] >> 6,
        mtu: r[54] & 0x3f,
        rate_selector: r[55] >> 6,
        rate: r[55] & 0x3f,
        packet_life_time_selector: r[56] >> 6,
        packet_life_time: r[56] & 0x3f,
        preference: r[57],
        ..base
    }
}

/// `RDMA_OPTION_IB_PATH` (the kernel's `ucma_set_ib_path`): `val` is an
/// array of `struct ibv_path_data` (`EINVAL` unless a whole number of
/// them); the one flagged `IB_PATH_ROUTE_FLAGS` becomes the id's route
/// (`EINVAL` if none, if the id is not address-resolved or has no
/// device) in place of `rdma_resolve_route`, and ROUTE_RESOLVED is
/// queued. Unlike `rdma_resolve_route` it never waits for that event,
/// even on a synchronous id: librdmacm's `rdma_create_ep` takes it next
/// (`complete`), as its own does.
fn set_ib_path(id: &Arc<IdPriv>, val: &[u8]) -> Result<(), Errno> {
    if val.len() % IB_PATH_DATA_LEN != 0 {
        return Err(Errno::EINVAL);
    }
    let rec = val
        .chunks_exact(IB_PATH_DATA_LEN)
        .find(|d| u32::from_ne_bytes([d[0], d[1], d[2], d[3]]) == IB_PATH_ROUTE_FLAGS)
        .map(|d| &d[8..])
        .ok_or(Errno::EINVAL)?;
    {
        let mut s = lock(&id.st);
        if s.st != St::AddrResolved {
            return Err(Errno::EINVAL);
        }
        let (Some(dev), Some(dst)) = (s.dev.clone(), s.dst) else {
            return Err(Errno::EINVAL);
        };
        let dgid = Gid(rec[8..24].try_into().expect("16 bytes"));
        let base = dev.init_path(s.port_num as u32, dgid)?;
        let path = path_from_record(rec, base, cma::service_id(s.ps, dst.port()));
        id.set_path(&mut s, path);
        s.st = St::RouteResolved;
    }
    post(id, R::RouteResolved as c_int, 0);
    Ok(())
}

/// `rdma_set_option`.
pub fn set_option(id: &Arc<IdPriv>, level: c_int, name: c_int, val: &[u8]) -> Result<(), Errno> {
    if (level, name) == (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) {
        return set_ib_path(id, val);
    }
    let mut s = lock(&id.st);
    let int = || -> Result<c_int, Errno> {
        let b: [u8; 4] = val.try_into().map_err(|_| Errno::EINVAL)?;
        Ok(c_int::from_ne_bytes(b))
    };
    match (level, name) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => {
            let [v] = val else { return Err(Errno::EINVAL) };
            s.tos = Some(*v);
        }
        (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => {
            // Only before binding (kernel: -EINVAL otherwise).
            if s.st != St::Idle {
                return Err(Errno::EINVAL);
            }
            s.reuseaddr = int()? != 0;
        }
        (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => {
            if s.st != St::Idle {
                return Err(Errno::EINVAL);
            }
            s.afonly = int()? != 0;
        }
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
            let [v] = val else { return Err(Errno::EINVAL) };
            s.ack_timeout = Some(*v);
        }
        _ => return Err(Errno(libc::ENOSYS)),
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Listen, connect, accept, reject, disconnect
// ---------------------------------------------------------------------------

/// `rdma_listen`.
pub fn listen(id: &Arc<IdPriv>) -> Result<(), Errno> {
    let mut s = lock(&id.st);
    if s.st == St::Idle {
        bind_locked(
            id,
            &mut s,
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        )?;
    }
    if s.st == St::Listen {
        return Ok(());
    }
    if s.st != St::AddrBound {
        return Err(Errno::EINVAL);
    }
    let src = s.src.ok_or(Errno::EINVAL)?;
    // A bound address listens on its device; the wildcard on every device
    // (each request's child then belongs to the device it came in on).
    let devs = match s.dev.clone() {
        Some(d) => vec![d],
        None => select::wildcard_devices(src.ip(), s.afonly)?,
    };
    ports().listen(s.ps, src.port(), id.port_owner())?;
    let sid = cma::service_id(s.ps, src.port());
    let mut cms: Vec<CmId> = Vec::with_capacity(devs.len());
    for dev in &devs {
        let r = dev
            .create_id(None, std::ptr::null_mut(), Some(handler()))
            .and_then(|cm| {
                register_cm(id, &cm);
                // The engine prepares the MRA of every connection REQ this
                // listener reports (SIDR REQs are left alone): see
                // `on_req`. Through the host CM service, each REQ comes
                // with its QP attributes: `create_qp` and `accept` move
                // the child's QP without a round trip.
                match cm
                    .set_prepare_mra_on_report(true)
                    .and_then(|()| cm.set_qp_attrs_on_req(true))
                    .and_then(|()| cm.listen(sid))
                {
                    Ok(()) => Ok(cm),
                    Err(e) => {
                        lock(by_cm()).remove(&(cm.c_ptr() as usize));
                        let _ = cm.destroy();
                        Err(e)
                    }
                }
            });
        match r {
            Ok(cm) => cms.push(cm),
            Err(e) => {
                for cm in cms {
                    lock(by_cm()).remove(&(cm.c_ptr() as usize));
                    let _ = cm.destroy();
                }
                return Err(e);
            }
        }
    }
    s.dev = devs.first().cloned();
    if s.vdev.is_none() {
        s.port_num = 1;
    }
    let mut cms = cms.into_iter();
    s.cm = cms.next();
    s.more_cms = cms.collect();
    s.st = St::Listen;
    id.sync_public(&s);
    Ok(())
}

/// The user's private data of a call, checked against `max`.
///
/// # Safety
/// `p` must be NULL or readable for `len` bytes.
pub unsafe fn pdata<'a>(p: *const c_void, len: usize, max: usize) -> Result<&'a [u8], Errno> {
    if len > max {
        return Err(Errno::EINVAL);
    }
    if p.is_null() || len == 0 {
        return Ok(&[]);
    }
    Ok(unsafe { std::slice::from_raw_parts(p.cast(), len) })
}

conn_param_bytes!(bytes_struct! {
    /// Connection parameters of `rdma_connect` / `rdma_accept` in Rust
    /// form. `..u8s` stands for `rdma_conn_param`'s one-byte members
    /// `responder_resources` … `srq` (`conn_param_bytes!`, `lib.rs`).
    #[derive(Clone, Default)]
    pub struct ConnParam {
        pub private_data: Vec<u8>,
        ..u8s,
        pub qp_num: u32,
    }
});

/// `rdma_connect`.
pub fn connect(id: &Arc<IdPriv>, p: Option<ConnParam>) -> Result<(), Errno> {
    {
        let mut s = lock(&id.st);
        if s.st != St::RouteResolved {
            return Err(Errno::EINVAL);
        }
        let (Some(dev), Some(path), Some(src), Some(dst)) = (s.dev.clone(), s.path, s.src, s.dst)
        else {
            return Err(Errno::EINVAL);
        };
        let has_qp = !id.public().qp.is_null();
        let ud = qp_type_of(s.ps) == IBV_QPT_UD;
        let p = match p {
            Some(p) => p,
            None if !has_qp && !ud => return Err(Errno::EINVAL),
            None => ConnParam {
                retry_count: 7,
                rnr_retry_count: 7,
                responder_resources: RDMA_MAX_RESP_RES,
                initiator_depth: RDMA_MAX_INIT_DEPTH,
                ..ConnParam::default()
            },
        };
        let (resp, init) = verbs::RdAtomicMax::of(s.vdev).connect(
            p.responder_resources,
            p.initiator_depth,
            s.ps == port_space::TCP && s.vdev.is_some(),
        )?;
        let header = IpHeader {
            src_port: src.port(),
            src: src.ip(),
            dst: dst.ip(),
        };
        let mut user = s.connect_prefix.clone();
        user.extend_from_slice(&p.private_data);
        let max = if ud {
            cma::SIDR_REQ_USER_DATA
        } else {
            cma::REQ_USER_DATA
        };
        if user.len() > max {
            return Err(Errno::EINVAL);
        }
        let pd = header.with_user_data(&user).map_err(|_| Errno::EINVAL)?;
        let cm = dev.create_id(None, std::ptr::null_mut(), Some(handler()))?;
        register_cm(id, &cm);
        let sid = cma::service_id(s.ps, dst.port());
        let r = if ud {
            cm.send_sidr_req(&SidrReqParams {
                path,
                sgid_attr: None,
                service_id: sid,
                timeout_ms: 1 << (CM_RESPONSE_TIMEOUT - 8),
                private_data: pd,
                max_cm_retries: MAX_CM_RETRIES,
            })
        } else {
            let qp_num = if has_qp {
                qp_num_of(id.public().qp)
            } else {
                p.qp_num
            };
            // The REQ's SRQ bit: whether the id's QP has an SRQ
            // (librdmacm), else what the application says.
            let srq = crate::qp::srq_bit(id.public().qp, p.srq);
            // An id with a QP moves it with the CM's attributes when its
            // REP comes (`connect_retrieved`): through the host CM
            // service, the REP brings them (no `INIT_QP_ATTR` round trip,
            // from the process's first connection on).
            if self::has_qp(&s) {
                cm.want_qp_attrs_on_rep();
            }
            // The engine prepares the REP's MRA when it reports it: see
            // `on_event`.
            cm.set_prepare_mra_on_report(true).and_then(|()| {
                cm.send_req(&ReqParams {
                    primary_path: path,
                    service_id: sid,
                    qp_num: qp_num & 0x00ff_ffff,
                    qp_type: crate::qp::req_qp_type(s.ps, id.public().qp_type),
                    starting_psn: s.psn,
                    private_data: pd,
                    responder_resources: resp,
                    initiator_depth: init,
                    remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
                    local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
                    flow_control: p.flow_control,
                    retry_count: p.retry_count.min(7),
                    rnr_retry_count: p.rnr_retry_count.min(7),
                    max_cm_retries: MAX_CM_RETRIES,
                    srq,
                    ece: s.local_ece.unwrap_or_default(),
                    ..ReqParams::default()
                })
            })
        };
        if let Err(e) = r {
            lock(by_cm()).remove(&(cm.c_ptr() as usize));
            let _ = cm.destroy();
            return Err(e);
        }
        s.cm = Some(cm);
        s.st = St::Connect;
    }
    complete(id)
}

/// The QP number of the application's `struct ibv_qp` (`id->qp`).
fn qp_num_of(qp: *mut c_void) -> u32 {
    // SAFETY: a live struct ibv_qp; its qp_num member sits at offset 52
    // (ibv_qp: context, qp_context, pd, send_cq, recv_cq, srq, handle,
    // qp_num).
    unsafe { *(qp as *const u8).add(52).cast::<u32>() }
}

/// `rdma_create_qp[_ex]` on an id with a verbs device: the QP (and the
/// CQs the attributes leave out) on `id->verbs`, INIT at once (a
/// CONNECT_REQUEST child with its CM id's INIT attributes), UD on to RTS;
/// `id->qp`, the CQs, their channels and `id->pd` are set.
pub fn create_qp(id: &Arc<IdPriv>, attr: &mut verbs::IbvQpInitAttrEx) -> Result<(), Errno> {
    let mut s = lock(&id.st);
    if !id.public().qp.is_null() || s.qpres.is_some() {
        return Err(Errno::EINVAL);
    }
    let Some(vdev) = s.vdev else {
        ibcm_log!(
            DEBUG,
            "librdmacm (ibcm): rdma_create_qp needs a verbs device; this id has none \
             (id->verbs is NULL: a soft device, CM only)"
        );
        return Err(Errno::EINVAL);
    };
    if attr.comp_mask & verbs::QP_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        attr.pd = s.pd.cast();
        attr.comp_mask |= verbs::QP_INIT_ATTR_PD;
    }
    // The SRQ (and an XRC SRQ's CQ) made through the id, as librdmacm.
    crate::qp::qp_attr_from_srq(id.public(), s.srq.as_ref(), || vdev.xrcd_get(), attr)?;
    let cm_init = match (&s.cm, s.st) {
        (Some(cm), St::Request) if attr.qp_type != verbs::qpt::UD => {
            Some(cm.init_qp_attr(IBV_QPS_INIT as u32)?)
        }
        _ => None,
    };
    let init = match &cm_init {
        Some(a) => verbs::QpInit::Cm(a),
        None => verbs::QpInit::Fresh {
            port_num: s.port_num,
            pkey_index: 0,
        },
    };
    // SAFETY: the context is the id's device's, open for the process; the
    // pointers in `attr` are the application's objects of it.
    let r = unsafe { verbs::create_qp(vdev.context(), id.public_ptr().cast(), attr, init) }?;
    if s.local_ece.is_none() {
        // SAFETY: the QP was just created.
        if let Ok(e) = unsafe { verbs::qp_ece(r.qp) } {
            if e.vendor_id != 0 {
                s.local_ece = Some(e);
            }
        }
    }
    let p = id.public_mut();
    p.qp = r.qp.cast();
    p.send_cq = r.send_cq.cast();
    p.recv_cq = r.recv_cq.cast();
    p.send_cq_channel = r.send_cq_channel.cast();
    p.recv_cq_channel = r.recv_cq_channel.cast();
    crate::qp::srq_cq_public(p, s.srq.as_ref());
    s.qp_pd = attr.pd.cast();
    s.qpres = Some(r);
    id.sync_public(&s);
    Ok(())
}

/// `rdma_destroy_qp`: the QP and what `create_qp` made for it.
pub fn destroy_qp(id: &Arc<IdPriv>) -> Result<(), Errno> {
    let mut s = lock(&id.st);
    let Some(r) = s.qpres.take() else {
        return Ok(());
    };
    let p = id.public_mut();
    p.qp = std::ptr::null_mut();
    p.send_cq = std::ptr::null_mut();
    p.recv_cq = std::ptr::null_mut();
    p.send_cq_channel = std::ptr::null_mut();
    p.recv_cq_channel = std::ptr::null_mut();
    crate::qp::srq_cq_public(p, s.srq.as_ref());
    s.qp_pd = std::ptr::null_mut();
    id.sync_public(&s);
    // SAFETY: our objects; the application let go of them.
    unsafe { verbs::destroy_qp(&r) }
}

/// The QP to INIT (again), RTR (the peer's ECE applied first) and RTS with the CM id's
/// attributes (`ucma_modify_qp_rtr`/`_rts`); `ack_timeout` overrides
/// the RTS local ACK timeout (`RDMA_OPTION_ID_ACK_TIMEOUT`).
fn qp_rtr_rts(
    cm: &CmId,
    qp: *mut ibcm::api::ibv::IbvQp,
    psn: u32,
    remote_ece: &Ece,
    ack_timeout: Option<u8>,
) -> Result<(), Errno> {
    // SAFETY: `qp` is the id's live QP.
    unsafe {
        // INIT again with the CM's attributes first: the access flags the
        // connection grants (a QP created before the exchange has none).
        verbs::modify_qp_cm(qp, &cm.init_qp_attr(IBV_QPS_INIT as u32)?)?;
        verbs::apply_remote_ece(qp, remote_ece)?;
        // The receive PSN is the id's own sequence number (the starting
        // PSN of its REQ or REP), as the kernel's rdma_init_qp_attr sets it.
        let mut rtr = cm.init_qp_attr(IBV_QPS_RTR as u32)?;
        rtr.rq_psn = psn;
        verbs::modify_qp_cm(qp, &rtr)?;
        let mut rts = cm.init_qp_attr(IBV_QPS_RTS as u32)?;
        if let Some(t) = ack_timeout {
            rts.timeout = t;
        }
        verbs::modify_qp_cm(qp, &rts)
    }
}

/// `rdma_accept` on a listener's child.
pub fn accept(id: &Arc<IdPriv>, p: Option<ConnParam>) -> Result<(), Errno> {
    let ud;
    {
        let mut s = lock(&id.st);
        if s.st != St::Request {
            return Err(Errno::EINVAL);
        }
        let cm = s.cm.clone().ok_or(Errno::EINVAL)?;
        let has_qp = !id.public().qp.is_null();
        ud = qp_type_of(s.ps) == IBV_QPT_UD;
        if ud {
            let p = p.unwrap_or_default();
            if p.private_data.len() > MAX_SIDR_REP_PDATA {
                return Err(Errno::EINVAL);
            }
            cm.send_sidr_rep(&SidrRepParams {
                qp_num: if has_qp {
                    qp_num_of(id.public().qp)
                } else {
                    p.qp_num
                },
                qkey: cma::RDMA_UDP_QKEY,
                status: 0,
                info: Vec::new(),
                private_data: p.private_data,
                ece: s.local_ece.unwrap_or_default(),
            })?;
            s.st = St::Connected;
        } else {
            let want = p
                .as_ref()
                .map(|p| (p.responder_resources, p.initiator_depth));
            let p = match p {
                Some(p) => p,
                None if has_qp => ConnParam {
                    rnr_retry_count: 7,
                    ..ConnParam::default()
                },
                None => return Err(Errno::EINVAL),
            };
            if p.private_data.len() > MAX_REP_PDATA {
                return Err(Errno::EINVAL);
            }
            // RDMA_MAX_* or no conn_param: what the peer asked for, within
            // the device's limits.
            let (resp, init) = verbs::RdAtomicMax::of(s.vdev).accept(
                want,
                s.peer_resources,
                s.ps == port_space::TCP && s.vdev.is_some(),
            )?;
            if let Some(r) = s.qpres {
                qp_rtr_rts(&cm, r.qp, s.psn, &s.remote_ece, s.ack_timeout)?;
            }
            let qp_num = if has_qp {
                qp_num_of(id.public().qp)
            } else {
                p.qp_num
            };
            cm.send_rep(&RepParams {
                qp_num: qp_num & 0x00ff_ffff,
                starting_psn: s.psn,
                private_data: p.private_data,
                responder_resources: resp,
                initiator_depth: init,
                failover_accepted: 0,
                flow_control: p.flow_control,
                rnr_retry_count: p.rnr_retry_count.min(7),
                srq: crate::qp::srq_bit(id.public().qp, p.srq),
                ece: s.local_ece.unwrap_or_default(),
            })?;
            s.st = St::Accepted;
        }
    }
    if ud { Ok(()) } else { complete(id) }
}

/// `rdma_reject` / `rdma_reject_ece`.
pub fn reject(id: &Arc<IdPriv>, data: &[u8], reason: u32) -> Result<(), Errno> {
    let mut s = lock(&id.st);
    if s.st != St::Request {
        return Err(Errno::EINVAL);
    }
    let cm = s.cm.clone().ok_or(Errno::EINVAL)?;
    if qp_type_of(s.ps) == IBV_QPT_UD {
        if data.len() > MAX_SIDR_REP_PDATA {
            return Err(Errno::EINVAL);
        }
        cm.send_sidr_rep(&SidrRepParams {
            status: SIDR_REJECT,
            private_data: data.to_vec(),
            ..SidrRepParams::default()
        })?;
    } else {
        if data.len() > MAX_REJ_PDATA {
            return Err(Errno::EINVAL);
        }
        cm.send_rej(reason, &[], data)?;
    }
    s.st = St::Failed;
    Ok(())
}

/// `rdma_disconnect`, with the kernel's return values (cma.c
/// `rdma_disconnect`, ucma.c `ucma_disconnect`): `EINVAL` only for an id
/// with no IB CM id (nothing connected, requested or listened on through
/// one) or no device (a wildcard listener); otherwise the QP goes to ERR,
/// a DREQ is tried, then a DREP, and the result is 0 whether either was
/// sent or not (not connected yet, rejected, already disconnected, a
/// second call). A synchronous id waits for its DISCONNECTED only when
/// this call sent a DREQ or DREP (librdmacm would wait for an event that
/// never comes).
pub fn disconnect(id: &Arc<IdPriv>) -> Result<(), Errno> {
    let sent = {
        let (cm, dreq_received) = {
            let s = lock(&id.st);
            let cm = s.cm.clone().ok_or(Errno::EINVAL)?;
            if s.st == St::Listen {
                return match s.src {
                    Some(a) if !a.ip().is_unspecified() => Ok(()),
                    _ => Err(Errno::EINVAL),
                };
            }
            if let Some(r) = s.qpres {
                // SAFETY: the id's live QP (destroy_qp takes it under
                // this lock).
                if let Err(e) = unsafe { verbs::to_error(r.qp) } {
                    ibcm_log!(DEBUG, "librdmacm (ibcm): rdma_disconnect: QP to ERR: {e}");
                }
            }
            (cm, s.dreq_received)
        };
        // The DREQ or DREP leaves without the id's lock: the CM id's own
        // state decides (a DREQ that arrives meanwhile makes send_dreq
        // fail and the DREP go), and the event-loop thread, which takes
        // this lock to queue the id's events, never waits for a sender
        // that a wake-up preempted in the middle of its send (one CPU).
        let r = if dreq_received {
            cm.send_drep(&[])
        } else {
            cm.send_dreq(&[]).or_else(|_| cm.send_drep(&[]))
        };
        if let Err(e) = &r {
            ibcm_log!(
                DEBUG,
                "librdmacm (ibcm): rdma_disconnect: neither DREQ nor DREP in this state ({e}); \
                 0 as the kernel returns"
            );
        }
        r.is_ok()
    };
    // A synchronous caller waits for DISCONNECTED (already queued when the
    // peer disconnected first).
    if sent { complete(id) } else { Ok(()) }
}

/// `rdma_establish`: the RTU of a QP-less active connection.
pub fn establish(id: &Arc<IdPriv>) -> Result<(), Errno> {
    if !id.public().qp.is_null() {
        return Err(Errno::EINVAL);
    }
    let mut s = lock(&id.st);
    if s.st != St::ConnectResponse {
        return Err(Errno::EINVAL);
    }
    let cm = s.cm.clone().ok_or(Errno::EINVAL)?;
    cm.send_rtu(&[])?;
    s.st = St::Connected;
    Ok(())
}

/// `rdma_notify`.
pub fn notify(id: &Arc<IdPriv>, event: c_int) -> Result<(), Errno> {
    let s = lock(&id.st);
    let cm = s.cm.clone().ok_or(Errno::EINVAL)?;
    if event != IBV_EVENT_COMM_EST {
        return Err(Errno::EINVAL);
    }
    cm.notify(event as u32)
}

/// `rdma_init_qp_attr`.
pub fn init_qp_attr(id: &Arc<IdPriv>, attr: &mut IbvQpAttr) -> Result<c_int, Errno> {
    let s = lock(&id.st);
    let ud = qp_type_of(s.ps) == IBV_QPT_UD;
    let exchanged = matches!(
        s.st,
        St::Request | St::Accepted | St::Connect | St::ConnectResponse | St::Connected
    );
    if ud || !exchanged || attr.qp_state == IBV_QPS_INIT as u32 && s.cm.is_none() {
        if s.dev.is_none() {
            return Err(Errno::EINVAL);
        }
        return match attr.qp_state as c_int {
            IBV_QPS_INIT => {
                attr.pkey_index = 0;
                attr.port_num = s.port_num;
                if ud {
                    attr.qkey = cma::RDMA_UDP_QKEY;
                    Ok(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)
                } else {
                    attr.qp_access_flags = 0;
                    Ok(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
                }
            }
            IBV_QPS_RTR if ud => Ok(IBV_QP_STATE),
            IBV_QPS_RTS if ud => {
                attr.sq_psn = 0;
                Ok(IBV_QP_STATE | qp_mask::SQ_PSN as c_int)
            }
            _ => Err(Errno::EINVAL),
        };
    }
    let cm = s.cm.clone().ok_or(Errno::EINVAL)?;
    let mut q = cm.init_qp_attr(attr.qp_state)?;
    // The kernel's rdma_init_qp_attr: at RTR the receive PSN is the id's
    // own sequence number (the starting PSN of its REQ or REP); the local
    // ACK timeout is RDMA_OPTION_ID_ACK_TIMEOUT's when set.
    if q.qp_state == IBV_QPS_RTR as u32 {
        q.rq_psn = s.psn;
    }
    if let Some(t) = s.ack_timeout {
        if q.qp_state == IBV_QPS_RTS as u32 {
            q.mask |= qp_mask::TIMEOUT;
        }
        if q.mask & qp_mask::TIMEOUT != 0 {
            q.timeout = t;
        }
    }
    // As ucma: the whole struct is the kernel's answer (unselected
    // members zero).
    let (out, mask) = ibcm::api::ibv::qp_attr_from_cm(&q)?;
    *attr = out;
    Ok(mask)
}

/// `rdma_set_local_ece`.
pub fn set_local_ece(id: &Arc<IdPriv>, ece: &IbvEce) -> Result<(), Errno> {
    if !id.public().qp.is_null() {
        return Err(Errno::EINVAL);
    }
    lock(&id.st).local_ece = Some(Ece {
        vendor_id: ece.vendor_id,
        attr_mod: ece.options,
    });
    Ok(())
}

/// `rdma_get_remote_ece`.
pub fn remote_ece(id: &Arc<IdPriv>) -> Result<IbvEce, Errno> {
    if !id.public().qp.is_null() {
        return Err(Errno::EINVAL);
    }
    let e = lock(&id.st).remote_ece;
    Ok(IbvEce {
        vendor_id: e.vendor_id,
        options: e.attr_mod,
        comp_mask: 0,
    })
}

/// `rdma_write_cm_event`: a user event on the id's channel.
pub fn write_event(id: &Arc<IdPriv>, kind: c_int, status: c_int, arg: u64) -> Result<(), Errno> {
    let mut b = EventBox::new(id, id, kind, status);
    // `param.arg` (rdma-core ≥ v60) overlays the first 8 bytes of param.
    // SAFETY: param is at least 8 bytes.
    unsafe { std::ptr::write_unaligned((&raw mut b.ev.param).cast::<u64>(), arg) };
    if !enqueue(id, b) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Queues an event the library produced for a call of the application
/// (`rdma_resolve_addrinfo`).
pub fn post_event(id: &Arc<IdPriv>, kind: c_int, status: c_int) {
    post(id, kind, status);
}

/// `rdma_get_request`: the next CONNECT_REQUEST of a synchronous listener.
pub fn get_request(listen: &Arc<IdPriv>) -> Result<Arc<IdPriv>, Errno> {
    let (sync, ch) = {
        let s = lock(&listen.st);
        (s.sync, s.channel.clone())
    };
    if !sync {
        return Err(Errno::EINVAL);
    }
    let last = std::mem::replace(&mut listen.public_mut().event, std::ptr::null_mut());
    if !last.is_null() {
        let _ = channel::ack(last);
    }
    let b = ch.pop()?;
    if b.ev.status != 0 {
        let rejected = b.ev.event == R::Rejected as c_int;
        let st = b.ev.status;
        let p = channel::hand_out(b);
        let _ = channel::ack(p);
        return Err(Errno(if rejected {
            libc::ECONNREFUSED
        } else {
            st.abs()
        }));
    }
    if b.ev.event != R::ConnectRequest as c_int {
        let p = channel::hand_out(b);
        let _ = channel::ack(p);
        return Err(Errno::EINVAL);
    }
    let child = b.subject.clone();
    let p = channel::hand_out(b);
    child.public_mut().event = p;
    Ok(child)
}

// ---------------------------------------------------------------------------
// Events from ibcm
// ---------------------------------------------------------------------------

fn find(cm: *mut c_void) -> Option<Arc<IdPriv>> {
    lock(by_cm()).get(&(cm as usize)).and_then(Weak::upgrade)
}

/// The `RustHandler` of every id: translates and queues; a non-zero
/// return makes ibcm destroy the id (a request nobody takes is rejected).
fn on_cm_event(cm: &CmId, ev: &Event) -> i32 {
    match ev.kind {
        EventType::ReqReceived | EventType::SidrReqReceived => on_request(cm, ev),
        _ => {
            if let Some(id) = find(cm.c_ptr().cast()) {
                on_event(&id, ev);
            }
            0
        }
    }
}

fn on_request(cm: &CmId, ev: &Event) -> i32 {
    let Some(listener) = find(listen_id(ev).cast()) else {
        return 1;
    };
    let Some(pd) = ev.private_data() else {
        return 1;
    };
    let (hdr, user) = match IpHeader::parse(pd) {
        Ok(v) => v,
        Err(e) => {
            ibcm_log!(
                DEBUG,
                "librdmacm (ibcm): request without a valid rdma_cm header ({e}): rejected"
            );
            return 1;
        }
    };
    let (ps, lport, lsrc, ctx, sync, lchannel) = {
        let s = lock(&listener.st);
        let Some(src) = s.src else { return 1 };
        (
            s.ps,
            src.port(),
            src.ip(),
            listener.public().context,
            s.sync,
            s.channel.clone(),
        )
    };
    // The child belongs to the device the request came in on (one of a
    // wildcard listener's), and to the verbs device holding the address
    // the request came to.
    let cdev = cm.device().clone();
    let child_verbs = select::name_of(&cdev).and_then(|n| select::verbs_binding(&n, hdr.dst));
    // A listener on a specific address takes requests for that address only
    // (kernel cma_match_private_data).
    if !lsrc.is_unspecified() && lsrc != hdr.dst {
        ibcm_log!(
            DEBUG,
            "librdmacm (ibcm): request for {} on a listener bound to {lsrc}: rejected",
            hdr.dst
        );
        return 1;
    }
    let child_channel = if sync {
        match Channel::new() {
            Ok(c) => c,
            Err(_) => return 1,
        }
    } else {
        lchannel
    };
    // The child has the listener's QP type (librdmacm's
    // ucma_process_conn_req), e.g. rdma_create_ep's IBV_QPT_XRC_RECV.
    let qpt = listener.public().qp_type;
    let child = IdPriv::new(child_channel, sync, ps, qpt, ctx);
    let ud = ev.kind == EventType::SidrReqReceived;
    {
        let mut s = lock(&child.st);
        s.src = Some(SocketAddr::new(hdr.dst, lport));
        s.dst = Some(SocketAddr::new(hdr.src, hdr.src_port));
        s.dev = Some(cdev);
        s.cm = Some(cm.clone());
        s.st = St::Request;
        match &ev.param {
            EventParam::Req(r) => {
                s.port_num = r.port;
                s.remote_qpn = r.remote_qpn;
                s.peer_resources = (r.responder_resources, r.initiator_depth);
                s.remote_ece = r.ece;
                child.set_path(&mut s, r.primary_path);
            }
            EventParam::SidrReq(r) => {
                s.port_num = r.port;
                if let Ok(path) = cm.device().init_path(r.port as u32, gid_of(hdr.src)) {
                    child.set_path(&mut s, path);
                }
            }
            _ => return 1,
        }
        if let Err(e) = set_verbs(&child, &mut s, child_verbs.as_ref()) {
            ibcm_log!(
                DEBUG,
                "librdmacm (ibcm): request: no default PD for the new id ({e}): rejected"
            );
            return 1;
        }
        child.sync_public(&s);
    }
    lock(ids()).insert(child.public_ptr() as usize, child.clone());
    register_cm(&child, cm);
    let mut b = EventBox::new(&child, &listener, R::ConnectRequest as c_int, 0);
    b.ev.listen_id = listener.public_ptr();
    if ud {
        b.set_private_data(user, cma::SIDR_REQ_USER_DATA, true);
    } else {
        b.set_private_data(user, cma::REQ_USER_DATA, false);
        if let EventParam::Req(r) = &ev.param {
            // SAFETY: writing the conn member of our own event.
            unsafe {
                let c = &mut b.ev.param.conn;
                // ibcm's REQ event is already the receiver's view (as ib_cm's).
                c.responder_resources = r.responder_resources;
                c.initiator_depth = r.initiator_depth;
                c.flow_control = r.flow_control;
                c.retry_count = r.retry_count;
                c.rnr_retry_count = r.rnr_retry_count;
                c.srq = r.srq;
                c.qp_num = r.remote_qpn;
            }
        }
    }
    if enqueue(&listener, b) {
        // As the kernel's rdma_cm (cma_ib_req_handler), a connection REQ
        // the application has not answered yet has its MRA prepared, so
        // that a duplicate of it is answered with an MRA (service timeout
        // 24, ≈ 69 s) instead of being dropped — the active side then
        // stops retransmitting while the server works through a burst of
        // requests. The engine did it when it reported the REQ (the
        // listener's `set_prepare_mra_on_report`), before this callback
        // ran: a duplicate in the same receive, or one reaching the host
        // CM service before this event reaches the process, is covered.
        0
    } else {
        // The listener is going away: the child goes with the request.
        child.destroyed.store(true, Ordering::SeqCst);
        if let Some(d) = lock(&child.st).vdev.take() {
            d.pd_put();
        }
        lock(ids()).remove(&(child.public_ptr() as usize));
        lock(by_cm()).remove(&(cm.c_ptr() as usize));
        1
    }
}

/// Whether the id has a QP for the library to move to RTS when its
/// connection completes (a test's stand-in counts).
fn has_qp(s: &IdState) -> bool {
    #[cfg(test)]
    if s.test_qp.is_some() {
        return true;
    }
    s.qpres.is_some()
}

/// Moves the id's QP through INIT (the CM's access flags), RTR and RTS.
fn qp_to_rts(cm: &CmId, s: &IdState) -> Result<(), Errno> {
    #[cfg(test)]
    if let Some(r) = s.test_qp {
        return r;
    }
    let q = s.qpres.ok_or(Errno::EINVAL)?;
    qp_rtr_rts(cm, q.qp, s.psn, &s.remote_ece, s.ack_timeout)
}

/// The application retrieves a CONNECT_RESPONSE (`Channel::pop`:
/// `rdma_get_cm_event`, or a synchronous `rdma_connect` waiting for it).
/// With a QP the connection is completed now, on the application's
/// thread, as librdmacm's `ucma_process_conn_resp`: the QP to RTS, the
/// RTU, the id connected and the event turned into ESTABLISHED. A failure
/// turns it into CONNECT_ERROR as librdmacm reports it (status -1, the
/// error in `errno`, the QP moved to ERR, the id marked `connect_error`
/// so that its later REJECTED and DISCONNECTED are not reported); a QP
/// that could not reach RTS also rejects the REP. An id without a QP gets
/// the CONNECT_RESPONSE (`rdma_establish` sends the RTU). An id that left
/// ConnectResponse meanwhile (destroyed, disconnected, or its connection
/// rejected or timed out, reported by the events after this one) sends
/// nothing: CONNECT_ERROR with `EINVAL` (the kernel refuses librdmacm's
/// ACCEPT for such an id).
pub(crate) fn connect_retrieved(b: &mut EventBox) {
    let id = b.subject.clone();
    let mut s = lock(&id.st);
    if !has_qp(&s) {
        return;
    }
    let cm = match (&s.cm, s.st) {
        (Some(cm), St::ConnectResponse) if !id.is_destroyed() => cm.clone(),
        (_, st) => {
            ibcm_log!(
                DEBUG,
                "librdmacm (ibcm): CONNECT_RESPONSE retrieved with the id {st:?}{}: \
                 connection not completed",
                if id.is_destroyed() {
                    " (destroyed)"
                } else {
                    ""
                }
            );
            connect_error(b, &mut s, Errno::EINVAL);
            return;
        }
    };
    match qp_to_rts(&cm, &s).and_then(|()| cm.send_rtu(&[])) {
        Ok(()) => {
            s.st = St::Connected;
            b.ev.event = R::Established as c_int;
        }
        Err(e) => {
            ibcm_log!(
                DEBUG,
                "librdmacm (ibcm): REP: moving the QP to RTS failed: {e}; rejected"
            );
            let _ = cm.send_rej(REJ_CONSUMER_DEFINED, &[], &[]);
            s.st = St::Failed;
            connect_error(b, &mut s, e);
        }
    }
}

/// A CONNECT_RESPONSE retrieved as CONNECT_ERROR (librdmacm's
/// `rdma_get_cm_event` when `ucma_process_conn_resp` fails): status -1
/// and `e` in the retrieving thread's `errno` (what librdmacm's failed
/// call left there), the id's QP to ERR, the id marked.
fn connect_error(b: &mut EventBox, s: &mut IdState, e: Errno) {
    qp_to_err(s);
    s.connect_error = true;
    b.ev.event = R::ConnectError as c_int;
    b.ev.status = -1;
    crate::exports::set_errno(e.0);
}

/// librdmacm's `ucma_modify_qp_err`: the id's QP (if any) to ERR; a
/// failure is logged, not reported.
pub(crate) fn qp_to_err(s: &IdState) {
    if let Some(r) = s.qpres {
        // SAFETY: the id's live QP (destroy_qp takes it under the id's
        // lock, which the caller holds).
        if let Err(e) = unsafe { verbs::to_error(r.qp) } {
            ibcm_log!(DEBUG, "librdmacm (ibcm): QP to ERR: {e}");
        }
    }
}

/// Retrieving a REJECTED or DISCONNECTED event of `id`: whether it is
/// reported (librdmacm drops both for an id whose CONNECT_RESPONSE was
/// retrieved as CONNECT_ERROR); a reported REJECTED moves the id's QP to
/// ERR, as librdmacm's `rdma_get_cm_event` does.
pub(crate) fn end_retrieved(id: &IdPriv, rejected: bool) -> bool {
    let s = lock(&id.st);
    if s.connect_error {
        return false;
    }
    if rejected {
        qp_to_err(&s);
    }
    true
}

fn on_event(id: &Arc<IdPriv>, ev: &Event) {
    let Some(m) = cma::map_event(ev) else { return };
    let mut b = EventBox::new(id, id, m.kind as c_int, m.status);
    let pd = ev.private_data().unwrap_or(&[]);
    {
        let mut s = lock(&id.st);
        match (ev.kind, &ev.param) {
            (EventType::RepReceived, EventParam::Rep(r)) => {
                s.remote_qpn = r.remote_qpn;
                s.remote_ece = r.ece;
                s.st = St::ConnectResponse;
                // As the kernel's rdma_cm (cma_ib_handler on
                // IB_CM_REP_RECEIVED), the REP has its MRA prepared — by the
                // engine as it reported it (`set_prepare_mra_on_report` in
                // connect) — so that a duplicate of it that comes before the
                // RTU (one that an application calling rdma_establish later
                // leaves time for) is answered with an MRA (service timeout
                // 24, ≈ 69 s) instead of being dropped: the passive side
                // then waits instead of running out of REP retries.
                b.set_private_data(pd, m.private_data_len as usize, false);
                // SAFETY: writing the conn member of our own event.
                unsafe {
                    let c = &mut b.ev.param.conn;
                    c.responder_resources = r.responder_resources;
                    c.initiator_depth = r.initiator_depth;
                    c.flow_control = r.flow_control;
                    c.rnr_retry_count = r.rnr_retry_count;
                    c.srq = r.srq;
                    c.qp_num = r.remote_qpn;
                }
                // With a QP the library completes the connection itself
                // (librdmacm's ucma_process_conn_resp): RTR, RTS, RTU,
                // ESTABLISHED; a failure rejects the REP (CONNECT_ERROR).
                // Not here on the event-loop thread but when the
                // application retrieves the event (`connect_retrieved`), on
                // its thread, as librdmacm's rdma_get_cm_event: three QP
                // modifications and the RTU took milliseconds per REP in
                // this callback under load, and the REPs that came in
                // meanwhile stayed unread while their REQ timers ran
                // (docs/PERFORMANCE.md §5). The engine stopped this REQ's
                // timer when it reported the REP.
                b.completes_connect = true;
            }
            (EventType::RtuReceived | EventType::UserEstablished, _) => {
                s.st = St::Connected;
            }
            (EventType::RejReceived, _) => {
                s.st = St::Failed;
                b.set_private_data(pd, m.private_data_len as usize, false);
            }
            (EventType::DreqReceived | EventType::DrepReceived | EventType::DreqError, _) => {
                if ev.kind == EventType::DreqReceived {
                    s.dreq_received = true;
                }
                if s.disconnected {
                    return;
                }
                s.disconnected = true;
                s.st = St::Disconnected;
            }
            (EventType::SidrRepReceived, EventParam::SidrRep(r)) => {
                if r.status == 0 {
                    s.st = St::Connected;
                    b.set_private_data(pd, m.private_data_len as usize, true);
                    let ah = s
                        .path
                        .map(|p| ah_from_path(&p, s.port_num, s.gid_index))
                        .unwrap_or_default();
                    // SAFETY: writing the ud member of our own event.
                    unsafe {
                        let u = &mut b.ev.param.ud;
                        u.ah_attr = ah;
                        u.qp_num = r.qpn;
                        u.qkey = r.qkey;
                    }
                } else {
                    s.st = St::Failed;
                }
            }
            (EventType::ReqError | EventType::RepError | EventType::SidrReqError, _) => {
                s.st = St::Failed;
            }
            _ => {}
        }
    }
    enqueue(id, b);
}

#[cfg(test)]
#[path = "../../tests/common/net.rs"]
mod test_net;

// The integration tests' helpers (`sockaddr`, `conn_param`), shared by path.
#[cfg(test)]
#[path = "../tests/common/cma.rs"]
mod test_cma;

/// Where the active side completes a connection with a QP: when the
/// application retrieves the CONNECT_RESPONSE (librdmacm's
/// `rdma_get_cm_event`), not on the event-loop thread as the REP comes in.
/// Soft devices have no verbs, so the id's QP is a stand-in (`test_qp`)
/// whose move to RTS gives what the test says; the rest is the real path:
/// a plain IB CM peer on a soft device answers the REQ and reports the RTU.
#[cfg(test)]
mod tests {
    use super::test_cma::{conn_param, sockaddr};
    use super::test_net as net;
    use super::*;
    use crate::exports::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn starting_psns_are_24_bit_random_and_a_fork_child_draws_its_own() {
        let psns: Vec<u32> = (0..300).map(|_| random_psn()).collect();
        assert!(psns.iter().all(|&p| p < 1 << 24));
        let distinct: std::collections::HashSet<_> = psns.iter().collect();
        // 300 draws of 24 bits: a repeat has probability ≈ 0.3 %; many
        // mean a pool handed out twice.
        assert!(distinct.len() >= 298, "{} distinct of 300", distinct.len());
        // After fork the child's pool is its parent's copy: it must not
        // hand out what the parent hands out next.
        let mut fds = [0; 2];
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only draws, writes 4 bytes and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let v = random_psn();
            unsafe {
                libc::write(fds[1], (&raw const v).cast(), 4);
                libc::_exit(0);
            }
        }
        assert!(pid > 0);
        let mine = random_psn();
        let mut theirs = 0u32;
        let n = unsafe { libc::read(fds[0], (&raw mut theirs).cast(), 4) };
        unsafe {
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert_eq!(n, 4);
        assert_ne!(mine, theirs, "the child drew its parent's next PSN");
    }

    fn setup() {
        // SAFETY: every test of this binary that reads it sets the same
        // value before it opens a device.
        unsafe { std::env::set_var(crate::select::ENV, "soft") };
    }

    /// A plain IB CM peer on `soft:ip(n)` listening on TCP port `port`: it
    /// answers a REQ with a REP (QPN 0x4444) and reports every other event.
    fn peer(n: u16, port: u16) -> (Arc<Device>, CmId, mpsc::Receiver<EventType>) {
        peer_with(n, port, false)
    }

    /// `peer`, which with `rej_after_rep` sends a REJ (consumer defined)
    /// right after each REP: the connection is rejected before the
    /// application retrieves its CONNECT_RESPONSE.
    fn peer_with(
        n: u16,
        port: u16,
        rej_after_rep: bool,
    ) -> (Arc<Device>, CmId, mpsc::Receiver<EventType>) {
        let dev = Device::open(&net::soft(n), ibcm::api::DeviceOptions::default()).unwrap();
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let h: ibcm::api::RustHandler = Arc::new(move |id, ev| {
            if ev.kind == EventType::ReqReceived {
                let rep = ibcm::api::RepParams {
                    qp_num: 0x4444,
                    starting_psn: 9,
                    ..ibcm::api::RepParams::default()
                };
                if let Err(e) = id.send_rep(&rep) {
                    return e.0;
                }
                if rej_after_rep {
                    id.send_rej(REJ_CONSUMER_DEFINED, &[], &[]).unwrap();
                }
                return 0;
            }
            let _ = lock(&tx).send(ev.kind);
            0
        });
        let l = dev.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
        l.listen(cma::service_id(port_space::TCP, port)).unwrap();
        (dev, l, rx)
    }

    /// An id on `ch` (NULL: synchronous) from `ip(client)` routed to
    /// `ip(server):port`, with a stand-in QP whose move to RTS gives `qp`.
    fn routed(
        ch: *mut RdmaEventChannel,
        client: u16,
        server: u16,
        port: u16,
        qp: Result<(), Errno>,
    ) -> *mut RdmaCmId {
        let mut id = std::ptr::null_mut();
        // SAFETY: out pointer of ours; the addresses are ours too.
        unsafe {
            assert_eq!(
                rdma_create_id(ch, &mut id, std::ptr::null_mut(), port_space::TCP as i32),
                0
            );
            let mut src = sockaddr(SocketAddr::new(net::addr(client).into(), 0));
            let mut dst = sockaddr(SocketAddr::new(net::addr(server).into(), port));
            assert_eq!(
                rdma_resolve_addr(id, (&raw mut src).cast(), (&raw mut dst).cast(), 1000),
                0
            );
            if !ch.is_null() {
                assert_eq!(next(ch).0, R::AddrResolved as c_int);
            }
            assert_eq!(rdma_resolve_route(id, 1000), 0);
            if !ch.is_null() {
                assert_eq!(next(ch).0, R::RouteResolved as c_int);
            }
        }
        lock(&lookup(id).unwrap().st).test_qp = Some(qp);
        id
    }

    /// `rdma_connect` of `id` with QPN `qpn` and no private data.
    fn connect(id: *mut RdmaCmId, qpn: u32) -> c_int {
        let mut cp = conn_param(b"", qpn);
        // SAFETY: a live id and parameters of ours.
        unsafe { rdma_connect(id, &mut cp) }
    }

    /// Whether `ch`'s fd becomes readable (an event queued) within 5 s.
    fn readable(ch: *mut RdmaEventChannel) -> bool {
        let mut p = libc::pollfd {
            // SAFETY: a live channel of ours.
            fd: unsafe { (*ch).fd },
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd of ours.
        unsafe { libc::poll(&mut p, 1, 5000) == 1 }
    }

    /// The next event of `ch` (kind, status, its conn's QPN), acked.
    fn next(ch: *mut RdmaEventChannel) -> (c_int, c_int, u32) {
        assert!(readable(ch), "no event in 5 s");
        let mut ev = std::ptr::null_mut();
        // SAFETY: a live channel and an out pointer of ours.
        unsafe {
            assert_eq!(rdma_get_cm_event(ch, &mut ev), 0);
            let r = ((*ev).event, (*ev).status, (*ev).param.conn.qp_num);
            assert_eq!(rdma_ack_cm_event(ev), 0);
            r
        }
    }

    /// The peer's events within `t`.
    fn seen(rx: &mpsc::Receiver<EventType>, t: Duration) -> Vec<EventType> {
        let end = std::time::Instant::now() + t;
        let mut v = Vec::new();
        while let Ok(k) = rx.recv_timeout(end.saturating_duration_since(std::time::Instant::now()))
        {
            v.push(k);
        }
        v
    }

    #[test]
    fn the_rtu_leaves_when_the_application_retrieves_the_response() {
        setup();
        let (_dev, l, rx) = peer(2, 7481);
        let ch = rdma_create_event_channel();
        let id = routed(ch, 3, 2, 7481, Ok(()));
        assert_eq!(connect(id, 0x1236), 0);
        // The REP is in: its event waits for the application, and no RTU
        // has left.
        assert!(readable(ch), "no CONNECT_RESPONSE in 5 s");
        let rtu_early = seen(&rx, Duration::from_millis(300));
        assert!(
            !rtu_early.contains(&EventType::RtuReceived),
            "the RTU left before the application took the event: {rtu_early:?}"
        );
        assert_eq!(lock(&lookup(id).unwrap().st).st, St::ConnectResponse);
        // Retrieving it completes the connection.
        assert_eq!(next(ch), (R::Established as c_int, 0, 0x4444));
        assert_eq!(lock(&lookup(id).unwrap().st).st, St::Connected);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(EventType::RtuReceived)
        );
        assert_eq!(rdma_destroy_id(id), 0);
        rdma_destroy_event_channel(ch);
        l.destroy().unwrap();
    }

    #[test]
    fn a_synchronous_connect_completes_or_rejects_on_the_callers_thread() {
        setup();
        let (_dev, l, rx) = peer(4, 7482);
        let id = routed(std::ptr::null_mut(), 5, 4, 7482, Ok(()));
        assert_eq!(connect(id, 0x1236), 0);
        // SAFETY: the id's own last event, kept until its next call.
        assert_eq!(unsafe { (*(*id).event).event }, R::Established as c_int);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(EventType::RtuReceived)
        );
        assert_eq!(rdma_destroy_id(id), 0);
        // The QP cannot go to RTS: the REP is rejected, the connect fails,
        // no RTU. The event is CONNECT_ERROR with status -1 (errno EIO
        // then), which librdmacm's `ucma_complete` turns into errno
        // -(-1) = EPERM for the synchronous call.
        let id = routed(std::ptr::null_mut(), 5, 4, 7482, Err(Errno(libc::EIO)));
        // Another QPN: the peer still holds the first connection (its DREQ
        // unanswered), and the same QPN again would be a stale connection.
        assert_eq!(connect(id, 0x1237), -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EPERM)
        );
        // SAFETY: the id's own last event, kept until its next call.
        unsafe {
            assert_eq!((*(*id).event).event, R::ConnectError as c_int);
            assert_eq!((*(*id).event).status, -1);
        }
        assert_eq!(lock(&lookup(id).unwrap().st).st, St::Failed);
        let after = seen(&rx, Duration::from_millis(500));
        assert!(after.contains(&EventType::RejReceived), "{after:?}");
        assert!(!after.contains(&EventType::RtuReceived), "{after:?}");
        assert_eq!(rdma_destroy_id(id), 0);
        l.destroy().unwrap();
    }

    /// Through the host CM service (one in this process, both devices
    /// served by it): the first `rdma_connect` of a process, on an id
    /// with a QP, asks for the REP's QP attributes in the REQ's message,
    /// so that first REP already brings them (pushed 1) and its QP moves
    /// make no `INIT_QP_ATTR` round trip (requests 0).
    #[test]
    fn the_first_connect_with_a_qp_gets_its_reps_qp_attributes_through_the_service() {
        setup();
        let dir = std::env::temp_dir().join(format!("ibcm-rdmacm-{}-repattrs", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("ibcmd.sock");
        let listener = ibcm::service::bind(&socket).unwrap();
        let svc = ibcm::service::Service::new(ibcm::service::Options {
            socket: socket.clone(),
            idle_exit: None,
            limits: ibcm::service::Limits::default(),
        });
        std::thread::spawn(move || svc.run(listener));
        let srv = Device::open_served(&net::soft(8), &socket).unwrap();
        let cli = Device::open_served(&net::soft(9), &socket).unwrap();
        crate::select::test_use_device(&net::soft(9), cli.clone());
        let h: ibcm::api::RustHandler = Arc::new(move |id, ev| {
            if ev.kind == EventType::ReqReceived {
                let rep = ibcm::api::RepParams {
                    qp_num: 0x4444,
                    starting_psn: 9,
                    ..ibcm::api::RepParams::default()
                };
                return id.send_rep(&rep).map_or(1, |()| 0);
            }
            0
        });
        let l = srv.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
        l.listen(cma::service_id(port_space::TCP, 7484)).unwrap();
        let counts = || {
            let s = cli.service_stat().unwrap();
            (s.qp_attrs_pushed, s.qp_attr_requests)
        };
        assert_eq!(counts(), (0, 0));
        let id = routed(std::ptr::null_mut(), 9, 8, 7484, Ok(()));
        assert_eq!(connect(id, 0x1237), 0);
        // SAFETY: the id's own last event, kept until its next call.
        assert_eq!(unsafe { (*(*id).event).event }, R::Established as c_int);
        assert_eq!(counts(), (1, 0), "(pushed, requests) of the first connect");
        assert_eq!(rdma_destroy_id(id), 0);
        l.destroy().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_rtu_leaves_for_an_id_destroyed_before_the_retrieval() {
        setup();
        let (_dev, l, rx) = peer(6, 7483);
        let ch = rdma_create_event_channel();
        let id = routed(ch, 7, 6, 7483, Ok(()));
        assert_eq!(connect(id, 0x1236), 0);
        assert!(readable(ch), "no CONNECT_RESPONSE in 5 s");
        assert_eq!(rdma_destroy_id(id), 0);
        let after = seen(&rx, Duration::from_millis(500));
        assert!(!after.contains(&EventType::RtuReceived), "{after:?}");
        rdma_destroy_event_channel(ch);
        l.destroy().unwrap();
    }

    /// Whether `f` holds within 5 s.
    fn wait_until(f: impl Fn() -> bool) -> bool {
        let end = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < end {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        f()
    }

    /// The next event of `ch` with the `errno` its retrieval left (kind,
    /// status, errno), acked.
    fn next_errno(ch: *mut RdmaEventChannel) -> (c_int, c_int, i32) {
        assert!(readable(ch), "no event in 5 s");
        let mut ev = std::ptr::null_mut();
        crate::exports::set_errno(0);
        // SAFETY: a live channel and an out pointer of ours.
        unsafe {
            assert_eq!(rdma_get_cm_event(ch, &mut ev), 0);
            let e = std::io::Error::last_os_error().raw_os_error().unwrap();
            let r = ((*ev).event, (*ev).status, e);
            assert_eq!(rdma_ack_cm_event(ev), 0);
            r
        }
    }

    /// Whether `ch` has an event queued now (non-blocking retrieval);
    /// one that is there is acked.
    fn pending(ch: *mut RdmaEventChannel) -> Option<c_int> {
        // SAFETY: a live channel of ours.
        let fd = unsafe { (*ch).fd };
        // SAFETY: fcntl on our own fd.
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        let mut ev = std::ptr::null_mut();
        // SAFETY: a live channel and an out pointer of ours.
        unsafe {
            if rdma_get_cm_event(ch, &mut ev) != 0 {
                assert_eq!(
                    std::io::Error::last_os_error().raw_os_error(),
                    Some(libc::EAGAIN)
                );
                return None;
            }
            let k = (*ev).event;
            assert_eq!(rdma_ack_cm_event(ev), 0);
            Some(k)
        }
    }

    /// librdmacm (`rdma_get_cm_event`): a CONNECT_RESPONSE whose
    /// connection was rejected before its retrieval comes out as
    /// CONNECT_ERROR with status -1 and errno EINVAL, and the REJECTED
    /// behind it is not reported; the id's destroy does not wait for it.
    #[test]
    fn a_response_rejected_before_its_retrieval_is_a_connect_error_and_hides_the_rejected() {
        setup();
        let (_dev, l, rx) = peer_with(10, 7485, true);
        let ch = rdma_create_event_channel();
        let id = routed(ch, 11, 10, 7485, Ok(()));
        assert_eq!(connect(id, 0x1238), 0);
        // Both the REP's and the REJ's events are queued before the
        // application looks.
        assert!(readable(ch), "no CONNECT_RESPONSE in 5 s");
        assert!(
            wait_until(|| { lock(&lookup(id).unwrap().st).st == St::Failed }),
            "the REJ did not come"
        );
        assert_eq!(next_errno(ch), (R::ConnectError as c_int, -1, libc::EINVAL));
        assert!(lock(&lookup(id).unwrap().st).connect_error);
        assert_eq!(pending(ch), None, "the REJECTED was reported");
        let after = seen(&rx, Duration::from_millis(300));
        assert!(!after.contains(&EventType::RtuReceived), "{after:?}");
        assert_eq!(rdma_destroy_id(id), 0);
        rdma_destroy_event_channel(ch);
        l.destroy().unwrap();
    }

    /// A QP that cannot reach RTS when the application retrieves the
    /// CONNECT_RESPONSE: CONNECT_ERROR, status -1, the error in errno, a
    /// REJ to the peer; an id without that mark still gets its REJECTED.
    #[test]
    fn a_failed_rts_is_a_connect_error_with_the_error_in_errno() {
        setup();
        let (_dev, l, rx) = peer(12, 7486);
        let ch = rdma_create_event_channel();
        let id = routed(ch, 13, 12, 7486, Err(Errno(libc::EIO)));
        assert_eq!(connect(id, 0x1239), 0);
        assert_eq!(next_errno(ch), (R::ConnectError as c_int, -1, libc::EIO));
        let after = seen(&rx, Duration::from_millis(500));
        assert!(after.contains(&EventType::RejReceived), "{after:?}");
        assert_eq!(pending(ch), None);
        assert_eq!(rdma_destroy_id(id), 0);
        // Without the mark the REJECTED is reported (an id the peer
        // rejects while the application has not looked yet, no QP).
        let (_dev2, l2, _rx2) = peer_with(14, 7487, true);
        let id = routed(ch, 15, 14, 7487, Ok(()));
        lock(&lookup(id).unwrap().st).test_qp = None;
        assert_eq!(connect(id, 0x123a), 0);
        assert_eq!(next(ch).0, R::ConnectResponse as c_int);
        assert_eq!(next(ch).0, R::Rejected as c_int);
        assert_eq!(rdma_destroy_id(id), 0);
        rdma_destroy_event_channel(ch);
        l.destroy().unwrap();
        l2.destroy().unwrap();
    }

    /// One `struct ibv_path_data`: `flags`, the reserved word, and an SA
    /// PathRecord (network order) from `sgid` to `dgid` with recognisable
    /// values.
    fn path_data(flags: u32, sgid: Gid, dgid: Gid) -> Vec<u8> {
        let mut d = vec![0u8; IB_PATH_DATA_LEN];
        d[0..4].copy_from_slice(&flags.to_ne_bytes());
        let r = &mut d[8..];
        r[0..8].copy_from_slice(&0x0106_0000_0000_1d4cu64.to_be_bytes());
        r[8..24].copy_from_slice(&dgid.0);
        r[24..40].copy_from_slice(&sgid.0);
        // raw_traffic 0, flow label 0x12345, hop limit 9
        r[44..48].copy_from_slice(&((0x12345u32 << 8) | 9).to_be_bytes());
        r[48] = 0x28; // traffic class
        r[49] = 0x80 | 1; // reversible, one path
        r[50..52].copy_from_slice(&0xffffu16.to_be_bytes());
        r[52..54].copy_from_slice(&((0x5u16 << 4) | 3).to_be_bytes()); // QoS 5, SL 3
        r[54] = (2 << 6) | 3; // MTU exactly 1024
        r[55] = (2 << 6) | 7; // rate exactly 40 Gb/s
        r[56] = (2 << 6) | 15; // packet life time exactly 15
        d
    }

    /// `rdma_set_option(RDMA_OPTION_IB_PATH)` on `id`: its result and errno.
    fn set_path_option(id: *mut RdmaCmId, v: &[u8]) -> (c_int, Option<i32>) {
        let mut v = v.to_vec();
        // SAFETY: plain store to our errno; a live id and a buffer of ours.
        unsafe {
            *libc::__errno_location() = 0;
            let r = rdma_set_option(
                id,
                RDMA_OPTION_IB,
                RDMA_OPTION_IB_PATH,
                v.as_mut_ptr().cast(),
                v.len(),
            );
            (r, Some(*libc::__errno_location()))
        }
    }

    /// `RDMA_OPTION_IB_PATH` (librdmacm's route from ibacm, `rdma_create_ep`
    /// with `ai_route`): the path record flagged GMP | PRIMARY |
    /// BIDIRECTIONAL becomes the route, ROUTE_RESOLVED is queued, and the
    /// REQ carries that path; the kernel's `EINVAL`s otherwise.
    #[test]
    fn an_ib_path_option_is_the_route_the_req_carries() {
        setup();
        let dev = Device::open(&net::soft(18), ibcm::api::DeviceOptions::default()).unwrap();
        let seen: Arc<Mutex<Option<PathRec>>> = Arc::new(Mutex::new(None));
        let h: ibcm::api::RustHandler = {
            let seen = seen.clone();
            Arc::new(move |id, ev| {
                if let ibcm::api::EventParam::Req(p) = &ev.param {
                    *lock(&seen) = Some(p.primary_path);
                    let rep = ibcm::api::RepParams {
                        qp_num: 0x4445,
                        starting_psn: 9,
                        ..ibcm::api::RepParams::default()
                    };
                    return id.send_rep(&rep).err().map_or(0, |e| e.0);
                }
                0
            })
        };
        let l = dev.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
        l.listen(cma::service_id(port_space::TCP, 7489)).unwrap();

        let ch = rdma_create_event_channel();
        let mut id = std::ptr::null_mut();
        let (sgid, dgid) = (gid_of(net::addr(19).into()), gid_of(net::addr(18).into()));
        let good = path_data(IB_PATH_ROUTE_FLAGS, sgid, dgid);
        // SAFETY: out pointer of ours.
        unsafe {
            assert_eq!(
                rdma_create_id(ch, &mut id, std::ptr::null_mut(), port_space::TCP as i32),
                0
            );
        }
        // Before the address is resolved: EINVAL.
        assert_eq!(set_path_option(id, &good), (-1, Some(libc::EINVAL)));
        let mut src = sockaddr(SocketAddr::new(net::addr(19).into(), 0));
        let mut dst = sockaddr(SocketAddr::new(net::addr(18).into(), 7489));
        // SAFETY: a live id and addresses of ours.
        let r =
            unsafe { rdma_resolve_addr(id, (&raw mut src).cast(), (&raw mut dst).cast(), 1000) };
        assert_eq!(r, 0);
        assert_eq!(next(ch).0, R::AddrResolved as c_int);
        // Not a whole number of records; no record with the route's flags.
        assert_eq!(set_path_option(id, &good[..71]), (-1, Some(libc::EINVAL)));
        let mut two = path_data(1 | 2, sgid, dgid);
        assert_eq!(set_path_option(id, &two), (-1, Some(libc::EINVAL)));
        assert_eq!(pending(ch), None, "a refused path queued an event");
        // The route's record second, behind one with other flags.
        two.extend_from_slice(&good);
        assert_eq!(set_path_option(id, &two).0, 0);
        assert_eq!(next(ch).0, R::RouteResolved as c_int);
        // SAFETY: the id's route, filled by the call.
        let pr = unsafe {
            assert_eq!((*id).route.num_paths, 1);
            *(*id).route.path_rec
        };
        assert_eq!(
            (u32::from_be(pr.flow_label), pr.hop_limit, pr.traffic_class),
            (0x12345, 9, 0x28)
        );
        assert_eq!((pr.mtu, pr.rate, pr.packet_life_time, pr.sl), (3, 7, 15, 3));
        assert_eq!((pr.sgid.raw, pr.dgid.raw), (sgid.0, dgid.0));
        // A second one: the route is resolved already.
        assert_eq!(set_path_option(id, &good), (-1, Some(libc::EINVAL)));

        lock(&lookup(id).unwrap().st).test_qp = Some(Ok(()));
        assert_eq!(connect(id, 0x123c), 0);
        assert_eq!(next(ch), (R::Established as c_int, 0, 0x4445));
        let p = lock(&seen).expect("the peer saw no REQ");
        // (The passive side's event path has hop limit 0xff whatever the
        // REQ said, as the kernel's.)
        assert_eq!(
            (p.flow_label, p.traffic_class, p.mtu, p.rate),
            (0x12345, 0x28, 3, 7),
            "the REQ did not carry the path given"
        );
        assert_eq!(rdma_destroy_id(id), 0);
        rdma_destroy_event_channel(ch);
        l.destroy().unwrap();
    }
}
