//! `ib_destroy_cm_id` in every state (CM_RULES.md §destroy), end to end on the
//! simulated fabric: one side destroys its id in the state under test, and
//! the peer must see what a kernel peer would (REJ(TIMEOUT) found through
//! the ARI GUID, REJ(CONSUMER_DEFINED), a DREQ, a DREP, SIDR_REP(REJECT),
//! nothing at all...). Afterwards everything still alive is destroyed and
//! no id, timer or table entry may remain (`Sim::check_clean`).
//!
//! Each scenario runs on a loss-free fabric, where the exact event history
//! of both sides is checked, and on a faulty one (seeded loss,
//! duplication, reordering, delay), where the peer may only see events of
//! an allowed set and the general invariants must hold.
//!
//! `IBCM_SIM_SEEDS=N` sets the number of seeds per scenario (default 200);
//! `IBCM_SIM_SEED=S` replays one seed with a full trace.

mod sim_seeds;

use ibcm::engine::*;
use ibcm::sim::*;
use sim_seeds::{ONCE_PER_ID, SERVICE, replaying, req_params, seeds};
use std::cell::{Cell, RefCell};

/// Virtual time: a lost REJ after an MRA leaves the peer retrying every
/// convert(24) + convert(av.timeout) ≈ 65.7 s, 15 times (as the kernel).
const LIMIT_MS: u64 = 3_600_000;
const C: usize = 0;
const S: usize = 1;
const QPN_C: u32 = 0x77;
const QPN_S: u32 = 0x88;

// ----------------------------------------------------------------- cases

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Idle,
    Listen,
    ReqSent,
    MraReqRcvd,
    ReqRcvd,
    /// REQ_RCVD destroyed by a handler returning -ENOMEM: no REJ.
    ReqRcvdEnomem,
    MraReqSent,
    RepSent,
    MraRepRcvd,
    RepRcvd,
    MraRepSent,
    EstablishedClient,
    EstablishedServer,
    DreqSent,
    DreqRcvd,
    TimewaitClient,
    TimewaitServer,
    SidrReqSent,
    SidrReqRcvd,
}

impl Case {
    fn target(self) -> State {
        use Case::*;
        match self {
            Idle => State::Idle,
            Listen => State::Listen,
            ReqSent => State::ReqSent,
            MraReqRcvd => State::MraReqRcvd,
            ReqRcvd | ReqRcvdEnomem => State::ReqRcvd,
            MraReqSent => State::MraReqSent,
            RepSent => State::RepSent,
            MraRepRcvd => State::MraRepRcvd,
            RepRcvd => State::RepRcvd,
            MraRepSent => State::MraRepSent,
            EstablishedClient | EstablishedServer => State::Established,
            DreqSent => State::DreqSent,
            DreqRcvd => State::DreqRcvd,
            TimewaitClient | TimewaitServer => State::Timewait,
            SidrReqSent => State::SidrReqSent,
            SidrReqRcvd => State::SidrReqRcvd,
        }
    }

    /// The node whose id is destroyed in the state under test.
    fn victim(self) -> usize {
        use Case::*;
        match self {
            Idle | ReqSent | MraReqRcvd | RepRcvd | MraRepSent | EstablishedClient | DreqSent
            | TimewaitClient | SidrReqSent => C,
            _ => S,
        }
    }

    fn is_sidr(self) -> bool {
        matches!(self, Case::SidrReqSent | Case::SidrReqRcvd)
    }

