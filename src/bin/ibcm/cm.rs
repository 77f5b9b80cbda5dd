//! `ibcm listen` and `ibcm connect`: establish connections, exchange private
//! data, disconnect, print every event and the counters (like librdmacm's
//! ucmatose, at the CM level).

use crate::EXIT_USAGE;
use ibcm::engine::{Errno, Event, EventParam, EventType, RepParams, ReqParams, qp_type};
use ibcm::runtime::{CmId, Device, DeviceOptions, RustHandler};
use ibcm::wire::Gid;
use std::ffi::OsString;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Options shared by both commands.
struct Opts {
    device: String,
    dest: Option<Gid>,
    service_id: u64,
    count: u32,
    private_data: Vec<u8>,
    reject: Option<u32>,
    timeout: Duration,
    quiet: bool,
}

fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn parse(args: &[OsString], connect: bool) -> Result<Opts, String> {
    let mut o = Opts {
        device: std::env::var("IBCM_DEVICE").unwrap_or_else(|_| "soft:127.0.0.1".into()),
        dest: None,
        service_id: 0x0000_0000_0106_1c06,
        count: 1,
        private_data: Vec::new(),
        reject: None,
        timeout: Duration::from_secs(30),
        quiet: false,
    };
    let mut it = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "-d" | "--device" => o.device = val("--device")?,
            "--dest" if connect => {
                let v = val("--dest")?;
                o.dest = Some(
                    v.parse()
                        .map_err(|_| format!("--dest: not an IP address: {v}"))?,
                );
            }
            "-s" | "--service-id" => {
                let v = val("--service-id")?;
                o.service_id = parse_u64(&v).ok_or(format!("--service-id: not a number: {v}"))?;
            }
            "-c" | "--count" => {
                let v = val("--count")?;
                o.count = v
                    .parse()
                    .map_err(|_| format!("--count: not a number: {v}"))?;
            }
            "-p" | "--private-data" => o.private_data = val("--private-data")?.into_bytes(),
            "--reject" if !connect => {
                let v = val("--reject")?;
                o.reject = Some(
                    v.parse()
                        .map_err(|_| format!("--reject: not a number: {v}"))?,
                );
            }
            "-t" | "--timeout" => {
                let v = val("--timeout")?;
                let s: f64 = v
                    .parse()
                    .map_err(|_| format!("--timeout: not a number: {v}"))?;
                o.timeout = Duration::from_secs_f64(s.max(0.0));
            }
            "-q" | "--quiet" => o.quiet = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if connect && o.dest.is_none() {
        return Err("--dest is required".into());
    }
    Ok(o)
}

const LISTEN_USAGE: &str = "\
usage: ibcm listen [--device soft:IP] [--service-id ID] [--count N]
                   [--private-data TEXT] [--reject REASON] [--timeout SEC] [--quiet]

Listens on a service ID (default 0x1061c06, rdma_cm TCP port 7174), accepts
N connections (default 1) with the private data given, answers their
disconnect, prints every event, then the counters. With --reject REASON
every request is rejected with that reason instead.
";

const CONNECT_USAGE: &str = "\
usage: ibcm connect --dest IP [--device soft:IP] [--service-id ID] [--count N]
                    [--private-data TEXT] [--timeout SEC] [--quiet]

Connects N times (default 1) to a listener at IP, sends the private data in
the REQ, RTU and DREQ, prints every event with its timing, disconnects, and
prints the counters.
";

/// Printable private data: text when it is mostly text, else hex.
fn show(bytes: &[u8]) -> String {
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let b = &bytes[..end];
    if b.is_empty() {
        return "(none)".into();
    }
    if b.iter().all(|&c| (0x20..0x7f).contains(&c) || c == b'\n') {
        format!("{:?}", String::from_utf8_lossy(b))
    } else {
        format!("0x{}", ibcm::wire::hex(b))
    }
}

