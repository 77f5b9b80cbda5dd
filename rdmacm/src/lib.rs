//! librdmacm on ibcm: the `rdma_*` API (rdma-core's `<rdma/rdma_cma.h>`)
//! with librdmacm's semantics, built on `ibcm::api`.
//!
//! * `verbs` — libibverbs for the rdma_cm layer: device contexts (one
//!   `ibv_context` per device, shared with the application), default PDs,
//!   CQs and QPs of `rdma_create_qp`, QP state transitions, and finding the
//!   device/port/GID that owns an IP address.
#![allow(clippy::missing_safety_doc)]

pub mod verbs;