    /// On a loss-free fabric: every event of (client, server), in order,
    /// with the REJ reason / SIDR_REP status.
    fn clean_history(self) -> (Vec<Ev>, Vec<Ev>) {
        use Case::*;
        use EventType as E;
        let req = (E::ReqReceived, 0);
        let rep = (E::RepReceived, 0);
        let rtu = (E::RtuReceived, 0);
        let mra = (E::MraReceived, 24);
        let dreq = (E::DreqReceived, 0);
        let drep = (E::DrepReceived, 0);
        let tw = (E::TimewaitExit, 0);
        let rej = |r| (E::RejReceived, r);
        match self {
            // The client's id went through a whole connection to IDLE.
            Idle => (vec![rep, drep, tw], vec![req, rtu, dreq, tw]),
            // Connection 1 survives the listener; connection 2 is refused.
            Listen => (vec![rep, rej(8), drep, tw], vec![req, rtu, dreq, tw]),
            // The passive side finds the connection by the ARI GUID.
            ReqSent => (vec![], vec![req, rej(4)]),
            MraReqRcvd => (vec![mra], vec![req, rej(4)]),
            ReqRcvd => (vec![rej(28)], vec![req]),
            // No REJ: the REQ retry makes a new connection that succeeds.
            ReqRcvdEnomem => (vec![rep, drep, tw], vec![req, req, rtu, dreq, tw]),
            MraReqSent => (vec![mra, rej(28)], vec![req]),
            RepSent => (vec![rep, rej(28)], vec![req]),
            MraRepRcvd => (vec![rep, rej(28)], vec![req, mra]),
            RepRcvd => (vec![rep], vec![req, rej(28)]),
            MraRepSent => (vec![rep], vec![req, mra, rej(28)]),
            // One unretried DREQ; the peer's DREP goes nowhere.
            EstablishedClient => (vec![rep], vec![req, rtu, dreq, tw]),
            EstablishedServer => (vec![rep, dreq, tw], vec![req, rtu]),
            // Nothing is sent; the peer answers the DREQ it already has.
            DreqSent => (vec![rep], vec![req, rtu, dreq, tw]),
            DreqRcvd => (vec![rep, drep, tw], vec![req, rtu, dreq]),
            TimewaitClient => (vec![rep, drep], vec![req, rtu, dreq, tw]),
            TimewaitServer => (vec![rep, drep, tw], vec![req, rtu, dreq]),
            SidrReqSent => (vec![], vec![(E::SidrReqReceived, 0)]),
            SidrReqRcvd => (vec![(E::SidrRepReceived, 2)], vec![(E::SidrReqReceived, 0)]),
        }
    }

    /// On a faulty fabric: the events the peer may see (any number, any
    /// order).
    fn allowed_peer(self) -> Vec<Ev> {
        use Case::*;
        use EventType as E;
        let (c, s) = self.clean_history();
        let mut v = if self.victim() == C { s } else { c };
        let extra: &[Ev] = match self {
            // Retransmitted REQs after the REP was lost, REPs to a client
            // id that is gone.
            Idle | EstablishedClient | DreqSent | TimewaitClient => &[(E::RepError, 0)],
            Listen => &[(E::ReqError, 0)],
            ReqSent | MraReqRcvd | SidrReqSent => &[],
            ReqRcvd | MraReqSent | RepSent | MraRepRcvd => {
                &[(E::ReqError, 0), (E::RepReceived, 0), (E::MraReceived, 24)]
            }
            ReqRcvdEnomem => &[(E::ReqError, 0), (E::DreqError, 0)],
            RepRcvd | MraRepSent => &[(E::RepError, 0), (E::MraReceived, 24)],
            EstablishedServer | TimewaitServer => &[(E::ReqError, 0)],
            DreqRcvd => &[(E::DreqError, 0), (E::ReqError, 0)],
            SidrReqRcvd => &[(E::SidrReqError, 0)],
        };
        v.extend_from_slice(extra);
        v
    }
}

const CASES: [Case; 19] = [
    Case::Idle,
    Case::Listen,
    Case::ReqSent,
    Case::MraReqRcvd,
    Case::ReqRcvd,
    Case::ReqRcvdEnomem,
    Case::MraReqSent,
    Case::RepSent,
    Case::MraRepRcvd,
    Case::RepRcvd,
    Case::MraRepSent,
    Case::EstablishedClient,
    Case::EstablishedServer,
    Case::DreqSent,
    Case::DreqRcvd,
    Case::TimewaitClient,
    Case::TimewaitServer,
    Case::SidrReqSent,
    Case::SidrReqRcvd,
];

/// An event as recorded: kind and REJ reason / SIDR status / MRA timeout.
type Ev = (EventType, u32);

// ------------------------------------------------------------ the consumer

/// Wake-up actions (token = action << 40 | handle).
const W_DESTROY_VICTIM: u64 = 1;
const W_SEND_DREQ: u64 = 2;
const W_SEND_DREP: u64 = 3;
const W_SIDR_ANSWER: u64 = 4;
const W_CONNECT_AGAIN: u64 = 5;
const W_DESTROY_LISTENER: u64 = 6;

fn token(action: u64, h: Handle) -> u64 {
    action << 40 | h.0
}

#[derive(Default)]
struct Rec {
    /// Every event per node.
    events: [Vec<Ev>; 2],
    /// The state each victim destroy found.
    victim_states: Vec<State>,
    destroyed: Vec<(usize, Handle)>,
    seen: Vec<(usize, Handle, EventType)>,
    errors: Vec<String>,
}

