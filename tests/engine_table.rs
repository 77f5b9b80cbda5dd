//! Table-driven unit tests of the protocol engine against the kernel's
//! rules (`docs/CM_RULES.md` §states, §api-calls, §timers, §request-errors,
//! §req-received … §notify, §qp-attributes, §tids, §message-fields).
//!
//! Two engines ("A", the active side, and "P", the passive side) are joined
//! by a tiny in-test wire that moves `poll_transmit()` output into the other
//! engine's `handle_mad()`, and can hold, drop or re-inject any MAD. A
//! fixture builder drives an id into every `State` the rules name; the
//! tables then apply every API call and every received message kind to it
//! and check the return value, the new state, the event and what went on
//! the wire.

use ibcm::engine::*;
use ibcm::wire::{
    CmMad, CmMsg, Drep, Dreq, Gid, Lap, Mra, MsgCode, Rej, Rep, ReqPath, Rtu, SidrRep, apr_status,
    attr, method, pdata, pdata_area, rej_reason, sidr_status,
};

// ------------------------------------------------------------------ setup

const A: usize = 0;
const P: usize = 1;

const SERVICE: u64 = 0x0000_0000_0106_1c06;
const GUID: [u64; 2] = [0x0002_c903_00aa_0001, 0x0002_c903_00bb_0002];
const HI_TID: [u32; 2] = [7, 9];
/// Different ACK delays on the two sides, so that a swapped use shows.
const ACK_DELAY: [u8; 2] = [15, 12];
const LID: [u16; 2] = [0x11, 0x22];

const QPN_A: u32 = 0x000abc;
const QPN_P: u32 = 0x000def;
const PSN_A: u32 = 0x123456;
const PSN_P: u32 = 0x654321;
const FLOW: u32 = 0x12345;
const TCLASS: u8 = 0x20;
const PLT: u8 = 14;
const REMOTE_CM_TO: u8 = 16;
const LOCAL_CM_TO: u8 = 17;
const MAX_RETRIES: u8 = 3;
/// `2*convert(PLT) + convert(REMOTE_CM_TO)` = 2*64 + 256.
const REQ_INTERVAL: u64 = 384;
/// `convert(LOCAL_CM_TO)`.
const REP_INTERVAL: u64 = 512;
/// REQ PrimaryLocalACKTimeout = `cm_ack_timeout(ACK_DELAY[A], PLT)`.
const REQ_ACK_TO: u8 = 16;
/// Active side AV timeout after the REP: `cm_ack_timeout(ACK_DELAY[P], PLT)`.
const ACTIVE_AV_TO: u8 = 15;

fn convert(t: u8) -> u64 {
    1u64 << (t as u32).saturating_sub(8)
}

fn gid(i: usize) -> Gid {
    std::net::IpAddr::from([10, 0, 0, i as u8 + 1]).into()
}

#[derive(Clone, Copy)]
struct Opts {
    qp_type: u32,
    /// ResponderResources in the REQ (and the active id's own value).
    req_rr: u8,
    /// InitiatorDepth in the REQ.
    req_id: u8,
    /// ResponderResources / InitiatorDepth in the REP.
    rep_rr: u8,
    rep_id: u8,
    flush: bool,
    /// InfiniBand ports (LID routed, no GRH) instead of RoCEv2.
    ib: bool,
    /// With an alternate path (IB only).
    alt: bool,
    /// For IDLE: reach it through a whole connection and timewait.
    idle_after_tw: bool,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            qp_type: qp_type::RC,
            req_rr: 3,
            req_id: 5,
            rep_rr: 2,
            rep_id: 4,
            flush: false,
            ib: false,
            alt: false,
            idle_after_tw: false,
        }
    }
}

fn port(i: usize, o: &Opts) -> PortInfo {
    if o.ib {
        PortInfo {
            port_num: 1,
            gids: vec![GidEntry {
                gid: gid(i),
                gid_type: GidType::Ib,
            }],
            pkeys: vec![0xffff, 0x8001],
            lid: LID[i],
            lmc: 0,
            is_roce: false,
            mtu: 4,
            rate: 3,
        }
    } else {
        let mut p = PortInfo::roce(1, gid(i));
        p.pkeys = vec![0xffff, 0x8001];
        p
    }
}

fn engine(i: usize, o: &Opts) -> Engine {
    let mut c = EngineConfig::new(GUID[i], vec![port(i, o)]);
    c.ack_delay = ACK_DELAY[i];
    c.hi_tid = HI_TID[i];
    c.flush_caps = o.flush;
    c.seed = 1000 + i as u64;
    Engine::standalone(c, 77 + i as u64)
}

// ------------------------------------------------------------------- wire

/// Two engines and the MADs in flight between them.
struct Wire {
    e: Vec<Engine>,
    ib: bool,
    now: Time,
    /// MADs side `i` emitted and that were not delivered yet.
    out: [Vec<Transmit>; 2],
    /// Events side `i` produced and the test did not take yet.
    ev: [Vec<Event>; 2],
}

impl Wire {
    fn new(o: &Opts) -> Wire {
        Wire {
            e: vec![engine(A, o), engine(P, o)],
            ib: o.ib,
            now: Time::from_millis(1_000_000),
            out: [Vec::new(), Vec::new()],
            ev: [Vec::new(), Vec::new()],
        }
    }

    /// Pulls every output of both engines into `out` / `ev`.
    fn collect(&mut self) {
        for i in 0..2 {
            while let Some(t) = self.e[i].poll_transmit() {
                self.out[i].push(t);
            }
            while let Some(ev) = self.e[i].poll_event() {
                self.ev[i].push(ev);
            }
            while self.e[i].poll_change().is_some() {}
            while self.e[i].poll_foreign().is_some() {}
        }
    }

    /// Where a MAD from side `from` seems to come from.
    fn src(&self, from: usize) -> MadSource {
        let to = 1 - from;
        MadSource {
            port: 1,
            sgid: gid(from),
            dgid: gid(to),
            has_grh: !self.ib,
            slid: LID[from],
            dlid_path_bits: 0,
            sl: 0,
            src_qp: 1,
            pkey: 0xffff,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    /// Hands `mad` to side `to` as if the other side had sent it.
    fn inject(&mut self, to: usize, mad: &[u8; 256]) -> Result<(), Dropped> {
        let src = self.src(1 - to);
        let now = self.now;
        let r = self.e[to].handle_mad(now, &src, mad);
        self.collect();
        r
    }

    /// Delivers everything side `from` has queued.
    fn flush(&mut self, from: usize) -> Vec<Result<(), Dropped>> {
        self.collect();
        let q = std::mem::take(&mut self.out[from]);
        q.iter().map(|t| self.inject(1 - from, &t.mad)).collect()
    }

    /// Removes (holds or drops) what side `from` has queued.
    fn take(&mut self, from: usize) -> Vec<[u8; 256]> {
        self.collect();
        std::mem::take(&mut self.out[from])
            .into_iter()
            .map(|t| t.mad)
            .collect()
    }

    fn events(&mut self, side: usize) -> Vec<Event> {
        self.collect();
        std::mem::take(&mut self.ev[side])
    }

    /// Moves the clock forward by `ms` and runs both engines' timers.
    fn advance(&mut self, ms: u64) {
        self.now = self.now.plus_millis(ms);
        let now = self.now;
        for e in &mut self.e {
            e.handle_timeout(now);
        }
        self.collect();
    }

    /// Next deadline of side `i`, as milliseconds after now.
    fn next_in(&self, i: usize) -> Option<u64> {
        self.e[i]
            .poll_timeout()
            .map(|t| t.as_millis_floor() - self.now.as_millis_floor())
    }
}

fn mad_attr(m: &[u8; 256]) -> u16 {
    u16::from_be_bytes([m[16], m[17]])
}

fn mad_tid(m: &[u8; 256]) -> u64 {
    u64::from_be_bytes(m[8..16].try_into().unwrap())
}

fn parse(m: &[u8; 256]) -> CmMsg {
    CmMad::parse(m)
        .expect("engine sent a MAD it cannot parse")
        .msg
}

fn attr_name(a: u16) -> &'static str {
    attr::name(a).unwrap_or("?")
}

/// What one step sent, against what the table wants: nothing (`None`) or
/// exactly one MAD of attribute `want`, which is returned for its checks.
fn expect_sent<'a>(sent: &'a [[u8; 256]], want: Option<u16>, label: &str) -> Option<&'a [u8; 256]> {
    let names: Vec<_> = sent.iter().map(|m| attr_name(mad_attr(m))).collect();
    let Some(a) = want else {
        assert!(sent.is_empty(), "{label}: sent {names:?}");
        return None;
    };
    assert_eq!(names, [attr_name(a)], "{label}: one MAD");
    assert_eq!(mad_attr(&sent[0]), a, "{label}");
    Some(&sent[0])
}

fn kinds(evs: &[Event]) -> Vec<EventType> {
    evs.iter().map(|e| e.kind).collect()
}

/// The TID of a new request from side `side` on id `h` (CM_RULES.md §tids).
fn new_tid(side: usize, h: Handle) -> u64 {
    (HI_TID[side] as u64) << 32 | (h.0 as u32).swap_bytes() as u64
}

fn lid_of(h: Handle) -> u32 {
    h.0 as u32
}

// -------------------------------------------------------------- parameters

fn path(from: usize, o: &Opts) -> PathRec {
    let to = 1 - from;
    PathRec {
        dgid: gid(to),
        sgid: gid(from),
        flow_label: FLOW,
        hop_limit: if o.ib { 0 } else { 64 },
        traffic_class: TCLASS,
        reversible: 1,
        pkey: 0xffff,
        sl: if o.ib { 3 } else { 0 },
        mtu_selector: SA_EQ,
        mtu: 4,
        rate_selector: SA_EQ,
        rate: 3,
        packet_life_time_selector: SA_EQ,
        packet_life_time: PLT,
        rec_type: if o.ib {
            PathRecType::Ib
        } else {
            PathRecType::RoceV2
        },
        flags: 1,
        slid: if o.ib { LID[from] as u32 } else { 0 },
        dlid: if o.ib { LID[to] as u32 } else { 0 },
        ..PathRec::default()
    }
}

fn req_params(from: usize, o: &Opts) -> ReqParams {
    let alternate_path = o.alt.then(|| {
        let mut p = path(from, o);
        p.sl = 5;
        p.flow_label = 0x777;
        p
    });
    ReqParams {
        primary_path: path(from, o),
        alternate_path,
        service_id: SERVICE,
        qp_num: QPN_A,
        qp_type: o.qp_type,
        starting_psn: PSN_A,
        private_data: b"req".to_vec(),
        responder_resources: o.req_rr,
        initiator_depth: o.req_id,
        remote_cm_response_timeout: REMOTE_CM_TO,
        flow_control: 1,
        local_cm_response_timeout: LOCAL_CM_TO,
        retry_count: 6,
        rnr_retry_count: 5,
        max_cm_retries: MAX_RETRIES,
        srq: 0,
        ..ReqParams::default()
    }
}

fn rep_params(o: &Opts) -> RepParams {
    RepParams {
        qp_num: QPN_P,
        starting_psn: PSN_P,
        private_data: b"rep".to_vec(),
        responder_resources: o.rep_rr,
        initiator_depth: o.rep_id,
        failover_accepted: 0,
        flow_control: 1,
        rnr_retry_count: 6,
        srq: 0,
        ece: Ece::default(),
    }
}

fn sidr_params(from: usize, o: &Opts) -> SidrReqParams {
    SidrReqParams {
        path: path(from, o),
        sgid_attr: None,
        service_id: SERVICE,
        timeout_ms: 250,
        private_data: b"sidr".to_vec(),
        max_cm_retries: 2,
    }
}

// ---------------------------------------------------------------- fixtures

/// An id driven into a state, with its connection peer.
struct Fx {
    w: Wire,
    /// Side of the id under test.
    side: usize,
    id: Handle,
    /// The other end of the connection (if it exists).
    peer: Option<Handle>,
    listener: Handle,
    /// TID of the REQ (or SIDR_REQ), 0 if none was sent.
    req_tid: u64,
    /// The REQ and REP as sent, for duplicates.
    req: Option<[u8; 256]>,
    rep: Option<[u8; 256]>,
    /// TID of the DREQ the peer of the disconnecting side received.
    dreq_tid: u64,
    opts: Opts,
}

impl Fx {
    fn state(&self) -> Option<State> {
        self.w.e[self.side].state(self.id)
    }
    fn remote_id(&self) -> u32 {
        self.w.e[self.side].info(self.id).unwrap().remote_id
    }
    /// The QPN the id under test calls its own.
    fn local_qpn(&self) -> u32 {
        let s = self.state().unwrap();
        match (self.side, s) {
            (_, State::Idle | State::Listen | State::SidrReqSent | State::SidrReqRcvd) => 0,
            (A, _) => QPN_A,
            (_, State::ReqRcvd | State::MraReqSent) => 0,
            _ => QPN_P,
        }
    }
    fn peer_side(&self) -> usize {
        1 - self.side
    }
    fn peer_id(&self) -> u32 {
        self.peer.map(lid_of).unwrap_or(0)
    }
    fn take_own(&mut self) -> Vec<[u8; 256]> {
        let side = self.side;
        self.w.take(side)
    }
}

fn one_event(w: &mut Wire, side: usize, kind: EventType) -> Event {
    let evs = w.events(side);
    assert_eq!(kinds(&evs), vec![kind], "side {side} events");
    evs.into_iter().next().unwrap()
}

