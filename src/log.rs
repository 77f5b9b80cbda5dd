//! Minimal leveled logging to stderr, off unless `IBCM_LOG` says otherwise
//! (`error`, `warn`, `info`, `debug`, `trace`, or a number 1-5).
//! Read once, lazily, so loading the library does no work.

use std::sync::atomic::{AtomicU8, Ordering};

pub const ERROR: u8 = 1;
pub const WARN: u8 = 2;
pub const INFO: u8 = 3;
pub const DEBUG: u8 = 4;
pub const TRACE: u8 = 5;

/// 0xff = not read yet.
static LEVEL: AtomicU8 = AtomicU8::new(0xff);

fn parse_level(s: &str) -> u8 {
    match s.trim().to_ascii_lowercase().as_str() {
        "" | "off" | "0" | "none" => 0,
        "error" | "1" => ERROR,
        "warn" | "warning" | "2" => WARN,
        "info" | "3" => INFO,
        "debug" | "4" => DEBUG,
        _ => TRACE,
    }
}

/// The current level (0 = off).
#[inline]
pub fn level() -> u8 {
    let l = LEVEL.load(Ordering::Relaxed);
    if l != 0xff {
        return l;
    }
    let l = std::env::var("IBCM_LOG")
        .map(|s| parse_level(&s))
        .unwrap_or(0);
    LEVEL.store(l, Ordering::Relaxed);
    l
}

/// Overrides the level (tests, CLI `-v`).
pub fn set_level(l: u8) {
    LEVEL.store(l, Ordering::Relaxed);
}

#[inline]
pub fn enabled(l: u8) -> bool {
    level() >= l
}

pub fn write(l: u8, args: std::fmt::Arguments<'_>) {
    write_to(&mut std::io::stderr().lock(), l, args);
}

/// One log line to `w` in one `write` call: the line is formatted first.
/// Formatting into stderr directly (`eprintln!`: stderr is unbuffered)
/// writes every piece of the format on its own, and the application's
/// own output to the same file can land between the pieces (seen: a
/// tool's "end 0" inside a debug line, which hid it from a line check).
/// A failed write is ignored: a log line must never abort the process.
fn write_to(w: &mut impl std::io::Write, l: u8, args: std::fmt::Arguments<'_>) {
    let tag = match l {
        ERROR => "error",
        WARN => "warn",
        INFO => "info",
        DEBUG => "debug",
        _ => "trace",
    };
    let line = format!("ibcm[{}] {tag}: {args}\n", std::process::id());
    let _ = w.write_all(line.as_bytes());
}

/// Writes a line even when `IBCM_LOG` is unset, for failures the caller
/// would otherwise see only as an errno (or not at all). `IBCM_LOG=off`
/// (or 0, none) silences it.
pub fn always(l: u8, args: std::fmt::Arguments<'_>) {
    let off = std::env::var("IBCM_LOG")
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "off" | "0" | "none"))
        .unwrap_or(false);
    if enabled(l) || !off {
        write(l, args);
    }
}

/// This process's pid, read once per process (glibc's `getpid` is a
/// system call: `rdma_resolve_addr` made 3.2 of them per id for its fork
/// checks) and read again in a forked child: a `pthread_atfork` child
/// handler, registered before the first read, clears it, so a child never
/// takes its parent's pid (nor what its parent owns) for its own. The one
/// pid cache of the library and of librdmacm (log lines keep their own
/// `getpid`: this warns through them).
pub fn pid() -> u32 {
    use std::sync::atomic::{AtomicBool, AtomicU32};
    static PID: AtomicU32 = AtomicU32::new(0);
    static ARMED: AtomicBool = AtomicBool::new(false);
    static AT_FORK: std::sync::Once = std::sync::Once::new();
    extern "C" fn forked_child() {
        PID.store(0, Ordering::Relaxed);
    }
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    AT_FORK.call_once(|| {
        // SAFETY: a child handler that only stores an atomic.
        let r = unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
        if r == 0 {
            ARMED.store(true, Ordering::Relaxed);
        } else {
            always(
                WARN,
                format_args!("pthread_atfork failed ({r}): the pid is read at every use"),
            );
        }
    });
    let p = std::process::id();
    // Kept only with the handler in place (else read at every use).
    if ARMED.load(Ordering::Relaxed) {
        PID.store(p, Ordering::Relaxed);
    }
    p
}

/// `ibcm_log!(WARN, "...", args)`.
#[macro_export]
macro_rules! ibcm_log {
    ($lvl:expr, $($arg:tt)*) => {
        if $crate::log::enabled($lvl) {
            $crate::log::write($lvl, format_args!($($arg)*));
        }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn levels() {
        assert_eq!(super::parse_level("debug"), super::DEBUG);
        assert_eq!(super::parse_level("off"), 0);
        assert_eq!(super::parse_level("2"), super::WARN);
    }

    /// A forked child reads its own pid through `pid()`, not the parent's
    /// cached one.
    #[test]
    fn forked_child_sees_its_own_pid() {
        let parent = super::pid();
        assert_eq!(parent, std::process::id());
        assert_eq!(super::pid(), parent, "cached");
        // SAFETY: the child only reads atomics, calls getpid and _exits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            let ok = super::pid() == unsafe { libc::getpid() } as u32;
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status), "child status {status:#x}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the child saw its parent's pid"
        );
        assert_eq!(super::pid(), parent);
    }

    /// Records every `write` call it gets.
    struct Calls(Vec<Vec<u8>>);

    impl std::io::Write for Calls {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.push(b.to_vec());
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn one_write_per_line() {
        let mut w = Calls(Vec::new());
        let from = "::ffff:10.77.0.1";
        super::write_to(
            &mut w,
            super::DEBUG,
            format_args!("rxe0: MAD from {from} dropped: {}", "unknown_id"),
        );
        let want = format!(
            "ibcm[{}] debug: rxe0: MAD from ::ffff:10.77.0.1 dropped: unknown_id\n",
            std::process::id()
        );
        assert_eq!(w.0, vec![want.into_bytes()]);
    }
}
