//! What the simulation suites (`sim.rs`, `sim_destroy.rs`) share: the
//! seeds they run (`IBCM_SIM_SEEDS=N` sets how many per scenario, default
//! 200; `IBCM_SIM_SEED=S` replays one seed with a full trace), the events
//! an id may see only once and the REQ their connections start with.

use ibcm::engine::{EventType, ReqParams, qp_type};
use ibcm::sim::{Sim, sim_path};

/// The service ID the scenarios listen on and connect to.
pub const SERVICE: u64 = 0x0000_0000_0106_1c06;

/// An RC REQ from node `a` to node `b` of `sim` (QPN `qpn`, private data
/// `pdata`, `retries` retries): REQ every 2*convert(8) + convert(10) = 6
/// ms, REP every convert(10) = 4 ms.
pub fn req_params(sim: &Sim, a: usize, b: usize, pdata: &[u8], qpn: u32, retries: u8) -> ReqParams {
    ReqParams {
        primary_path: sim_path(sim, a, b, 8),
        service_id: SERVICE,
        qp_num: qpn,
        qp_type: qp_type::RC,
        starting_psn: 0x123456,
        private_data: pdata.to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: 10,
        local_cm_response_timeout: 10,
        retry_count: 7,
        rnr_retry_count: 7,
        max_cm_retries: retries,
        ..ReqParams::default()
    }
}

/// The events the CM delivers at most once to one id (a second one is a
/// duplicate that should have been dropped).
pub const ONCE_PER_ID: &[EventType] = &[
    EventType::ReqReceived,
    EventType::RepReceived,
    EventType::RtuReceived,
    EventType::UserEstablished,
    EventType::DrepReceived,
    EventType::TimewaitExit,
    EventType::SidrReqReceived,
    EventType::SidrRepReceived,
    EventType::ReqError,
    EventType::RepError,
    EventType::DreqError,
    EventType::SidrReqError,
    EventType::DreqReceived,
];

/// The seeds to run: 1..=N, or the one being replayed.
pub fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("IBCM_SIM_SEED") {
        return vec![s.parse().expect("IBCM_SIM_SEED")];
    }
    let n: u64 = std::env::var("IBCM_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    (1..=n).collect()
}

/// True when one seed is replayed (`IBCM_SIM_SEED`): runs print a trace.
pub fn replaying() -> bool {
    std::env::var("IBCM_SIM_SEED").is_ok()
}
