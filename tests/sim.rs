//! Deterministic simulation of the CM engine: scenarios run over a
//! simulated fabric with seeded faults (loss, duplication, reordering,
//! delay, corruption). Every run checks that both sides agree on the
//! outcome, that no event is delivered twice or after destroy, that private
//! data, ARI and SIDR fields arrive intact, and that destroying everything
//! leaves no id, timer or table entry behind.
//!
//! `IBCM_SIM_SEEDS=N` sets the number of seeds per scenario (default 200);
//! `IBCM_SIM_SEED=S` replays one seed with a full trace.

mod sim_seeds;

use ibcm::engine::*;
use ibcm::sim::*;
use ibcm::wire::{attr, rej_reason, sidr_status};
use sim_seeds::{ONCE_PER_ID, SERVICE, replaying, req_params, seeds};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

const LIMIT_MS: u64 = 600_000;

/// Runs `f` for every seed; a failure names the seed and how to replay it.
fn for_seeds(name: &str, f: impl Fn(u64, bool) -> Result<(), String>) {
    let mut failures = Vec::new();
    for seed in seeds() {
        if let Err(e) = f(seed, replaying()) {
            failures.push(format!(
                "{name}: seed {seed} failed: {e}\n  replay: IBCM_SIM_SEED={seed} cargo test --test sim {name} -- --nocapture"
            ));
            if failures.len() >= 3 {
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Per-id event history, checked for validity as events arrive.
#[derive(Default, Debug)]
struct History {
    events: HashMap<(usize, Handle), Vec<EventType>>,
    destroyed: Vec<(usize, Handle)>,
    errors: Vec<String>,
}

impl History {
    fn record(&mut self, node: usize, ev: &Event) {
        if self.destroyed.contains(&(node, ev.id)) {
            self.errors
                .push(format!("n{node}: event {} after destroy", ev.kind.name()));
        }
        let h = self.events.entry((node, ev.id)).or_default();
        use EventType::*;
        if ONCE_PER_ID.contains(&ev.kind) && h.contains(&ev.kind) {
            self.errors.push(format!(
                "n{node}: {} delivered twice to one id",
                ev.kind.name()
            ));
        }
        if h.contains(&TimewaitExit) {
            self.errors
                .push(format!("n{node}: {} after TIMEWAIT_EXIT", ev.kind.name()));
        }
        if matches!(ev.kind, ReqReceived | SidrReqReceived) && !h.is_empty() {
            self.errors.push(format!(
                "n{node}: {} on an id that had events",
                ev.kind.name()
            ));
        }
        h.push(ev.kind);
    }
    fn destroy(&mut self, node: usize, id: Handle) {
        self.destroyed.push((node, id));
    }
    fn check(&self) -> Result<(), String> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self.errors.join("; "))
        }
    }
}

/// Even seeds run on a fault-free fabric, odd ones with faults seeded
/// from the seed.
fn alternating(seed: u64) -> Faults {
    if seed % 2 == 0 {
        Faults::NONE
    } else {
        Faults::random(&mut Rng::new(seed))
    }
}

/// Declares a scenario's two tests: on a fault-free fabric, and on a
/// fabric with faults seeded from `seed ^ salt` (named in a failure).
macro_rules! on_clean_and_faulty_fabric {
    ($( $scenario:ident: $clean:ident, $faulty:ident, salt $salt:expr; )*) => { $(
        #[test]
        fn $clean() {
            for_seeds(stringify!($clean), |seed, t| $scenario(seed, t, Faults::NONE));
        }

        #[test]
        fn $faulty() {
            for_seeds(stringify!($faulty), |seed, t| {
                let f = Faults::random(&mut Rng::new(seed ^ $salt));
                $scenario(seed, t, f).map_err(|e| format!("{e} (faults {f:?})"))
            });
        }
    )* };
}

/// Checks that the client `c` sent `want` RTUs of its own, one per
/// connection it established: an RTU re-sent to answer a duplicate REP is
/// counted as a retry, so a `send_rtu` that put nothing on the wire (the
/// connection then rescued by the server's REP retransmission) fails here.
fn check_own_rtus(sim: &Sim, c: usize, want: u64) -> Result<(), String> {
    let rtu = counters::attr_index(attr::RTU);
    let k = sim.nodes[c].engine.counters();
    let own = k.tx[rtu] - k.tx_retries[rtu];
    if own != want {
        return Err(format!("n{c} sent {own} RTUs of its own, want {want}"));
    }
    Ok(())
}

/// Checks that no node retransmitted anything (nor answered a duplicate):
/// on a fabric without faults every request is answered in time.
fn check_no_retransmission(sim: &Sim) -> Result<(), String> {
    for (n, node) in sim.nodes.iter().enumerate() {
        let retries = node.engine.counters().tx_retries;
        if let Some(a) = retries.iter().position(|&r| r != 0) {
            return Err(format!(
                "n{n} retransmitted {} {} on a fabric without faults",
                retries[a],
                counters::ATTR_NAMES[a]
            ));
        }
    }
    Ok(())
}

/// A client (node 0) and a server (node 1) on one fabric with `faults`.
fn pair(seed: u64, trace: bool, faults: Faults) -> (Sim, usize, usize) {
    let mut sim = Sim::new(seed, faults);
    sim.tracing = trace;
    let c = sim.add_node(0x1111, |_| {});
    let s = sim.add_node(0x2222, |_| {});
    (sim, c, s)
}

/// The server's plain answer to a REQ: QPN 0x88, everything else default.
fn plain_rep() -> RepParams {
    RepParams {
        qp_num: 0x88,
        ..RepParams::default()
    }
}

/// A new id on the node of `ctx` sends a REQ with `params`.
fn start_req(ctx: &mut Ctx, params: &ReqParams) -> Handle {
    let id = ctx.engine.create_id().unwrap();
    ctx.engine.send_req(ctx.now, id, params).unwrap();
    id
}

/// Destroys the server's listener `l` (its last id when nothing leaked),
/// then checks that neither node kept an id, timer or table entry.
fn close_listener(sim: &mut Sim, c: usize, s: usize, l: Handle) -> Result<(), String> {
    sim.nodes[s].engine.destroy(l, 0);
    sim.check_clean(c)?;
    sim.check_clean(s)
}

/// A listener on `SERVICE` at node `n`.
fn listen(sim: &mut Sim, n: usize) -> Handle {
    let e = &mut sim.nodes[n].engine;
    let l = e.create_id().unwrap();
    e.listen(l, SERVICE).unwrap();
    l
}

fn pd(seed: u64, tag: u8, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed * 31 + tag as u64);
    r.bytes(len)
}

