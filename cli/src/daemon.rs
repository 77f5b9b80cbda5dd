//! `ibcm daemon`: the host CM service (one CM per host). Without
//! `--foreground` it detaches (fork, setsid) once its socket listens, so
//! the command returns when the service is ready — what a process that
//! starts it on demand (`IBCM_SERVICE=auto`) waits for, at most
//! `IBCM_SERVICE_TIMEOUT_MS` before it kills the daemon's process group
//! (the forked service process joins a session of its own only once it
//! listens).

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use ibcm::service::{Limits, Options, Service, bind};

/// The long description in `ibcm daemon --help`.
pub const ABOUT: &str = "\
Runs the host CM service: it owns each device's CM transport (the UDP port
of a soft: address, the umad agent of an HCA port) and serves every process
that opens the device (IBCM_SERVICE=auto, the default, or required;
libibcm, Python, the CLI, ibcm::api). By default (IBCM_SERVICE_MODE=forward,
the process's choice) each process runs its devices' CM engines and the
service forwards their MADs, tracking every connection; with
IBCM_SERVICE_MODE=engine the engines run in the service. A device is served
one way at a time. Two processes can then use one device: one listener per
service ID on the host (-EBUSY for a second), connections between processes
on the device, and the connections of a process that exits or is killed end
at once (DREQ / REJ to their peers).

The socket is /run/ibcm/ibcmd.<N>.sock, N the inode of the network
namespace (one service per namespace; $IBCM_SERVICE_SOCKET or --socket
override), mode 0660 with group ibcm if that group exists, else 0600: who
may open it may use every device the service opens. Limits per process and device:
$IBCM_SERVICE_MAX_IDS, $IBCM_SERVICE_MAX_LISTENERS (-ENOMEM beyond),
$IBCM_SERVICE_MAX_EVENTS (unread events; beyond, the process is
disconnected); $IBCM_SERVICE_MAX_CONNECTIONS for all processes together.
Logs go to stderr (IBCM_LOG, default info for the service).";

/// `ibcm daemon`'s command line.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// stay in the foreground (logs on stderr); default: detach once ready
    #[arg(long)]
    pub foreground: bool,
    /// the service socket (default $IBCM_SERVICE_SOCKET, else /run/ibcm/ibcmd.<netns>.sock)
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// leave after SECS without any process connected (default: never)
    #[arg(long, value_name = "SECS")]
    pub idle_exit: Option<u64>,
    /// the service's scheduling policy: normal (SCHED_OTHER, the default)
    /// or batch (SCHED_BATCH: a service thread woken by a process's MAD or
    /// call does not preempt the process that woke it, it runs when that
    /// process waits or its time slice ends, taking what queued meanwhile
    /// in one go; it may then see a process's exit before a MAD for it
    /// that came first)
    #[arg(long, value_name = "POLICY", env = "IBCM_SERVICE_SCHED", default_value = "normal",
          value_parser = ["batch", "normal"])]
    pub sched: String,
}

/// Puts this thread (the only one yet; every thread the service starts
/// inherits it, the detached child too) under `policy`. A refusal is said
/// and the service goes on under the policy it has.
fn set_sched(policy: &str) {
    let p = if policy == "batch" {
        libc::SCHED_BATCH
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a valid sched_param; 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, p, &param) } != 0 {
        eprintln!(
            "ibcm daemon: scheduling policy {policy}: {} (kept the current one)",
            std::io::Error::last_os_error()
        );
    }
}

pub fn main(a: &Args) -> i32 {
    // A service logs what it does (opens, processes gone, limits) unless
    // told otherwise.
    if std::env::var_os("IBCM_LOG").is_none() {
        // SAFETY: no other thread exists yet.
        unsafe { std::env::set_var("IBCM_LOG", "info") };
    }
    set_sched(&a.sched);
    let socket = a.socket.clone().unwrap_or_else(ibcm::ipc::socket_path);
    let opts = Options {
        socket: socket.clone(),
        idle_exit: a.idle_exit.map(Duration::from_secs),
        limits: Limits::default(),
    };
    if a.foreground {
        return serve(opts, None);
    }
    // Detach: the child signals readiness (or its failure) on a pipe.
    let mut fds = [0; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        eprintln!("ibcm daemon: pipe: {}", std::io::Error::last_os_error());
        return 1;
    }
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!("ibcm daemon: fork: {}", std::io::Error::last_os_error());
            1
        }
        0 => {
            drop(rd);
            // Logs stay on stderr; nothing else of the caller's is kept.
            let null = c"/dev/null";
            let fd = unsafe { libc::open(null.as_ptr(), libc::O_RDWR) };
            if fd >= 0 {
                unsafe {
                    libc::dup2(fd, 0);
                    libc::dup2(fd, 1);
                    libc::close(fd);
                }
            }
            std::process::exit(serve(opts, Some(wr)));
        }
        _ => {
            drop(wr);
            let mut b = [0u8; 1];
            match std::fs::File::from(rd).read(&mut b) {
                Ok(1) => 0,
                _ => {
                    eprintln!("ibcm daemon: the service did not start");
                    1
                }
            }
        }
    }
}

fn serve(opts: Options, ready: Option<OwnedFd>) -> i32 {
    let listener = match bind(&opts.socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ibcm daemon: {}: {e}", opts.socket.display());
            return 1;
        }
    };
    if let Some(w) = ready {
        // Detached only now: until it listens the service process stays
        // in its starter's process group, so a starter that gives up
        // waiting (IBCM_SERVICE_TIMEOUT_MS) kills it with that group.
        unsafe { libc::setsid() };
        use std::io::Write;
        let _ = std::fs::File::from(w).write_all(b"1");
    }
    // SAFETY: no arguments; 0 is the calling thread.
    let policy = match unsafe { libc::sched_getscheduler(0) } {
        libc::SCHED_BATCH => "batch",
        libc::SCHED_OTHER => "normal",
        _ => "other",
    };
    eprintln!(
        "ibcm daemon: pid {} serving on {} (scheduling: {policy})",
        std::process::id(),
        opts.socket.display()
    );
    match Service::new(opts).run(listener) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ibcm daemon: {e}");
            1
        }
    }
}
