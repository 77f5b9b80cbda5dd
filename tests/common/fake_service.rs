//! A fake CM service for the tests of a served process: one connection on
//! a socket of its own, each request answered as the test says. Included
//! by path (`#[path]`) by `tests/service_ports.rs` and
//! `tests/service_qp_attrs.rs` (beside `common/net.rs`, as `net`).
#![allow(dead_code)]

use super::net;
use ibcm::api::PortInfo;
use ibcm::ipc::{self, Header, Opened, Public, Reader, op, sock};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// A fresh socket path for `test` of the suite `suite` (in a directory of
/// its own, named for both and this process).
pub fn temp_socket(suite: &str, test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ibcm-{suite}-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("ibcmd.sock")
}

/// The reply to OPEN `h`: the device `soft:ip(2)` with `ports`.
pub fn opened(h: Header, ports: Vec<PortInfo>) -> Vec<u8> {
    let opened = Opened {
        name: format!("{}:4791", net::soft(2)).into_bytes(),
        node_guid: 7,
        ports: ports.into_boxed_slice(),
    };
    ipc::reply(h, 0, Public::default(), |w| {
        w.put(&opened);
    })
}

/// Serves the first connection to `socket` until it closes, handing
/// each message it reads to `each` with the connection.
fn serve_messages(
    socket: &Path,
    mut each: impl FnMut(&OwnedFd, &[u8]) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let listener = sock::listen(socket, |_| Ok(())).unwrap();
    std::thread::spawn(move || {
        let fd = sock::accept(&listener).unwrap();
        let mut buf = vec![0u8; ipc::MAX_RECORD];
        loop {
            let n = match sock::recv(&fd, &mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            each(&fd, &buf[..n]);
        }
    })
}

/// Serves the first connection to `socket` until it closes: each
/// request's header and body go to `answer`, with the connection (to push
/// records on), and the reply it returns is sent (`None`: nothing is).
pub fn serve(
    socket: &Path,
    mut answer: impl FnMut(&OwnedFd, Header, Reader<'_>) -> Option<Vec<u8>> + Send + 'static,
) -> std::thread::JoinHandle<()> {
    serve_messages(socket, move |fd, msg| {
        let (h, r) = Header::parse(msg).unwrap();
        if let Some(rep) = answer(fd, h, r) {
            sock::send(fd, &rep).unwrap();
        }
    })
}

/// As `serve`, but record by record: a `BATCH` message's records each go
/// to `answer`, with the number of the message that brought them (from
/// 0), and a reply is sent only to a request that waits for one (`seq`
/// not 0).
pub fn serve_records(
    socket: &Path,
    mut answer: impl FnMut(&OwnedFd, usize, Header, Reader<'_>) -> Option<Vec<u8>> + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let mut msg_no = 0;
    serve_messages(socket, move |fd, msg| {
        let (h, r) = Header::parse(msg).unwrap();
        let recs: Vec<&[u8]> = if h.op == op::BATCH {
            ipc::unbatch(&msg[msg.len() - r.remaining()..]).unwrap()
        } else {
            vec![msg]
        };
        for rec in recs {
            let (h, r) = Header::parse(rec).unwrap();
            if let Some(rep) = answer(fd, msg_no, h, r).filter(|_| h.seq != 0) {
                sock::send(fd, &rep).unwrap();
            }
        }
        msg_no += 1;
    })
}
