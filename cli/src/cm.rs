//! `ibcm listen` and `ibcm connect`: establish connections, exchange private
//! data, disconnect, print every event and the counters (like librdmacm's
//! ucmatose, at the CM level). With `--rdma-cm` they speak to rdma_cm peers
//! (the IP private-data header and port spaces of `docs/CM_RULES.md`
//! §rdma-cm), with `--sidr` they do service ID resolution (UD) instead.

use crate::args;
use ibcm::api::{
    CmId, Device, DeviceOptions, Errno, Event, EventParam, EventType, Gid, RepParams, ReqParams,
    RustHandler, SidrRepParams, SidrReqParams, qp_type,
};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ibcm::cma::{self, IpHeader, RDMA_UDP_QKEY, port_space};

/// Options shared by `ibcm listen` and `ibcm connect`.
#[derive(clap::Args, Debug)]
pub struct Common {
    /// the device: soft:<ip>[:<udp port>], soft:<ip>@<rdma device>,
    /// loop:<ip> or an RDMA device name ('ibcm devices' lists them)
    #[arg(
        short = 'd',
        long,
        value_name = "DEVICE",
        env = "IBCM_DEVICE",
        default_value = "soft:127.0.0.1",
        value_parser = args::device
    )]
    pub device: String,
    /// the service ID, decimal or 0x hex (default: the rdma_cm service ID
    /// of --port)
    #[arg(short = 's', long, value_name = "ID", value_parser = args::u64_hex_or_dec)]
    pub service_id: Option<u64>,
    /// the rdma_cm service ID of port P (TCP port space; UDP with --sidr):
    /// 0x10600000000 | P (0x11100000000 | P); default 7174
    #[arg(long, value_name = "P", value_parser = args::port, conflicts_with = "service_id")]
    pub port: Option<u16>,
    /// how many connections (SIDR requests)
    #[arg(short = 'c', long, value_name = "N", default_value_t = 1)]
    pub count: u32,
    /// private data for every message that carries it
    #[arg(short = 'p', long, value_name = "TEXT", default_value = "")]
    pub private_data: OsString,
    /// give up waiting after SEC seconds (fractions allowed)
    #[arg(short = 't', long, value_name = "SEC", default_value = "30", value_parser = args::seconds)]
    pub timeout: Duration,
    /// print only the counters and the result, not every event
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// The long description in `ibcm listen --help`.
pub const LISTEN_ABOUT: &str = "\
Listens on a service ID (default 0x1061c06, rdma_cm TCP port 7174), accepts
N connections (default 1) with the private data given, answers their
disconnect, prints every event, then the counters. With --reject REASON
every request is rejected with that reason instead. --count 0 serves until
the timeout or SIGINT/SIGTERM (exit 0): requests for other service IDs are
rejected (REJ 8).";

/// `ibcm listen`'s command line.
#[derive(clap::Args, Debug)]
#[command(override_usage = "\
ibcm listen [--device soft:IP] [--service-id ID | --port P] [--count N]
                   [--private-data TEXT] [--reject REASON]
                   [--disconnect | --disconnect-delay MS]
                   [--rdma-cm] [--sidr [--qkey Q]] [--timeout SEC] [--quiet]")]
pub struct ListenArgs {
    #[command(flatten)]
    pub common: Common,
    /// reject every request with this reason (with --sidr: answer with
    /// this SIDR status)
    #[arg(long, value_name = "REASON")]
    pub reject: Option<u32>,
    /// send the DREQ as soon as a connection is established
    #[arg(long)]
    pub disconnect: bool,
    /// send the DREQ MS milliseconds after the connection is established
    /// (implies --disconnect)
    #[arg(long, value_name = "MS", value_parser = args::millis)]
    pub disconnect_delay: Option<Duration>,
    /// decode the rdma_cm IP header of the requests' private data
    #[arg(long)]
    pub rdma_cm: bool,
    /// answer SIDR_REQs with a SIDR_REP (status 0, or --reject's value as
    /// the SIDR status) instead of accepting connections
    #[arg(long)]
    pub sidr: bool,
    /// the Q_Key of the SIDR_REPs (default: rdma_cm's RDMA_UDP_QKEY)
    #[arg(long, value_name = "Q", default_value = "0x01234567", value_parser = args::u32_hex_or_dec)]
    pub qkey: u32,
}