fn finish(
    sim: &mut Sim,
    hist: &RefCell<History>,
    app: &mut impl FnMut(&mut Ctx, Input),
) -> Result<(), String> {
    if !sim.run(Time::from_millis(LIMIT_MS), app) {
        return Err("did not settle within the time limit".into());
    }
    hist.borrow().check()
}

/// The errors a scenario's consumer recorded, as one.
fn no_errors(errors: &[String]) -> Result<(), String> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

// ------------------------------------------------------------------ connect

/// Client connects, server accepts, one side (seeded) disconnects, both
/// leave timewait and destroy everything.
fn connect_disconnect(seed: u64, trace: bool, faults: Faults) -> Result<(), String> {
    let (mut sim, c, s) = pair(seed, trace, faults);
    let client_disconnects = seed % 2 == 0;
    let (req_pd, rep_pd, rtu_pd, dreq_pd, drep_pd) = (
        pd(seed, 1, 92),
        pd(seed, 2, 196),
        pd(seed, 3, 224),
        pd(seed, 4, 220),
        pd(seed, 5, 224),
    );
    let hist = RefCell::new(History::default());
    #[derive(Default)]
    struct Out {
        client_est: u32,
        server_est: u32,
        client_down: u32,
        server_down: u32,
        tw_exits: u32,
        errors: Vec<String>,
        server_ids: Vec<Handle>,
        cid: Option<Handle>,
        listener: Option<Handle>,
    }
    let mut out = Out::default();
    let listener = listen(&mut sim, s);
    out.listener = Some(listener);
    let mut app = |ctx: &mut Ctx, input: Input| {
        let ev = match input {
            Input::Event(ev) => ev,
            Input::Wake(token) => {
                // Disconnect from whichever side owns the connection id.
                let h = Handle(token);
                if let Err(e) = ctx.engine.send_dreq(ctx.now, h, &dreq_pd) {
                    out.errors.push(format!("send_dreq: {e}"));
                }
                return;
            }
        };
        hist.borrow_mut().record(ctx.node, &ev);
        let now = ctx.now;
        let e = &mut *ctx.engine;
        let check = |what: &str, got: Option<&[u8]>, want: &[u8], errs: &mut Vec<String>| {
            if got.map(|g| &g[..want.len()]) != Some(want) {
                errs.push(format!("{what} private data corrupted"));
            }
        };
        match (ctx.node == s, ev.kind) {
            (true, EventType::ReqReceived) => {
                check("REQ", ev.private_data(), &req_pd, &mut out.errors);
                let EventParam::Req(p) = &ev.param else {
                    unreachable!()
                };
                if p.remote_qpn != 0x77
                    || p.starting_psn != 0x123456
                    || Some(p.listen_id) != out.listener
                {
                    out.errors.push(format!("REQ event params wrong: {p:?}"));
                }
                out.server_ids.push(ev.id);
                let rep = RepParams {
                    qp_num: 0x88,
                    starting_psn: 0x654321,
                    private_data: rep_pd.clone(),
                    responder_resources: 1,
                    initiator_depth: 1,
                    rnr_retry_count: 7,
                    ..RepParams::default()
                };
                if let Err(err) = e.send_rep(now, ev.id, &rep) {
                    out.errors.push(format!("send_rep: {err}"));
                }
            }
            (true, EventType::RtuReceived) => {
                check("RTU", ev.private_data(), &rtu_pd, &mut out.errors);
                out.server_est += 1;
                if !client_disconnects {
                    ctx.wake_at(now.plus_millis(20), ev.id.0);
                }
            }
            (false, EventType::RepReceived) => {
                check("REP", ev.private_data(), &rep_pd, &mut out.errors);
                let EventParam::Rep(p) = &ev.param else {
                    unreachable!()
                };
                if p.remote_qpn != 0x88 || p.starting_psn != 0x654321 {
                    out.errors.push(format!("REP event params wrong: {p:?}"));
                }
                if let Err(err) = e.send_rtu(ev.id, &rtu_pd) {
                    out.errors.push(format!("send_rtu: {err}"));
                }
                out.client_est += 1;
                if client_disconnects {
                    ctx.wake_at(now.plus_millis(20), ev.id.0);
                }
            }
            (_, EventType::DreqReceived) => {
                check("DREQ", ev.private_data(), &dreq_pd, &mut out.errors);
                if ctx.node == s {
                    out.server_down += 1
                } else {
                    out.client_down += 1
                }
                if let Err(err) = e.send_drep(now, ev.id, &drep_pd) {
                    out.errors.push(format!("send_drep: {err}"));
                }
            }
            (_, EventType::DrepReceived) => {
                check("DREP", ev.private_data(), &drep_pd, &mut out.errors);
                if ctx.node == s {
                    out.server_down += 1
                } else {
                    out.client_down += 1
                }
            }
            (_, EventType::TimewaitExit) => {
                out.tw_exits += 1;
                e.destroy(ev.id, 0);
                hist.borrow_mut().destroy(ctx.node, ev.id);
            }
            (_, k) => out
                .errors
                .push(format!("n{} unexpected {}", ctx.node, k.name())),
        }
    };
    let params = req_params(&sim, c, s, &req_pd, 0x77, 15);
    let cid = sim.with_node(c, &mut app, |ctx| start_req(ctx, &params));
    finish(&mut sim, &hist, &mut app)?;
    out.cid = Some(cid);
    if !out.errors.is_empty() {
        return Err(out.errors.join("; "));
    }
    // The server may learn of the connection only through the DREQ: its
    // RTU lost, the DREQ arrives in REP_SENT (the kernel's REP_SENT → DREQ_RCVD).
    if out.client_est != 1 || out.server_est > 1 || (out.server_est == 0 && out.server_down != 1) {
        return Err(format!(
            "established client={} server={}",
            out.client_est, out.server_est
        ));
    }
    if out.client_down != 1 || out.server_down != 1 || out.tw_exits != 2 {
        return Err(format!(
            "disconnect client={} server={} timewait exits={}",
            out.client_down, out.server_down, out.tw_exits
        ));
    }
    check_own_rtus(&sim, c, 1)?;
    if faults == Faults::NONE {
        check_no_retransmission(&sim)?;
    }
    let l = out.listener.unwrap();
    close_listener(&mut sim, c, s, l)
}