/// Drives an id into `target`. `side` says which side's id is wanted when
/// both sides can be in that state (ESTABLISHED, DREQ_*, TIMEWAIT, IDLE);
/// otherwise the natural side is used. Nothing is left in flight, and the
/// events seen so far are discarded.
fn reach_opts(target: State, side: usize, o: Opts) -> Fx {
    use State::*;
    let mut w = Wire::new(&o);
    let listener = w.e[P].create_id().unwrap();
    w.e[P].listen(listener, SERVICE).unwrap();
    let mut fx = Fx {
        w,
        side,
        id: listener,
        peer: None,
        listener,
        req_tid: 0,
        req: None,
        rep: None,
        dreq_tid: 0,
        opts: o,
    };
    let done = |mut fx: Fx, side: usize, a: Handle, p: Option<Handle>| -> Fx {
        fx.side = side;
        let (id, peer) = if side == A {
            (a, p)
        } else {
            (p.unwrap(), Some(a))
        };
        fx.id = id;
        fx.peer = peer;
        fx.w.collect();
        assert!(fx.w.out[A].is_empty() && fx.w.out[P].is_empty());
        fx.w.ev = [Vec::new(), Vec::new()];
        assert_eq!(fx.state(), Some(target), "fixture for {}", target.name());
        fx
    };
    if target == Listen {
        fx.side = P;
        fx.id = listener;
        return fx;
    }
    if target == Idle && !o.idle_after_tw {
        let h = fx.w.e[side].create_id().unwrap();
        fx.side = side;
        fx.id = h;
        return fx;
    }
    let a = fx.w.e[A].create_id().unwrap();
    let now = fx.w.now;
    if matches!(target, SidrReqSent | SidrReqRcvd) {
        fx.w.e[A]
            .send_sidr_req(now, a, &sidr_params(A, &o))
            .unwrap();
        let m = fx.w.take(A);
        fx.req_tid = mad_tid(&m[0]);
        fx.req = Some(m[0]);
        fx.w.inject(P, &m[0]).unwrap();
        let p = one_event(&mut fx.w, P, EventType::SidrReqReceived).id;
        let s = if target == SidrReqSent { A } else { P };
        return done(fx, s, a, Some(p));
    }
    fx.w.e[A].send_req(now, a, &req_params(A, &o)).unwrap();
    let m = fx.w.take(A);
    fx.req_tid = mad_tid(&m[0]);
    fx.req = Some(m[0]);
    fx.w.inject(P, &m[0]).unwrap();
    let p = one_event(&mut fx.w, P, EventType::ReqReceived).id;
    match target {
        ReqSent => return done(fx, A, a, Some(p)),
        ReqRcvd => return done(fx, P, a, Some(p)),
        MraReqSent | MraReqRcvd => {
            fx.w.e[P].prepare_mra(p).unwrap();
            if target == MraReqSent {
                return done(fx, P, a, Some(p));
            }
            let req = fx.req.unwrap();
            fx.w.inject(P, &req).unwrap();
            fx.w.flush(P);
            one_event(&mut fx.w, A, EventType::MraReceived);
            return done(fx, A, a, Some(p));
        }
        _ => {}
    }
    fx.w.e[P].send_rep(now, p, &rep_params(&o)).unwrap();
    let m = fx.w.take(P);
    fx.rep = Some(m[0]);
    fx.w.inject(A, &m[0]).unwrap();
    one_event(&mut fx.w, A, EventType::RepReceived);
    match target {
        RepSent => return done(fx, P, a, Some(p)),
        RepRcvd => return done(fx, A, a, Some(p)),
        MraRepSent | MraRepRcvd => {
            fx.w.e[A].prepare_mra(a).unwrap();
            if target == MraRepSent {
                return done(fx, A, a, Some(p));
            }
            let rep = fx.rep.unwrap();
            fx.w.inject(A, &rep).unwrap();
            fx.w.flush(A);
            one_event(&mut fx.w, P, EventType::MraReceived);
            return done(fx, P, a, Some(p));
        }
        _ => {}
    }
    fx.w.e[A].send_rtu(a, b"rtu").unwrap();
    fx.w.flush(A);
    one_event(&mut fx.w, P, EventType::RtuReceived);
    if target == Established {
        return done(fx, side, a, Some(p));
    }
    // Disconnect: for DREQ_SENT the wanted side sends the DREQ, for
    // DREQ_RCVD the other one; for TIMEWAIT and IDLE the active side.
    let d = match target {
        DreqSent => side,
        DreqRcvd => 1 - side,
        _ => A,
    };
    let ids = [a, p];
    let now = fx.w.now;
    fx.w.e[d].send_dreq(now, ids[d], b"dreq").unwrap();
    let m = fx.w.take(d);
    fx.dreq_tid = mad_tid(&m[0]);
    fx.w.inject(1 - d, &m[0]).unwrap();
    one_event(&mut fx.w, 1 - d, EventType::DreqReceived);
    if matches!(target, DreqSent | DreqRcvd) {
        return done(fx, side, a, Some(p));
    }
    fx.w.e[1 - d].send_drep(now, ids[1 - d], b"drep").unwrap();
    fx.w.flush(1 - d);
    one_event(&mut fx.w, d, EventType::DrepReceived);
    if target == Timewait {
        return done(fx, side, a, Some(p));
    }
    assert_eq!(target, Idle);
    fx.w.advance(10_000);
    assert_eq!(kinds(&fx.w.events(A)), vec![EventType::TimewaitExit]);
    assert_eq!(kinds(&fx.w.events(P)), vec![EventType::TimewaitExit]);
    done(fx, side, a, Some(p))
}

fn reach(target: State, side: usize) -> Fx {
    reach_opts(target, side, Opts::default())
}

/// Every state CM_RULES.md §states names, each on the side(s) it occurs,
/// plus IDLE reached again after a whole connection. (label, state, side, opts)
fn fixtures() -> Vec<(String, State, usize, Opts)> {
    use State::*;
    let d = Opts::default();
    let mut v = Vec::new();
    let mut add = |s: State, side: usize, o: Opts, what: &str| {
        let n = if side == A { "A" } else { "P" };
        v.push((format!("{}{}@{}", s.name(), what, n), s, side, o));
    };
    add(Idle, A, d, "");
    add(Idle, P, d, "");
    add(Listen, P, d, "");
    add(ReqSent, A, d, "");
    add(ReqRcvd, P, d, "");
    add(MraReqSent, P, d, "");
    add(MraReqRcvd, A, d, "");
    add(RepSent, P, d, "");
    add(RepRcvd, A, d, "");
    add(MraRepSent, A, d, "");
    add(MraRepRcvd, P, d, "");
    add(Established, A, d, "");
    add(Established, P, d, "");
    add(DreqSent, A, d, "");
    add(DreqSent, P, d, "");
    add(DreqRcvd, A, d, "");
    add(DreqRcvd, P, d, "");
    add(Timewait, A, d, "");
    add(Timewait, P, d, "");
    add(SidrReqSent, A, d, "");
    add(SidrReqRcvd, P, d, "");
    let tw = Opts {
        idle_after_tw: true,
        ..d
    };
    add(Idle, A, tw, "(after timewait)");
    add(Idle, P, tw, "(after timewait)");
    v
}

#[test]
fn fixtures_reach_every_state() {
    let mut seen = Vec::new();
    for (label, s, side, o) in fixtures() {
        let fx = reach_opts(s, side, o);
        assert_eq!(fx.state(), Some(s), "{label}");
        seen.push(s);
    }
    for s in State::ALL {
        assert!(seen.contains(&s), "no fixture for {}", s.name());
    }
}

// ------------------------------------------------------- API × state table

#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    Listen,
    SendReq,
    SendRep,
    SendRtu,
    SendDreq,
    SendDrep,
    SendRej,
    PrepareMra,
    CommEst,
    PathMig,
    NotifyOther(u32),
    InitQp(u32),
    SendSidrReq,
    SendSidrRep,
}

const APIS: [Api; 20] = [
    Api::Listen,
    Api::SendReq,
    Api::SendRep,
    Api::SendRtu,
    Api::SendDreq,
    Api::SendDrep,
    Api::SendRej,
    Api::PrepareMra,
    Api::CommEst,
    Api::PathMig,
    Api::NotifyOther(0),
    Api::NotifyOther(5),
    Api::NotifyOther(19),
    Api::InitQp(qp_state::INIT),
    Api::InitQp(qp_state::RTR),
    Api::InitQp(qp_state::RTS),
    Api::InitQp(0),
    Api::InitQp(4),
    Api::SendSidrReq,
    Api::SendSidrRep,
];

const SERVICE2: u64 = 0x0000_0000_0106_2000;

fn sidr_rep_params() -> SidrRepParams {
    SidrRepParams {
        qp_num: 0x99,
        qkey: 0x0123_4567,
        status: sidr_status::SUCCESS as u32,
        info: b"inf".to_vec(),
        private_data: b"srep".to_vec(),
        ece: Ece::default(),
    }
}

fn call(fx: &mut Fx, api: Api) -> ApiResult {
    let (side, h, now, o) = (fx.side, fx.id, fx.w.now, fx.opts);
    let e = &mut fx.w.e[side];
    match api {
        Api::Listen => e.listen(h, SERVICE2),
        Api::SendReq => e.send_req(now, h, &req_params(side, &o)),
        Api::SendRep => e.send_rep(now, h, &rep_params(&o)),
        Api::SendRtu => e.send_rtu(h, b"rtu2"),
        Api::SendDreq => e.send_dreq(now, h, b"dq"),
        Api::SendDrep => e.send_drep(now, h, b"dp"),
        Api::SendRej => e.send_rej(now, h, rej_reason::CONSUMER_DEFINED as u32, b"ari", b"rej"),
        Api::PrepareMra => e.prepare_mra(h),
        Api::CommEst => e.notify(h, ib_event::COMM_EST),
        Api::PathMig => e.notify(h, ib_event::PATH_MIG),
        Api::NotifyOther(ev) => e.notify(h, ev),
        Api::InitQp(s) => e.init_qp_attr(h, s).map(|_| ()),
        Api::SendSidrReq => e.send_sidr_req(now, h, &sidr_params(side, &o)),
        Api::SendSidrRep => e.send_sidr_rep(h, &sidr_rep_params()),
    }
}

/// CM_RULES.md §api-calls: (return value, state afterwards, attribute
/// sent).
fn expected(api: Api, s: State) -> (ApiResult, State, Option<u16>) {
    use State::*;
    let einval = (Err(Errno::EINVAL), s, None);
    let ok = |to: State, a: Option<u16>| (Ok(()), to, a);
    let connected = matches!(
        s,
        ReqRcvd | MraReqSent | RepRcvd | MraRepSent | RepSent | MraRepRcvd | Established
    );
    match api {
        Api::Listen if s == Idle => ok(Listen, None),
        Api::SendReq if s == Idle => ok(ReqSent, Some(attr::REQ)),
        Api::SendRep if matches!(s, ReqRcvd | MraReqSent) => ok(RepSent, Some(attr::REP)),
        Api::SendRtu if matches!(s, RepRcvd | MraRepSent) => ok(Established, Some(attr::RTU)),
        Api::SendDreq if s == Established => ok(DreqSent, Some(attr::DREQ)),
        Api::SendDrep if s == DreqRcvd => ok(Timewait, Some(attr::DREP)),
        Api::SendRej
            if matches!(
                s,
                ReqSent | MraReqRcvd | ReqRcvd | MraReqSent | RepRcvd | MraRepSent
            ) =>
        {
            ok(Idle, Some(attr::REJ))
        }
        Api::SendRej if matches!(s, RepSent | MraRepRcvd) => ok(Timewait, Some(attr::REJ)),
        Api::PrepareMra if s == ReqRcvd => ok(MraReqSent, None),
        Api::PrepareMra if s == RepRcvd => ok(MraRepSent, None),
        Api::CommEst if matches!(s, RepSent | MraRepRcvd) => ok(Established, None),
        Api::CommEst if s == Established => (Err(Errno::EISCONN), s, None),
        Api::PathMig if s == Established => ok(Established, None),
        Api::InitQp(qp_state::INIT) if connected || matches!(s, ReqSent | MraReqRcvd) => {
            ok(s, None)
        }
        Api::InitQp(qp_state::RTR | qp_state::RTS) if connected => ok(s, None),
        Api::SendSidrReq if s == Idle => ok(SidrReqSent, Some(attr::SIDR_REQ)),
        Api::SendSidrRep if s == SidrReqRcvd => ok(Idle, Some(attr::SIDR_REP)),
        _ => einval,
    }
}

/// Checks the key fields of the MAD an API call sent (CM_RULES.md
/// §message-fields, §tids).
fn check_sent(fx: &Fx, api: Api, before: State, remote_before: u32, m: &[u8; 256], label: &str) {
    use State::*;
    let l = lid_of(fx.id);
    let tid = mad_tid(m);
    match (api, parse(m)) {
        (Api::SendReq, CmMsg::Req(r)) => {
            assert_eq!(r.local_comm_id, l, "{label}");
            assert_eq!(tid, new_tid(fx.side, fx.id), "{label}: REQ TID");
            assert_eq!(r.local_ca_guid, GUID[fx.side], "{label}");
            assert_eq!(r.service_id, SERVICE, "{label}");
        }
        (Api::SendRep, CmMsg::Rep(r)) => {
            assert_eq!(
                (r.local_comm_id, r.remote_comm_id),
                (l, fx.peer_id()),
                "{label}"
            );
            assert_eq!(tid, fx.req_tid, "{label}: REP reuses the REQ's TID");
            assert_eq!(r.target_ack_delay, ACK_DELAY[P], "{label}");
            assert_eq!(r.local_ca_guid, GUID[P], "{label}");
            assert_eq!((r.local_qpn, r.starting_psn), (QPN_P, PSN_P), "{label}");
        }
        (Api::SendRtu, CmMsg::Rtu(r)) => {
            assert_eq!(
                (r.local_comm_id, r.remote_comm_id),
                (l, fx.peer_id()),
                "{label}"
            );
            assert_eq!(tid, fx.req_tid, "{label}: RTU reuses the own REQ's TID");
            assert_eq!(&r.private_data[..5], b"rtu2\0", "{label}");
        }
        (Api::SendDreq, CmMsg::Dreq(d)) => {
            assert_eq!(
                (d.local_comm_id, d.remote_comm_id),
                (l, fx.peer_id()),
                "{label}"
            );
            let peer_qpn = if fx.side == A { QPN_P } else { QPN_A };
            assert_eq!(d.remote_qpn, peer_qpn, "{label}");
            assert_eq!(tid, new_tid(fx.side, fx.id), "{label}: DREQ gets a new TID");
        }
        (Api::SendDrep, CmMsg::Drep(d)) => {
            assert_eq!(
                (d.local_comm_id, d.remote_comm_id),
                (l, fx.peer_id()),
                "{label}"
            );
            assert_eq!(tid, fx.dreq_tid, "{label}: DREP reuses the DREQ's TID");
        }
        (Api::SendRej, CmMsg::Rej(r)) => {
            // cm_format_rej with the state before the REJ's own transition.
            let (local, code) = match before {
                ReqRcvd => (0, MsgCode::Req),
                MraReqSent => (l, MsgCode::Req),
                RepRcvd | MraRepSent => (l, MsgCode::Rep),
                _ => (l, MsgCode::Other),
            };
            assert_eq!(r.local_comm_id, local, "{label}: REJ LocalCommID");
            assert_eq!(r.remote_comm_id, remote_before, "{label}: REJ RemoteCommID");
            assert_eq!(r.message_rejected, code, "{label}: MessageRejected");
            assert_eq!(
                (r.reason, r.ari_length),
                (rej_reason::CONSUMER_DEFINED, 3),
                "{label}"
            );
            assert_eq!(&r.ari[..4], b"ari\0", "{label}");
            assert_eq!(&r.private_data[..4], b"rej\0", "{label}");
            assert_eq!(tid, fx.req_tid, "{label}: REJ reuses the REQ's TID");
        }
        (Api::SendSidrReq, CmMsg::SidrReq(s)) => {
            assert_eq!(s.request_id, l, "{label}");
            assert_eq!(s.service_id, SERVICE, "{label}");
            assert_eq!(tid, new_tid(fx.side, fx.id), "{label}: SIDR_REQ TID");
        }
        (Api::SendSidrRep, CmMsg::SidrRep(s)) => {
            assert_eq!(s.request_id, fx.peer_id(), "{label}");
            assert_eq!(
                (s.status, s.qpn, s.qkey),
                (sidr_status::SUCCESS, 0x99, 0x0123_4567),
                "{label}"
            );
            assert_eq!(s.service_id, SERVICE, "{label}");
            assert_eq!(&s.info[..4], b"inf\0", "{label}");
            assert_eq!(
                tid, fx.req_tid,
                "{label}: SIDR_REP reuses the SIDR_REQ's TID"
            );
        }
        (api, m) => panic!("{label}: {api:?} sent {}", m.name()),
    }
}

