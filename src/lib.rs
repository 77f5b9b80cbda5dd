//! ibcm: a userspace InfiniBand / RoCE Communication Manager with the Linux
//! kernel's `ib_cm` C ABI. See `docs/ARCHITECTURE.md` for the map.

#[macro_use]
mod c_enum;
#[macro_use]
mod members;
pub mod abi;
pub mod api;
pub mod capture;
pub mod cma;
pub mod decode;
pub mod engine;
pub mod fabric;
pub mod ipc;
pub mod ladder;
#[macro_use]
pub mod log;
pub mod ffi;
pub mod forwarder;
pub mod path;
pub mod portspace;
pub mod runtime;
pub mod service;
pub mod sim;
pub mod svg;
#[doc(hidden)]
pub mod testsupport;
pub mod tracker;
pub mod wire;