fn describe(ev: &Event) -> String {
    let mut s = ev.kind.name().to_string();
    match &ev.param {
        EventParam::Req(p) => {
            s += &format!(
                " from {} qpn={:#x} psn={:#x} service={:#x}",
                p.primary_path.dgid.to_ip(),
                p.remote_qpn,
                p.starting_psn,
                p.primary_path.service_id
            )
        }
        EventParam::Rep(p) => s += &format!(" qpn={:#x} psn={:#x}", p.remote_qpn, p.starting_psn),
        EventParam::Rej { reason, .. } => {
            s += &format!(
                " reason={reason} ({})",
                ibcm::ffi::reject_msg(*reason as i32)
            )
        }
        EventParam::Mra { service_timeout } => s += &format!(" service_timeout={service_timeout}"),
        EventParam::SendStatus(st) => s += &format!(" status={st}"),
        _ => {}
    }
    if let Some(pd) = ev.private_data() {
        s += &format!(" private_data={}", show(pd));
    }
    s
}

fn open(dev: &str) -> Result<Arc<Device>, i32> {
    Device::open(dev, DeviceOptions::default()).map_err(|e: Errno| {
        eprintln!("ibcm: cannot open {dev}: {e}");
        1
    })
}

fn print_counters(dev: &Device) {
    eprint!("counters ({}):\n{}", dev.name(), dev.counters().report());
}

// ------------------------------------------------------------------ listen

pub fn listen_main(args: &[OsString]) -> i32 {
    let o = match parse(args, false) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("ibcm listen: {e}\n");
            }
            eprint!("{LISTEN_USAGE}");
            return EXIT_USAGE;
        }
    };
    let Ok(dev) = open(&o.device) else { return 1 };
    let start = Instant::now();
    let (tx, rx) = mpsc::channel::<u32>();
    let tx = Mutex::new(tx);
    let pd = o.private_data.clone();
    let reject = o.reject;
    let quiet = o.quiet;
    let accepted = std::sync::atomic::AtomicU32::new(0);
    let handler: RustHandler = Arc::new(move |id: &CmId, ev: &Event| {
        if !quiet {
            println!(
                "[{:>9.3} ms] {:#010x} {}",
                start.elapsed().as_secs_f64() * 1e3,
                id.local_id(),
                describe(ev)
            );
        }
        let done = |code: u32| {
            let _ = tx.lock().unwrap().send(code);
        };
        match ev.kind {
            EventType::ReqReceived => {
                if let Some(reason) = reject {
                    let _ = id.send_rej(reason, &[], &pd);
                    done(1);
                    return 1; // destroy the new id (already rejected: IDLE)
                }
                let n = accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let rep = RepParams {
                    qp_num: 0x1000 + n,
                    starting_psn: (id.local_id() & 0xff_ffff) ^ 0x5a5a5a,
                    private_data: pd.clone(),
                    responder_resources: 1,
                    initiator_depth: 1,
                    rnr_retry_count: 7,
                    ..RepParams::default()
                };
                if let Err(e) = id.send_rep(&rep) {
                    eprintln!("ibcm listen: REP failed: {e}");
                    done(2);
                    return 1;
                }
            }
            EventType::DreqReceived => {
                let _ = id.send_drep(&pd);
            }
            EventType::TimewaitExit => {
                done(0);
                return 1; // destroy the finished connection
            }
            EventType::RepError | EventType::RejReceived => {
                done(2);
                return 1;
            }
            _ => {}
        }
        0
    });
    let listener = match dev.create_id(None, std::ptr::null_mut(), Some(handler)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ibcm listen: create_id: {e}");
            return 1;
        }
    };
    if let Err(e) = listener.listen(o.service_id) {
        eprintln!("ibcm listen: cannot listen on {:#x}: {e}", o.service_id);
        return 1;
    }
    println!(
        "listening on {} service {:#018x} for {} connection(s)",
        dev.name(),
        o.service_id,
        o.count
    );
    let mut finished = 0;
    let mut failed = 0;
    while finished < o.count {
        match rx.recv_timeout(o.timeout) {
            Ok(code) => {
                finished += 1;
                if code != 0 && reject.is_none() {
                    failed += 1;
                }
            }
            Err(_) => {
                eprintln!(
                    "ibcm listen: timed out after {:?} ({finished} of {} done)",
                    o.timeout, o.count
                );
                failed += o.count - finished;
                break;
            }
        }
    }
    let _ = listener.destroy();
    // The last handler signals before its id is destroyed: let it finish.
    let t = Instant::now();
    while dev.live_ids() > 0 && t.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(1));
    }
    print_counters(&dev);
    dev.close();
    println!("{finished} connection(s) handled, {failed} failed");
    (failed > 0) as i32
}