#[test]
fn api_calls_in_every_state() {
    let mut cases = 0;
    for (label, s, side, o) in fixtures() {
        for api in APIS {
            let mut fx = reach_opts(s, side, o);
            let label = format!("{api:?} in {label}");
            let remote_before = fx.remote_id();
            let (want, want_state, want_attr) = expected(api, s);
            let got = call(&mut fx, api);
            assert_eq!(got, want, "{label}: return value");
            assert_eq!(fx.state(), Some(want_state), "{label}: state afterwards");
            let sent = fx.take_own();
            assert!(fx.w.take(fx.peer_side()).is_empty(), "{label}");
            if let Some(m) = expect_sent(&sent, want_attr, &label) {
                check_sent(&fx, api, s, remote_before, m, &label);
            }
            let evs = fx.w.events(fx.side);
            if api == Api::CommEst && want.is_ok() {
                assert_eq!(kinds(&evs), vec![EventType::UserEstablished], "{label}");
            } else {
                assert!(evs.is_empty(), "{label}: events {evs:?}");
            }
            cases += 1;
        }
    }
    assert_eq!(cases, 23 * APIS.len());
}

// ------------------------------------------ received messages × state table

#[derive(Clone, Copy, Debug, PartialEq)]
enum Rx {
    Rtu,
    Dreq,
    DreqWrongQpn,
    Drep,
    RejOther,
    RejReq,
    RejStale,
    RejTimeout,
    MraReq,
    MraRep,
    MraOther,
    Rep,
    SidrRep,
    Lap,
    Apr,
}

const RXS: [Rx; 15] = [
    Rx::Rtu,
    Rx::Dreq,
    Rx::DreqWrongQpn,
    Rx::Drep,
    Rx::RejOther,
    Rx::RejReq,
    Rx::RejStale,
    Rx::RejTimeout,
    Rx::MraReq,
    Rx::MraRep,
    Rx::MraOther,
    Rx::Rep,
    Rx::SidrRep,
    Rx::Lap,
    Rx::Apr,
];

const PEER_TID: u64 = 0x0000_0005_dead_beef;
const FRESH_REMOTE: u32 = 0x5a5a_0001;

fn send_mad(tid: u64, msg: CmMsg) -> [u8; 256] {
    CmMad::send(tid, 0, msg).to_bytes()
}

fn rej(local: u32, remote: u32, code: MsgCode, reason: u16, ari: &[u8]) -> CmMsg {
    CmMsg::Rej(Rej {
        local_comm_id: local,
        remote_comm_id: remote,
        message_rejected: code,
        ari_length: ari.len() as u8,
        reason,
        ari: pdata_area(ari),
        private_data: pdata_area(b"rejpd"),
    })
}

fn mra(local: u32, remote: u32, code: MsgCode) -> CmMsg {
    CmMsg::Mra(Mra {
        local_comm_id: local,
        remote_comm_id: remote,
        message_mraed: code,
        service_timeout: 24,
        private_data: [0; pdata::MRA],
    })
}

/// A message of kind `rx` addressed to the id under test, as its peer
/// would build it.
fn craft(fx: &Fx, rx: Rx) -> [u8; 256] {
    let l = lid_of(fx.id);
    let r = fx.remote_id();
    let peer = fx.peer_side();
    let msg = match rx {
        Rx::Rtu => CmMsg::Rtu(Rtu {
            local_comm_id: r,
            remote_comm_id: l,
            private_data: pdata_area(b"rtu!"),
        }),
        Rx::Dreq | Rx::DreqWrongQpn => CmMsg::Dreq(Dreq {
            local_comm_id: r,
            remote_comm_id: l,
            remote_qpn: fx.local_qpn() ^ (rx == Rx::DreqWrongQpn) as u32,
            private_data: pdata_area(b"dreq!"),
        }),
        Rx::Drep => CmMsg::Drep(Drep {
            local_comm_id: r,
            remote_comm_id: l,
            private_data: pdata_area(b"drep!"),
        }),
        Rx::RejOther => rej(r, l, MsgCode::Other, rej_reason::CONSUMER_DEFINED, b""),
        Rx::RejReq => rej(r, l, MsgCode::Req, rej_reason::CONSUMER_DEFINED, b""),
        Rx::RejStale => rej(r, l, MsgCode::Other, rej_reason::STALE_CONN, b""),
        Rx::RejTimeout => rej(
            r,
            0,
            MsgCode::Other,
            rej_reason::TIMEOUT,
            &GUID[peer].to_be_bytes(),
        ),
        Rx::MraReq => mra(r, l, MsgCode::Req),
        Rx::MraRep => mra(r, l, MsgCode::Rep),
        Rx::MraOther => mra(r, l, MsgCode::Other),
        Rx::Rep => CmMsg::Rep(Rep {
            local_comm_id: if r == 0 { FRESH_REMOTE } else { r },
            remote_comm_id: l,
            local_qkey: 0,
            local_qpn: if peer == P { QPN_P } else { QPN_A },
            vendor_id: 0,
            local_eecn: 0,
            starting_psn: PSN_P,
            responder_resources: 2,
            initiator_depth: 4,
            target_ack_delay: ACK_DELAY[peer],
            failover_accepted: 0,
            end_to_end_flow_control: true,
            rnr_retry_count: 6,
            srq: false,
            local_ca_guid: GUID[peer],
            private_data: pdata_area(b"rep!"),
        }),
        Rx::SidrRep => CmMsg::SidrRep(SidrRep {
            request_id: l,
            status: sidr_status::SUCCESS,
            info_length: 0,
            vendor_id: 0,
            qpn: 0x99,
            service_id: SERVICE,
            qkey: 0x0123_4567,
            info: [0; pdata::SIDR_REP_INFO],
            private_data: [0; pdata::SIDR_REP],
        }),
        Rx::Lap => CmMsg::Lap(Lap {
            local_comm_id: r,
            remote_comm_id: l,
            remote_qpn: fx.local_qpn(),
            remote_cm_response_timeout: 16,
            alternate: ReqPath::default(),
            private_data: [0; pdata::LAP],
        }),
        Rx::Apr => CmMsg::Apr(ibcm::wire::Apr {
            local_comm_id: r,
            remote_comm_id: l,
            info_length: 0,
            ap_status: apr_status::SUCCESS,
            info: [0; pdata::APR_INFO],
            private_data: [0; pdata::APR],
        }),
    };
    send_mad(PEER_TID, msg)
}

/// CM_RULES.md §req-received … §lap-apr: (state afterwards, event, attribute
/// of the reply).
fn rx_expected(rx: Rx, s: State, remote_known: bool) -> (State, Option<EventType>, Option<u16>) {
    use EventType as E;
    use State::*;
    let none = (s, None, None);
    // In the (remote CA GUID, remote comm ID) table: connection states
    // with a known peer, until timewait.
    let registered = remote_known && !matches!(s, Timewait | Idle | Listen | SidrReqRcvd);
    let rej = |stale: bool| match s {
        ReqSent | MraReqRcvd | RepSent | MraRepRcvd | ReqRcvd | MraReqSent => (
            if stale { Timewait } else { Idle },
            Some(E::RejReceived),
            None,
        ),
        DreqSent | RepRcvd | MraRepSent | Established => (Timewait, Some(E::RejReceived), None),
        _ => none,
    };
    match rx {
        Rx::Rtu if matches!(s, RepSent | MraRepRcvd) => (Established, Some(E::RtuReceived), None),
        Rx::Dreq if matches!(s, RepSent | DreqSent | MraRepRcvd | Established) => {
            (DreqRcvd, Some(E::DreqReceived), None)
        }
        Rx::Dreq if s == Timewait => (Timewait, None, Some(attr::DREP)),
        Rx::Drep if matches!(s, DreqSent | DreqRcvd) => (Timewait, Some(E::DrepReceived), None),
        Rx::RejOther => rej(false),
        Rx::RejStale => rej(true),
        Rx::RejReq if !remote_known => rej(false),
        Rx::RejTimeout if registered => rej(false),
        Rx::MraReq if !remote_known && s == ReqSent => (MraReqRcvd, Some(E::MraReceived), None),
        Rx::MraRep if s == RepSent => (MraRepRcvd, Some(E::MraReceived), None),
        Rx::Rep if !remote_known && matches!(s, ReqSent | MraReqRcvd) => {
            (RepRcvd, Some(E::RepReceived), None)
        }
        Rx::Rep if remote_known && s == Established => (s, None, Some(attr::RTU)),
        Rx::Rep if remote_known && s == MraRepSent => (s, None, Some(attr::MRA)),
        Rx::SidrRep if !remote_known && s == SidrReqSent => (Idle, Some(E::SidrRepReceived), None),
        _ => none,
    }
}

fn check_reply(fx: &Fx, rx: Rx, m: &[u8; 256], label: &str) {
    let l = lid_of(fx.id);
    let r = fx.remote_id();
    match (rx, parse(m)) {
        (Rx::Dreq, CmMsg::Drep(d)) => {
            assert_eq!((d.local_comm_id, d.remote_comm_id), (l, r), "{label}");
            // The id's remembered TID: the DREQ it received, or for the
            // side that sent the DREQ its REQ's TID (the active side's
            // DREQ TID is the same number).
            assert_eq!(
                mad_tid(m),
                if fx.side == A {
                    fx.req_tid
                } else {
                    fx.dreq_tid
                },
                "{label}"
            );
            // The kernel re-sends the id's stored private data: the DREP's
            // on the side that sent one, else whatever was stored last
            // (the active side's RTU private data).
            let want: &[u8] = if fx.side == P { b"drep\0" } else { b"rtu\0" };
            assert_eq!(&d.private_data[..want.len()], want, "{label}");
        }
        (Rx::Rep, CmMsg::Rtu(t)) => {
            assert_eq!((t.local_comm_id, t.remote_comm_id), (l, r), "{label}");
            assert_eq!(mad_tid(m), fx.req_tid, "{label}");
            let want: &[u8] = if fx.side == A { b"rtu\0" } else { b"\0\0\0\0" };
            assert_eq!(
                &t.private_data[..4],
                want,
                "{label}: saved RTU private data"
            );
        }
        (Rx::Rep, CmMsg::Mra(x)) => {
            assert_eq!((x.local_comm_id, x.remote_comm_id), (l, r), "{label}");
            assert_eq!(
                (x.message_mraed, x.service_timeout),
                (MsgCode::Rep, 24),
                "{label}"
            );
            assert_eq!(mad_tid(m), fx.req_tid, "{label}");
            assert!(x.private_data.iter().all(|&b| b == 0), "{label}");
        }
        (rx, m) => panic!("{label}: {rx:?} answered with {}", m.name()),
    }
}

#[test]
fn received_messages_in_every_state() {
    let mut cases = 0;
    for (label, s, side, o) in fixtures() {
        for rx in RXS {
            let mut fx = reach_opts(s, side, o);
            let label = format!("{rx:?} in {label}");
            let remote_known = fx.remote_id() != 0;
            let (want_state, want_ev, want_reply) = rx_expected(rx, s, remote_known);
            let mad = craft(&fx, rx);
            let res = fx.w.inject(side, &mad);
            if want_ev.is_some() {
                assert!(res.is_ok(), "{label}: {res:?}");
            }
            assert_eq!(fx.state(), Some(want_state), "{label}: state ({res:?})");
            let evs = fx.w.events(side);
            assert_eq!(
                kinds(&evs),
                want_ev.into_iter().collect::<Vec<_>>(),
                "{label}: events ({res:?})"
            );
            if let Some(ev) = evs.first() {
                assert_eq!(ev.id, fx.id, "{label}");
                match (&ev.param, rx) {
                    (EventParam::Rej { reason, .. }, _) => {
                        let want = match rx {
                            Rx::RejStale => rej_reason::STALE_CONN,
                            Rx::RejTimeout => rej_reason::TIMEOUT,
                            _ => rej_reason::CONSUMER_DEFINED,
                        };
                        assert_eq!(*reason, want as u32, "{label}");
                        assert_eq!(&ev.private_data().unwrap()[..5], b"rejpd", "{label}");
                    }
                    (EventParam::Mra { service_timeout }, _) => {
                        assert_eq!(*service_timeout, 24, "{label}")
                    }
                    (EventParam::Rep(p), _) => {
                        assert_eq!((p.remote_qpn, p.starting_psn), (QPN_P, PSN_P), "{label}");
                        assert_eq!(p.target_ack_delay, ACK_DELAY[P], "{label}");
                    }
                    (EventParam::SidrRep(p), _) => {
                        assert_eq!(
                            (p.status, p.qpn, p.qkey),
                            (sidr_status::SUCCESS as u32, 0x99, 0x0123_4567),
                            "{label}"
                        )
                    }
                    (EventParam::None, Rx::Dreq) => {
                        assert_eq!(&ev.private_data().unwrap()[..5], b"dreq!", "{label}")
                    }
                    (EventParam::None, _) => {}
                    (p, _) => panic!("{label}: unexpected param {p:?}"),
                }
            }
            let sent = fx.take_own();
            if let Some(m) = expect_sent(&sent, want_reply, &label) {
                check_reply(&fx, rx, m, &label);
            }
            cases += 1;
        }
    }
    assert_eq!(cases, 23 * RXS.len());
}

// ------------------------------------------------ named received-MAD cases

impl Wire {
    /// Like `take`, with the destinations.
    fn take_t(&mut self, from: usize) -> Vec<Transmit> {
        self.collect();
        std::mem::take(&mut self.out[from])
    }
}

#[test]
fn dup_req_in_mra_req_sent_gets_mra_with_timeout_24() {
    let mut fx = reach(State::MraReqSent, P);
    let req = fx.req.unwrap();
    fx.w.inject(P, &req).unwrap();
    let out = fx.w.take_t(P);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dest.dgid, gid(A), "MRA goes back to the sender");
    let CmMsg::Mra(m) = parse(&out[0].mad) else {
        panic!("not an MRA")
    };
    assert_eq!(m.local_comm_id, lid_of(fx.id));
    assert_eq!(m.remote_comm_id, fx.peer_id());
    assert_eq!(m.message_mraed, MsgCode::Req);
    assert_eq!(m.service_timeout, MRA_SETTING);
    assert!(m.private_data.iter().all(|&b| b == 0));
    assert_eq!(mad_tid(&out[0].mad), fx.req_tid);
    assert_eq!(fx.state(), Some(State::MraReqSent));
    assert!(fx.w.events(P).is_empty());
    // Counted as a duplicate and the MRA as a retry.
    assert_eq!(fx.w.e[P].counters().rx_duplicates[1], 1);
    assert_eq!(fx.w.e[P].counters().tx_retries[2], 1);
}