/// The long description in `ibcm connect --help`.
pub const CONNECT_ABOUT: &str = "\
Connects N times (default 1) to a listener at IP, sends the private data in
the REQ, RTU and DREQ, prints every event with its timing, disconnects, and
prints the counters.";

/// `ibcm connect`'s command line.
#[derive(clap::Args, Debug)]
#[command(override_usage = "\
ibcm connect --dest IP [--device soft:IP] [--service-id ID | --port P]
                    [--count N] [--private-data TEXT] [--rdma-cm] [--sidr]
                    [--wait-disconnect] [--expect-reject REASON]
                    [--response-timeout T] [--qpn QPN] [--timeout SEC] [--quiet]")]
pub struct ConnectArgs {
    /// the listener's IP address
    #[arg(long, value_name = "IP", value_parser = args::dest)]
    pub dest: Gid,
    #[command(flatten)]
    pub common: Common,
    /// put the rdma_cm IP header (version 0, IPv4/6, source port, source
    /// and destination address) before the private data, as rdma_connect()
    /// does
    #[arg(long)]
    pub rdma_cm: bool,
    /// resolve the service ID (SIDR_REQ) instead of connecting; success is
    /// a SIDR_REP with status 0
    #[arg(long)]
    pub sidr: bool,
    /// do not send the DREQ: wait for the peer's and answer it
    #[arg(long)]
    pub wait_disconnect: bool,
    /// success is the peer rejecting with reason R (SIDR: a SIDR_REP with
    /// status R)
    #[arg(long, value_name = "R")]
    pub expect_reject: Option<u32>,
    /// the REQ's CM response timeouts (IBA exponent 8..31, default 20 =
    /// 4.3 s; 16 makes the REQ retransmit after ~0.4 s)
    #[arg(long, value_name = "T", default_value = "20", value_parser = response_timeout)]
    pub response_timeout: u8,
    /// the QP number the first REQ announces, the next ones +1 each (24
    /// bits; default: a range of this process's). Two connections naming
    /// one QP of one CA make the older one stale: its CM disconnects it
    /// and the newer one is rejected (STALE_CONN, 10)
    #[arg(long, value_name = "QPN", value_parser = qpn)]
    pub qpn: Option<u32>,
}

fn qpn(s: &str) -> Result<u32, String> {
    match args::u64_hex_or_dec(s)? {
        v @ 1..=0xff_ffff => Ok(v as u32),
        v => Err(format!("a QP number from 1 to 0xffffff, not {v}")),
    }
}

fn response_timeout(s: &str) -> Result<u8, String> {
    match args::u64_hex_or_dec(s)? {
        v @ 8..=31 => Ok(v as u8),
        v => Err(format!("an IBA timeout exponent from 8 to 31, not {v}")),
    }
}

/// What both commands run with.
struct Opts {
    device: String,
    dest: Option<Gid>,
    service_id: Option<u64>,
    port: Option<u16>,
    count: u32,
    private_data: Vec<u8>,
    reject: Option<u32>,
    timeout: Duration,
    quiet: bool,
    rdma_cm: bool,
    sidr: bool,
    qkey: u32,
    disconnect: bool,
    disconnect_delay: Duration,
    wait_disconnect: bool,
    expect_reject: Option<u32>,
    response_timeout: u8,
    qpn: Option<u32>,
}

impl Opts {
    fn common(c: &Common, rdma_cm: bool, sidr: bool) -> Opts {
        Opts {
            device: c.device.clone(),
            dest: None,
            service_id: c.service_id,
            port: c.port,
            count: c.count,
            private_data: c.private_data.as_bytes().to_vec(),
            reject: None,
            timeout: c.timeout,
            quiet: c.quiet,
            rdma_cm,
            sidr,
            qkey: RDMA_UDP_QKEY,
            disconnect: false,
            disconnect_delay: Duration::ZERO,
            wait_disconnect: false,
            expect_reject: None,
            response_timeout: 20,
            qpn: None,
        }
    }

    fn listen(a: &ListenArgs) -> Opts {
        Opts {
            reject: a.reject,
            qkey: a.qkey,
            disconnect: a.disconnect || a.disconnect_delay.is_some(),
            disconnect_delay: a.disconnect_delay.unwrap_or(Duration::ZERO),
            ..Opts::common(&a.common, a.rdma_cm, a.sidr)
        }
    }