struct Consumer {
    case: Case,
    rec: RefCell<Rec>,
    listener: Cell<Option<Handle>>,
    req: ReqParams,
    sidr: SidrReqParams,
    enomem_done: Cell<bool>,
}

impl Consumer {
    fn record(&self, node: usize, ev: &Event) {
        use EventType::*;
        let mut r = self.rec.borrow_mut();
        if r.destroyed.contains(&(node, ev.id)) {
            r.errors
                .push(format!("n{node}: {} after destroy", ev.kind.name()));
        }
        if ONCE_PER_ID.contains(&ev.kind) && r.seen.contains(&(node, ev.id, ev.kind)) {
            r.errors
                .push(format!("n{node}: {} twice on one id", ev.kind.name()));
        }
        if r.seen.contains(&(node, ev.id, TimewaitExit)) {
            r.errors
                .push(format!("n{node}: {} after TIMEWAIT_EXIT", ev.kind.name()));
        }
        r.seen.push((node, ev.id, ev.kind));
        let p = match &ev.param {
            EventParam::Rej { reason, .. } => *reason,
            EventParam::SidrRep(s) => s.status,
            EventParam::Mra { service_timeout } => *service_timeout as u32,
            _ => 0,
        };
        r.events[node].push((ev.kind, p));
    }

    fn destroy(&self, ctx: &mut Ctx, h: Handle, err: i32) {
        ctx.engine.destroy(h, err);
        self.rec.borrow_mut().destroyed.push((ctx.node, h));
    }

    /// The destroy under test.
    fn destroy_victim(&self, ctx: &mut Ctx, h: Handle, err: i32) {
        let Some(st) = ctx.engine.state(h) else {
            return;
        };
        self.rec.borrow_mut().victim_states.push(st);
        self.destroy(ctx, h, err);
    }

    fn rep_params() -> RepParams {
        RepParams {
            qp_num: QPN_S,
            starting_psn: 0x654321,
            private_data: b"rep".to_vec(),
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            ..RepParams::default()
        }
    }

    fn on_wake(&self, ctx: &mut Ctx, tok: u64) {
        let h = Handle(tok & ((1 << 40) - 1));
        let now = ctx.now;
        match tok >> 40 {
            W_DESTROY_VICTIM => self.destroy_victim(ctx, h, 0),
            W_SEND_DREQ => {
                let _ = ctx.engine.send_dreq(now, h, b"bye");
            }
            W_SEND_DREP => {
                let _ = ctx.engine.send_drep(now, h, &[]);
            }
            W_SIDR_ANSWER => {
                let p = SidrRepParams {
                    qp_num: 0x99,
                    qkey: 0x0123_4567,
                    ..SidrRepParams::default()
                };
                let _ = ctx.engine.send_sidr_rep(h, &p);
                self.destroy(ctx, h, 0);
            }
            W_CONNECT_AGAIN => {
                let id = ctx.engine.create_id().unwrap();
                let mut p = self.req.clone();
                p.qp_num = QPN_C + 1;
                ctx.engine.send_req(now, id, &p).unwrap();
            }
            W_DESTROY_LISTENER => {
                if let Some(l) = self.listener.take() {
                    self.destroy_victim(ctx, l, 0);
                }
            }
            _ => unreachable!(),
        }
    }