on_clean_and_faulty_fabric! {
    connect_disconnect: connect_disconnect_clean_fabric, connect_disconnect_faulty_fabric, salt 0;
}

// ------------------------------------------------------------------- reject

fn reject(seed: u64, trace: bool, faults: Faults, via_callback: bool) -> Result<(), String> {
    let (mut sim, c, s) = pair(seed, trace, faults);
    let ari = pd(seed, 7, 5);
    let rej_pd = pd(seed, 8, 148);
    let hist = RefCell::new(History::default());
    let mut errors: Vec<String> = Vec::new();
    let mut client_rej = 0;
    let mut server_reqs = 0;
    listen(&mut sim, s);
    let mut app = |ctx: &mut Ctx, input: Input| {
        let Input::Event(ev) = input else { return };
        hist.borrow_mut().record(ctx.node, &ev);
        let now = ctx.now;
        match (ctx.node == s, ev.kind) {
            (true, EventType::ReqReceived) => {
                server_reqs += 1;
                if via_callback {
                    // A handler returning non-zero: destroy with that error.
                    ctx.engine.destroy(ev.id, -1);
                } else {
                    ctx.engine
                        .send_rej(
                            now,
                            ev.id,
                            rej_reason::CONSUMER_DEFINED as u32,
                            &ari,
                            &rej_pd,
                        )
                        .unwrap();
                    ctx.engine.destroy(ev.id, 0);
                }
                hist.borrow_mut().destroy(ctx.node, ev.id);
            }
            (false, EventType::RejReceived) => {
                client_rej += 1;
                let EventParam::Rej { reason, ari_length } = ev.param else {
                    unreachable!()
                };
                if reason != rej_reason::CONSUMER_DEFINED as u32 {
                    errors.push(format!("reason {reason}"));
                }
                if !via_callback {
                    if ari_length as usize != ari.len() || ev.info() != Some(&ari[..]) {
                        errors.push("ARI corrupted".into());
                    }
                    if ev.private_data() != Some(&rej_pd[..]) {
                        errors.push("REJ private data corrupted".into());
                    }
                }
                ctx.engine.destroy(ev.id, 0);
                hist.borrow_mut().destroy(ctx.node, ev.id);
            }
            (_, k) => errors.push(format!("n{} unexpected {}", ctx.node, k.name())),
        }
    };
    let params = req_params(&sim, c, s, b"hello", 0x77, 15);
    sim.with_node(c, &mut app, |ctx| start_req(ctx, &params));
    finish(&mut sim, &hist, &mut app)?;
    no_errors(&errors)?;
    if client_rej != 1 || server_reqs < 1 {
        return Err(format!(
            "client REJs {client_rej}, server REQs {server_reqs}"
        ));
    }
    let l = sim.nodes[s].engine.handles()[0];
    close_listener(&mut sim, c, s, l)
}

#[test]
fn reject_with_ari_and_private_data() {
    for_seeds("reject_with_ari_and_private_data", |seed, t| {
        let f = Faults::random(&mut Rng::new(seed));
        reject(seed, t, f, false)
    });
}

#[test]
fn reject_by_handler_return() {
    for_seeds("reject_by_handler_return", |seed, t| {
        let f = Faults::random(&mut Rng::new(seed));
        reject(seed, t, f, true)
    });
}

// ------------------------------------------------- no listener / no answer