    fn connect(a: &ConnectArgs) -> Opts {
        Opts {
            dest: Some(a.dest),
            wait_disconnect: a.wait_disconnect,
            expect_reject: a.expect_reject,
            response_timeout: a.response_timeout,
            qpn: a.qpn,
            ..Opts::common(&a.common, a.rdma_cm, a.sidr)
        }
    }

    /// The service ID: `--service-id`, else the rdma_cm service ID of
    /// `--port` (TCP port space, UDP with `--sidr`), else rdma_cm TCP 7174.
    fn service_id(&self) -> u64 {
        let ps = if self.sidr {
            port_space::UDP
        } else {
            port_space::TCP
        };
        self.service_id
            .unwrap_or(cma::service_id(ps, self.port.unwrap_or(7174)))
    }
}

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

/// One event as `[ms since start] comm-id description` on stdout.
fn print_event(start: Instant, id: &CmId, ev: &Event, rdma_cm: bool) {
    println!(
        "[{:>9.3} ms] {:#010x} {}",
        start.elapsed().as_secs_f64() * 1e3,
        id.local_id(),
        describe(ev, rdma_cm)
    );
}

fn describe(ev: &Event, rdma_cm: bool) -> String {
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
                ibcm::api::reject_msg(*reason as i32)
            )
        }
        EventParam::Mra { service_timeout } => s += &format!(" service_timeout={service_timeout}"),
        EventParam::SendStatus(st) => s += &format!(" status={st}"),
        EventParam::SidrReq(p) => s += &format!(" service={:#x}", p.service_id),
        EventParam::SidrRep(p) => {
            s += &format!(" status={} qpn={:#x} qkey={:#x}", p.status, p.qpn, p.qkey)
        }
        _ => {}
    }
    if let Some(pd) = ev.private_data() {
        let request = matches!(ev.kind, EventType::ReqReceived | EventType::SidrReqReceived);
        if rdma_cm && request {
            match IpHeader::parse(pd) {
                Ok((h, user)) => {
                    s += &format!(
                        " rdma_cm={}:{}->{} private_data={}",
                        h.src,
                        h.src_port,
                        h.dst,
                        show(user)
                    )
                }
                Err(e) => s += &format!(" rdma_cm_header_invalid=({e}) private_data={}", show(pd)),
            }
        } else {
            s += &format!(" private_data={}", show(pd));
        }
    }
    s
}

fn open(dev: &str) -> Result<Arc<Device>, i32> {
    Device::open(dev, DeviceOptions::default()).map_err(|e: Errno| {
        eprintln!("ibcm: cannot open {dev}: {e} ('ibcm devices' lists the devices this host has)");
        1
    })
}

/// Added to this process's QP numbers on a device the CM service shares:
/// processes there share one CA GUID, and the CM takes a second
/// connection from the same (CA GUID, QPN) for a stale one (REJ 10), as
/// a real device never hands out one QPN twice.
fn qpn_offset(dev: &Device) -> u32 {
    if dev.is_served() {
        0x10000 * (1 + std::process::id() % 200)
    } else {
        0
    }
}

fn print_counters(dev: &Device) {
    eprint!("counters ({}):\n{}", dev.name(), dev.counters().report());
}

// ------------------------------------------------------------------ listen

/// Set by SIGINT / SIGTERM: `ibcm listen` stops waiting, prints the
/// counters and exits as if the wait had ended.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Waits for the next completion until `until`, waking up to notice `STOP`.
fn next_done(rx: &mpsc::Receiver<u32>, until: Instant) -> Option<u32> {
    loop {
        let left = until.checked_duration_since(Instant::now())?;
        if STOP.load(Ordering::Relaxed) {
            return None;
        }
        if let Ok(code) = rx.recv_timeout(left.min(Duration::from_millis(50))) {
            return Some(code);
        }
    }
}

