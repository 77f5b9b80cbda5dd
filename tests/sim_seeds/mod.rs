//! What the simulation suites (`sim.rs`, `sim_destroy.rs`) share: the
//! seeds they run (`IBCM_SIM_SEEDS=N` sets how many per scenario, default
//! 200; `IBCM_SIM_SEED=S` replays one seed with a full trace) and the
//! events an id may see only once.

use ibcm::engine::EventType;

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