fn unanswered(seed: u64, trace: bool, listener_host_up: bool) -> Result<(), String> {
    let faults = if listener_host_up {
        Faults::random(&mut Rng::new(seed))
    } else {
        Faults::NONE
    };
    let (mut sim, c, s) = pair(seed, trace, faults);
    sim.nodes[s].up = listener_host_up;
    let hist = RefCell::new(History::default());
    let mut outcome: Vec<(EventType, Time, u32)> = Vec::new();
    let mut app = |ctx: &mut Ctx, input: Input| {
        let Input::Event(ev) = input else { return };
        hist.borrow_mut().record(ctx.node, &ev);
        let reason = match ev.param {
            EventParam::Rej { reason, .. } => reason,
            EventParam::SendStatus(s) => s,
            _ => 0,
        };
        outcome.push((ev.kind, ctx.now, reason));
        ctx.engine.destroy(ev.id, 0);
        hist.borrow_mut().destroy(ctx.node, ev.id);
    };
    let retries = (seed % 16) as u8;
    let params = req_params(&sim, c, s, b"x", 0x77, retries);
    let start = sim.now;
    sim.with_node(c, &mut app, |ctx| start_req(ctx, &params));
    finish(&mut sim, &hist, &mut app)?;
    match outcome.as_slice() {
        [(EventType::RejReceived, _, 8)] if listener_host_up => {}
        // Every REQ or its REJ lost, or the REJ slower than the last
        // REQ timeout (6 ms): only possible with loss or long delays.
        [(EventType::ReqError, _, 20)]
            if listener_host_up
                && (!faults.lossless() || 2 * (faults.min_delay_us + faults.jitter_us) >= 6000) => {
        }
        [(EventType::ReqError, at, 20)] if !listener_host_up => {
            // (1 + retries) attempts of 2*convert(8) + convert(10) = 6 ms.
            let want = start.plus_millis(6 * (1 + retries as u64));
            if at.as_millis_floor() != want.as_millis_floor() {
                return Err(format!("REQ_ERROR at {at:?}, expected {want:?}"));
            }
            let tx = sim.nodes[c].engine.counters().tx[1];
            if tx != 1 + retries as u64 {
                return Err(format!("{tx} REQs sent, expected {}", 1 + retries));
            }
        }
        other => return Err(format!("unexpected outcome {other:?}")),
    }
    sim.check_clean(c)?;
    sim.check_clean(s)
}

#[test]
fn no_listener_gets_rej_invalid_service_id() {
    for_seeds("no_listener_gets_rej_invalid_service_id", |seed, t| {
        unanswered(seed, t, true)
    });
}

#[test]
fn req_timeout_after_exact_retries() {
    for_seeds("req_timeout_after_exact_retries", |seed, t| {
        unanswered(seed, t, false)
    });
}

// ---------------------------------------------------------------------- MRA

fn mra(seed: u64, trace: bool, faults: Faults) -> Result<(), String> {
    let (mut sim, c, s) = pair(seed, trace, faults);
    let hist = RefCell::new(History::default());
    let mut errors = Vec::new();
    let (mut mras, mut client_est, mut server_est) = (0, 0, 0);
    listen(&mut sim, s);
    let mut app = |ctx: &mut Ctx, input: Input| {
        let now = ctx.now;
        let ev = match input {
            Input::Wake(token) => {
                // The slow consumer finally accepts.
                let rep = RepParams {
                    qp_num: 0x88,
                    starting_psn: 1,
                    ..RepParams::default()
                };
                if let Err(e) = ctx.engine.send_rep(now, Handle(token), &rep) {
                    errors.push(format!("late send_rep: {e}"));
                }
                return;
            }
            Input::Event(ev) => ev,
        };
        hist.borrow_mut().record(ctx.node, &ev);
        match (ctx.node == s, ev.kind) {
            (true, EventType::ReqReceived) => {
                ctx.engine.prepare_mra(ev.id).unwrap();
                // Three REQ timeouts later.
                ctx.wake_at(now.plus_millis(18), ev.id.0);
            }
            (false, EventType::MraReceived) => {
                mras += 1;
                let EventParam::Mra { service_timeout } = ev.param else {
                    unreachable!()
                };
                if service_timeout != MRA_SETTING {
                    errors.push(format!("MRA service timeout {service_timeout}"));
                }
            }
            (false, EventType::RepReceived) => {
                ctx.engine.send_rtu(ev.id, &[]).unwrap();
                client_est += 1;
            }
            (true, EventType::RtuReceived) => server_est += 1,
            (_, k) => errors.push(format!("n{} unexpected {}", ctx.node, k.name())),
        }
    };
    let params = req_params(&sim, c, s, b"slow", 0x77, 15);
    sim.with_node(c, &mut app, |ctx| start_req(ctx, &params));
    finish(&mut sim, &hist, &mut app)?;
    no_errors(&errors)?;
    if client_est != 1 || server_est != 1 {
        return Err(format!(
            "established client={client_est} server={server_est}"
        ));
    }
    if faults.lossless() && mras == 0 {
        return Err("no MRA received on a loss-free fabric".into());
    }
    check_own_rtus(&sim, c, 1)?;
    // MRA extended the client's REQ timeout: no REQ_ERROR although the
    // REP came after 3 REQ timeouts.
    for n in [c, s] {
        for h in sim.nodes[n].engine.handles() {
            sim.nodes[n].engine.destroy(h, 0);
        }
    }
    sim.run(Time::from_millis(LIMIT_MS), &mut |_: &mut Ctx, _| {});
    sim.check_clean(c)?;
    sim.check_clean(s)
}

#[test]
fn mra_from_slow_consumer() {
    for_seeds("mra_from_slow_consumer", |seed, t| {
        mra(seed, t, alternating(seed))
    });
}

// --------------------------------------------------------------------- SIDR

