//! ibcm: a userspace InfiniBand / RoCE Communication Manager with the Linux
//! kernel's `ib_cm` C ABI. See `docs/ARCHITECTURE.md` for the map.

pub mod capture;
pub mod engine;
pub mod ffi;
pub mod sim;
pub mod wire;