pub fn listen_main(a: &ListenArgs) -> i32 {
    let o = Opts::listen(a);
    let Ok(dev) = open(&o.device) else { return 1 };
    let service_id = o.service_id();
    let start = Instant::now();
    let (tx, rx) = mpsc::channel::<u32>();
    let tx = Mutex::new(tx);
    let pd = o.private_data.clone();
    let reject = o.reject;
    let quiet = o.quiet;
    let rdma_cm = o.rdma_cm;
    let disconnect = o.disconnect;
    let disconnect_delay = o.disconnect_delay;
    let qkey = o.qkey;
    let accepted = std::sync::atomic::AtomicU32::new(0);
    let qpn_base = qpn_offset(&dev);
    let handler: RustHandler = Arc::new(move |id: &CmId, ev: &Event| {
        if !quiet {
            print_event(start, id, ev, rdma_cm);
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
                    qp_num: qpn_base + 0x1000 + n,
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
            EventType::SidrReqReceived => {
                let n = accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // Like rdma_cm: a refusal carries no QPN and Q_Key.
                let (qp_num, qkey) = match reject {
                    None => (0x1000 + n, qkey),
                    Some(_) => (0, 0),
                };
                let rep = SidrRepParams {
                    qp_num,
                    qkey,
                    status: reject.unwrap_or(0),
                    private_data: pd.clone(),
                    ..SidrRepParams::default()
                };
                let code = match id.send_sidr_rep(&rep) {
                    Ok(()) => reject.map_or(0, |_| 1),
                    Err(e) => {
                        eprintln!("ibcm listen: SIDR_REP failed: {e}");
                        2
                    }
                };
                done(code);
                return 1; // SIDR is over: destroy the id
            }
            EventType::RtuReceived | EventType::UserEstablished if disconnect => {
                let dreq = |id: &CmId, pd: &[u8]| {
                    if let Err(e) = id.send_dreq(pd) {
                        eprintln!("ibcm listen: DREQ failed: {e}");
                    }
                };
                if disconnect_delay.is_zero() {
                    dreq(id, &pd);
                } else {
                    // Not in the callback: it runs on the device's event loop.
                    let (id, pd) = (id.clone(), pd.clone());
                    std::thread::spawn(move || {
                        std::thread::sleep(disconnect_delay);
                        dreq(&id, &pd);
                    });
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
    if let Err(e) = listener.listen(service_id) {
        eprintln!("ibcm listen: cannot listen on {service_id:#x}: {e}");
        return 1;
    }
    println!(
        "listening on {} service {:#018x} for {} {}",
        dev.name(),
        service_id,
        o.count,
        if o.sidr {
            "SIDR request(s)"
        } else {
            "connection(s)"
        }
    );
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        let h = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGINT, h);
        libc::signal(libc::SIGTERM, h);
    }
    let mut finished = 0;
    let mut failed = 0;
    if o.count == 0 {
        // Serve until the timeout (or a signal): whatever arrives is
        // counted, nothing fails.
        let until = Instant::now() + o.timeout;
        while Instant::now() < until && !STOP.load(Ordering::Relaxed) {
            if next_done(&rx, until).is_some() {
                finished += 1;
            }
        }
    }
    while finished < o.count {
        match next_done(&rx, Instant::now() + o.timeout) {
            Some(code) => {
                finished += 1;
                if code != 0 && reject.is_none() {
                    failed += 1;
                }
            }
            None => {
                let why = if STOP.load(Ordering::Relaxed) {
                    "stopped by a signal".to_string()
                } else {
                    format!("timed out after {:?}", o.timeout)
                };
                eprintln!("ibcm listen: {why} ({finished} of {} done)", o.count);
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
    println!(
        "{finished} {} handled, {failed} failed",
        if o.sidr {
            "SIDR request(s)"
        } else {
            "connection(s)"
        }
    );
    (failed > 0) as i32
}

// ----------------------------------------------------------------- connect

/// What the connect loop waits for: (local id, event, reject reason or
/// SIDR status).
type Note = (u32, EventType, u32);

pub fn connect_main(a: &ConnectArgs) -> i32 {
    let o = Opts::connect(a);
    let Ok(dev) = open(&o.device) else { return 1 };
    let dest = o.dest.unwrap();
    let path = match dev.init_path(1, dest) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ibcm connect: no path to {}: {e}", dest.to_ip());
            return 1;
        }
    };
    let service_id = o.service_id();
    let start = Instant::now();
    let (tx, rx) = mpsc::channel::<Note>();
    let tx = Mutex::new(tx);
    let quiet = o.quiet;
    let pd = o.private_data.clone();
    let handler: RustHandler = Arc::new(move |id: &CmId, ev: &Event| {
        if !quiet {
            print_event(start, id, ev, false);
        }
        let mut aux = 0;
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
        match &ev.param {
            EventParam::Rej { reason, .. } => aux = *reason,
            EventParam::SidrRep(p) => aux = p.status,
            _ => {}
        }
        let _ = tx.lock().unwrap().send((id.local_id(), ev.kind, aux));
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
        let private_data = if o.rdma_cm {
            // An ephemeral-looking source port, as rdma_bind_addr(port 0) picks.
            let sport = 32768 + (id.local_id() as u16 % 28000);
            let h = IpHeader {
                src_port: sport,
                src: path.sgid.to_ip(),
                dst: dest.to_ip(),
            };
            match h.with_user_data(&o.private_data) {
                Ok(pd) => pd,
                Err(e) => {
                    eprintln!("ibcm connect: rdma_cm header: {e}");
                    let _ = id.destroy();
                    break;
                }
            }
        } else {
            o.private_data.clone()
        };
        let sent = if o.sidr {
            let req = SidrReqParams {
                path,
                service_id,
                timeout_ms: 1 << (o.response_timeout - 8),
                private_data,
                max_cm_retries: 15,
                ..SidrReqParams::default()
            };
            id.send_sidr_req(&req)
        } else {
            let req = ReqParams {
                primary_path: path,
                service_id,
                qp_num: o.qpn.unwrap_or(qpn_offset(&dev) + 0x2000).wrapping_add(i) & 0xff_ffff,
                qp_type: qp_type::RC,
                starting_psn: (id.local_id() & 0xff_ffff) ^ 0xa5a5a5,
                private_data,
                responder_resources: 1,
                initiator_depth: 1,
                remote_cm_response_timeout: o.response_timeout,
                local_cm_response_timeout: o.response_timeout,
                retry_count: 7,
                rnr_retry_count: 7,
                max_cm_retries: 15,
                ..ReqParams::default()
            };
            id.send_req(&req)
        };
        if let Err(e) = sent {
            eprintln!("ibcm connect: request failed: {e}");
            let _ = id.destroy();
            break;
        }
        let wait = |want: &[EventType]| -> Option<(EventType, u32)> {
            let deadline = Instant::now() + o.timeout;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok((lid, k, aux)) if lid == id.local_id() && want.contains(&k) => {
                        return Some((k, aux));
                    }
                    Ok(_) => continue,
                    Err(_) => return None,
                }
            }
        };
        use EventType::*;
        let name = |r: Option<(EventType, u32)>| r.map_or("timed out", |(k, _)| k.name());
        if o.sidr {
            match wait(&[SidrRepReceived, SidrReqError]) {
                Some((SidrRepReceived, status)) if Some(status) == o.expect_reject => ok += 1,
                Some((SidrRepReceived, 0)) if o.expect_reject.is_none() => ok += 1,
                Some((SidrRepReceived, status)) => {
                    eprintln!("ibcm connect: SIDR {i}: status {status}")
                }
                other => eprintln!("ibcm connect: SIDR {i} failed: {}", name(other)),
            }
            let _ = id.destroy();
            continue;
        }
        match (wait(&[RepReceived, RejReceived, ReqError]), o.expect_reject) {
            (Some((RepReceived, _)), None) => {}
            (Some((RejReceived, reason)), Some(want)) if reason == want => {
                ok += 1;
                let _ = id.destroy();
                continue;
            }
            (other, _) => {
                eprintln!("ibcm connect: connection {i} failed: {}", name(other));
                let _ = id.destroy();
                continue;
            }
        }
        if o.wait_disconnect {
            match wait(&[DreqReceived]) {
                Some(_) => ok += 1,
                None => eprintln!("ibcm connect: connection {i}: the peer did not disconnect"),
            }
        } else {
            if let Err(e) = id.send_dreq(&o.private_data) {
                eprintln!("ibcm connect: DREQ failed: {e}");
            }
            match wait(&[DrepReceived, DreqError, DreqReceived]) {
                Some(_) => ok += 1,
                None => eprintln!("ibcm connect: no answer to the disconnect of connection {i}"),
            }
        }
        let _ = id.destroy();
    }
    print_counters(&dev);
    dev.close();
    let what = match (o.sidr, o.expect_reject.is_some()) {
        (true, false) => "service ID resolution(s) answered",
        (true, true) => "service ID resolution(s) refused as expected",
        (false, true) => "connection(s) rejected as expected",
        (false, false) => "connection(s) established and disconnected",
    };
    println!("{ok} of {} {what}", o.count);
    (ok != o.count) as i32
}