fn sidr(seed: u64, trace: bool, faults: Faults, listening: bool) -> Result<(), String> {
    let (mut sim, c, s) = pair(seed, trace, faults);
    let info = pd(seed, 9, (seed % 73) as usize);
    let rep_pd = pd(seed, 10, 136);
    let req_pd = pd(seed, 11, 216);
    let hist = RefCell::new(History::default());
    let mut errors = Vec::new();
    let mut replies = Vec::new();
    if listening {
        listen(&mut sim, s);
    }
    let mut app = |ctx: &mut Ctx, input: Input| {
        let Input::Event(ev) = input else { return };
        hist.borrow_mut().record(ctx.node, &ev);
        match (ctx.node == s, ev.kind) {
            (true, EventType::SidrReqReceived) => {
                if ev.private_data() != Some(&req_pd[..]) {
                    errors.push("SIDR_REQ private data corrupted".into());
                }
                let p = SidrRepParams {
                    qp_num: 0x99,
                    qkey: 0x0123_4567,
                    status: sidr_status::SUCCESS as u32,
                    info: info.clone(),
                    private_data: rep_pd.clone(),
                    ..SidrRepParams::default()
                };
                ctx.engine.send_sidr_rep(ev.id, &p).unwrap();
                ctx.engine.destroy(ev.id, 0);
                hist.borrow_mut().destroy(ctx.node, ev.id);
            }
            (false, EventType::SidrRepReceived) => {
                let EventParam::SidrRep(p) = ev.param else {
                    unreachable!()
                };
                replies.push(p.status);
                if listening {
                    if p.qpn != 0x99 || p.qkey != 0x0123_4567 || ev.info() != Some(&info[..]) {
                        errors.push(format!("SIDR_REP fields wrong: {p:?}"));
                    }
                    if ev.private_data() != Some(&rep_pd[..]) {
                        errors.push("SIDR_REP private data corrupted".into());
                    }
                }
                ctx.engine.destroy(ev.id, 0);
                hist.borrow_mut().destroy(ctx.node, ev.id);
            }
            (false, EventType::SidrReqError) => {
                replies.push(u32::MAX);
                ctx.engine.destroy(ev.id, 0);
                hist.borrow_mut().destroy(ctx.node, ev.id);
            }
            (_, k) => errors.push(format!("n{} unexpected {}", ctx.node, k.name())),
        }
    };
    let p = SidrReqParams {
        path: sim_path(&sim, c, s, 8),
        service_id: SERVICE,
        timeout_ms: 5,
        private_data: req_pd.clone(),
        max_cm_retries: 15,
        ..SidrReqParams::default()
    };
    sim.with_node(c, &mut app, |ctx| {
        let id = ctx.engine.create_id().unwrap();
        ctx.engine.send_sidr_req(ctx.now, id, &p).unwrap();
    });
    finish(&mut sim, &hist, &mut app)?;
    no_errors(&errors)?;
    let want = if listening {
        sidr_status::SUCCESS
    } else {
        sidr_status::UNSUPPORTED
    } as u32;
    if replies != [want] {
        return Err(format!("client outcomes {replies:?}, expected [{want}]"));
    }
    for h in sim.nodes[s].engine.handles() {
        sim.nodes[s].engine.destroy(h, 0);
    }
    sim.check_clean(c)?;
    sim.check_clean(s)
}

#[test]
fn sidr_resolves_service() {
    for_seeds("sidr_resolves_service", |seed, t| {
        sidr(seed, t, Faults::random(&mut Rng::new(seed)), true)
    });
}

#[test]
fn sidr_without_listener_gets_unsupported() {
    for_seeds("sidr_without_listener_gets_unsupported", |seed, t| {
        sidr(seed, t, Faults::random(&mut Rng::new(seed)), false)
    });
}

// -------------------------------------------------- simultaneous disconnect

fn simultaneous_disconnect(seed: u64, trace: bool, faults: Faults) -> Result<(), String> {
    let (mut sim, c, s) = pair(seed, trace, faults);
    let hist = RefCell::new(History::default());
    let mut errors = Vec::new();
    let mut conn: HashMap<usize, Handle> = HashMap::new();
    let mut tw = 0;
    listen(&mut sim, s);
    let mut app = |ctx: &mut Ctx, input: Input| {
        let now = ctx.now;
        let ev = match input {
            Input::Wake(_) => {
                let h = conn[&ctx.node];
                if let Err(e) = ctx.engine.send_dreq(now, h, &[]) {
                    errors.push(format!("n{} send_dreq: {e}", ctx.node));
                }
                return;
            }
            Input::Event(ev) => ev,
        };
        hist.borrow_mut().record(ctx.node, &ev);
        match (ctx.node == s, ev.kind) {
            (true, EventType::ReqReceived) => {
                ctx.engine.send_rep(now, ev.id, &plain_rep()).unwrap();
            }
            (true, EventType::RtuReceived) => {
                conn.insert(s, ev.id);
            }
            (false, EventType::RepReceived) => {
                ctx.engine.send_rtu(ev.id, &[]).unwrap();
                conn.insert(c, ev.id);
            }
            (_, EventType::DreqReceived) => {
                ctx.engine.send_drep(now, ev.id, &[]).unwrap();
            }
            (_, EventType::DrepReceived | EventType::DreqError) => {}
            (_, EventType::TimewaitExit) => {
                tw += 1;
                ctx.engine.destroy(ev.id, 0);
                hist.borrow_mut().destroy(ctx.node, ev.id);
            }
            (_, k) => errors.push(format!("n{} unexpected {}", ctx.node, k.name())),
        }
    };
    let params = req_params(&sim, c, s, b"", 0x77, 15);
    sim.with_node(c, &mut app, |ctx| {
        start_req(ctx, &params);
        // Both sides disconnect at the same instant, well after setup.
        ctx.wake_at(ctx.now.plus_millis(200), 0);
    });
    sim.with_node(s, &mut app, |ctx| ctx.wake_at(ctx.now.plus_millis(200), 0));
    finish(&mut sim, &hist, &mut app)?;
    no_errors(&errors)?;
    if tw != 2 {
        return Err(format!("{tw} timewait exits"));
    }
    check_own_rtus(&sim, c, 1)?;
    let l = sim.nodes[s].engine.handles()[0];
    close_listener(&mut sim, c, s, l)
}