#[test]
fn dup_req_ignored_in_other_states_and_new_after_timewait() {
    use State::*;
    for s in [
        ReqRcvd,
        RepSent,
        MraRepRcvd,
        Established,
        DreqRcvd,
        DreqSent,
    ] {
        let mut fx = reach(s, P);
        let req = fx.req.unwrap();
        let r = fx.w.inject(P, &req);
        assert!(r.is_err(), "{}", s.name());
        assert!(fx.w.take(P).is_empty(), "{}: nothing sent", s.name());
        assert!(fx.w.events(P).is_empty(), "{}", s.name());
        assert_eq!(fx.state(), Some(s));
        assert_eq!(fx.w.e[P].id_count(), 2, "{}: no new id", s.name());
    }
    // In TIMEWAIT the connection has left the duplicate tables, so a late
    // copy of the REQ starts a new connection (as in the kernel).
    let mut fx = reach(Timewait, P);
    let req = fx.req.unwrap();
    fx.w.inject(P, &req).unwrap();
    let ev = one_event(&mut fx.w, P, EventType::ReqReceived);
    assert_ne!(ev.id, fx.id);
    assert_eq!(fx.state(), Some(Timewait));
}

#[test]
fn dup_rep_in_established_resends_rtu_with_saved_private_data() {
    let mut fx = reach(State::Established, A);
    let rep = fx.rep.unwrap();
    fx.w.inject(A, &rep).unwrap();
    let out = fx.w.take_t(A);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dest.dgid, gid(P));
    let CmMsg::Rtu(r) = parse(&out[0].mad) else {
        panic!("not an RTU")
    };
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id),
        (lid_of(fx.id), fx.peer_id())
    );
    assert_eq!(&r.private_data[..4], b"rtu\0");
    assert_eq!(mad_tid(&out[0].mad), fx.req_tid);
    assert!(fx.w.events(A).is_empty());
    // The re-sent RTU is harmless to the passive side (already ESTABLISHED).
    fx.w.inject(P, &out[0].mad).unwrap_err();
    assert_eq!(fx.w.e[P].state(fx.peer.unwrap()), Some(State::Established));
}

#[test]
fn dup_rep_in_mra_rep_sent_gets_mra_rep() {
    let mut fx = reach(State::MraRepSent, A);
    let rep = fx.rep.unwrap();
    fx.w.inject(A, &rep).unwrap();
    let out = fx.w.take(A);
    let CmMsg::Mra(m) = parse(&out[0]) else {
        panic!()
    };
    assert_eq!(
        (m.message_mraed, m.service_timeout),
        (MsgCode::Rep, MRA_SETTING)
    );
    assert_eq!(
        (m.local_comm_id, m.remote_comm_id),
        (lid_of(fx.id), fx.peer_id())
    );
    // The passive side takes it: REP_SENT -> MRA_REP_RCVD.
    fx.w.inject(P, &out[0]).unwrap();
    let ev = one_event(&mut fx.w, P, EventType::MraReceived);
    assert_eq!(fx.w.e[P].state(ev.id), Some(State::MraRepRcvd));
}

/// `set_prepare_mra_on_report` (rdma_cm's MRA, prepared by the engine):
/// a flagged listener's REQ and a flagged active id's REP are left
/// MRA_REQ_SENT / MRA_REP_SENT as they are reported, so a duplicate that
/// arrives before any answer gets an MRA(24); unflagged, it is dropped.
/// The application's answers still work from those states.
/// Injects a duplicate of `dup` (a REQ or REP, `code`) into side `to`
/// before its application answered. In `mode` 0 (MRA on report not set)
/// it is dropped and nothing is sent; otherwise side `to` answers with one
/// MRA (`code`, service timeout `MRA_SETTING`), which moves the peer's id
/// `peer.0` to state `peer.1`.
fn duplicate_before_answer(
    w: &mut Wire,
    mode: u32,
    to: usize,
    dup: &[u8; 256],
    code: MsgCode,
    peer: (Handle, State),
) {
    let r = w.inject(to, dup);
    let out = w.take(to);
    if mode == 0 {
        assert!(r.is_err(), "mode {mode}: dropped");
        assert!(out.is_empty(), "mode {mode}");
        return;
    }
    r.unwrap();
    assert_eq!(out.len(), 1, "mode {mode}");
    let CmMsg::Mra(m) = parse(&out[0]) else {
        panic!("mode {mode}: not an MRA")
    };
    assert_eq!((m.message_mraed, m.service_timeout), (code, MRA_SETTING));
    let from = 1 - to;
    w.inject(from, &out[0]).unwrap();
    one_event(w, from, EventType::MraReceived);
    assert_eq!(w.e[from].state(peer.0), Some(peer.1));
}

#[test]
fn mra_on_report_answers_duplicates_before_the_application() {
    use State::*;
    // 0: never set; 1: set before listen/send_req; 2: the listener's set
    // after listen (applies to its later REQs).
    assert_eq!(MRA_SETTING, 24);
    for mode in 0..3 {
        let on = mode != 0;
        let o = Opts::default();
        let mut w = Wire::new(&o);
        let l = w.e[P].create_id().unwrap();
        if mode == 1 {
            w.e[P].set_prepare_mra_on_report(l, true).unwrap();
        }
        w.e[P].listen(l, SERVICE).unwrap();
        if mode == 2 {
            w.e[P].set_prepare_mra_on_report(l, true).unwrap();
        }
        let a = w.e[A].create_id().unwrap();
        w.e[A].set_prepare_mra_on_report(a, on).unwrap();
        let now = w.now;
        w.e[A].send_req(now, a, &req_params(A, &o)).unwrap();
        let req = w.take(A)[0];
        w.inject(P, &req).unwrap();
        let p = one_event(&mut w, P, EventType::ReqReceived).id;
        assert_eq!(w.e[P].state(p), Some(if on { MraReqSent } else { ReqRcvd }));
        // A duplicate REQ before the application answers.
        duplicate_before_answer(&mut w, mode, P, &req, MsgCode::Req, (a, MraReqRcvd));
        assert!(w.events(P).is_empty());
        // The application accepts from MRA_REQ_SENT.
        w.e[P].send_rep(now, p, &rep_params(&o)).unwrap();
        let rep = w.take(P)[0];
        w.inject(A, &rep).unwrap();
        one_event(&mut w, A, EventType::RepReceived);
        assert_eq!(w.e[A].state(a), Some(if on { MraRepSent } else { RepRcvd }));
        // A duplicate REP before the RTU.
        duplicate_before_answer(&mut w, mode, A, &rep, MsgCode::Rep, (p, MraRepRcvd));
        // The RTU from MRA_REP_SENT completes the connection.
        w.e[A].send_rtu(a, b"").unwrap();
        w.flush(A);
        one_event(&mut w, P, EventType::RtuReceived);
        assert_eq!(w.e[A].state(a), Some(Established));
        assert_eq!(w.e[P].state(p), Some(Established));
    }
}

/// A flagged id's reported REQ/REP can still be rejected, and a flagged
/// listener's SIDR REQs are left alone.
#[test]
fn mra_on_report_keeps_reject_and_leaves_sidr_alone() {
    use State::*;
    let o = Opts::default();
    let mut w = Wire::new(&o);
    let l = w.e[P].create_id().unwrap();
    w.e[P].set_prepare_mra_on_report(l, true).unwrap();
    w.e[P].listen(l, SERVICE).unwrap();
    let now = w.now;
    // Passive reject from MRA_REQ_SENT.
    let a = w.e[A].create_id().unwrap();
    w.e[A].send_req(now, a, &req_params(A, &o)).unwrap();
    let req = w.take(A)[0];
    w.inject(P, &req).unwrap();
    let p = one_event(&mut w, P, EventType::ReqReceived).id;
    assert_eq!(w.e[P].state(p), Some(MraReqSent));
    w.e[P].send_rej(now, p, 28, &[], &[]).unwrap();
    w.flush(P);
    one_event(&mut w, A, EventType::RejReceived);
    // Active reject from MRA_REP_SENT.
    let a = w.e[A].create_id().unwrap();
    w.e[A].set_prepare_mra_on_report(a, true).unwrap();
    w.e[A].send_req(now, a, &req_params(A, &o)).unwrap();
    let req = w.take(A)[0];
    w.inject(P, &req).unwrap();
    let p = one_event(&mut w, P, EventType::ReqReceived).id;
    w.e[P].send_rep(now, p, &rep_params(&o)).unwrap();
    w.flush(P);
    one_event(&mut w, A, EventType::RepReceived);
    assert_eq!(w.e[A].state(a), Some(MraRepSent));
    w.e[A].send_rej(now, a, 28, &[], &[]).unwrap();
    w.flush(A);
    one_event(&mut w, P, EventType::RejReceived);
    // SIDR: the reported SIDR REQ stays SIDR_REQ_RCVD.
    let a = w.e[A].create_id().unwrap();
    w.e[A].send_sidr_req(now, a, &sidr_params(A, &o)).unwrap();
    let m = w.take(A)[0];
    w.inject(P, &m).unwrap();
    let p = one_event(&mut w, P, EventType::SidrReqReceived).id;
    assert_eq!(w.e[P].state(p), Some(SidrReqRcvd));
    // Unknown handles are refused.
    assert!(
        w.e[P]
            .set_prepare_mra_on_report(Handle(0xdead), true)
            .is_err()
    );
}

#[test]
fn dup_dreq_in_timewait_resends_drep() {
    let mut fx = reach(State::Timewait, P);
    // The very DREQ the active side retransmits.
    let a = fx.peer.unwrap();
    let dreq = send_mad(
        fx.dreq_tid,
        CmMsg::Dreq(Dreq {
            local_comm_id: lid_of(a),
            remote_comm_id: lid_of(fx.id),
            remote_qpn: QPN_P,
            private_data: pdata_area(b"dreq"),
        }),
    );
    fx.w.inject(P, &dreq).unwrap();
    let out = fx.w.take_t(P);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dest.dgid, gid(A));
    let CmMsg::Drep(d) = parse(&out[0].mad) else {
        panic!()
    };
    assert_eq!(
        (d.local_comm_id, d.remote_comm_id),
        (lid_of(fx.id), lid_of(a))
    );
    assert_eq!(
        &d.private_data[..5],
        b"drep\0",
        "the saved DREP private data"
    );
    assert_eq!(mad_tid(&out[0].mad), fx.dreq_tid);
    assert_eq!(fx.state(), Some(State::Timewait));
    assert!(fx.w.events(P).is_empty());
    assert_eq!(fx.w.e[P].counters().rx_duplicates[6], 1);
}

#[test]
fn dreq_for_unknown_id_gets_drep_built_from_it() {
    let mut w = Wire::new(&Opts::default());
    let tid = 0x0000_0003_1122_3344;
    let dreq = send_mad(
        tid,
        CmMsg::Dreq(Dreq {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0a0b_0c0d,
            remote_qpn: 0x42,
            private_data: pdata_area(b"bye"),
        }),
    );
    assert!(w.inject(P, &dreq).is_err());
    let out = w.take_t(P);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dest.dgid, gid(A), "to the DREQ's sender");
    let want = send_mad(
        tid,
        CmMsg::Drep(Drep {
            local_comm_id: 0x0a0b_0c0d,
            remote_comm_id: 0x0102_0304,
            private_data: [0; pdata::DREP],
        }),
    );
    assert_eq!(out[0].mad, want);
    assert_eq!(w.e[P].id_count(), 0);
}

/// A request from a fresh id on A (what `send` sends) reaches P, where no
/// listener waits: P refuses it with an error and answers A with exactly
/// one MAD that reuses the request's TID, keeping no id or table entry.
/// Returns the wire, A's id and the answer.
fn refused_without_listener(
    send: impl FnOnce(&mut Engine, Time, Handle),
) -> (Wire, Handle, [u8; 256]) {
    let mut w = Wire::new(&Opts::default());
    let a = w.e[A].create_id().unwrap();
    let now = w.now;
    send(&mut w.e[A], now, a);
    let req = w.take(A)[0];
    assert!(w.inject(P, &req).is_err());
    let out = w.take_t(P);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dest.dgid, gid(A));
    assert_eq!(mad_tid(&out[0].mad), mad_tid(&req));
    assert_eq!(w.e[P].id_count(), 0, "no id left behind");
    assert_eq!(w.e[P].table_sizes(), (0, 0));
    (w, a, out[0].mad)
}

#[test]
fn req_without_listener_gets_rej_invalid_service_id() {
    let (mut w, a, answer) = refused_without_listener(|e, now, a| {
        e.send_req(now, a, &req_params(A, &Opts::default()))
            .unwrap();
    });
    let CmMsg::Rej(r) = parse(&answer) else {
        panic!()
    };
    assert_eq!(r.local_comm_id, 0);
    assert_eq!(r.remote_comm_id, lid_of(a));
    assert_eq!(r.message_rejected, MsgCode::Req);
    assert_eq!(
        (r.reason, r.ari_length),
        (rej_reason::INVALID_SERVICE_ID, 0)
    );
    assert_eq!(w.e[P].shared().qp_count(), 0);
    // The active side takes it (Acquire(RemoteCommID, 0)).
    w.inject(A, &answer).unwrap();
    let ev = one_event(&mut w, A, EventType::RejReceived);
    assert!(
        matches!(ev.param, EventParam::Rej { reason, .. } if reason == rej_reason::INVALID_SERVICE_ID as u32)
    );
    assert_eq!(w.e[A].state(a), Some(State::Idle));
}

#[test]
fn sidr_req_without_listener_gets_sidr_rep_unsupported() {
    let (mut w, a, answer) = refused_without_listener(|e, now, a| {
        e.send_sidr_req(now, a, &sidr_params(A, &Opts::default()))
            .unwrap();
    });
    let CmMsg::SidrRep(s) = parse(&answer) else {
        panic!()
    };
    assert_eq!(
        (s.request_id, s.status, s.qpn, s.qkey),
        (lid_of(a), sidr_status::UNSUPPORTED, 0, 0)
    );
    assert_eq!(s.service_id, SERVICE);
    w.inject(A, &answer).unwrap();
    let ev = one_event(&mut w, A, EventType::SidrRepReceived);
    assert!(
        matches!(ev.param, EventParam::SidrRep(p) if p.status == sidr_status::UNSUPPORTED as u32)
    );
}

#[test]
fn dup_sidr_req_while_pending_is_ignored() {
    let mut fx = reach(State::SidrReqRcvd, P);
    let req = fx.req.unwrap();
    assert!(fx.w.inject(P, &req).is_err());
    assert!(fx.w.take(P).is_empty());
    assert!(fx.w.events(P).is_empty());
    assert_eq!(fx.w.e[P].id_count(), 2);
    // Once answered, the same request is new again.
    fx.w.e[P].send_sidr_rep(fx.id, &sidr_rep_params()).unwrap();
    fx.w.take(P);
    fx.w.inject(P, &req).unwrap();
    one_event(&mut fx.w, P, EventType::SidrReqReceived);
}

