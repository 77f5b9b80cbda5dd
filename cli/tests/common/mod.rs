//! Helpers shared by the CLI's end-to-end tests: running the `ibcm` binary
//! to completion, a scratch directory, and this process's own loopback
//! addresses (`net`, shared with the library's tests).
#![allow(dead_code)]

#[path = "../../../tests/common/net.rs"]
pub mod net;
#[path = "../../../tests/common/served.rs"]
pub mod served;
#[path = "../../../tests/common/stopped.rs"]
pub mod stopped;

use std::path::PathBuf;
use std::process::Command;

/// The `ibcm` binary under test.
pub fn ibcm_command() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ibcm"))
}

/// A finished run of the binary.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Runs `c` to completion. Fails the test if the binary could not
    /// start, was killed by a signal, panicked or wrote non-UTF-8 to stdout.
    pub fn of(c: &mut Command) -> Run {
        let out = c.output().expect("cannot run the ibcm binary");
        let r = Run {
            code: out.status.code().expect("ibcm killed by a signal"),
            stdout: String::from_utf8(out.stdout).expect("stdout is not UTF-8"),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        assert!(
            !r.stderr.contains("panicked"),
            "ibcm panicked: {}",
            r.stderr
        );
        r
    }
}

/// A scratch directory for one test (removed when dropped).
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `ibcm-<suite>-<pid>-<test>` under the system's temporary directory,
    /// empty.
    pub fn new(suite: &str, test: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("ibcm-{suite}-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// Writes `data` to `rel` (creating its directories); returns its path.
    pub fn write(&self, rel: &str, data: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, data).unwrap();
        p
    }

    /// Creates the directory `rel` (and its parents).
    pub fn dir(&self, rel: &str) {
        std::fs::create_dir_all(self.0.join(rel)).unwrap();
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