#[test]
fn both_sides_disconnect_at_once() {
    for_seeds("both_sides_disconnect_at_once", |seed, t| {
        simultaneous_disconnect(seed, t, Faults::random(&mut Rng::new(seed)))
    });
}

// ------------------------------------------------------------------- stale

/// The client process restarts while connected and reconnects with the
/// same QPN: the server rejects the new REQ as stale, tears the old
/// connection down, and the client's retry after timewait succeeds.
fn stale(seed: u64, trace: bool, faults: Faults) -> Result<(), String> {
    let (mut sim, c, s) = pair(seed, trace, faults);
    let hist = RefCell::new(History::default());
    let mut errors = Vec::new();
    let (stale_rej, server_old_down, client_est, server_est) =
        (Cell::new(0), Cell::new(0), Cell::new(0), Cell::new(0));
    let phase = Cell::new(1);
    let params = req_params(&sim, c, s, b"", 0x77, 15);
    listen(&mut sim, s);
    let mut app = |ctx: &mut Ctx, input: Input| {
        let now = ctx.now;
        let ev = match input {
            Input::Wake(_) => {
                let id = ctx.engine.create_id().unwrap();
                ctx.engine.send_req(now, id, &params).unwrap();
                return;
            }
            Input::Event(ev) => ev,
        };
        hist.borrow_mut().record(ctx.node, &ev);
        match (ctx.node == s, ev.kind) {
            (true, EventType::ReqReceived) => {
                ctx.engine.send_rep(now, ev.id, &plain_rep()).unwrap();
            }
            (true, EventType::RtuReceived) => server_est.set(server_est.get() + 1),
            (true, EventType::DreqReceived) => {
                server_old_down.set(server_old_down.get() + 1);
                ctx.engine.send_drep(now, ev.id, &[]).unwrap();
            }
            (true, EventType::DrepReceived | EventType::DreqError) => {
                server_old_down.set(server_old_down.get() + 1)
            }
            (true, EventType::TimewaitExit) => {
                ctx.engine.destroy(ev.id, 0);
                hist.borrow_mut().destroy(ctx.node, ev.id);
            }
            // A duplicated or retransmitted copy of the stale REQ that
            // arrives after the old connection is gone starts a connection
            // whose client id no longer exists: its REP times out, as with
            // the kernel.
            (true, EventType::RepError) if phase.get() == 2 => {
                ctx.engine.destroy(ev.id, 0);
                hist.borrow_mut().destroy(ctx.node, ev.id);
            }
            (false, EventType::RepReceived) => {
                ctx.engine.send_rtu(ev.id, &[]).unwrap();
                client_est.set(client_est.get() + 1);
            }
            (false, EventType::RejReceived) => {
                let EventParam::Rej { reason, .. } = ev.param else {
                    unreachable!()
                };
                if reason == rej_reason::STALE_CONN as u32 {
                    stale_rej.set(stale_rej.get() + 1);
                } else {
                    errors.push(format!("REJ reason {reason}"));
                }
                ctx.engine.destroy(ev.id, 0);
                hist.borrow_mut().destroy(ctx.node, ev.id);
                // Try again once the old connection has gone.
                ctx.wake_at(now.plus_millis(1000), 0);
            }
            (_, k) => errors.push(format!(
                "n{} unexpected {} (phase {})",
                ctx.node,
                k.name(),
                phase.get()
            )),
        }
    };
    sim.with_node(c, &mut app, |ctx| start_req(ctx, &params));
    // Phase 1: connected.
    let t1 = sim.now.plus_millis(300);
    sim.run(t1, &mut app);
    if client_est.get() != 1 || server_est.get() != 1 {
        return Err(format!(
            "first connect: client={} server={}",
            client_est.get(),
            server_est.get()
        ));
    }
    // Phase 2: the client restarts and reconnects with the same QPN.
    phase.set(2);
    sim.restart_node(c);
    sim.with_node(c, &mut app, |ctx| start_req(ctx, &params));
    finish(&mut sim, &hist, &mut app)?;
    no_errors(&errors)?;
    if client_est.get() != 2 || server_est.get() != 2 {
        return Err(format!(
            "reconnect: client={} server={}",
            client_est.get(),
            server_est.get()
        ));
    }
    if server_old_down.get() != 1 {
        return Err(format!(
            "old connection torn down {} times",
            server_old_down.get()
        ));
    }
    if faults.lossless() && faults.duplicate == 0.0 && stale_rej.get() != 1 {
        return Err(format!(
            "{} STALE_CONN rejects on a loss-free fabric",
            stale_rej.get()
        ));
    }
    Ok(())
}

#[test]
fn stale_connection_after_peer_restart() {
    for_seeds("stale_connection_after_peer_restart", |seed, t| {
        stale(seed, t, alternating(seed))
    });
}

// ------------------------------------------------------------------- chaos