#[test]
fn rej_timeout_is_found_through_the_ari_guid() {
    for s in [State::ReqRcvd, State::MraReqSent] {
        // The active side gives up in REQ_SENT: REJ(TIMEOUT), ARI = GUID.
        let mut fx = reach(s, P);
        let a = fx.peer.unwrap();
        fx.w.e[A].destroy(a, 0);
        let rej = fx.w.take(A);
        let CmMsg::Rej(r) = parse(&rej[0]) else {
            panic!()
        };
        assert_eq!((r.local_comm_id, r.remote_comm_id), (lid_of(a), 0));
        // A wrong GUID in the ARI finds nothing.
        let mut wrong = rej[0];
        wrong[36] ^= 0xff;
        assert!(fx.w.inject(P, &wrong).is_err());
        assert!(fx.w.events(P).is_empty());
        assert_eq!(fx.state(), Some(s));
        // The real one reaches the passive id.
        fx.w.inject(P, &rej[0]).unwrap();
        let ev = one_event(&mut fx.w, P, EventType::RejReceived);
        assert_eq!(ev.id, fx.id);
        assert!(matches!(
            ev.param,
            EventParam::Rej {
                reason,
                ari_length: 8
            } if reason == rej_reason::TIMEOUT as u32
        ));
        assert_eq!(ev.info().unwrap(), &GUID[A].to_be_bytes());
        assert_eq!(fx.state(), Some(State::Idle));
        assert_eq!(fx.w.e[P].table_sizes().0, 0);
    }
}

#[test]
fn dreq_with_wrong_remote_qpn_is_dropped() {
    let mut fx = reach(State::Established, P);
    let bad = craft(&fx, Rx::DreqWrongQpn);
    assert!(matches!(
        fx.w.inject(P, &bad),
        Err(Dropped::Other(DropCause::Mismatch, _))
    ));
    assert_eq!(fx.state(), Some(State::Established));
    assert!(fx.w.take(P).is_empty());
    assert!(fx.w.events(P).is_empty());
}

#[test]
fn mra_in_the_wrong_state_is_dropped() {
    use State::*;
    // (state, side, MRAed message)
    for (s, side, rx) in [
        (ReqSent, A, Rx::MraRep),
        (ReqSent, A, Rx::MraOther),
        (RepSent, P, Rx::MraReq),
        (RepSent, P, Rx::MraOther),
        (Established, A, Rx::MraRep),
        (Established, P, Rx::MraRep),
        (MraReqRcvd, A, Rx::MraReq),
        (MraRepRcvd, P, Rx::MraRep),
        (ReqRcvd, P, Rx::MraReq),
        (RepRcvd, A, Rx::MraRep),
    ] {
        let mut fx = reach(s, side);
        let deadline = fx.w.next_in(side);
        let m = craft(&fx, rx);
        assert!(fx.w.inject(side, &m).is_err(), "{rx:?} in {}", s.name());
        assert_eq!(fx.state(), Some(s));
        assert!(fx.w.events(side).is_empty());
        assert_eq!(fx.w.next_in(side), deadline, "timer untouched");
    }
}

#[test]
fn class_port_info_get_is_answered() {
    let mut w = Wire::new(&Opts::default());
    let mut get = [0u8; 256];
    get[..4].copy_from_slice(&[1, 7, 2, method::GET]);
    get[8..16].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
    get[16..18].copy_from_slice(&attr::CLASS_PORT_INFO.to_be_bytes());
    w.inject(P, &get).unwrap();
    let out = w.take_t(P);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dest.dgid, gid(A));
    let m = CmMad::parse(&out[0].mad).unwrap();
    assert_eq!(m.method, method::GET_RESP);
    assert_eq!(m.status, 0);
    assert_eq!(m.tid, 0x0102_0304_0506_0708);
    let CmMsg::ClassPortInfo(c) = m.msg else {
        panic!()
    };
    assert_eq!((c.base_version, c.class_version), (1, 2));
    // Set is not supported: GetResp with status 0x000C.
    let mut set = get;
    set[3] = method::SET;
    w.inject(P, &set).unwrap();
    let out = w.take(P);
    let mut want = set;
    want[3] = method::GET_RESP;
    want[4..6].copy_from_slice(&0x000cu16.to_be_bytes());
    assert_eq!(out, vec![want]);
    // A GetResp is not answered.
    let mut resp = get;
    resp[3] = method::GET_RESP;
    assert!(w.inject(P, &resp).is_err());
    assert!(w.take(P).is_empty());
}

#[test]
fn get_on_a_cm_attribute_gets_getresp_unsupported() {
    let mut w = Wire::new(&Opts::default());
    for a in [attr::REQ, attr::DREQ, attr::SIDR_REQ, 0x0030] {
        let mut get = [0u8; 256];
        get[..4].copy_from_slice(&[1, 7, 2, method::GET]);
        get[8..16].copy_from_slice(&0xfeed_0000_0000_0001u64.to_be_bytes());
        get[16..18].copy_from_slice(&a.to_be_bytes());
        get[40] = 0x5a; // payload is echoed
        assert!(w.inject(P, &get).is_err());
        let out = w.take(P);
        let mut want = get;
        want[3] = method::GET_RESP;
        want[4..6].copy_from_slice(&0x000cu16.to_be_bytes());
        assert_eq!(out, vec![want], "attribute {a:#x}");
        // A CM attribute with a non-Send method that is not Get/Set is
        // dropped without an answer.
        let mut trap = get;
        trap[3] = method::TRAP;
        assert!(w.inject(P, &trap).is_err());
        assert!(w.take(P).is_empty());
    }
}

#[test]
fn stale_connection_req_gets_rej_and_old_connection_dreq() {
    let mut fx = reach(State::Established, P);
    // A second REQ from the same CA with the same QPN (a restarted peer).
    let now = fx.w.now;
    let a2 = fx.w.e[A].create_id().unwrap();
    fx.w.e[A]
        .send_req(now, a2, &req_params(A, &Opts::default()))
        .unwrap();
    let req = fx.w.take(A)[0];
    assert!(fx.w.inject(P, &req).is_err());
    let out = fx.w.take(P);
    assert_eq!(out.len(), 2, "REJ(STALE_CONN) and a DREQ");
    let CmMsg::Rej(r) = parse(&out[0]) else {
        panic!()
    };
    assert_eq!(
        (r.reason, r.message_rejected),
        (rej_reason::STALE_CONN, MsgCode::Req)
    );
    assert_eq!(r.remote_comm_id, lid_of(a2));
    assert_eq!(mad_tid(&out[0]), mad_tid(&req));
    let CmMsg::Dreq(d) = parse(&out[1]) else {
        panic!()
    };
    assert_eq!(
        (d.local_comm_id, d.remote_comm_id),
        (lid_of(fx.id), fx.peer_id())
    );
    assert_eq!(fx.state(), Some(State::DreqSent));
    assert_eq!(fx.w.e[P].id_count(), 2, "no new id");
    // The new active id sees REJ(STALE_CONN) and goes to timewait.
    fx.w.inject(A, &out[0]).unwrap();
    let ev = one_event(&mut fx.w, A, EventType::RejReceived);
    assert_eq!(ev.id, a2);
    assert_eq!(fx.w.e[A].state(a2), Some(State::Timewait));
}

// ------------------------------------------------------- destroy per state

/// CM_RULES.md §destroy: what `destroy` sends in each state, and what the
/// peer makes of it.
#[test]
fn destroy_in_every_state_sends_the_kernel_mad() {
    use State::*;
    let mut cases = 0;
    let mut list = fixtures();
    // Extra rows: REQ_RCVD destroyed by a handler returning -ENOMEM, and
    // ESTABLISHED on an XRC target.
    let xrc = Opts {
        qp_type: qp_type::XRC_INI,
        ..Opts::default()
    };
    list.push(("REQ_RCVD(-ENOMEM)@P".into(), ReqRcvd, P, Opts::default()));
    list.push(("ESTABLISHED(XRC_TGT)@P".into(), Established, P, xrc));
    for (label, s, side, o) in list {
        let enomem = label.contains("ENOMEM");
        let mut fx = reach_opts(s, side, o);
        let l = lid_of(fx.id);
        let r = fx.remote_id();
        let peer_state = fx.peer.and_then(|p| fx.w.e[1 - side].state(p));
        let err = if enomem { -12 } else { 0 };
        fx.w.e[side].destroy(fx.id, err);
        assert_eq!(fx.state(), None, "{label}: gone");
        let sent = fx.take_own();
        // What the peer must make of it: (event, its state afterwards).
        let want_peer: Option<(EventType, State)> = match (s, sent.as_slice()) {
            (Idle | Listen | DreqSent | Timewait | SidrReqSent, []) => None,
            (ReqRcvd, []) if enomem => None,
            (Established, []) if o.qp_type == qp_type::XRC_INI => None,
            (ReqSent | MraReqRcvd, [m]) => {
                let CmMsg::Rej(j) = parse(m) else {
                    panic!("{label}")
                };
                assert_eq!((j.local_comm_id, j.remote_comm_id), (l, 0), "{label}");
                assert_eq!(j.message_rejected, MsgCode::Other, "{label}");
                assert_eq!(
                    (j.reason, j.ari_length),
                    (rej_reason::TIMEOUT, 8),
                    "{label}"
                );
                assert_eq!(
                    &j.ari[..8],
                    &GUID[side].to_be_bytes(),
                    "{label}: ARI = GUID"
                );
                assert_eq!(mad_tid(m), fx.req_tid, "{label}");
                // REQ_RCVD / MRA_REQ_SENT -> IDLE.
                Some((EventType::RejReceived, Idle))
            }
            (ReqRcvd | MraReqSent | RepRcvd | MraRepSent | RepSent | MraRepRcvd, [m]) => {
                let CmMsg::Rej(j) = parse(m) else {
                    panic!("{label}")
                };
                let (local, code) = match s {
                    ReqRcvd => (0, MsgCode::Req),
                    MraReqSent => (l, MsgCode::Req),
                    RepRcvd | MraRepSent => (l, MsgCode::Rep),
                    _ => (l, MsgCode::Other),
                };
                assert_eq!((j.local_comm_id, j.remote_comm_id), (local, r), "{label}");
                assert_eq!(j.message_rejected, code, "{label}");
                assert_eq!(
                    (j.reason, j.ari_length),
                    (rej_reason::CONSUMER_DEFINED, 0),
                    "{label}"
                );
                assert_eq!(mad_tid(m), fx.req_tid, "{label}");
                // The peer: REQ_SENT -> IDLE, REP_SENT -> IDLE,
                // REP_RCVD/MRA_REP_SENT -> TIMEWAIT.
                let after = match peer_state.unwrap() {
                    RepRcvd | MraRepSent => Timewait,
                    _ => Idle,
                };
                Some((EventType::RejReceived, after))
            }
            (Established, [m]) => {
                let CmMsg::Dreq(d) = parse(m) else {
                    panic!("{label}")
                };
                assert_eq!((d.local_comm_id, d.remote_comm_id), (l, r), "{label}");
                let peer_qpn = if side == A { QPN_P } else { QPN_A };
                assert_eq!(d.remote_qpn, peer_qpn, "{label}");
                assert!(d.private_data.iter().all(|&b| b == 0), "{label}");
                assert_eq!(mad_tid(m), new_tid(side, fx.id), "{label}");
                Some((EventType::DreqReceived, DreqRcvd))
            }
            (DreqRcvd, [m]) => {
                let CmMsg::Drep(d) = parse(m) else {
                    panic!("{label}")
                };
                assert_eq!((d.local_comm_id, d.remote_comm_id), (l, r), "{label}");
                assert!(d.private_data.iter().all(|&b| b == 0), "{label}");
                assert_eq!(mad_tid(m), fx.dreq_tid, "{label}");
                Some((EventType::DrepReceived, Timewait))
            }
            (SidrReqRcvd, [m]) => {
                let CmMsg::SidrRep(x) = parse(m) else {
                    panic!("{label}")
                };
                assert_eq!(
                    (x.request_id, x.status, x.qpn),
                    (r, sidr_status::REJECT, 0),
                    "{label}"
                );
                assert_eq!(x.service_id, SERVICE, "{label}");
                assert_eq!(mad_tid(m), fx.req_tid, "{label}");
                Some((EventType::SidrRepReceived, Idle))
            }
            (s, sent) => panic!(
                "{label}: destroy in {} sent {:?}",
                s.name(),
                sent.iter()
                    .map(|m| attr_name(mad_attr(m)))
                    .collect::<Vec<_>>()
            ),
        };
        if let Some((kind, after)) = want_peer {
            for m in &sent {
                fx.w.inject(1 - side, m).unwrap();
            }
            let ev = one_event(&mut fx.w, 1 - side, kind);
            assert_eq!(Some(ev.id), fx.peer, "{label}");
            assert_eq!(
                fx.w.e[1 - side].state(ev.id),
                Some(after),
                "{label}: peer state"
            );
        }
        // Nothing more from the destroyed id: no retransmission, no event,
        // no timer, no table entry.
        fx.w.advance(200_000);
        assert!(fx.w.take(side).is_empty(), "{label}: sent after destroy");
        assert!(
            fx.w.events(side).iter().all(|e| e.id != fx.id),
            "{label}: event after destroy"
        );
        let left = if side == P && s != Listen { 1 } else { 0 };
        let e = &fx.w.e[side];
        assert_eq!(e.id_count(), left, "{label}: ids");
        assert_eq!(e.timer_count(), 0, "{label}: timers");
        assert_eq!(e.table_sizes(), (0, 0), "{label}: tables");
        assert_eq!(e.shared().qp_count(), 0, "{label}: remote QPN table");
        assert_eq!(e.half_open(), 0, "{label}");
        cases += 1;
    }
    assert_eq!(cases, 25);
}

#[test]
fn destroy_of_a_listener_stops_matching() {
    let mut fx = reach(State::Listen, P);
    let now = fx.w.now;
    fx.w.e[P].destroy(fx.listener, 0);
    assert_eq!(fx.w.e[P].shared().listen_count(), 0);
    let a = fx.w.e[A].create_id().unwrap();
    fx.w.e[A]
        .send_req(now, a, &req_params(A, &Opts::default()))
        .unwrap();
    fx.w.flush(A);
    let rej = fx.w.take(P);
    let CmMsg::Rej(r) = parse(&rej[0]) else {
        panic!()
    };
    assert_eq!(r.reason, rej_reason::INVALID_SERVICE_ID);
}

#[test]
fn destroy_in_req_rcvd_with_enomem_lets_the_retry_succeed() {
    let mut fx = reach(State::ReqRcvd, P);
    fx.w.e[P].destroy(fx.id, -12);
    assert!(fx.w.take(P).is_empty(), "no REJ");
    // The active side's retransmission is a new REQ.
    fx.w.advance(REQ_INTERVAL);
    let req = fx.w.take(A);
    assert_eq!(req.len(), 1);
    fx.w.inject(P, &req[0]).unwrap();
    let ev = one_event(&mut fx.w, P, EventType::ReqReceived);
    assert_ne!(ev.id, fx.id);
}

// ------------------------------------------------------------ init_qp_attr

fn qp(fx: &Fx, s: u32) -> QpAttr {
    fx.w.e[fx.side].init_qp_attr(fx.id, s).unwrap()
}

