//! Runs of one-byte members that a C parameter struct (`abi`) and its
//! host-order Rust twin (`engine`) share, each named once.
//!
//! `struct ib_cm_req_param` and `ReqParams` (likewise the REP's and
//! `struct sa_path_rec` / `PathRec`) hold the
//! same one-byte knobs under the same names, in the same order; only the
//! members around them differ (raw pointers and big-endian values in C,
//! `PathRec`, `u64` and `Vec<u8>` in Rust). A list macro here names the run
//! once and hands it, as `[a b c]`, to the macro it is given:
//! `bytes_struct!` splices it into each struct at `..u8s`, `bytes_from!`
//! and `bytes_copy!` copy it in `ffi`'s conversions, and `tests/abi.rs` adds it to the
//! members it compares with gcc's layout (the C header still lists every
//! member on its own, so a name missing here fails that test).
//! librdmacm names its `rdma_conn_param` / `ConnParam` run the same way
//! (`conn_param_bytes!`, `rdmacm/src/lib.rs`), with these macros.

/// The one-byte members of `struct sa_path_rec` from `sl` to `preference`
/// (header order), shared with `PathRec`; used like [`req_param_bytes!`].
#[doc(hidden)]
#[macro_export]
macro_rules! path_rec_bytes {
    ($then:ident! { $($rest:tt)* }) => {
        $then! {
            [
                sl
                mtu_selector
                mtu
                rate_selector
                rate
                packet_life_time_selector
                packet_life_time
                preference
            ]
            $($rest)*
        }
    };
}

/// The one-byte members of `struct ib_cm_req_param` from
/// `responder_resources` to `srq` (header order), shared with `ReqParams`:
/// `req_param_bytes!(then! { … })` expands to `then! { [names] … }`.
#[doc(hidden)]
#[macro_export]
macro_rules! req_param_bytes {
    ($then:ident! { $($rest:tt)* }) => {
        $then! {
            [
                responder_resources
                initiator_depth
                remote_cm_response_timeout
                flow_control
                local_cm_response_timeout
                retry_count
                rnr_retry_count
                max_cm_retries
                srq
            ]
            $($rest)*
        }
    };
}

/// The one-byte members of `struct ib_cm_rep_param` from
/// `responder_resources` to `srq` (header order), shared with `RepParams`;
/// used like [`req_param_bytes!`].
#[doc(hidden)]
#[macro_export]
macro_rules! rep_param_bytes {
    ($then:ident! { $($rest:tt)* }) => {
        $then! {
            [
                responder_resources
                initiator_depth
                failover_accepted
                flow_control
                rnr_retry_count
                srq
            ]
            $($rest)*
        }
    };
}

/// A struct whose run of `u8` members comes from a list macro, spliced in
/// where the declaration says `..u8s,` (so a `#[repr(C)]` mirror keeps the
/// header's order): `req_param_bytes!(bytes_struct! { pub struct T { …,
/// ..u8s, … } })`. Exported for librdmacm's `rdma_conn_param` /
/// `ConnParam` (`conn_param_bytes!` in `rdmacm/src/lib.rs`).
#[doc(hidden)]
#[macro_export]
macro_rules! bytes_struct {
    (
        [$($b:ident)*]
        $(#[$m:meta])*
        pub struct $T:ident {
            $($(#[$hm:meta])* pub $h:ident: $hty:ty,)*
            ..u8s,
            $($(#[$tm:meta])* pub $t:ident: $tty:ty,)*
        }
    ) => {
        $(#[$m])*
        pub struct $T {
            $($(#[$hm])* pub $h: $hty,)*
            $(pub $b: u8,)*
            $($(#[$tm])* pub $t: $tty,)*
        }
    };
}

/// A struct expression whose run of members from a list macro is copied
/// from `src`'s members of the same names, the others given (and the rest,
/// after `..`, from a base): `req_param_bytes!(bytes_from! { p => T {
/// other: value, … } })`. Exported, as `bytes_struct!`.
#[doc(hidden)]
#[macro_export]
macro_rules! bytes_from {
    ([$($b:ident)*] $src:ident => $T:ident { $($f:ident: $e:expr,)* ..$base:expr }) => {
        $T {
            $($b: $src.$b,)*
            $($f: $e,)*
            ..$base
        }
    };
    ([$($b:ident)*] $src:ident => $T:ident { $($f:ident: $e:expr),* $(,)? }) => {
        $T {
            $($b: $src.$b,)*
            $($f: $e,)*
        }
    };
}

/// Assigns a run of members from a list macro from `src` to `dst`:
/// `path_rec_bytes!(bytes_copy! { c = p })`.
macro_rules! bytes_copy {
    ([$($b:ident)*] $dst:ident = $src:ident) => {
        $($dst.$b = $src.$b;)*
    };
}