// ----------------------------------------------------------------- connect

pub fn connect_main(args: &[OsString]) -> i32 {
    let o = match parse(args, true) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("ibcm connect: {e}\n");
            }
            eprint!("{CONNECT_USAGE}");
            return EXIT_USAGE;
        }
    };
    let Ok(dev) = open(&o.device) else { return 1 };
    let dest = o.dest.unwrap();
    let path = match ibcm::ffi::init_path(&dev, 1, dest) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ibcm connect: no path to {}: {e}", dest.to_ip());
            return 1;
        }
    };
    let start = Instant::now();
    let (tx, rx) = mpsc::channel::<(u32, EventType)>();
    let tx = Mutex::new(tx);
    let quiet = o.quiet;
    let pd = o.private_data.clone();
    let handler: RustHandler = Arc::new(move |id: &CmId, ev: &Event| {
        if !quiet {
            println!(
                "[{:>9.3} ms] {:#010x} {}",
                start.elapsed().as_secs_f64() * 1e3,
                id.local_id(),
                describe(ev)
            );
        }
        match ev.kind {
            EventType::RepReceived => {
                if let Err(e) = id.send_rtu(&pd) {
                    eprintln!("ibcm connect: RTU failed: {e}");
                }
            }
            EventType::DreqReceived => {
                let _ = id.send_drep(&pd);
            }
            _ => {}
        }
        let _ = tx.lock().unwrap().send((id.local_id(), ev.kind));
        0
    });
    let mut ok = 0;
    for i in 0..o.count {
        let id = match dev.create_id(None, std::ptr::null_mut(), Some(handler.clone())) {
            Ok(id) => id,
            Err(e) => {
                eprintln!("ibcm connect: create_id: {e}");
                break;
            }
        };
        let req = ReqParams {
            primary_path: path,
            service_id: o.service_id,
            qp_num: 0x2000 + i,
            qp_type: qp_type::RC,
            starting_psn: (id.local_id() & 0xff_ffff) ^ 0xa5a5a5,
            private_data: o.private_data.clone(),
            responder_resources: 1,
            initiator_depth: 1,
            remote_cm_response_timeout: 20,
            local_cm_response_timeout: 20,
            retry_count: 7,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            ..ReqParams::default()
        };
        if let Err(e) = id.send_req(&req) {
            eprintln!("ibcm connect: REQ failed: {e}");
            let _ = id.destroy();
            break;
        }
        let wait = |want: &[EventType]| -> Option<EventType> {
            let deadline = Instant::now() + o.timeout;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok((lid, k)) if lid == id.local_id() && want.contains(&k) => return Some(k),
                    Ok(_) => continue,
                    Err(_) => return None,
                }
            }
        };
        use EventType::*;
        match wait(&[RepReceived, RejReceived, ReqError]) {
            Some(RepReceived) => {}
            other => {
                eprintln!(
                    "ibcm connect: connection {i} failed: {}",
                    other.map_or("timed out", |k| k.name())
                );
                let _ = id.destroy();
                continue;
            }
        }
        if let Err(e) = id.send_dreq(&o.private_data) {
            eprintln!("ibcm connect: DREQ failed: {e}");
        }
        match wait(&[DrepReceived, DreqError, DreqReceived]) {
            Some(_) => ok += 1,
            None => eprintln!("ibcm connect: no answer to the disconnect of connection {i}"),
        }
        let _ = id.destroy();
    }
    print_counters(&dev);
    dev.close();
    println!(
        "{ok} of {} connection(s) established and disconnected",
        o.count
    );
    (ok != o.count) as i32
}
