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