const INIT_MASK: u32 = qp_mask::STATE | qp_mask::ACCESS_FLAGS | qp_mask::PKEY_INDEX | qp_mask::PORT;
const RTR_MASK: u32 =
    qp_mask::STATE | qp_mask::AV | qp_mask::PATH_MTU | qp_mask::DEST_QPN | qp_mask::RQ_PSN;
const RC_RTR: u32 = qp_mask::MAX_DEST_RD_ATOMIC | qp_mask::MIN_RNR_TIMER;
const RC_RTS: u32 =
    qp_mask::RETRY_CNT | qp_mask::RNR_RETRY | qp_mask::MAX_QP_RD_ATOMIC | qp_mask::TIMEOUT;
const RWA: u32 = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

fn check_roce_ah(ah: &AhAttr, to: usize, hop_limit: u8, label: &str) {
    assert!(ah.has_grh, "{label}: RoCE AH always has a GRH");
    assert_eq!(ah.dgid, gid(to), "{label}");
    assert_eq!(ah.port_num, 1, "{label}");
    assert_eq!(ah.sgid_index, 0, "{label}");
    assert_eq!(ah.flow_label, FLOW, "{label}");
    assert_eq!(ah.traffic_class, TCLASS, "{label}");
    assert_eq!(ah.hop_limit, hop_limit, "{label}");
    assert_eq!(ah.static_rate, 3, "{label}");
    assert_eq!(ah.sl, 0, "{label}");
    assert_eq!(ah.rec_type, PathRecType::RoceV2, "{label}");
}

#[test]
fn init_qp_attr_active_side() {
    use State::*;
    // REQ_SENT: INIT only, with the id's own responder resources (3).
    let fx = reach(ReqSent, A);
    let a = qp(&fx, qp_state::INIT);
    assert_eq!(a.mask, INIT_MASK);
    assert_eq!(a.qp_state, qp_state::INIT);
    assert_eq!(a.qp_access_flags, RWA);
    assert_eq!((a.pkey_index, a.port_num), (0, 1));
    for s in [qp_state::RTR, qp_state::RTS] {
        assert_eq!(fx.w.e[A].init_qp_attr(fx.id, s), Err(Errno::EINVAL));
    }
    for s in [RepRcvd, MraRepSent, Established] {
        let fx = reach(s, A);
        let label = s.name();
        let i = qp(&fx, qp_state::INIT);
        assert_eq!((i.mask, i.qp_access_flags), (INIT_MASK, RWA), "{label}");
        let r = qp(&fx, qp_state::RTR);
        assert_eq!(r.mask, RTR_MASK | RC_RTR, "{label}");
        check_roce_ah(&r.ah_attr, P, 64, label);
        assert_eq!(r.path_mtu, 4, "{label}");
        assert_eq!(r.dest_qp_num, QPN_P, "{label}");
        assert_eq!(r.rq_psn, PSN_A, "{label}: rq_psn = the REQ's StartingPSN");
        assert_eq!(r.max_dest_rd_atomic, 4, "{label}: = REP InitiatorDepth");
        assert_eq!(r.min_rnr_timer, 0, "{label}");
        let t = qp(&fx, qp_state::RTS);
        assert_eq!(t.mask, qp_mask::STATE | qp_mask::SQ_PSN | RC_RTS, "{label}");
        assert_eq!(t.sq_psn, PSN_P, "{label}: sq_psn = the REP's StartingPSN");
        assert_eq!(t.retry_cnt, 6, "{label}: own retry count");
        assert_eq!(t.rnr_retry, 6, "{label}: the REP's RNR retry count");
        assert_eq!(t.max_rd_atomic, 2, "{label}: = REP ResponderResources");
        assert_eq!(t.timeout, ACTIVE_AV_TO, "{label}: cm_ack_timeout(TAD, PLT)");
    }
}

#[test]
fn init_qp_attr_passive_side() {
    use State::*;
    for s in [ReqRcvd, MraReqSent] {
        let fx = reach(s, P);
        let label = s.name();
        let i = qp(&fx, qp_state::INIT);
        assert_eq!((i.mask, i.qp_access_flags), (INIT_MASK, RWA), "{label}");
        assert_eq!((i.pkey_index, i.port_num), (0, 1), "{label}");
        let r = qp(&fx, qp_state::RTR);
        assert_eq!(r.mask, RTR_MASK | RC_RTR, "{label}");
        // The AH is built from the REQ; its hop limit from the received
        // packet (0xFF on RoCE).
        check_roce_ah(&r.ah_attr, A, 0xff, label);
        assert_eq!(r.dest_qp_num, QPN_A, "{label}");
        assert_eq!(r.rq_psn, 0, "{label}: no REP sent yet");
        assert_eq!(r.max_dest_rd_atomic, 5, "{label}: = REQ InitiatorDepth");
        let t = qp(&fx, qp_state::RTS);
        assert_eq!(t.mask, qp_mask::STATE | qp_mask::SQ_PSN | RC_RTS, "{label}");
        assert_eq!(t.sq_psn, PSN_A, "{label}: sq_psn = the REQ's StartingPSN");
        assert_eq!(t.retry_cnt, 6, "{label}: the REQ's retry count");
        assert_eq!(t.rnr_retry, 5, "{label}: the REQ's RNR retry count");
        assert_eq!(t.max_rd_atomic, 3, "{label}: = REQ ResponderResources");
        assert_eq!(t.timeout, REQ_ACK_TO, "{label}: the REQ's LocalACKTimeout");
    }
    for s in [RepSent, MraRepRcvd, Established] {
        let fx = reach(s, P);
        let label = s.name();
        let r = qp(&fx, qp_state::RTR);
        assert_eq!(r.rq_psn, PSN_P, "{label}: rq_psn = the REP's StartingPSN");
        assert_eq!(
            r.max_dest_rd_atomic, 2,
            "{label}: the REP's responder resources"
        );
        let t = qp(&fx, qp_state::RTS);
        assert_eq!(t.sq_psn, PSN_A, "{label}");
        assert_eq!(t.max_rd_atomic, 4, "{label}: the REP's initiator depth");
        assert_eq!(t.timeout, REQ_ACK_TO, "{label}");
    }
}

#[test]
fn init_qp_attr_access_flags() {
    // (opts, side, state, access)
    let zero_req = Opts {
        req_rr: 0,
        req_id: 0,
        ..Opts::default()
    };
    let zero_rep = Opts {
        rep_rr: 0,
        rep_id: 0,
        ..Opts::default()
    };
    let flush = Opts {
        flush: true,
        ..Opts::default()
    };
    let flush_zero = Opts {
        flush: true,
        ..zero_req
    };
    let fl = access::FLUSH_GLOBAL | access::FLUSH_PERSISTENT;
    for (o, side, s, want) in [
        (zero_req, A, State::ReqSent, access::REMOTE_WRITE),
        (zero_req, P, State::ReqRcvd, access::REMOTE_WRITE),
        (zero_rep, P, State::RepSent, access::REMOTE_WRITE),
        (zero_rep, A, State::RepRcvd, access::REMOTE_WRITE),
        (flush, A, State::ReqSent, RWA | fl),
        (flush, P, State::Established, RWA | fl),
        (flush_zero, A, State::ReqSent, access::REMOTE_WRITE),
        (flush_zero, P, State::ReqRcvd, access::REMOTE_WRITE),
    ] {
        let fx = reach_opts(s, side, o);
        let a = qp(&fx, qp_state::INIT);
        assert_eq!(a.qp_access_flags, want, "{} side {side}", s.name());
        assert_eq!(a.mask, INIT_MASK);
    }
}

#[test]
fn init_qp_attr_uc_and_xrc_masks() {
    let uc = Opts {
        qp_type: qp_type::UC,
        ..Opts::default()
    };
    for side in [A, P] {
        let fx = reach_opts(State::Established, side, uc);
        assert_eq!(qp(&fx, qp_state::RTR).mask, RTR_MASK, "UC RTR side {side}");
        assert_eq!(
            qp(&fx, qp_state::RTS).mask,
            qp_mask::STATE | qp_mask::SQ_PSN,
            "UC RTS side {side}"
        );
    }
    let xrc = Opts {
        qp_type: qp_type::XRC_INI,
        ..Opts::default()
    };
    // XRC initiator: no RDMA-read resources at RTR, full RTS.
    let fx = reach_opts(State::Established, A, xrc);
    let r = qp(&fx, qp_state::RTR);
    assert_eq!(r.mask, RTR_MASK);
    assert_eq!(r.dest_qp_num, QPN_P, "from the REP's LocalEEContextNumber");
    assert_eq!(
        qp(&fx, qp_state::RTS).mask,
        qp_mask::STATE | qp_mask::SQ_PSN | RC_RTS
    );
    // XRC target: RTR like RC, RTS with the timeout only.
    let fx = reach_opts(State::Established, P, xrc);
    assert_eq!(qp(&fx, qp_state::RTR).mask, RTR_MASK | RC_RTR);
    assert_eq!(
        qp(&fx, qp_state::RTS).mask,
        qp_mask::STATE | qp_mask::SQ_PSN | qp_mask::TIMEOUT
    );
}

#[test]
fn init_qp_attr_ib_alternate_path_and_path_migration() {
    let o = Opts {
        ib: true,
        alt: true,
        ..Opts::default()
    };
    // Active side.
    let mut fx = reach_opts(State::Established, A, o);
    let r = qp(&fx, qp_state::RTR);
    assert_eq!(r.mask, RTR_MASK | RC_RTR | qp_mask::ALT_PATH);
    assert!(!r.ah_attr.has_grh, "IB, hop limit 0: no GRH");
    assert_eq!((r.ah_attr.dlid, r.ah_attr.sl), (LID[P] as u32, 3));
    assert_eq!((r.alt_port_num, r.alt_pkey_index), (1, 0));
    assert_eq!(r.alt_timeout, ACTIVE_AV_TO, "recomputed with the REP's TAD");
    assert_eq!((r.alt_ah_attr.dlid, r.alt_ah_attr.sl), (LID[P] as u32, 5));
    let t = qp(&fx, qp_state::RTS);
    assert_eq!(
        t.mask,
        qp_mask::STATE | qp_mask::SQ_PSN | RC_RTS | qp_mask::PATH_MIG_STATE
    );
    assert_eq!(t.path_mig_state, MIG_REARM);
    // Path migration: the alternate AV becomes the primary one.
    fx.w.e[A].notify(fx.id, ib_event::PATH_MIG).unwrap();
    assert_eq!(fx.w.e[A].info(fx.id).unwrap().lap_state, LapState::Idle);
    assert_eq!(qp(&fx, qp_state::RTR).ah_attr.sl, 5);
    let t = qp(&fx, qp_state::RTS);
    assert_eq!(
        t.mask,
        qp_mask::ALT_PATH | qp_mask::PATH_MIG_STATE,
        "RTS->RTS after a LAP/migration"
    );
    assert_eq!(t.path_mig_state, MIG_REARM);
    // Passive side: the alternate path comes from the REQ.
    let fx = reach_opts(State::Established, P, o);
    let r = qp(&fx, qp_state::RTR);
    assert_eq!(r.mask, RTR_MASK | RC_RTR | qp_mask::ALT_PATH);
    assert_eq!((r.ah_attr.dlid, r.ah_attr.sl), (LID[A] as u32, 3));
    assert_eq!(r.alt_timeout, REQ_ACK_TO);
    assert_eq!((r.alt_ah_attr.dlid, r.alt_ah_attr.sl), (LID[A] as u32, 5));
}

#[test]
fn lap_prepare_mra_and_duplicate_lap_on_ib() {
    let o = Opts {
        ib: true,
        ..Opts::default()
    };
    let mut fx = reach_opts(State::Established, A, o);
    let lap_tid = 0x0000_0009_0000_0042;
    let lap = send_mad(
        lap_tid,
        CmMsg::Lap(Lap {
            local_comm_id: fx.peer_id(),
            remote_comm_id: lid_of(fx.id),
            remote_qpn: QPN_A,
            remote_cm_response_timeout: 16,
            alternate: ReqPath {
                local_lid: LID[P],
                remote_lid: LID[A],
                local_gid: gid(P),
                remote_gid: gid(A),
                flow_label: 0,
                packet_rate: 3,
                traffic_class: 0,
                hop_limit: 0,
                sl: 7,
                subnet_local: true,
                local_ack_timeout: 15,
            },
            private_data: pdata_area(b"lap"),
        }),
    );
    // prepare_mra is only valid once a LAP was received.
    assert_eq!(fx.w.e[A].prepare_mra(fx.id), Err(Errno::EINVAL));
    fx.w.inject(A, &lap).unwrap();
    let ev = one_event(&mut fx.w, A, EventType::LapReceived);
    let EventParam::Lap { alternate_path } = &ev.param else {
        panic!()
    };
    assert_eq!((alternate_path.dgid, alternate_path.sgid), (gid(P), gid(A)));
    assert_eq!(
        (alternate_path.sl, alternate_path.packet_life_time),
        (7, 14)
    );
    assert_eq!(fx.w.e[A].info(fx.id).unwrap().lap_state, LapState::Rcvd);
    // A duplicate before the MRA is prepared is dropped.
    assert!(fx.w.inject(A, &lap).is_err());
    assert!(fx.w.take(A).is_empty());
    fx.w.e[A].prepare_mra(fx.id).unwrap();
    assert_eq!(fx.w.e[A].info(fx.id).unwrap().lap_state, LapState::MraSent);
    assert_eq!(fx.state(), Some(State::Established));
    assert!(fx.w.take(A).is_empty(), "prepare_mra sends nothing");
    // Now a duplicate LAP gets MRA(OTHER, 24) with the LAP's TID.
    fx.w.inject(A, &lap).unwrap();
    let out = fx.w.take(A);
    let CmMsg::Mra(m) = parse(&out[0]) else {
        panic!()
    };
    assert_eq!(
        (m.message_mraed, m.service_timeout),
        (MsgCode::Other, MRA_SETTING)
    );
    assert_eq!(
        (m.local_comm_id, m.remote_comm_id),
        (lid_of(fx.id), fx.peer_id())
    );
    assert_eq!(mad_tid(&out[0]), lap_tid);
    // The LAP's path is now the alternate one: RTS is an RTS->RTS modify.
    let t = qp(&fx, qp_state::RTS);
    assert_eq!(t.mask, qp_mask::ALT_PATH | qp_mask::PATH_MIG_STATE);
    assert_eq!(t.alt_ah_attr.sl, 7);
    // On RoCE a LAP is dropped.
    let mut fx = reach(State::Established, A);
    let mut lap2 = lap;
    lap2[24..28].copy_from_slice(&fx.peer_id().to_be_bytes());
    lap2[28..32].copy_from_slice(&lid_of(fx.id).to_be_bytes());
    assert!(matches!(
        fx.w.inject(A, &lap2),
        Err(Dropped::Other(DropCause::Unsupported, _))
    ));
    assert!(fx.w.events(A).is_empty());
}

// ------------------------------------------------------------------ notify

