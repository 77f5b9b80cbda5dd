//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`: librdmacm's conversion over
//! the system's `getaddrinfo` (first result only; `RAI_*` flags, QP type
//! and port space from the hints or from the socket type and protocol).
//! No device is needed and ibacm is not consulted. Memory comes from
//! `malloc` so that `rdma_freeaddrinfo` frees it member by member.

use crate::abi::*;
use ibcm::api::Errno;
use ibcm::cma::port_space;
use std::ffi::{c_char, c_int, c_void};

/// A result list this library owns (freed on drop).
pub struct Owned(pub *mut RdmaAddrinfo);

unsafe impl Send for Owned {}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: built by `getaddrinfo` / `dup` here.
        unsafe { free(self.0) }
    }
}

/// What `rdma_getaddrinfo` returns on failure: a `getaddrinfo` code
/// (returned as is) or an errno (-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Gai(c_int),
    Errno(Errno),
}

unsafe fn dup_bytes(p: *const c_void, len: usize) -> *mut c_void {
    if p.is_null() || len == 0 {
        return std::ptr::null_mut();
    }
    unsafe {
        let q = libc::malloc(len);
        if !q.is_null() {
            std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), len);
        }
        q
    }
}

/// # Safety
/// `node`/`service` NULL or C strings; `hints` NULL or readable.
pub unsafe fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const RdmaAddrinfo,
) -> Result<*mut RdmaAddrinfo, Failure> {
    if node.is_null() && service.is_null() {
        return Err(Failure::Errno(Errno::EINVAL));
    }
    let h = unsafe { hints.as_ref() };
    // SAFETY: all-zero is a valid addrinfo.
    let mut ai_hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    if let Some(h) = h {
        if h.ai_family == AF_IB {
            return Err(Failure::Errno(Errno(libc::EAFNOSUPPORT)));
        }
        if h.ai_flags & RAI_PASSIVE != 0 {
            ai_hints.ai_flags |= libc::AI_PASSIVE;
        }
        if h.ai_flags & RAI_NUMERICHOST != 0 {
            ai_hints.ai_flags |= libc::AI_NUMERICHOST;
        }
        ai_hints.ai_family = h.ai_family;
        ai_hints.ai_socktype = match h.ai_qp_type {
            IBV_QPT_UD => libc::SOCK_DGRAM,
            0 => 0,
            _ => libc::SOCK_STREAM,
        };
        ai_hints.ai_protocol = match h.ai_port_space as u16 {
            port_space::TCP => libc::IPPROTO_TCP,
            port_space::UDP | port_space::IPOIB => libc::IPPROTO_UDP,
            _ => 0,
        };
    }
    let mut ai: *mut libc::addrinfo = std::ptr::null_mut();
    let r = unsafe { libc::getaddrinfo(node, service, &ai_hints, &mut ai) };
    if r != 0 {
        return Err(Failure::Gai(r));
    }
    // SAFETY: getaddrinfo succeeded: at least one result.
    let a = unsafe { &*ai };
    let rai = unsafe { libc::calloc(1, std::mem::size_of::<RdmaAddrinfo>()) } as *mut RdmaAddrinfo;
    if rai.is_null() {
        unsafe { libc::freeaddrinfo(ai) };
        return Err(Failure::Errno(Errno::ENOMEM));
    }
    let r = unsafe { &mut *rai };
    let flags = h.map_or(0, |h| h.ai_flags);
    r.ai_flags = flags;
    r.ai_family = a.ai_family;
    r.ai_qp_type = match h.map_or(0, |h| h.ai_qp_type) {
        0 if a.ai_socktype == libc::SOCK_DGRAM => IBV_QPT_UD,
        0 => IBV_QPT_RC,
        q => q,
    };
    r.ai_port_space = match h.map_or(0, |h| h.ai_port_space) {
        0 if a.ai_protocol == libc::IPPROTO_UDP || a.ai_socktype == libc::SOCK_DGRAM => {
            port_space::UDP as c_int
        }
        0 => port_space::TCP as c_int,
        ps => ps,
    };
    let addr = unsafe { dup_bytes(a.ai_addr.cast(), a.ai_addrlen as usize) }.cast();
    let canon = if a.ai_canonname.is_null() {
        std::ptr::null_mut()
    } else {
        unsafe { libc::strdup(a.ai_canonname) }
    };
    if flags & RAI_PASSIVE != 0 {
        r.ai_src_addr = addr;
        r.ai_src_len = a.ai_addrlen;
        r.ai_src_canonname = canon;
    } else {
        r.ai_dst_addr = addr;
        r.ai_dst_len = a.ai_addrlen;
        r.ai_dst_canonname = canon;
        if let Some(h) = h
            && h.ai_src_len > 0
            && !h.ai_src_addr.is_null()
        {
            r.ai_src_addr =
                unsafe { dup_bytes(h.ai_src_addr.cast(), h.ai_src_len as usize) }.cast();
            r.ai_src_len = h.ai_src_len;
        }
    }
    unsafe { libc::freeaddrinfo(ai) };
    if addr.is_null() {
        unsafe { free(rai) };
        return Err(Failure::Errno(Errno::ENOMEM));
    }
    Ok(rai)
}