/// Corrupted MADs delivered to the engines, random API calls and destroys:
/// nothing may panic, and destroying everything must leave nothing behind.
fn chaos(seed: u64, trace: bool) -> Result<(), String> {
    let mut f = Faults::random(&mut Rng::new(seed));
    f.corrupt = 0.2;
    f.deliver_corrupt = true;
    let (mut sim, c, s) = pair(seed, trace, f);
    let mut rng = Rng::new(seed ^ 77);
    let mut rng2 = Rng::new(seed ^ 78);
    let hist = RefCell::new(History::default());
    listen(&mut sim, s);
    let mut app = |ctx: &mut Ctx, input: Input| {
        let Input::Event(ev) = input else { return };
        hist.borrow_mut().record(ctx.node, &ev);
        let now = ctx.now;
        let e = &mut *ctx.engine;
        let roll = rng.below(10);
        let _ = match ev.kind {
            EventType::ReqReceived if roll < 8 => e.send_rep(now, ev.id, &plain_rep()),
            EventType::ReqReceived => {
                e.send_rej(now, ev.id, rej_reason::CONSUMER_DEFINED as u32, &[], &[])
            }
            EventType::RepReceived if roll < 8 => e.send_rtu(ev.id, &[]),
            EventType::DreqReceived => e.send_drep(now, ev.id, &[]),
            EventType::SidrReqReceived => e.send_sidr_rep(ev.id, &SidrRepParams::default()),
            _ => Ok(()),
        };
        if roll == 9 {
            e.destroy(ev.id, 0);
            hist.borrow_mut().destroy(ctx.node, ev.id);
        }
    };
    for i in 0..8u32 {
        let mut p = req_params(&sim, c, s, b"chaos", 0x100 + i, 3);
        p.starting_psn = i;
        let sidr = SidrReqParams {
            path: sim_path(&sim, c, s, 8),
            service_id: SERVICE,
            timeout_ms: 3,
            max_cm_retries: 2,
            ..SidrReqParams::default()
        };
        sim.with_node(c, &mut app, |ctx| {
            let id = ctx.engine.create_id().unwrap();
            if i % 3 == 0 {
                ctx.engine.send_sidr_req(ctx.now, id, &sidr).unwrap();
            } else {
                ctx.engine.send_req(ctx.now, id, &p).unwrap();
            }
        });
        let t = sim.now.plus_millis(3);
        sim.run(t, &mut app);
    }
    // Random disconnects and destroys mid-flight.
    let t = sim.now.plus_millis(50);
    sim.run(t, &mut app);
    for n in [c, s] {
        for h in sim.nodes[n].engine.handles() {
            let now = sim.now;
            match rng2.below(3) {
                0 => {
                    let _ = sim.nodes[n].engine.send_dreq(now, h, &[]);
                }
                1 => {
                    sim.nodes[n].engine.destroy(h, 0);
                    hist.borrow_mut().destroy(n, h);
                }
                _ => {}
            }
        }
    }
    let t = sim.now.plus_millis(5_000);
    sim.run(t, &mut app);
    for n in [c, s] {
        for h in sim.nodes[n].engine.handles() {
            sim.nodes[n].engine.destroy(h, 0);
            hist.borrow_mut().destroy(n, h);
        }
    }
    // Stray packets still in flight must not resurrect anything durable.
    sim.run(Time::from_millis(LIMIT_MS), &mut app);
    for n in [c, s] {
        for h in sim.nodes[n].engine.handles() {
            sim.nodes[n].engine.destroy(h, 0);
        }
    }
    sim.check_clean(c)?;
    sim.check_clean(s)?;
    hist.borrow().check()
}

#[test]
fn chaos_with_corrupted_mads() {
    for_seeds("chaos_with_corrupted_mads", chaos);
}

// ----------------------------------------------------------- table pressure

