//! Waiting until a process signalled with `SIGSTOP` has stopped: `kill`
//! returns before a busy process has, and a test that goes on too early
//! races the very threads it meant to freeze. Shared by the Rust tests of
//! every crate, each including this one file by path.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Whether every thread of process `pid` is stopped (state `T` or `t` in
/// `/proc/<pid>/task/*/stat`).
pub fn all_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).all(|t| {
        let tid = t.file_name().to_string_lossy().parse().unwrap_or(0);
        ibcm::ipc::sock::proc_stat(tid).is_ok_and(|st| matches!(st.state, Some('T' | 't')))
    })
}

/// Sends `sig` to `pid`; for `SIGSTOP`, waits (up to 10 s, then panics)
/// until every thread has stopped.
pub fn signal(pid: u32, sig: i32) {
    assert_eq!(
        unsafe { libc::kill(pid as i32, sig) },
        0,
        "kill({pid}, {sig})"
    );
    if sig == libc::SIGSTOP {
        let t = Instant::now();
        while !all_stopped(pid) {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "process {pid} did not stop"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