#[test]
fn notify_comm_est_establishes_and_ignores_the_late_rtu() {
    for s in [State::RepSent, State::MraRepRcvd] {
        let mut fx = reach(s, P);
        fx.w.e[P].notify(fx.id, ib_event::COMM_EST).unwrap();
        assert_eq!(fx.state(), Some(State::Established));
        one_event(&mut fx.w, P, EventType::UserEstablished);
        assert_eq!(
            fx.w.e[P].notify(fx.id, ib_event::COMM_EST),
            Err(Errno::EISCONN)
        );
        // The REP is no longer retransmitted.
        fx.w.advance(200_000);
        assert!(fx.w.take(P).is_empty(), "{}", s.name());
        // The real RTU arrives later and is ignored.
        let a = fx.peer.unwrap();
        if fx.w.e[A].state(a) == Some(State::RepRcvd) {
            fx.w.e[A].prepare_mra(a).unwrap();
        }
        fx.w.e[A].send_rtu(a, &[]).unwrap();
        let res = fx.w.flush(A);
        assert!(res[0].is_err());
        assert!(fx.w.events(P).is_empty(), "no RTU_RECEIVED after COMM_EST");
        assert_eq!(fx.w.e[P].counters().rx_duplicates[5], 1);
    }
}

#[test]
fn notify_path_mig_and_other_events() {
    let mut fx = reach(State::Established, A);
    fx.w.e[A].notify(fx.id, ib_event::PATH_MIG).unwrap();
    assert_eq!(fx.w.e[A].info(fx.id).unwrap().lap_state, LapState::Idle);
    // Again from lap IDLE: still fine.
    fx.w.e[A].notify(fx.id, ib_event::PATH_MIG).unwrap();
    for ev in (0..=20).filter(|&e| e != ib_event::COMM_EST && e != ib_event::PATH_MIG) {
        assert_eq!(
            fx.w.e[A].notify(fx.id, ev),
            Err(Errno::EINVAL),
            "event {ev}"
        );
    }
    assert_eq!(fx.state(), Some(State::Established));
    assert!(fx.w.take(A).is_empty());
    assert!(fx.w.events(A).is_empty());
}

// ------------------------------------------------------------------ listen

#[test]
fn listen_errors_and_assigned_service_ids() {
    let mut e = engine(P, &Opts::default());
    let a = e.create_id().unwrap();
    let b = e.create_id().unwrap();
    e.listen(a, SERVICE).unwrap();
    assert_eq!(e.state(a), Some(State::Listen));
    assert_eq!(e.listen(b, SERVICE), Err(Errno::EBUSY), "same service ID");
    assert_eq!(e.state(b), Some(State::Idle));
    assert_eq!(e.listen(a, SERVICE2), Err(Errno::EINVAL), "not IDLE");
    for bad in [
        0x0200_0000_0000_0001u64,
        0x02ff_ffff_ffff_ffff,
        0x0200_0000_0100_0000,
    ] {
        assert_eq!(e.listen(b, bad), Err(Errno::EINVAL), "{bad:#x}");
        assert_eq!(e.state(b), Some(State::Idle));
    }
    // Other top bytes are fine.
    e.listen(b, 0x0300_0000_0000_0001).unwrap();
    // IB_CM_ASSIGN_SERVICE_ID: 0x0200000000000000, ...01, ...
    let c = e.create_id().unwrap();
    let d = e.create_id().unwrap();
    e.listen(c, ASSIGN_SERVICE_ID).unwrap();
    e.listen(d, ASSIGN_SERVICE_ID).unwrap();
    assert_eq!(e.info(c).unwrap().service_id, 0x0200_0000_0000_0000);
    assert_eq!(e.info(d).unwrap().service_id, 0x0200_0000_0000_0001);
    assert_eq!(e.shared().listen_count(), 4);
}

#[test]
fn insert_listen_shares_compatible_listeners() {
    let mut w = Wire::new(&Opts::default());
    let e = &mut w.e[P];
    let (h1, existed1) = e.insert_listen(SERVICE, 0xabc).unwrap();
    assert!(!existed1);
    assert_eq!(e.state(h1), Some(State::Listen));
    let (h2, existed2) = e.insert_listen(SERVICE, 0xabc).unwrap();
    assert!(existed2);
    assert_eq!(h1, h2, "the same listener");
    assert_eq!(
        e.insert_listen(SERVICE, 0xdef),
        Err(Errno::EINVAL),
        "other handler"
    );
    assert_eq!(
        e.insert_listen(0x0200_0000_0000_0005, 0xabc),
        Err(Errno::EINVAL),
        "bad service ID"
    );
    // IB_CM_ASSIGN_SERVICE_ID: a new ID each time, never shared.
    let (h3, s3) = e.insert_listen(ASSIGN_SERVICE_ID, 0xabc).unwrap();
    let (h4, s4) = e.insert_listen(ASSIGN_SERVICE_ID, 0xabc).unwrap();
    assert!(!s3 && !s4 && h3 != h4);
    assert_eq!(e.info(h3).unwrap().service_id, 0x0200_0000_0000_0000);
    assert_eq!(e.info(h4).unwrap().service_id, 0x0200_0000_0000_0001);
    // A plain listen on a shared service ID is busy, and a plain listener
    // is not shared.
    let x = e.create_id().unwrap();
    assert_eq!(e.listen(x, SERVICE), Err(Errno::EBUSY));
    e.listen(x, SERVICE2).unwrap();
    assert_eq!(e.insert_listen(SERVICE2, 0xabc), Err(Errno::EINVAL));
    // The first destroy only drops a share.
    let now = w.now;
    w.e[P].destroy(h1, 0);
    assert_eq!(w.e[P].state(h1), Some(State::Listen));
    let a = w.e[A].create_id().unwrap();
    w.e[A]
        .send_req(now, a, &req_params(A, &Opts::default()))
        .unwrap();
    w.flush(A);
    let ev = one_event(&mut w, P, EventType::ReqReceived);
    let EventParam::Req(p) = &ev.param else {
        panic!()
    };
    assert_eq!(p.listen_id, h1);
    // The last one removes the listener.
    w.e[P].destroy(h1, 0);
    assert_eq!(w.e[P].state(h1), None);
    let a2 = w.e[A].create_id().unwrap();
    let mut rp = req_params(A, &Opts::default());
    rp.qp_num = 0x4444;
    w.e[A].send_req(now, a2, &rp).unwrap();
    w.flush(A);
    let CmMsg::Rej(r) = parse(&w.take(P)[0]) else {
        panic!()
    };
    assert_eq!(r.reason, rej_reason::INVALID_SERVICE_ID);
}

// ----------------------------------------------------- private data limits

#[test]
fn private_data_limits_for_every_call() {
    use State::*;
    struct Case {
        name: &'static str,
        state: State,
        side: usize,
        limit: usize,
        /// The area of the sent MAD that must hold the data.
        area: fn(&CmMsg) -> &[u8],
        call: fn(&mut Fx, Vec<u8>) -> ApiResult,
    }
    const fn case(
        name: &'static str,
        (state, side): (State, usize),
        limit: usize,
        area: fn(&CmMsg) -> &[u8],
        call: fn(&mut Fx, Vec<u8>) -> ApiResult,
    ) -> Case {
        Case {
            name,
            state,
            side,
            limit,
            area,
            call,
        }
    }
    fn pd(m: &CmMsg) -> &[u8] {
        m.private_data().unwrap()
    }
    fn ari(m: &CmMsg) -> &[u8] {
        match m {
            CmMsg::Rej(r) => &r.ari,
            _ => panic!(),
        }
    }
    fn info(m: &CmMsg) -> &[u8] {
        match m {
            CmMsg::SidrRep(r) => &r.info,
            _ => panic!(),
        }
    }
    const CONSUMER: u32 = rej_reason::CONSUMER_DEFINED as u32;
    let cases = [
        case("REQ", (Idle, A), 92, pd, |fx, d| {
            let p = ReqParams {
                private_data: d,
                ..req_params(A, &fx.opts)
            };
            fx.w.e[A].send_req(fx.w.now, fx.id, &p)
        }),
        case("REP", (ReqRcvd, P), 196, pd, |fx, d| {
            let p = RepParams {
                private_data: d,
                ..rep_params(&fx.opts)
            };
            fx.w.e[P].send_rep(fx.w.now, fx.id, &p)
        }),
        case("RTU", (RepRcvd, A), 224, pd, |fx, d| {
            fx.w.e[A].send_rtu(fx.id, &d)
        }),
        case("DREQ", (Established, A), 220, pd, |fx, d| {
            fx.w.e[A].send_dreq(fx.w.now, fx.id, &d)
        }),
        case("DREP", (DreqRcvd, P), 224, pd, |fx, d| {
            fx.w.e[P].send_drep(fx.w.now, fx.id, &d)
        }),
        case("REJ private data", (ReqRcvd, P), 148, pd, |fx, d| {
            fx.w.e[P].send_rej(fx.w.now, fx.id, CONSUMER, &[], &d)
        }),
        case("REJ ARI", (ReqRcvd, P), 72, ari, |fx, d| {
            fx.w.e[P].send_rej(fx.w.now, fx.id, CONSUMER, &d, &[])
        }),
        case("SIDR_REQ", (Idle, A), 216, pd, |fx, d| {
            let p = SidrReqParams {
                private_data: d,
                ..sidr_params(A, &fx.opts)
            };
            fx.w.e[A].send_sidr_req(fx.w.now, fx.id, &p)
        }),
        case(
            "SIDR_REP private data",
            (SidrReqRcvd, P),
            136,
            pd,
            |fx, d| {
                let p = SidrRepParams {
                    private_data: d,
                    ..sidr_rep_params()
                };
                fx.w.e[P].send_sidr_rep(fx.id, &p)
            },
        ),
        case("SIDR_REP info", (SidrReqRcvd, P), 72, info, |fx, d| {
            let p = SidrRepParams {
                info: d,
                ..sidr_rep_params()
            };
            fx.w.e[P].send_sidr_rep(fx.id, &p)
        }),
    ];
    for c in &cases {
        // Exactly at the limit: accepted, and every byte on the wire.
        let mut fx = reach(c.state, c.side);
        let data: Vec<u8> = (0..c.limit)
            .map(|i| (i as u8).wrapping_mul(7) | 1)
            .collect();
        (c.call)(&mut fx, data.clone()).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let sent = fx.take_own();
        assert_eq!(sent.len(), 1, "{}", c.name);
        let msg = parse(&sent[0]);
        assert_eq!((c.area)(&msg), &data[..], "{}: all bytes sent", c.name);
        // One over: -EINVAL, nothing changes, nothing sent.
        let mut fx = reach(c.state, c.side);
        let long = vec![0x5a; c.limit + 1];
        assert_eq!((c.call)(&mut fx, long), Err(Errno::EINVAL), "{}", c.name);
        assert_eq!(fx.state(), Some(c.state), "{}", c.name);
        assert!(fx.take_own().is_empty(), "{}", c.name);
    }
    assert_eq!(cases.len(), 10);
    // End to end: the peer's event carries the full private data.
    let mut fx = reach(State::Idle, A);
    let mut p = req_params(A, &Opts::default());
    p.private_data = (0..92u8).collect();
    let now = fx.w.now;
    fx.w.e[A].send_req(now, fx.id, &p).unwrap();
    fx.w.flush(A);
    let ev = one_event(&mut fx.w, P, EventType::ReqReceived);
    assert_eq!(ev.private_data().unwrap(), &p.private_data[..]);
}

// ------------------------------------------------------------------ timers

/// Lets `ms` pass in 1 ms steps short of the deadline, checking that
/// nothing is sent early, then the last millisecond.
fn wait_exactly(w: &mut Wire, side: usize, ms: u64) -> Vec<[u8; 256]> {
    assert_eq!(w.next_in(side), Some(ms), "deadline");
    w.advance(ms - 1);
    assert!(w.take(side).is_empty(), "sent before the deadline");
    assert!(w.events(side).is_empty(), "event before the deadline");
    w.advance(1);
    w.take(side)
}

#[test]
fn req_retransmits_every_interval_then_req_error() {
    let mut fx = reach(State::Idle, A);
    let now = fx.w.now;
    fx.w.e[A]
        .send_req(now, fx.id, &req_params(A, &Opts::default()))
        .unwrap();
    let first = fx.w.take(A);
    assert_eq!(first.len(), 1);
    // 2*convert(14) + convert(16) = 384 ms; the same MAD each time.
    for _ in 0..MAX_RETRIES {
        let again = wait_exactly(&mut fx.w, A, REQ_INTERVAL);
        assert_eq!(again, first, "identical retransmission");
    }
    let last = wait_exactly(&mut fx.w, A, REQ_INTERVAL);
    assert!(last.is_empty(), "exactly 1 + max_cm_retries sends");
    let evs = fx.w.events(A);
    assert_eq!(kinds(&evs), vec![EventType::ReqError]);
    assert!(matches!(evs[0].param, EventParam::SendStatus(20)));
    assert!(evs[0].mad.is_none());
    assert_eq!(fx.state(), Some(State::Idle));
    assert_eq!(fx.w.next_in(A), None);
    assert_eq!(fx.w.e[A].counters().tx[1], 1 + MAX_RETRIES as u64);
    assert_eq!(fx.w.e[A].counters().tx_retries[1], MAX_RETRIES as u64);
    // The id can be used again.
    let now = fx.w.now;
    fx.w.e[A]
        .send_req(now, fx.id, &req_params(A, &Opts::default()))
        .unwrap();
}

#[test]
fn req_with_15_retries_sends_16_times() {
    let mut fx = reach(State::Idle, A);
    let mut p = req_params(A, &Opts::default());
    p.primary_path.packet_life_time = 8;
    p.remote_cm_response_timeout = 9;
    p.max_cm_retries = 15;
    let now = fx.w.now;
    fx.w.e[A].send_req(now, fx.id, &p).unwrap();
    let mut sends = fx.w.take(A).len();
    // 2*convert(8) + convert(9) = 2 + 2 ms.
    for _ in 0..16 {
        sends += wait_exactly(&mut fx.w, A, 4).len();
    }
    assert_eq!(sends, 16);
    assert_eq!(kinds(&fx.w.events(A)), vec![EventType::ReqError]);
}

#[test]
fn rep_retransmits_every_local_cm_response_timeout_then_rep_error() {
    let mut fx = reach(State::ReqRcvd, P);
    let now = fx.w.now;
    fx.w.e[P]
        .send_rep(now, fx.id, &rep_params(&Opts::default()))
        .unwrap();
    let first = fx.w.take(P);
    // convert(REQ.LocalCMResponseTimeout = 17) = 512 ms, REQ.MaxCMRetries = 3.
    for _ in 0..MAX_RETRIES {
        assert_eq!(wait_exactly(&mut fx.w, P, REP_INTERVAL), first);
    }
    assert!(
        wait_exactly(&mut fx.w, P, REP_INTERVAL).is_empty(),
        "no REJ either"
    );
    let evs = fx.w.events(P);
    assert_eq!(kinds(&evs), vec![EventType::RepError]);
    assert!(matches!(evs[0].param, EventParam::SendStatus(20)));
    assert_eq!(fx.state(), Some(State::Idle));
    assert_eq!(fx.w.e[P].table_sizes(), (0, 0));
    assert_eq!(fx.w.e[P].shared().qp_count(), 0);
}

