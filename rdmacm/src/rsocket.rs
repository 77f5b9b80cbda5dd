//! rsockets (librdmacm's socket emulation, 27 functions of RDMACM_1.0) are
//! not provided: `rpoll` is `poll` and `rselect` is `select` (no rsocket
//! can exist, so every fd is a normal one); the others fail with -1 /
//! `ENOSYS` after one log line naming rsockets as unsupported. They exist
//! so that binaries linked with `-z now` (every Debian rdma tool) load.

use crate::exports::set_errno;
use ibcm::log::ERROR;
use std::ffi::{c_int, c_void};
use std::sync::Once;

fn unsupported(what: &str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        ibcm::log::always(
            ERROR,
            format_args!(
                "librdmacm (ibcm): rsockets are not supported ({what} called); \
                 run this program with rdma-core's librdmacm"
            ),
        )
    });
    set_errno(libc::ENOSYS);
}

macro_rules! unsupported_fns {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $fail:expr;)*) => {$(
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($arg: $ty),*) -> $ret {
            $(let _ = $arg;)*
            unsupported(stringify!($name));
            $fail
        }
    )*};
}

type Sa = *mut libc::sockaddr;
type SaLen = *mut libc::socklen_t;

unsupported_fns! {
    rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int = -1;
    rbind(s: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int = -1;
    rlisten(s: c_int, backlog: c_int) -> c_int = -1;
    raccept(s: c_int, addr: Sa, len: SaLen) -> c_int = -1;
    rconnect(s: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int = -1;
    rshutdown(s: c_int, how: c_int) -> c_int = -1;
    rclose(s: c_int) -> c_int = -1;
    rrecv(s: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize = -1;
    rrecvfrom(s: c_int, buf: *mut c_void, len: usize, flags: c_int, addr: Sa, alen: SaLen) -> isize = -1;
    rrecvmsg(s: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize = -1;
    rsend(s: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize = -1;
    rsendto(s: c_int, buf: *const c_void, len: usize, flags: c_int, addr: *const libc::sockaddr, alen: libc::socklen_t) -> isize = -1;
    rsendmsg(s: c_int, msg: *const libc::msghdr, flags: c_int) -> isize = -1;
    rread(s: c_int, buf: *mut c_void, count: usize) -> isize = -1;
    rreadv(s: c_int, iov: *const libc::iovec, iovcnt: c_int) -> isize = -1;
    rwrite(s: c_int, buf: *const c_void, count: usize) -> isize = -1;
    rwritev(s: c_int, iov: *const libc::iovec, iovcnt: c_int) -> isize = -1;
    rgetpeername(s: c_int, addr: Sa, len: SaLen) -> c_int = -1;
    rgetsockname(s: c_int, addr: Sa, len: SaLen) -> c_int = -1;
    rsetsockopt(s: c_int, level: c_int, name: c_int, val: *const c_void, len: libc::socklen_t) -> c_int = -1;
    rgetsockopt(s: c_int, level: c_int, name: c_int, val: *mut c_void, len: SaLen) -> c_int = -1;
    // Variadic in C (`int rfcntl(int, int, ...)`): one integer/pointer
    // argument is read the same way on x86_64 and aarch64.
    rfcntl(s: c_int, cmd: c_int, arg: usize) -> c_int = -1;
    riomap(s: c_int, prot: c_int, len: usize, flags: c_int, fd: c_int, offset: libc::off_t) -> libc::off_t = -1;
    riounmap(s: c_int, buf: *mut c_void, len: usize) -> c_int = -1;
    riowrite(s: c_int, buf: *const c_void, count: usize, offset: libc::off_t, flags: c_int) -> usize = usize::MAX;
}

/// `rpoll`: no rsocket exists, so this is `poll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    unsafe { libc::poll(fds, nfds, timeout) }
}

/// `rselect`: `select`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) }
}
