//! Engine-only performance (criterion): full handshakes REQ/REP/RTU between
//! two in-process engines with no syscalls, connect + disconnect cycles,
//! and the id table under two threads.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ibcm::engine::*;
use ibcm::wire::Gid;
use std::hint::black_box;

fn pair() -> (Engine, Engine, PathRec, Handle) {
    let ga: Gid = "10.0.0.1".parse().unwrap();
    let gb: Gid = "10.0.0.2".parse().unwrap();
    let mut ca = EngineConfig::new(0xa, vec![PortInfo::roce(1, ga)]);
    ca.max_half_open = 0;
    let mut cb = EngineConfig::new(0xb, vec![PortInfo::roce(1, gb)]);
    cb.max_half_open = 0;
    let a = Engine::standalone(ca, 1);
    let mut b = Engine::standalone(cb, 2);
    let l = b.create_id().unwrap();
    b.listen(l, 0x1000).unwrap();
    let path = PathRec {
        dgid: gb,
        sgid: ga,
        hop_limit: 64,
        pkey: 0xffff,
        mtu: 3,
        packet_life_time: 16,
        rec_type: PathRecType::RoceV2,
        ..PathRec::default()
    };
    (a, b, path, l)
}

fn src(from: Gid, to: Gid) -> MadSource {
    MadSource {
        port: 1,
        sgid: from,
        dgid: to,
        has_grh: true,
        pkey: 0xffff,
        src_qp: 1,
        ..MadSource::default()
    }
}

/// One REQ/REP/RTU handshake, then both ids destroyed (no DREQ).
fn handshake(
    a: &mut Engine,
    b: &mut Engine,
    p: &ReqParams,
    rep: &RepParams,
    sa: &MadSource,
    sb: &MadSource,
    now: Time,
) {
    let id = a.create_id().unwrap();
    a.send_req(now, id, p).unwrap();
    let t = a.poll_transmit().unwrap();
    b.handle_mad(now, sb, &t.mad).unwrap();
    let ev = b.poll_event().unwrap();
    b.send_rep(now, ev.id, rep).unwrap();
    let t = b.poll_transmit().unwrap();
    a.handle_mad(now, sa, &t.mad).unwrap();
    let _ = a.poll_event().unwrap();
    a.send_rtu(id, &[]).unwrap();
    let t = a.poll_transmit().unwrap();
    b.handle_mad(now, sb, &t.mad).unwrap();
    let _ = b.poll_event().unwrap();
    while a.poll_change().is_some() {}
    while b.poll_change().is_some() {}
    // Tear down without protocol traffic: both ids forgotten.
    a.destroy(id, 0);
    b.destroy(ev.id, 0);
    while a.poll_transmit().is_some() {}
    while b.poll_transmit().is_some() {}
}

fn bench(c: &mut Criterion) {
    let (mut a, mut b, path, _l) = pair();
    let ga = path.sgid;
    let gb = path.dgid;
    let sa = src(gb, ga);
    let sb = src(ga, gb);
    let p = ReqParams {
        primary_path: path,
        service_id: 0x1000,
        qp_num: 0x11,
        qp_type: qp_type::RC,
        starting_psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        retry_count: 7,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        ..ReqParams::default()
    };
    let rep = RepParams {
        qp_num: 0x22,
        starting_psn: 2,
        ..RepParams::default()
    };
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(1));
    let mut qpn = 0u32;
    g.bench_function("handshake_req_rep_rtu", |bch| {
        bch.iter(|| {
            qpn = qpn.wrapping_add(1) & 0xff_ffff;
            let mut p2 = p.clone();
            p2.qp_num = qpn;
            handshake(
                &mut a,
                &mut b,
                black_box(&p2),
                &rep,
                &sa,
                &sb,
                Time::from_millis(1000),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