#[test]
fn dreq_retransmits_then_dreq_error_and_timewait() {
    // (side, DREQ interval, timewait)
    for (side, interval, tw) in [
        (A, REQ_INTERVAL, convert(ACTIVE_AV_TO)),
        (P, REP_INTERVAL, convert(REQ_ACK_TO)),
    ] {
        let mut fx = reach(State::Established, side);
        let now = fx.w.now;
        fx.w.e[side].send_dreq(now, fx.id, &[]).unwrap();
        let first = fx.w.take(side);
        for _ in 0..MAX_RETRIES {
            assert_eq!(
                wait_exactly(&mut fx.w, side, interval),
                first,
                "side {side}"
            );
        }
        assert!(wait_exactly(&mut fx.w, side, interval).is_empty());
        let evs = fx.w.events(side);
        assert_eq!(kinds(&evs), vec![EventType::DreqError], "side {side}");
        assert!(matches!(evs[0].param, EventParam::SendStatus(20)));
        assert_eq!(fx.state(), Some(State::Timewait));
        assert!(wait_exactly(&mut fx.w, side, tw).is_empty());
        assert_eq!(kinds(&fx.w.events(side)), vec![EventType::TimewaitExit]);
        assert_eq!(fx.state(), Some(State::Idle));
    }
}

#[test]
fn mra_extends_the_wait_to_service_timeout_plus_av_timeout() {
    // Active side: REQ_SENT, the passive side MRAs the retransmitted REQ.
    let mut fx = reach(State::ReqRcvd, P);
    fx.w.e[P].prepare_mra(fx.id).unwrap();
    let req = wait_exactly(&mut fx.w, A, REQ_INTERVAL);
    fx.w.inject(P, &req[0]).unwrap();
    fx.w.flush(P);
    let a = fx.peer.unwrap();
    one_event(&mut fx.w, A, EventType::MraReceived);
    assert_eq!(fx.w.e[A].state(a), Some(State::MraReqRcvd));
    // convert(24) + convert(av.timeout = PLT + 1).
    let ext = convert(24) + convert(PLT + 1);
    let again = wait_exactly(&mut fx.w, A, ext);
    assert_eq!(again, req, "the REQ is still retried after the MRA'd wait");
    // Later retries keep the extended wait.
    assert_eq!(fx.w.next_in(A), Some(ext));
    // Passive side: REP_SENT, the active side MRAs the retransmitted REP.
    let mut fx = reach(State::RepRcvd, A);
    fx.w.e[A].prepare_mra(fx.id).unwrap();
    let rep = wait_exactly(&mut fx.w, P, REP_INTERVAL);
    fx.w.inject(A, &rep[0]).unwrap();
    fx.w.flush(A);
    let p = fx.peer.unwrap();
    one_event(&mut fx.w, P, EventType::MraReceived);
    assert_eq!(fx.w.e[P].state(p), Some(State::MraRepRcvd));
    // As the kernel: convert(24) + convert(av.timeout), not the 4 s of
    // the passive side's own REP tries (rep_timeout_cap_ms): the requester
    // that MRAs is alive and asks for the time (rdma_cm's MRA does so for
    // every REP it has not completed yet).
    let ext = convert(24) + convert(REQ_ACK_TO);
    assert!(ext > fx.w.e[P].config().rep_timeout_cap_ms);
    assert!(ext <= fx.w.e[P].config().mra_rep_wait_cap_ms);
    assert_eq!(wait_exactly(&mut fx.w, P, ext), rep);
    assert_eq!(fx.w.next_in(P), Some(ext), "later REP tries keep it");
}

/// An MRA asking for more than `mra_rep_wait_cap_ms` (service timeout 31:
/// ≈ 2.3 hours per REP try) buys the cap, not what it asks.
#[test]
fn mra_for_a_rep_buys_at_most_the_cap() {
    let mut fx = reach(State::RepRcvd, A);
    fx.w.e[A].prepare_mra(fx.id).unwrap();
    let rep = wait_exactly(&mut fx.w, P, REP_INTERVAL);
    fx.w.inject(A, &rep[0]).unwrap();
    let out = fx.w.take(A);
    let CmMsg::Mra(mut m) = parse(&out[0]) else {
        panic!("not an MRA")
    };
    m.service_timeout = 31;
    fx.w.inject(P, &send_mad(mad_tid(&out[0]), CmMsg::Mra(m)))
        .unwrap();
    one_event(&mut fx.w, P, EventType::MraReceived);
    let cap = fx.w.e[P].config().mra_rep_wait_cap_ms;
    assert!(cap > 0 && cap < convert(31));
    assert_eq!(wait_exactly(&mut fx.w, P, cap), rep);
}

#[test]
fn timewait_lasts_convert_of_the_av_timeout() {
    // Both sides enter timewait at the same instant: the active one after
    // DREP_RECEIVED (av.timeout = cm_ack_timeout(TAD, PLT)), the passive
    // one at send_drep (av.timeout = REQ PrimaryLocalACKTimeout).
    let mut fx = reach(State::Timewait, A);
    assert_eq!(fx.w.next_in(A), Some(convert(ACTIVE_AV_TO)));
    assert_eq!(fx.w.next_in(P), Some(convert(REQ_ACK_TO)));
    fx.w.advance(convert(ACTIVE_AV_TO) - 1);
    assert!(fx.w.events(A).is_empty());
    fx.w.advance(1);
    let evs = fx.w.events(A);
    assert_eq!(kinds(&evs), vec![EventType::TimewaitExit]);
    assert!(evs[0].mad.is_none());
    assert_eq!(fx.state(), Some(State::Idle));
    fx.w.advance(convert(REQ_ACK_TO) - convert(ACTIVE_AV_TO) - 1);
    assert!(fx.w.events(P).is_empty());
    fx.w.advance(1);
    assert_eq!(kinds(&fx.w.events(P)), vec![EventType::TimewaitExit]);
    assert_eq!(fx.w.e[P].state(fx.peer.unwrap()), Some(State::Idle));
    assert!(fx.w.take(A).is_empty() && fx.w.take(P).is_empty());
}

#[test]
fn sidr_req_retransmits_every_timeout_ms_then_sidr_req_error() {
    let mut fx = reach(State::Idle, A);
    let now = fx.w.now;
    let p = sidr_params(A, &Opts::default());
    fx.w.e[A].send_sidr_req(now, fx.id, &p).unwrap();
    let first = fx.w.take(A);
    for _ in 0..p.max_cm_retries {
        assert_eq!(wait_exactly(&mut fx.w, A, p.timeout_ms), first);
    }
    assert!(wait_exactly(&mut fx.w, A, p.timeout_ms).is_empty());
    let evs = fx.w.events(A);
    assert_eq!(kinds(&evs), vec![EventType::SidrReqError]);
    assert!(matches!(evs[0].param, EventParam::SendStatus(20)));
    assert_eq!(fx.state(), Some(State::Idle));
}

#[test]
fn send_rej_stops_the_retransmission() {
    // ibcm: deliberate deviation, the kernel keeps retransmitting the REQ
    // (and REP) until its retries end, then ignores the completion.
    for (s, side) in [(State::ReqSent, A), (State::RepSent, P)] {
        let mut fx = reach(s, side);
        let now = fx.w.now;
        fx.w.e[side]
            .send_rej(now, fx.id, rej_reason::CONSUMER_DEFINED as u32, &[], &[])
            .unwrap();
        assert_eq!(fx.take_own().len(), 1);
        fx.w.advance(100_000);
        assert!(fx.take_own().is_empty(), "{}", s.name());
        // Only a TIMEWAIT_EXIT (REP_SENT -> TIMEWAIT), never an *_ERROR.
        assert!(
            fx.w.events(side)
                .iter()
                .all(|e| e.kind == EventType::TimewaitExit),
            "{}",
            s.name()
        );
    }
}

// -------------------------------------------------------------------- TIDs

/// CM_RULES.md §tids: REQ, DREQ and SIDR_REQ get
/// `hi_tid << 32 | local ID (as stored)`; everything else reuses the id's
/// remembered TID.
#[test]
fn tids_follow_the_kernel_rules() {
    // Active side disconnects.
    let mut fx = reach(State::ReqSent, A);
    let (a, p) = (fx.id, fx.peer.unwrap());
    let req_tid = fx.req_tid;
    assert_eq!(req_tid, new_tid(A, a));
    let now = fx.w.now;
    fx.w.e[P].prepare_mra(p).unwrap();
    let req = fx.req.unwrap();
    fx.w.inject(P, &req).unwrap();
    let mra = fx.w.take(P);
    assert_eq!(mad_tid(&mra[0]), req_tid, "MRA: the REQ's TID");
    fx.w.inject(A, &mra[0]).unwrap();
    fx.w.e[P]
        .send_rep(now, p, &rep_params(&Opts::default()))
        .unwrap();
    let rep = fx.w.take(P);
    assert_eq!(mad_tid(&rep[0]), req_tid, "REP: the REQ's TID");
    fx.w.inject(A, &rep[0]).unwrap();
    fx.w.e[A].send_rtu(a, &[]).unwrap();
    let rtu = fx.w.take(A);
    assert_eq!(mad_tid(&rtu[0]), req_tid, "RTU: the own REQ's TID");
    fx.w.inject(P, &rtu[0]).unwrap();
    fx.w.e[P].send_dreq(now, p, &[]).unwrap();
    let dreq = fx.w.take(P);
    assert_eq!(mad_tid(&dreq[0]), new_tid(P, p), "passive DREQ: a new TID");
    fx.w.inject(A, &dreq[0]).unwrap();
    fx.w.e[A].send_drep(now, a, &[]).unwrap();
    let drep = fx.w.take(A);
    assert_eq!(mad_tid(&drep[0]), new_tid(P, p), "DREP: the DREQ's TID");
    fx.w.inject(P, &drep[0]).unwrap();
    assert_eq!(fx.w.e[P].state(p), Some(State::Timewait));
    // A late copy of the active side's own DREQ (simultaneous disconnect)
    // reaches the passive id in TIMEWAIT: the DREP re-sent from there
    // carries the id's remembered TID, which sending a DREQ does not
    // change (ib_send_cm_dreq formats the DREQ with cm_form_tid() but
    // never stores it): still the REQ's TID.
    let late = send_mad(
        new_tid(A, a),
        CmMsg::Dreq(Dreq {
            local_comm_id: lid_of(a),
            remote_comm_id: lid_of(p),
            remote_qpn: QPN_P,
            private_data: [0; pdata::DREQ],
        }),
    );
    fx.w.inject(P, &late).unwrap();
    let redrep = fx.w.take(P);
    assert_eq!(
        mad_tid(&redrep[0]),
        req_tid,
        "re-sent DREP: the remembered TID"
    );
    // SIDR.
    let mut fx = reach(State::SidrReqRcvd, P);
    assert_eq!(fx.req_tid, new_tid(A, fx.peer.unwrap()));
    fx.w.e[P].send_sidr_rep(fx.id, &sidr_rep_params()).unwrap();
    assert_eq!(
        mad_tid(&fx.w.take(P)[0]),
        fx.req_tid,
        "SIDR_REP: the SIDR_REQ's TID"
    );
    // The active side's DREQ reuses its REQ's TID value (same formula).
    let mut fx = reach(State::Established, A);
    let now = fx.w.now;
    fx.w.e[A].send_dreq(now, fx.id, &[]).unwrap();
    assert_eq!(mad_tid(&fx.w.take(A)[0]), fx.req_tid);
}

#[test]
fn stale_connection_rep_gets_rej_and_old_connection_dreq() {
    // A is connected to P's QPN; a second active id gets a REP naming the
    // same (CA GUID, QPN).
    let mut fx = reach(State::Established, A);
    let now = fx.w.now;
    let a2 = fx.w.e[A].create_id().unwrap();
    let mut p = req_params(A, &Opts::default());
    p.qp_num = 0x0bbb;
    fx.w.e[A].send_req(now, a2, &p).unwrap();
    let req = fx.w.take(A)[0];
    let rep_tid = mad_tid(&req);
    let rep = send_mad(
        rep_tid,
        CmMsg::Rep(Rep {
            local_comm_id: FRESH_REMOTE,
            remote_comm_id: lid_of(a2),
            local_qkey: 0,
            local_qpn: QPN_P,
            vendor_id: 0,
            local_eecn: 0,
            starting_psn: 1,
            responder_resources: 1,
            initiator_depth: 1,
            target_ack_delay: ACK_DELAY[P],
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 7,
            srq: false,
            local_ca_guid: GUID[P],
            private_data: [0; pdata::REP],
        }),
    );
    assert!(fx.w.inject(A, &rep).is_err());
    let out = fx.w.take(A);
    assert_eq!(out.len(), 2, "REJ(STALE_CONN) and a DREQ");
    // cm_issue_rej: the IDs swapped from the REP, its TID, MessageRejected REP.
    let CmMsg::Rej(r) = parse(&out[0]) else {
        panic!()
    };
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id),
        (lid_of(a2), FRESH_REMOTE)
    );
    assert_eq!(
        (r.reason, r.message_rejected),
        (rej_reason::STALE_CONN, MsgCode::Rep)
    );
    assert_eq!(mad_tid(&out[0]), rep_tid);
    let CmMsg::Dreq(d) = parse(&out[1]) else {
        panic!()
    };
    assert_eq!(d.local_comm_id, lid_of(fx.id));
    assert_eq!(fx.state(), Some(State::DreqSent), "the old connection");
    // The new id is untouched: still waiting for a REP.
    assert_eq!(fx.w.e[A].state(a2), Some(State::ReqSent));
    assert_eq!(fx.w.e[A].info(a2).unwrap().remote_id, 0);
    assert!(fx.w.events(A).is_empty());
}

/// A stale connection's old id gets `ib_send_cm_dreq` (`dreq_stale_local`):
/// established, it sends a DREQ; otherwise (or already destroyed) it sends
/// none and leaves a notice instead of dropping the refusal silently.
#[test]
fn stale_dreq_not_sent_is_a_notice() {
    let mut fx = reach(State::Established, A);
    let (now, lid) = (fx.w.now, lid_of(fx.id));
    fx.w.take(A);
    while fx.w.e[A].poll_notice().is_some() {}
    fx.w.e[A].dreq_stale_local(now, lid);
    assert_eq!(fx.state(), Some(State::DreqSent));
    assert!(matches!(parse(&fx.w.take(A)[0]), CmMsg::Dreq(_)));
    assert_eq!(fx.w.e[A].poll_notice(), None);
    fx.w.e[A].dreq_stale_local(now, lid);
    assert!(fx.w.take(A).is_empty(), "no second DREQ");
    assert_eq!(
        fx.w.e[A].poll_notice(),
        Some(Notice::StaleNoDreq {
            local_id: lid,
            state: Some(State::DreqSent)
        })
    );
    fx.w.e[A].destroy(fx.id, 0);
    fx.w.e[A].dreq_stale_local(now, lid);
    assert_eq!(
        fx.w.e[A].poll_notice(),
        Some(Notice::StaleNoDreq {
            local_id: lid,
            state: None
        })
    );
}
