//! librdmacm on ibcm: the `rdma_*` API (rdma-core's `<rdma/rdma_cma.h>`)
//! with librdmacm's semantics, built on `ibcm::api` (docs/RDMACM.md).
//!
//! * `abi` — `#[repr(C)]` mirrors of the public structs.
//! * `exports` — the exported `rdma_*` functions (pointer checks,
//!   `catch_unwind`, errno); `qp` — QP/SRQ/device calls; `mcast` —
//!   multicast on RoCE (join/leave);
//!   `rsocket` — the rsocket entry points (`rpoll`/`rselect` only).
//! * `id` — ids: addresses, route, connect/accept/…, the IB CM → rdma_cm
//!   event translation, accounting, sync mode, destroy.
//! * `channel` — event channels (eventfd level indicator + queue) and
//!   events.
//! * `fork` — the per-process state and what a child of `fork()` gets.
//! * `ports` — the port space (`PortSpace`: the host's in the CM service, or per process).
//! * `select` — which ibcm device serves an IP (`IBCM_RDMACM_DEVICE`).
//! * `addrinfo` — `rdma_getaddrinfo` over the system's `getaddrinfo`.
//! * `verbs` — libibverbs for the rdma_cm layer: device contexts (one
//!   `ibv_context` per device, shared with the application), default PDs,
//!   CQs and QPs of `rdma_create_qp`, QP state transitions, and finding the
//!   device/port/GID that owns an IP address.
#![allow(clippy::missing_safety_doc)]

#[macro_use]
extern crate ibcm;

/// The one-byte members of `struct rdma_conn_param` from
/// `responder_resources` to `srq` (header order), shared with
/// `id::ConnParam`: `conn_param_bytes!(then! { … })` expands to `then! {
/// [names] … }` (as ibcm's `req_param_bytes!`, for `bytes_struct!` and
/// `bytes_from!`). `tests/abi.rs` still names each member on its own.
macro_rules! conn_param_bytes {
    ($then:ident! { $($rest:tt)* }) => {
        $then! {
            [
                responder_resources
                initiator_depth
                flow_control
                retry_count
                rnr_retry_count
                srq
            ]
            $($rest)*
        }
    };
}
// Lets the unit tests include `tests/common/cma.rs`, which names the crate.
#[cfg(test)]
extern crate self as ibcm_rdmacm;

pub mod abi;
pub mod addrinfo;
pub mod channel;
pub mod deadline;
pub mod exports;
pub mod fork;
pub mod id;
pub mod mcast;
pub mod ports;
pub mod qp;
pub mod rsocket;
pub mod select;
pub mod verbs;