    fn on_event(&self, ctx: &mut Ctx, ev: Event) {
        use Case as K;
        use EventType::*;
        self.record(ctx.node, &ev);
        let client = ctx.node == C;
        let now = ctx.now;
        let h = ev.id;
        // The scenario's own behaviour first.
        match (self.case, client, ev.kind) {
            // The server never answers: the client stays in REQ_SENT.
            (K::ReqSent, false, ReqReceived) => return,
            // The server acknowledges (an MRA answers the retransmission).
            (K::MraReqRcvd, false, ReqReceived) => {
                ctx.engine.prepare_mra(h).unwrap();
                return;
            }
            (K::ReqRcvd, false, ReqReceived) => {
                self.destroy_victim(ctx, h, -1);
                return;
            }
            (K::ReqRcvdEnomem, false, ReqReceived) if !self.enomem_done.get() => {
                self.enomem_done.set(true);
                self.destroy_victim(ctx, h, -12);
                return;
            }
            (K::MraReqSent, false, ReqReceived) => {
                ctx.engine.prepare_mra(h).unwrap();
                ctx.wake_at(now.plus_millis(50), token(W_DESTROY_VICTIM, h));
                return;
            }
            (K::RepSent, false, ReqReceived) => {
                ctx.engine.send_rep(now, h, &Self::rep_params()).unwrap();
                ctx.wake_at(now.plus_millis(20), token(W_DESTROY_VICTIM, h));
                return;
            }
            // The client neither RTUs nor MRAs: it stays in REP_RCVD.
            (K::RepSent, true, RepReceived) => return,
            (K::MraRepRcvd, true, RepReceived) => {
                ctx.engine.prepare_mra(h).unwrap();
                return;
            }
            (K::MraRepRcvd, false, MraReceived) => {
                self.destroy_victim(ctx, h, -1);
                return;
            }
            (K::RepRcvd, true, RepReceived) => {
                self.destroy_victim(ctx, h, -1);
                return;
            }
            (K::MraRepSent, true, RepReceived) => {
                ctx.engine.prepare_mra(h).unwrap();
                ctx.wake_at(now.plus_millis(30), token(W_DESTROY_VICTIM, h));
                return;
            }
            (K::EstablishedClient, true, RepReceived) => {
                ctx.engine.send_rtu(h, b"rtu").unwrap();
                ctx.wake_at(now.plus_millis(50), token(W_DESTROY_VICTIM, h));
                return;
            }
            (K::EstablishedServer, false, RtuReceived) => {
                ctx.wake_at(now.plus_millis(50), token(W_DESTROY_VICTIM, h));
                return;
            }
            (K::DreqSent, false, DreqReceived) => {
                ctx.wake_at(now.plus_millis(30), token(W_SEND_DREP, h));
                return;
            }
            (K::DreqRcvd, false, DreqReceived) => {
                self.destroy_victim(ctx, h, -1);
                return;
            }
            (K::TimewaitClient, true, DrepReceived | DreqError) => {
                self.destroy_victim(ctx, h, 0);
                return;
            }
            (K::TimewaitServer, false, DreqReceived) => {
                ctx.engine.send_drep(now, h, &[]).unwrap();
                self.destroy_victim(ctx, h, 0);
                return;
            }
            (K::SidrReqSent, false, SidrReqReceived) => {
                ctx.wake_at(now.plus_millis(30), token(W_SIDR_ANSWER, h));
                return;
            }
            (K::SidrReqRcvd, false, SidrReqReceived) => {
                self.destroy_victim(ctx, h, -1);
                return;
            }
            (K::Idle, true, TimewaitExit | ReqError | RejReceived)
                if ctx.engine.state(h) == Some(State::Idle) =>
            {
                self.destroy_victim(ctx, h, 0);
                return;
            }
            _ => {}
        }
        // An ordinary consumer otherwise.
        let e = &mut *ctx.engine;
        match ev.kind {
            ReqReceived => {
                e.send_rep(now, h, &Self::rep_params()).unwrap();
            }
            RepReceived => {
                e.send_rtu(h, b"rtu").unwrap();
                // Client-initiated disconnect where the scenario needs one.
                if matches!(
                    self.case,
                    K::Idle
                        | K::Listen
                        | K::ReqRcvdEnomem
                        | K::DreqSent
                        | K::DreqRcvd
                        | K::TimewaitClient
                        | K::TimewaitServer
                ) {
                    // LISTEN: the connection outlives its listener
                    // (destroyed at +100 ms).
                    let after = if self.case == K::Listen { 200 } else { 50 };
                    ctx.wake_at(now.plus_millis(after), token(W_SEND_DREQ, h));
                    if self.case == K::DreqSent {
                        // The DREQ goes out at +50 ms; destroy 10 ms later,
                        // before the delayed DREP (+30 ms) comes back.
                        ctx.wake_at(now.plus_millis(60), token(W_DESTROY_VICTIM, h));
                    }
                }
            }
            DreqReceived => {
                let _ = e.send_drep(now, h, &[]);
            }
            SidrReqReceived => {
                let _ = e.send_sidr_rep(h, &SidrRepParams::default());
                self.destroy(ctx, h, 0);
            }
            RejReceived | ReqError | RepError | SidrRepReceived | SidrReqError | TimewaitExit => {
                self.destroy(ctx, h, 0)
            }
            RtuReceived | UserEstablished | MraReceived | DrepReceived | DreqError => {}
            LapReceived | AprReceived | LapError => {
                self.rec
                    .borrow_mut()
                    .errors
                    .push(format!("unexpected {}", ev.kind.name()));
            }
        }
    }
}

