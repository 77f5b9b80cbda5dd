//! `ibcm ids` and `ibcm stat`: what the host CM service (`ibcm daemon`)
//! holds — every id on the host with its process, and every served
//! device's counters — as `rdma res show cm_id` shows the kernel CM's.

use std::path::PathBuf;

use ibcm::api::State;
use ibcm::wire::Gid;
use serde_json::{Value, json};

/// The long description in `ibcm ids --help`.
pub const IDS_ABOUT: &str = "\
Lists every id the host CM service (ibcm daemon) holds: the process that
owns it, the device, its state, local and remote comm IDs, service ID, the
peer's address (from the REQ sent or received) and its age. Processes that
open their devices in-process (IBCM_SERVICE=off) are not seen.";

/// The long description in `ibcm stat --help`.
pub const STAT_ABOUT: &str = "\
Prints the counters of every device the host CM service (ibcm daemon)
serves: processes using it, live ids, pending timers, the CM's counters
(messages sent and received per attribute, retries, timeouts, rejects,
drops by cause) and the transport's datagram counters.";

/// `ibcm ids` / `ibcm stat`'s command line.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// one JSON document instead of text
    #[arg(long)]
    pub json: bool,
    /// the service socket (default $IBCM_SERVICE_SOCKET, else /run/ibcm/ibcmd.<netns>.sock)
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

fn socket(a: &Args) -> PathBuf {
    a.socket.clone().unwrap_or_else(ibcm::ipc::socket_path)
}

fn state_name(s: u32) -> &'static str {
    State::ALL.get(s as usize).map_or("?", |s| s.name())
}

fn peer(g: Option<Gid>) -> String {
    g.map_or_else(|| "-".to_string(), |g| g.to_string())
}

fn print(v: &Value) -> i32 {
    match serde_json::to_string_pretty(v) {
        Ok(s) => {
            println!("{s}");
            0
        }
        Err(e) => {
            eprintln!("ibcm: {e}");
            1
        }
    }
}

pub fn ids_main(a: &Args) -> i32 {
    let path = socket(a);
    let ids = match ibcm::service::query_ids(&path) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("ibcm ids: no CM service at {}: {e}", path.display());
            return 1;
        }
    };
    if a.json {
        let v: Vec<Value> = ids
            .iter()
            .map(|i| {
                json!({
                    "pid": i.pid,
                    "device": String::from_utf8_lossy(&i.device),
                    "state": state_name(i.state),
                    "local_id": format!("{:#010x}", i.local_id),
                    "remote_id": format!("{:#010x}", i.remote_id),
                    "service_id": format!("{:#018x}", i.service_id),
                    "peer": i.peer.map(|g| g.to_string()),
                    "age_ms": i.age_ms,
                })
            })
            .collect();
        return print(&json!({ "ids": v }));
    }
    println!(
        "{:>7}  {:<24} {:<14} {:<10} {:<10} {:<18} {:<24} {:>9}",
        "PID", "DEVICE", "STATE", "LOCAL", "REMOTE", "SERVICE ID", "PEER", "AGE"
    );
    for i in &ids {
        println!(
            "{:>7}  {:<24} {:<14} {:#010x} {:#010x} {:#018x} {:<24} {:>8.1}s",
            i.pid,
            String::from_utf8_lossy(&i.device),
            state_name(i.state),
            i.local_id,
            i.remote_id,
            i.service_id,
            peer(i.peer),
            i.age_ms as f64 / 1000.0
        );
    }
    println!("{} id(s)", ids.len());
    0
}

pub fn stat_main(a: &Args) -> i32 {
    let path = socket(a);
    let devs = match ibcm::service::query_stat(&path) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("ibcm stat: no CM service at {}: {e}", path.display());
            return 1;
        }
    };
    if a.json {
        let v: Vec<Value> = devs
            .iter()
            .map(|d| {
                let c = &d.cm;
                let t = &d.transport;
                json!({
                    "device": String::from_utf8_lossy(&d.name),
                    "processes": d.clients,
                    "ids": d.ids,
                    "pending_timers": d.pending_timers,
                    "oneway_refused": d.oneway_refused,
                    "cm": {
                        "tx": c.tx, "rx": c.rx, "rx_duplicates": c.rx_duplicates,
                        "tx_retries": c.tx_retries, "timeouts": c.timeouts,
                        "rej_tx": c.rej_tx.to_vec(), "rej_rx": c.rej_rx.to_vec(),
                        "drops": c.drops, "ids_created": c.ids_created,
                        "ids_destroyed": c.ids_destroyed, "events": c.events,
                    },
                    "transport": {
                        "rx_datagrams": t.rx_datagrams, "tx_datagrams": t.tx_datagrams,
                        "rx_garbage": t.rx_garbage, "tx_errors": t.tx_errors,
                        "rx_errors": t.rx_errors, "tx_unroutable": t.tx_unroutable,
                    },
                })
            })
            .collect();
        return print(&json!({ "attributes": ibcm::engine::counters::ATTR_NAMES, "devices": v }));
    }
    for d in &devs {
        let t = &d.transport;
        println!(
            "{}: {} process(es), {} id(s), {} timer(s), {} one-way call(s) refused",
            String::from_utf8_lossy(&d.name),
            d.clients,
            d.ids,
            d.pending_timers,
            d.oneway_refused
        );
        print!("{}", d.cm.report());
        println!(
            "{:<14} rx={} tx={} garbage={} tx_errors={} rx_errors={} unroutable={}",
            "datagrams",
            t.rx_datagrams,
            t.tx_datagrams,
            t.rx_garbage,
            t.tx_errors,
            t.rx_errors,
            t.tx_unroutable
        );
    }
    if devs.is_empty() {
        println!("no device served");
    }
    0
}
