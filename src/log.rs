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
    let tag = match l {
        ERROR => "error",
        WARN => "warn",
        INFO => "info",
        DEBUG => "debug",
        _ => "trace",
    };
    // One `write` per line: `eprintln!` on the unbuffered stderr makes one
    // per formatted piece (a dozen for a line with three arguments), and
    // another process's line could land between them.
    let line = format!("ibcm[{}] {tag}: {args}\n", std::process::id());
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
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
}
