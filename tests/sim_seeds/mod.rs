//! The seeds the simulation suites (`sim.rs`, `sim_destroy.rs`) run:
//! `IBCM_SIM_SEEDS=N` sets how many per scenario (default 200);
//! `IBCM_SIM_SEED=S` replays one seed with a full trace.

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
