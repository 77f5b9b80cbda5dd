//! What the librdmacm tests build the same way: an IPv4 `sockaddr_in` and
//! `rdma_connect`'s parameters. Included by path (`#[path]`) by each test
//! that uses it, and by the unit tests of `src/id.rs`.
#![allow(dead_code)]

use ibcm_rdmacm::abi::RdmaConnParam;
use std::net::SocketAddr;

/// `a` as a `sockaddr_in` (IPv4 only).
pub fn sockaddr(a: SocketAddr) -> libc::sockaddr_in {
    let SocketAddr::V4(v) = a else {
        panic!("IPv4 only")
    };
    libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: v.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*v.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// `rdma_connect`'s parameters: `pd` (none when empty) and QPN `qp_num`,
/// one responder resource and initiator depth, 7 retries and RNR retries.
pub fn conn_param(pd: &'static [u8], qp_num: u32) -> RdmaConnParam {
    RdmaConnParam {
        private_data: if pd.is_empty() {
            std::ptr::null()
        } else {
            pd.as_ptr().cast()
        },
        private_data_len: pd.len() as u8,
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num,
    }
}
