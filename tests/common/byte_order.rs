//! A number's bytes in the byte order a test writes a capture in (pcap and
//! pcapng files come in both). Included by path (`#[path]`) by
//! `tests/fuzz_smoke.rs` and by the unit tests of `src/capture/`.
#![allow(dead_code)]

/// Big-endian (`big`) or little-endian bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Order {
    pub big: bool,
}

macro_rules! to_bytes {
    ($($name:ident: $t:ty),*) => {
        impl Order {
            $(
                /// `v`'s bytes in this order.
                pub fn $name(self, v: $t) -> [u8; size_of::<$t>()] {
                    if self.big { v.to_be_bytes() } else { v.to_le_bytes() }
                }
            )*
        }
    };
}

to_bytes!(u16: u16, u32: u32, i64: i64);