// --------------------------------------------------------------- scenario

/// Runs one scenario; `Ok(true)` when the id was destroyed in the state
/// under test (always on a loss-free fabric).
fn run(case: Case, seed: u64, faults: Faults, trace: bool) -> Result<bool, String> {
    let mut sim = Sim::new(seed, faults);
    sim.tracing = trace;
    let c = sim.add_node(0x1111, |_| {});
    let s = sim.add_node(0x2222, |_| {});
    assert_eq!((c, s), (C, S));
    let listener = {
        let e = &mut sim.nodes[S].engine;
        let l = e.create_id().unwrap();
        e.listen(l, SERVICE).unwrap();
        l
    };
    let con = Consumer {
        case,
        rec: RefCell::new(Rec::default()),
        listener: Cell::new(Some(listener)),
        req: req_params(&sim, C, S, b"req", QPN_C, 15),
        sidr: SidrReqParams {
            path: sim_path(&sim, C, S, 8),
            service_id: SERVICE,
            timeout_ms: 5,
            private_data: b"sidr".to_vec(),
            max_cm_retries: 15,
            ..SidrReqParams::default()
        },
        enomem_done: Cell::new(false),
    };
    let mut app = |ctx: &mut Ctx, input: Input| match input {
        Input::Event(ev) => con.on_event(ctx, ev),
        Input::Wake(t) => con.on_wake(ctx, t),
    };
    // Start: the client connects (or resolves); timed actions.
    sim.with_node(C, &mut app, |ctx| {
        let id = ctx.engine.create_id().unwrap();
        if case.is_sidr() {
            ctx.engine.send_sidr_req(ctx.now, id, &con.sidr).unwrap();
        } else {
            ctx.engine.send_req(ctx.now, id, &con.req).unwrap();
        }
        match case {
            Case::ReqSent => ctx.wake_at(ctx.now.plus_millis(30), token(W_DESTROY_VICTIM, id)),
            Case::MraReqRcvd => ctx.wake_at(ctx.now.plus_millis(60), token(W_DESTROY_VICTIM, id)),
            Case::SidrReqSent => ctx.wake_at(ctx.now.plus_millis(10), token(W_DESTROY_VICTIM, id)),
            Case::Listen => ctx.wake_at(ctx.now.plus_millis(150), token(W_CONNECT_AGAIN, id)),
            _ => {}
        }
    });
    if case == Case::Listen {
        sim.with_node(S, &mut app, |ctx| {
            ctx.wake_at(
                ctx.now.plus_millis(100),
                token(W_DESTROY_LISTENER, listener),
            )
        });
    }
    if !sim.run(Time::from_millis(LIMIT_MS), &mut app) {
        return Err("did not settle".into());
    }
    let clean = faults == Faults::NONE;
    let reached = con.rec.borrow().victim_states.contains(&case.target());
    {
        let r = con.rec.borrow();
        if !r.errors.is_empty() {
            return Err(r.errors.join("; "));
        }
        let target = case.target();
        let victim_node = case.victim();
        let peer = 1 - victim_node;
        if clean {
            if r.victim_states != [target] {
                return Err(format!(
                    "victim destroyed in {:?}, wanted [{}]",
                    r.victim_states.iter().map(|s| s.name()).collect::<Vec<_>>(),
                    target.name()
                ));
            }
            let (want_c, want_s) = case.clean_history();
            if r.events[C] != want_c || r.events[S] != want_s {
                return Err(format!(
                    "history client {:?} server {:?}, wanted client {:?} server {:?}",
                    r.events[C], r.events[S], want_c, want_s
                ));
            }
            // Everything ended by itself: only the listener is left.
            let left_s = if case == Case::Listen { 0 } else { 1 };
            let (nc, ns) = (
                sim.nodes[C].engine.id_count(),
                sim.nodes[S].engine.id_count(),
            );
            if (nc, ns) != (0, left_s) {
                return Err(format!("ids left: client {nc}, server {ns}"));
            }
        } else {
            let allowed = case.allowed_peer();
            if let Some(bad) = r.events[peer].iter().find(|e| !allowed.contains(e)) {
                return Err(format!(
                    "peer saw {} ({}), allowed {:?}; peer history {:?}",
                    bad.0.name(),
                    bad.1,
                    allowed,
                    r.events[peer]
                ));
            }
            // Destroyed at most once per id, and only in the scenario's
            // state or (when faults changed the course) in one the flow
            // can reach instead.
            if r.victim_states.len() > 8 {
                return Err(format!("{} victim destroys", r.victim_states.len()));
            }
        }
    }
    // Tear down whatever is left and let stray packets drain.
    for n in [C, S] {
        for h in sim.nodes[n].engine.handles() {
            sim.nodes[n].engine.destroy(h, 0);
            con.rec.borrow_mut().destroyed.push((n, h));
        }
    }
    sim.run(Time::from_millis(LIMIT_MS * 2), &mut app);
    {
        let r = con.rec.borrow();
        if !r.errors.is_empty() {
            return Err(r.errors.join("; "));
        }
    }
    sim.check_clean(C)?;
    sim.check_clean(S)?;
    Ok(reached)
}