/// Table pressure (admission policy, docs/RELIABILITY.md): three hosts
/// flood the server with REQs asking for the longest waits a REQ can ask
/// for (LocalCMResponseTimeout 31, MaxCMRetries 15: 37 hours of REP
/// retries in the kernel), never answer a REP and vanish; then a real
/// client connects. The half-open table (8) and the per-source quota (4)
/// hold at every event, the client gets in, every flood entry ends by
/// eviction or by the passive side's own capped wait (16 × 4096 ms), and
/// nothing leaks.
fn table_pressure(seed: u64, trace: bool, faults: Faults) -> Result<(), String> {
    const CAP: u32 = 8;
    const QUOTA: u32 = 4;
    const PER_ATTACKER: u32 = 6;
    let mut sim = Sim::new(seed, faults);
    sim.tracing = trace;
    let s = sim.add_node(0x2222, |c| {
        c.max_half_open = CAP;
        c.max_half_open_per_source = QUOTA;
    });
    let attackers: Vec<usize> = (0..3).map(|i| sim.add_node(0x3000 + i, |_| {})).collect();
    let c = sim.add_node(0x1111, |_| {});
    let attacker_gids: Vec<ibcm::wire::Gid> = attackers.iter().map(|&a| sim.nodes[a].gid).collect();
    let listener = listen(&mut sim, s);
    let hist = RefCell::new(History::default());
    #[derive(Default)]
    struct Out {
        errors: Vec<String>,
        admitted: u32,
        flood_ended: u32,
        last_flood_end: Option<Time>,
        client_est: u32,
        client_down: u32,
        server_client_est: u32,
        client_id: Option<Handle>,
    }
    let out = RefCell::new(Out::default());
    let qpn = Cell::new(0x100u32);
    let mut app = |ctx: &mut Ctx, input: Input| {
        let mut o = out.borrow_mut();
        let ev = match input {
            Input::Event(ev) => ev,
            Input::Wake(token) => {
                if let Err(e) = ctx.engine.send_dreq(ctx.now, Handle(token), &[]) {
                    o.errors.push(format!("send_dreq: {e}"));
                }
                return;
            }
        };
        hist.borrow_mut().record(ctx.node, &ev);
        let now = ctx.now;
        let e = &mut *ctx.engine;
        if ctx.node == s {
            if e.half_open() > CAP {
                o.errors
                    .push(format!("half-open {} > {CAP}", e.half_open()));
            }
            for g in &attacker_gids {
                if e.half_open_from(g) > QUOTA {
                    o.errors
                        .push(format!("{g}: {} > {QUOTA}", e.half_open_from(g)));
                }
            }
        }
        match (ctx.node, ev.kind) {
            (n, EventType::ReqReceived) if n == s => {
                o.admitted += 1;
                qpn.set(qpn.get() + 1);
                let rep = RepParams {
                    qp_num: qpn.get(),
                    starting_psn: 1,
                    responder_resources: 1,
                    initiator_depth: 1,
                    rnr_retry_count: 7,
                    ..RepParams::default()
                };
                if let Err(err) = e.send_rep(now, ev.id, &rep) {
                    o.errors.push(format!("send_rep: {err}"));
                }
            }
            (n, EventType::RepError) if n == s => {
                o.flood_ended += 1;
                o.last_flood_end = Some(now);
                e.destroy(ev.id, 0);
                hist.borrow_mut().destroy(n, ev.id);
            }
            (n, EventType::RtuReceived) if n == s => o.server_client_est += 1,
            (n, EventType::DreqReceived) => {
                if let Err(err) = e.send_drep(now, ev.id, &[]) {
                    o.errors.push(format!("send_drep: {err}"));
                }
                if n == c {
                    o.client_down += 1;
                }
            }
            (n, EventType::DrepReceived) if n == c => o.client_down += 1,
            (n, EventType::TimewaitExit) => {
                e.destroy(ev.id, 0);
                hist.borrow_mut().destroy(n, ev.id);
            }
            (n, EventType::RepReceived) if n == c => {
                if let Err(err) = e.send_rtu(ev.id, &[]) {
                    o.errors.push(format!("send_rtu: {err}"));
                }
                o.client_est += 1;
                ctx.wake_at(now.plus_millis(20), ev.id.0);
            }
            // The flooders never answer.
            (n, EventType::RepReceived) if n != c => {}
            (n, k) => o.errors.push(format!("n{n} unexpected {}", k.name())),
        }
    };
    // The flood, then the flooders vanish (their MADs never leave again).
    let t_flood = sim.now;
    let mut flood_ids = Vec::new();
    for (i, &a) in attackers.iter().enumerate() {
        let mut p = req_params(&sim, a, s, b"", 0x1000 * (i as u32 + 1), 15);
        p.local_cm_response_timeout = 31;
        p.remote_cm_response_timeout = 31;
        for k in 0..PER_ATTACKER {
            p.qp_num += k;
            let id = sim.with_node(a, &mut app, |ctx| {
                let id = ctx.engine.create_id().unwrap();
                ctx.engine.send_req(ctx.now, id, &p).unwrap();
                id
            });
            flood_ids.push((a, id));
        }
    }
    sim.run(t_flood.plus_millis(50), &mut app);
    for (a, id) in flood_ids {
        sim.nodes[a].up = false;
        sim.nodes[a].engine.destroy(id, 0);
    }
    // A real client while the table is full of flood entries.
    let params = req_params(&sim, c, s, b"", 0x77, 15);
    let cid = sim.with_node(c, &mut app, |ctx| start_req(ctx, &params));
    out.borrow_mut().client_id = Some(cid);
    finish(&mut sim, &hist, &mut app)?;
    let o = out.borrow();
    if !o.errors.is_empty() {
        return Err(o.errors.join("; "));
    }
    if o.client_est != 1 || o.client_down != 1 {
        return Err(format!(
            "client established {} disconnected {}",
            o.client_est, o.client_down
        ));
    }
    let flood_admitted = o.admitted - 1;
    let evicted = sim.nodes[s].engine.counters().half_open_evicted as u32;
    if evicted < (o.admitted).saturating_sub(CAP) {
        return Err(format!("{evicted} evicted of {} admitted", o.admitted));
    }
    if faults.lossless() && faults.duplicate == 0.0 && evicted != 11 {
        return Err(format!("lossless: {evicted} evicted, expected 11"));
    }
    // The client's own entry may be the one the RTU loss ends, so count
    // flood endings only against flood admissions.
    if o.flood_ended < flood_admitted {
        return Err(format!(
            "{} flood entries ended of {flood_admitted}",
            o.flood_ended
        ));
    }
    // The passive side's capped wait: (1 + 15) × 4096 ms, not 37 hours.
    let bound = t_flood.plus_millis(16 * 4096 + 1000);
    if let Some(t) = o.last_flood_end
        && t > bound
    {
        return Err(format!("a flood entry lived until {t:?} (bound {bound:?})"));
    }
    sim.nodes[s].engine.destroy(listener, 0);
    for n in [s, c].into_iter().chain(attackers.iter().copied()) {
        sim.check_clean(n)?;
    }
    if sim.nodes[s].engine.admission_sizes().0 != 0 {
        return Err("admission still counts sources".into());
    }
    Ok(())
}

on_clean_and_faulty_fabric! {
    table_pressure: table_pressure_clean_fabric, table_pressure_faulty_fabric, salt 0x7ab1e;
}