/// A deep copy of one result list.
///
/// # Safety
/// `p` is NULL or a list built here.
pub unsafe fn dup(p: *const RdmaAddrinfo) -> *mut RdmaAddrinfo {
    let mut head: *mut RdmaAddrinfo = std::ptr::null_mut();
    let mut tail: *mut *mut RdmaAddrinfo = &mut head;
    let mut cur = p;
    unsafe {
        while let Some(a) = cur.as_ref() {
            let n = libc::calloc(1, std::mem::size_of::<RdmaAddrinfo>()) as *mut RdmaAddrinfo;
            if n.is_null() {
                free(head);
                return std::ptr::null_mut();
            }
            let b = &mut *n;
            b.ai_flags = a.ai_flags;
            b.ai_family = a.ai_family;
            b.ai_qp_type = a.ai_qp_type;
            b.ai_port_space = a.ai_port_space;
            b.ai_src_len = a.ai_src_len;
            b.ai_dst_len = a.ai_dst_len;
            b.ai_src_addr = dup_bytes(a.ai_src_addr.cast(), a.ai_src_len as usize).cast();
            b.ai_dst_addr = dup_bytes(a.ai_dst_addr.cast(), a.ai_dst_len as usize).cast();
            if !a.ai_src_canonname.is_null() {
                b.ai_src_canonname = libc::strdup(a.ai_src_canonname);
            }
            if !a.ai_dst_canonname.is_null() {
                b.ai_dst_canonname = libc::strdup(a.ai_dst_canonname);
            }
            b.ai_route_len = a.ai_route_len;
            b.ai_route = dup_bytes(a.ai_route, a.ai_route_len);
            b.ai_connect_len = a.ai_connect_len;
            b.ai_connect = dup_bytes(a.ai_connect, a.ai_connect_len);
            *tail = n;
            tail = &mut b.ai_next;
            cur = a.ai_next;
        }
    }
    head
}

/// `rdma_freeaddrinfo`.
///
/// # Safety
/// `p` is NULL or a list built here, not freed before.
pub unsafe fn free(mut p: *mut RdmaAddrinfo) {
    unsafe {
        while let Some(a) = p.as_mut() {
            let next = a.ai_next;
            libc::free(a.ai_src_addr.cast());
            libc::free(a.ai_dst_addr.cast());
            libc::free(a.ai_src_canonname.cast());
            libc::free(a.ai_dst_canonname.cast());
            libc::free(a.ai_route);
            libc::free(a.ai_connect);
            libc::free(p.cast());
            p = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn passive_and_active_results() {
        let svc = CString::new("7471").unwrap();
        let node = CString::new("127.0.0.1").unwrap();
        // SAFETY: all-zero hints are valid.
        let mut h: RdmaAddrinfo = unsafe { std::mem::zeroed() };
        h.ai_flags = RAI_PASSIVE;
        h.ai_port_space = port_space::TCP as c_int;
        let r = unsafe { getaddrinfo(std::ptr::null(), svc.as_ptr(), &h) }.unwrap();
        let a = unsafe { &*r };
        assert!(!a.ai_src_addr.is_null() && a.ai_dst_addr.is_null());
        assert_eq!(a.ai_qp_type, IBV_QPT_RC);
        assert_eq!(a.ai_port_space, port_space::TCP as c_int);
        let sa = unsafe { crate::id::read_sockaddr(a.ai_src_addr) }.unwrap();
        assert_eq!(sa.port(), 7471);
        let copy = unsafe { dup(r) };
        unsafe { free(r) };
        unsafe { free(copy) };
        h.ai_flags = RAI_NUMERICHOST;
        h.ai_port_space = port_space::UDP as c_int;
        h.ai_qp_type = IBV_QPT_UD;
        let r = unsafe { getaddrinfo(node.as_ptr(), svc.as_ptr(), &h) }.unwrap();
        let a = unsafe { &*r };
        assert!(a.ai_src_addr.is_null() && !a.ai_dst_addr.is_null());
        assert_eq!(a.ai_qp_type, IBV_QPT_UD);
        let sa = unsafe { crate::id::read_sockaddr(a.ai_dst_addr) }.unwrap();
        assert_eq!(sa.to_string(), "127.0.0.1:7471");
        unsafe { free(r) };
        let bad = CString::new("not a number").unwrap();
        let e = unsafe { getaddrinfo(bad.as_ptr(), svc.as_ptr(), &h) }.unwrap_err();
        assert!(matches!(e, Failure::Gai(_)));
        let e = unsafe { getaddrinfo(std::ptr::null(), std::ptr::null(), &h) }.unwrap_err();
        assert_eq!(e, Failure::Errno(Errno::EINVAL));
    }
}