fn for_seeds(name: &str, case: Case, faulty: bool) {
    let replay = replaying();
    let mut failures = Vec::new();
    let (mut runs, mut reached) = (0, 0);
    for seed in seeds() {
        let f = if faulty {
            Faults::random(&mut Rng::new(seed))
        } else {
            Faults::NONE
        };
        runs += 1;
        let r = run(case, seed, f, replay);
        if r == Ok(true) {
            reached += 1;
        }
        if let Err(e) = r {
            failures.push(format!(
                "{name}: seed {seed} failed: {e} (faults {f:?})\n  replay: IBCM_SIM_SEED={seed} cargo test --test sim_destroy {name} -- --nocapture"
            ));
            if failures.len() >= 3 {
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Faults may divert a run before the state is reached, but most runs
    // must test what they are named after.
    if !replay {
        assert!(
            reached * 2 >= runs,
            "{name}: only {reached} of {runs} runs destroyed the id in {}",
            case.target().name()
        );
    }
    eprintln!(
        "{name}: {reached}/{runs} runs destroyed in {}",
        case.target().name()
    );
}

macro_rules! scenarios {
    ($($case:ident => $clean:ident, $faulty:ident;)*) => {
        $(
            #[test]
            fn $clean() {
                for_seeds(stringify!($clean), Case::$case, false);
            }
            #[test]
            fn $faulty() {
                for_seeds(stringify!($faulty), Case::$case, true);
            }
        )*
        #[test]
        fn every_case_has_a_scenario() {
            let listed = [$(Case::$case),*];
            for c in CASES {
                assert!(listed.contains(&c), "{c:?}");
            }
            for s in State::ALL {
                assert!(CASES.iter().any(|c| c.target() == s), "{}", s.name());
            }
        }
    };
}

scenarios! {
    Idle => destroy_in_idle, destroy_in_idle_faulty;
    Listen => destroy_in_listen, destroy_in_listen_faulty;
    ReqSent => destroy_in_req_sent, destroy_in_req_sent_faulty;
    MraReqRcvd => destroy_in_mra_req_rcvd, destroy_in_mra_req_rcvd_faulty;
    ReqRcvd => destroy_in_req_rcvd, destroy_in_req_rcvd_faulty;
    ReqRcvdEnomem => destroy_in_req_rcvd_enomem, destroy_in_req_rcvd_enomem_faulty;
    MraReqSent => destroy_in_mra_req_sent, destroy_in_mra_req_sent_faulty;
    RepSent => destroy_in_rep_sent, destroy_in_rep_sent_faulty;
    MraRepRcvd => destroy_in_mra_rep_rcvd, destroy_in_mra_rep_rcvd_faulty;
    RepRcvd => destroy_in_rep_rcvd, destroy_in_rep_rcvd_faulty;
    MraRepSent => destroy_in_mra_rep_sent, destroy_in_mra_rep_sent_faulty;
    EstablishedClient => destroy_in_established_client, destroy_in_established_client_faulty;
    EstablishedServer => destroy_in_established_server, destroy_in_established_server_faulty;
    DreqSent => destroy_in_dreq_sent, destroy_in_dreq_sent_faulty;
    DreqRcvd => destroy_in_dreq_rcvd, destroy_in_dreq_rcvd_faulty;
    TimewaitClient => destroy_in_timewait_client, destroy_in_timewait_client_faulty;
    TimewaitServer => destroy_in_timewait_server, destroy_in_timewait_server_faulty;
    SidrReqSent => destroy_in_sidr_req_sent, destroy_in_sidr_req_sent_faulty;
    SidrReqRcvd => destroy_in_sidr_req_rcvd, destroy_in_sidr_req_rcvd_faulty;
}
