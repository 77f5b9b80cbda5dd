//! Runs N engine-only handshakes (REQ/REP/RTU, then teardown) between two
//! in-process engines and prints the connect and teardown rates; under `valgrind --tool=callgrind`
//! it gives a noise-free instruction count per handshake.
//!
//!     cargo run --release --example engine_loop -- 200000 [batch]

use ibcm::engine::*;
use ibcm::wire::Gid;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let ga: Gid = "10.0.0.1".parse().unwrap();
    let gb: Gid = "10.0.0.2".parse().unwrap();
    let mut ca = EngineConfig::new(0xa, vec![PortInfo::roce(1, ga)]);
    ca.max_half_open = 0;
    let mut cb = EngineConfig::new(0xb, vec![PortInfo::roce(1, gb)]);
    cb.max_half_open = 0;
    let mut a = Engine::standalone(ca, 1);
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
    let sa = MadSource {
        port: 1,
        sgid: gb,
        dgid: ga,
        has_grh: true,
        pkey: 0xffff,
        src_qp: 1,
        ..MadSource::default()
    };
    let sb = MadSource {
        port: 1,
        sgid: ga,
        dgid: gb,
        has_grh: true,
        pkey: 0xffff,
        src_qp: 1,
        ..MadSource::default()
    };
    let mut p = ReqParams {
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
    let mut rep = RepParams {
        qp_num: 0x22,
        starting_psn: 2,
        ..RepParams::default()
    };
    let now = Time::from_millis(1000);
    // Batches of 4096: connect them all (timed as "connect"), then tear
    // them all down (timed as "teardown"), then let timewait expire.
    // `engine_loop N 1` gives the hot-cache figure (one connection at a
    // time); the default keeps 4096 connections live per batch.
    let batch_n: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(4096)
        .max(1);
    let (mut t_conn, mut t_down) = (0f64, 0f64);
    let mut ids = Vec::with_capacity(batch_n as usize);
    let mut i = 0u64;
    while i < n {
        let m = batch_n.min(n - i);
        ids.clear();
        let t = std::time::Instant::now();
        for _ in 0..m {
            p.qp_num = (i as u32 + 1) & 0xff_ffff;
            rep.qp_num = p.qp_num;
            i += 1;
            let id = a.create_id().unwrap();
            a.send_req(now, id, &p).unwrap();
            let m = a.poll_transmit().unwrap();
            b.handle_mad(now, &sb, &m.mad).unwrap();
            let ev = b.poll_event().unwrap();
            b.send_rep(now, ev.id, &rep).unwrap();
            let m = b.poll_transmit().unwrap();
            a.handle_mad(now, &sa, &m.mad).unwrap();
            let _ = a.poll_event().unwrap();
            a.send_rtu(id, &[]).unwrap();
            let m = a.poll_transmit().unwrap();
            b.handle_mad(now, &sb, &m.mad).unwrap();
            let _ = b.poll_event().unwrap();
            while a.poll_change().is_some() {}
            while b.poll_change().is_some() {}
            ids.push((id, ev.id));
        }
        t_conn += t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        for &(x, y) in &ids {
            a.destroy(x, 0);
            b.destroy(y, 0);
            while a.poll_transmit().is_some() {}
            while b.poll_transmit().is_some() {}
            while a.poll_change().is_some() {}
            while b.poll_change().is_some() {}
        }
        // Let timewait timers of torn-down connections expire.
        a.handle_timeout(Time::from_millis(1_000_000_000));
        b.handle_timeout(Time::from_millis(1_000_000_000));
        t_down += t.elapsed().as_secs_f64();
    }
    let r = |s: f64| n as f64 / s;
    println!(
        "{n} handshakes (REQ/REP/RTU, both sides on this core): {:.3} s, {:.0}/s, {:.0} ns each",
        t_conn,
        r(t_conn),
        t_conn * 1e9 / n as f64
    );
    println!(
        "{n} teardowns (destroy both ids, timewait expiry): {:.3} s, {:.0}/s; together {:.0}/s",
        t_down,
        r(t_down),
        r(t_conn + t_down)
    );
}
