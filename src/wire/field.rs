//! The field machinery every wire structure is declared with.
//!
//! A message is declared once, as a table of fields in the IBTA
//! (byte, bit-from-MSB, width) notation (`cm_message!`); the table
//! generates the zero-copy view's accessors, the typed representation, its
//! `parse`, `emit` and `Default`, and `rows()`: the fields as
//! [`FieldRef`]s (name, IBTA name, value, meaning) in the order and text
//! lines `ibcm decode` shows them. A field's kind says how it sits on the
//! wire:
//!
//! * `bits(byte, bit, width)`: an integer, `bool` or [`MsgCode`] bit field
//!   (`bits(byte, bit, width; max LIMIT)` rejects values above `LIMIT` as
//!   [`Error::Reserved`] named `MSG.IbtaName`);
//! * `split(part / set_part: ty = (byte, bit, width), ...)`: one value
//!   whose bits are spread over several fields, most significant part
//!   first (the 24-bit vendor IDs of REP and SIDR_REP);
//! * `gid(byte)`: a 16-byte [`Gid`];
//! * `area(byte)`: a byte area, its length that of the field's `[u8; N]`;
//! * `path(byte, Layout, Slot)`: a [`ReqPath`](super::ReqPath) at `byte`,
//!   laid out as in a REQ or a LAP, named `primary_*` or `alternate_*`.
//!
//! Reserved bits are never declared, so they are ignored on parse and stay
//! zero on emit (the caller zeroes the buffer first).

use super::{Error, Gid, MsgCode, Result};

/// What a field's number means, for renderers (`ibcm decode` adds notes
/// and derived keys from it). Non-integer fields use `Plain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Show {
    /// As it is: booleans, message codes, GIDs, byte areas.
    Plain,
    /// An identifier, key or mask: hex (one digit per 4 bits of width).
    Hex,
    /// A count or small number: decimal.
    Dec,
    /// A MAD method: hex, with its name.
    Method,
    /// An IBTA timeout exponent (4.096 us * 2^t).
    Timeout,
    /// `enum ib_rate`.
    Rate,
    /// `enum ib_mtu`.
    Mtu,
    /// REQ TransportServiceType (RC, UC, RD, extended).
    Transport,
    /// REQ ExtendedTransportType (1 = XRC).
    ExtTransport,
    /// An RNR retry count (7 = infinite).
    RnrRetry,
    /// REP FailoverAccepted.
    Failover,
    /// A service ID (RDMA CM IP space recognised).
    ServiceId,
    /// `enum ib_cm_rej_reason`.
    RejReason,
    /// `enum ib_cm_sidr_status`.
    SidrStatus,
    /// `enum ib_cm_apr_status`.
    AprStatus,
}

/// A field's value as a renderer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValue<'a> {
    /// An integer and its width on the wire in bits.
    Uint(u64, u32),
    Bool(bool),
    Code(MsgCode),
    Gid(Gid),
    Bytes(&'a [u8]),
}

/// One field of a message: what `rows()` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldRef<'a> {
    /// The representation's field name (`primary_flow_label` for path
    /// fields): the `ibcm decode` key.
    pub name: &'static str,
    /// The IBTA name (`LocalCommID`, `PrimaryFlowLabel`).
    pub ibta: &'static str,
    pub value: FieldValue<'a>,
    pub show: Show,
}

/// A representation type that a `bits` field converts to and from: `Raw`
/// is what the view's accessors take and return.
pub trait BitsValue: Sized + Copy {
    type Raw: Copy;
    /// `field` names the field in errors (`REJ.MessageRejected`).
    fn from_raw(raw: Self::Raw, field: &'static str) -> Result<Self>;
    fn to_raw(self) -> Self::Raw;
}

macro_rules! int_bits_value {
    ($($t:ty),*) => {$(
        impl BitsValue for $t {
            type Raw = $t;
            #[inline(always)]
            fn from_raw(raw: $t, _: &'static str) -> Result<$t> {
                Ok(raw)
            }
            #[inline(always)]
            fn to_raw(self) -> $t {
                self
            }
        }
        impl ToFieldValue for $t {
            fn field_value(&self, bits: u32) -> FieldValue<'_> {
                FieldValue::Uint(*self as u64, bits)
            }
        }
    )*};
}
int_bits_value!(u8, u16, u32, u64);

impl BitsValue for bool {
    type Raw = u8;
    #[inline(always)]
    fn from_raw(raw: u8, _: &'static str) -> Result<bool> {
        Ok(raw != 0)
    }
    #[inline(always)]
    fn to_raw(self) -> u8 {
        self as u8
    }
}

impl BitsValue for MsgCode {
    type Raw = u8;
    #[inline(always)]
    fn from_raw(raw: u8, field: &'static str) -> Result<MsgCode> {
        match raw {
            0 => Ok(MsgCode::Req),
            1 => Ok(MsgCode::Rep),
            2 => Ok(MsgCode::Other),
            _ => Err(Error::Reserved {
                field,
                value: raw as u64,
            }),
        }
    }
    #[inline(always)]
    fn to_raw(self) -> u8 {
        self as u8
    }
}

/// A representation value as a [`FieldValue`] (`bits`: width on the wire).
pub trait ToFieldValue {
    fn field_value(&self, bits: u32) -> FieldValue<'_>;
}

impl ToFieldValue for bool {
    fn field_value(&self, _: u32) -> FieldValue<'_> {
        FieldValue::Bool(*self)
    }
}

impl ToFieldValue for MsgCode {
    fn field_value(&self, _: u32) -> FieldValue<'_> {
        FieldValue::Code(*self)
    }
}

impl ToFieldValue for Gid {
    fn field_value(&self, _: u32) -> FieldValue<'_> {
        FieldValue::Gid(*self)
    }
}

impl<const N: usize> ToFieldValue for [u8; N] {
    fn field_value(&self, _: u32) -> FieldValue<'_> {
        FieldValue::Bytes(self)
    }
}

/// Checks a length field against the area it describes.
#[inline(always)]
pub(crate) fn check_max(v: impl Into<u64>, max: usize, field: &'static str) -> Result<()> {
    let v = v.into();
    if v > max as u64 {
        Err(Error::Reserved { field, value: v })
    } else {
        Ok(())
    }
}

/// The per-kind code of one declared field; `cm_message!` and `cm_path!`
/// call it with the operation first.
macro_rules! cm_field {
    // ---- view accessors
    (view $view:ident, $f:ident, $set:ident, $ty:ty, bits($o:expr, $b:expr, $w:expr $(; max $max:expr)?)) => {
        impl<T: AsRef<[u8]>> $view<T> {
            #[inline]
            pub fn $f(&self) -> <$ty as $crate::wire::field::BitsValue>::Raw {
                $crate::wire::get_bits(self.buffer.as_ref(), self.at($o), $b, $w)
                    as <$ty as $crate::wire::field::BitsValue>::Raw
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            #[inline]
            pub fn $set(&mut self, value: <$ty as $crate::wire::field::BitsValue>::Raw) {
                let at = self.at($o);
                $crate::wire::set_bits(self.buffer.as_mut(), at, $b, $w, value as u64)
            }
        }
    };
    (view $view:ident, $f:ident, $set:ident, $ty:ty, split($($part:ident / $pset:ident : $pty:ty = ($o:expr, $b:expr, $w:expr)),+ $(,)?)) => {
        $( $crate::wire::field::cm_field!(view $view, $part, $pset, $pty, bits($o, $b, $w)); )+
    };
    (view $view:ident, $f:ident, $set:ident, $ty:ty, gid($o:expr)) => {
        $crate::wire::field::cm_field!(view $view, $f, $set, [u8; 16], area($o));
    };
    (view $view:ident, $f:ident, $set:ident, $ty:ty, area($o:expr)) => {
        impl<T: AsRef<[u8]>> $view<T> {
            #[inline]
            pub fn $f(&self) -> &[u8; core::mem::size_of::<$ty>()] {
                let at = self.at($o);
                self.buffer.as_ref()[at..at + core::mem::size_of::<$ty>()]
                    .try_into()
                    .unwrap()
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            #[inline]
            pub fn $set(&mut self) -> &mut [u8; core::mem::size_of::<$ty>()] {
                let at = self.at($o);
                (&mut self.buffer.as_mut()[at..at + core::mem::size_of::<$ty>()])
                    .try_into()
                    .unwrap()
            }
        }
    };
    (view $view:ident, $f:ident, $set:ident, $ty:ty, path($o:expr, $layout:ident, $slot:ident)) => {
        impl<T: AsRef<[u8]>> $view<T> {
            #[inline]
            pub fn $f(&self) -> $crate::wire::PathPacket<&[u8]> {
                $crate::wire::PathPacket::new(
                    self.buffer.as_ref(),
                    self.at($o),
                    $crate::wire::PathLayout::$layout,
                )
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            #[inline]
            pub fn $set(&mut self) -> $crate::wire::PathPacket<&mut [u8]> {
                let at = self.at($o);
                $crate::wire::PathPacket::new(
                    self.buffer.as_mut(),
                    at,
                    $crate::wire::PathLayout::$layout,
                )
            }
        }
    };

    // ---- zero value
    (zero $ty:ty, area) => { [0; core::mem::size_of::<$ty>()] };
    (zero $ty:ty, $kind:ident) => { <$ty>::default() };

    // ---- range checks: run before any conversion, so a length field out
    // of range is the error even when a code field is reserved too
    (check $p:ident, $f:ident, $ty:ty, $name:expr, bits($o:expr, $b:expr, $w:expr; max $max:expr)) => {
        $crate::wire::field::check_max($p.$f(), $max, $name)?;
    };
    (check $p:ident, $f:ident, $ty:ty, $name:expr, $kind:ident($($spec:tt)*)) => {};

    // ---- parse (an expression of the field's type; `?` returns errors)
    (parse $p:ident, $f:ident, $ty:ty, $name:expr, bits($o:expr, $b:expr, $w:expr $(; max $max:expr)?)) => {
        <$ty as $crate::wire::field::BitsValue>::from_raw($p.$f(), $name)?
    };
    (parse $p:ident, $f:ident, $ty:ty, $name:expr, split($($part:ident / $pset:ident : $pty:ty = ($o:expr, $b:expr, $w:expr)),+ $(,)?)) => {{
        let mut v: u64 = 0;
        $( v = (v << $w) | $p.$part() as u64; )+
        v as $ty
    }};
    (parse $p:ident, $f:ident, $ty:ty, $name:expr, gid($o:expr)) => {
        $crate::wire::Gid(*$p.$f())
    };
    (parse $p:ident, $f:ident, $ty:ty, $name:expr, area($o:expr)) => {
        *$p.$f()
    };
    (parse $p:ident, $f:ident, $ty:ty, $name:expr, path($o:expr, $layout:ident, $slot:ident)) => {
        <$ty>::parse(&$p.$f())?
    };

    // ---- emit
    (emit $p:ident, $v:expr, $f:ident, $set:ident, $ty:ty, bits($($spec:tt)*)) => {
        $p.$set($crate::wire::field::BitsValue::to_raw($v))
    };
    (emit $p:ident, $v:expr, $f:ident, $set:ident, $ty:ty, split($($part:ident / $pset:ident : $pty:ty = ($o:expr, $b:expr, $w:expr)),+ $(,)?)) => {{
        let total: u32 = 0 $(+ $w)+;
        let mut used: u32 = 0;
        $(
            used += $w;
            $p.$pset(($v as u64 >> (total - used)) as $pty);
        )+
    }};
    (emit $p:ident, $v:expr, $f:ident, $set:ident, $ty:ty, gid($o:expr)) => {
        *$p.$set() = $v.0
    };
    (emit $p:ident, $v:expr, $f:ident, $set:ident, $ty:ty, area($o:expr)) => {
        *$p.$set() = $v
    };
    (emit $p:ident, $v:expr, $f:ident, $set:ident, $ty:ty, path($($spec:tt)*)) => {
        $v.emit(&mut $p.$set())
    };

    // ---- rows: push the field onto `row` (a path adds its own rows)
    (show $rows:ident, $row:ident, $v:expr, $name:expr, $ibta:expr, $show:ident, bits($o:expr, $b:expr, $w:expr $(; max $max:expr)?)) => {
        $crate::wire::field::cm_field!(@push $row, $v, $w, $name, $ibta, $show)
    };
    (show $rows:ident, $row:ident, $v:expr, $name:expr, $ibta:expr, $show:ident, split($($part:ident / $pset:ident : $pty:ty = ($o:expr, $b:expr, $w:expr)),+ $(,)?)) => {
        $crate::wire::field::cm_field!(@push $row, $v, 0 $(+ $w)+, $name, $ibta, $show)
    };
    (show $rows:ident, $row:ident, $v:expr, $name:expr, $ibta:expr, $show:ident, gid($o:expr)) => {
        $crate::wire::field::cm_field!(@push $row, $v, 128, $name, $ibta, $show)
    };
    (show $rows:ident, $row:ident, $v:expr, $name:expr, $ibta:expr, $show:ident, area($o:expr)) => {
        $crate::wire::field::cm_field!(@push $row, $v, 0, $name, $ibta, $show)
    };
    (show $rows:ident, $row:ident, $v:expr, $name:expr, $ibta:expr, $show:ident, path($o:expr, $layout:ident, $slot:ident)) => {{
        if !$row.is_empty() {
            $rows.push(core::mem::take(&mut $row));
        }
        $rows.extend($v.rows($crate::wire::PathSlot::$slot));
    }};
    (@push $row:ident, $v:expr, $bits:expr, $name:expr, $ibta:expr, $show:ident) => {
        $row.push($crate::wire::field::FieldRef {
            name: $name,
            ibta: $ibta,
            value: $crate::wire::field::ToFieldValue::field_value($v, $bits),
            show: $crate::wire::field::Show::$show,
        })
    };
}
pub(crate) use cm_field;

/// Declares a wire structure's field table: the view's accessors (the view
/// type itself, with its `at` offset base, is declared beside), the
/// representation with `Default`, `parse_fields`, `emit_fields` and
/// `rows()`. Each `[ ... ]` group is one line of `ibcm decode` text; fields
/// are listed in that order (JSON keys follow it too), each as
/// `name / setter: ReprType = kind(position), "IbtaName", Show;` with an
/// optional `=> "key"` when the decoder's key is not the field name.
macro_rules! wire_struct {
    (
        $(#[$smeta:meta])*
        $name:ident, $view:ident, $label:literal {
            $( [ $(
                $(#[$fmeta:meta])*
                $f:ident / $set:ident : $ty:ty = $kind:ident ( $($spec:tt)* ), $ibta:literal, $show:ident $(=> $key:literal)?;
            )* ] )*
        }
    ) => {
        $( $( $crate::wire::field::cm_field!(view $view, $f, $set, $ty, $kind($($spec)*)); )* )*

        $(#[$smeta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $( $( $(#[$fmeta])* pub $f: $ty, )* )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    $( $( $f: $crate::wire::field::cm_field!(zero $ty, $kind), )* )*
                }
            }
        }

        impl $name {
            /// Reads every declared field: range checks first (see
            /// [`crate::wire::field`]), then each field's conversion.
            #[inline(always)]
            pub(crate) fn parse_fields<T: AsRef<[u8]>>(p: &$view<T>) -> $crate::wire::Result<$name> {
                $( $( $crate::wire::field::cm_field!(
                    check p, $f, $ty, concat!($label, ".", $ibta), $kind($($spec)*)
                ); )* )*
                Ok($name {
                    $( $( $f: $crate::wire::field::cm_field!(
                        parse p, $f, $ty, concat!($label, ".", $ibta), $kind($($spec)*)
                    ), )* )*
                })
            }

            /// Writes every declared field (reserved bits are left as they
            /// are: callers zero the buffer first).
            #[inline]
            pub(crate) fn emit_fields<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut $view<T>) {
                $( $( $crate::wire::field::cm_field!(
                    emit p, self.$f, $f, $set, $ty, $kind($($spec)*)
                ); )* )*
            }

            /// Every field with its value, grouped in the lines `ibcm
            /// decode` prints (see the [module docs](crate::wire::field)).
            #[allow(clippy::vec_init_then_push)]
            pub fn rows(&self) -> Vec<Vec<$crate::wire::field::FieldRef<'_>>> {
                let mut rows = Vec::new();
                $(
                    #[allow(unused_mut)]
                    let mut row = Vec::new();
                    $( $crate::wire::field::cm_field!(
                        show rows, row, &self.$f,
                        $crate::wire::field::key_or!([$($key)?] stringify!($f)),
                        $ibta, $show, $kind($($spec)*)
                    ); )*
                    if !row.is_empty() {
                        rows.push(row);
                    }
                )*
                rows
            }
        }
    };
}
pub(crate) use wire_struct;

/// The explicit decoder key if there is one, else the default.
macro_rules! key_or {
    ([$key:literal] $default:expr) => {
        $key
    };
    ([] $default:expr) => {
        $default
    };
}
pub(crate) use key_or;

/// Declares one CM message: its 256-byte view, and through
/// [`wire_struct!`] its representation, `parse`, `emit`, `Default` and
/// `rows()`, from one field table. A table starting with `comm_ids` has
/// LocalCommID (byte 24) and RemoteCommID (byte 28) first in its first
/// line, where every connection message but the REQ has them; one ending
/// with `private_data(byte, size)` has its last line the PrivateData area
/// of `size` bytes at `byte`.
macro_rules! cm_message {
    (
        $(#[$smeta:meta])*
        $name:ident, $view:ident, $label:literal, $title:literal, $table:literal {
            comm_ids [ $($first:tt)* ] $($rest:tt)*
        }
    ) => {
        $crate::wire::field::cm_message! {
            $(#[$smeta])*
            $name, $view, $label, $title, $table {
                [
                    local_comm_id / set_local_comm_id: u32 = bits(24, 0, 32), "LocalCommID", Hex;
                    remote_comm_id / set_remote_comm_id: u32 = bits(28, 0, 32), "RemoteCommID", Hex;
                    $($first)*
                ]
                $($rest)*
            }
        }
    };
    (
        $(#[$smeta:meta])*
        $name:ident, $view:ident, $label:literal, $title:literal, $table:literal {
            $( [ $($line:tt)* ] )* private_data($o:literal, $size:path)
        }
    ) => {
        $crate::wire::field::cm_message! {
            $(#[$smeta])*
            $name, $view, $label, $title, $table {
                $( [ $($line)* ] )*
                [
                    private_data / private_data_mut: [u8; $size] = area($o), "PrivateData", Plain;
                ]
            }
        }
    };
    (
        $(#[$smeta:meta])*
        $name:ident, $view:ident, $label:literal, $title:literal, $table:literal { $($body:tt)* }
    ) => {
        $crate::wire::field::wire_view!(
            #[doc = concat!($title, " (", $table, ").")]
            $view, $crate::wire::MAD_LEN
        );
        $crate::wire::field::wire_struct! {
            #[doc = concat!($title, ".")]
            $(#[$smeta])*
            $name, $view, $label { $($body)* }
        }

        impl $name {
            /// The message name in errors and `ibcm decode`.
            pub const LABEL: &'static str = $label;

            /// Parses the attribute; reserved encodings are
            /// [`Error::Reserved`](crate::wire::Error::Reserved) errors.
            #[inline(always)]
            pub fn parse<T: AsRef<[u8]>>(p: &$view<T>) -> $crate::wire::Result<$name> {
                $name::parse_fields(p)
            }

            /// Writes the attribute's fields (the caller zeroes the MAD).
            #[inline]
            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut $view<T>) {
                self.emit_fields(p)
            }
        }
    };
}
pub(crate) use cm_message;

/// A zero-copy view type over a buffer of at least `$len` bytes (field
/// offsets are offsets in that buffer).
macro_rules! wire_view {
    ($(#[$meta:meta])* $name:ident, $len:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }
        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking its length (accessors panic
            /// on short buffers; use `new_checked` for untrusted input).
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }
            #[doc = concat!("Wraps a buffer of at least `", stringify!($len), "` bytes.")]
            pub fn new_checked(buffer: T) -> $crate::wire::Result<Self> {
                $crate::wire::check_len(buffer.as_ref(), $len)?;
                Ok($name { buffer })
            }
            pub fn into_inner(self) -> T {
                self.buffer
            }
            #[inline(always)]
            fn at(&self, offset: usize) -> usize {
                offset
            }
        }
    };
}
pub(crate) use wire_view;

/// Declares the path sub-structure (REQ primary and alternate, LAP
/// alternate): its view, representation, `parse`, `emit`, `Default` and
/// `rows(slot)`. Positions are relative to the path's first byte, as
/// `[offset in a REQ, offset in a LAP]` (the two tables differ only in
/// where TrafficClass, HopLimit and PacketRate sit); each `[ ... ]` group
/// is one line of `ibcm decode` text.
macro_rules! cm_path {
    (
        $(#[$smeta:meta])*
        $name:ident, $view:ident {
            $( [ $(
                $(#[$fmeta:meta])*
                $f:ident / $set:ident : $ty:ty = $kind:ident ( $($spec:tt)* ), $ibta:literal, $show:ident;
            )* ] )*
        }
    ) => {
        /// Zero-copy view of one path inside a REQ or LAP (see
        #[doc = concat!("[`", stringify!($name), "`]).")]
        #[derive(Debug, Clone)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
            base: usize,
            layout: $crate::wire::PathLayout,
        }
        impl<T: AsRef<[u8]>> $view<T> {
            /// The path starting at MAD byte `base` of `buffer`, laid out
            /// as `layout` says.
            pub fn new(buffer: T, base: usize, layout: $crate::wire::PathLayout) -> Self {
                $view { buffer, base, layout }
            }
            #[inline(always)]
            fn at(&self, offset: [usize; 2]) -> usize {
                self.base + offset[self.layout as usize]
            }
        }
        $( $( $crate::wire::field::cm_field!(view $view, $f, $set, $ty, $kind($($spec)*)); )* )*

        $(#[$smeta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name {
            $( $( $(#[$fmeta])* pub $f: $ty, )* )*
        }

        impl $name {
            #[inline(always)]
            pub fn parse<T: AsRef<[u8]>>(p: &$view<T>) -> $crate::wire::Result<$name> {
                Ok($name {
                    $( $( $f: $crate::wire::field::cm_field!(
                        parse p, $f, $ty, $ibta, $kind($($spec)*)
                    ), )* )*
                })
            }

            #[inline]
            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut $view<T>) {
                $( $( $crate::wire::field::cm_field!(
                    emit p, self.$f, $f, $set, $ty, $kind($($spec)*)
                ); )* )*
            }

            /// The path's fields, named for `slot` (`primary_local_lid`,
            /// `AlternateLocalPortLID`, ...), in the lines `ibcm decode`
            /// prints.
            #[allow(clippy::vec_init_then_push)]
            pub fn rows(&self, slot: $crate::wire::PathSlot) -> Vec<Vec<$crate::wire::field::FieldRef<'_>>> {
                let s = slot as usize;
                let mut rows = Vec::new();
                $(
                    let mut row = Vec::new();
                    $( $crate::wire::field::cm_field!(
                        show rows, row, &self.$f,
                        [concat!("primary_", stringify!($f)), concat!("alternate_", stringify!($f))][s],
                        [concat!("Primary", $ibta), concat!("Alternate", $ibta)][s],
                        $show, $kind($($spec)*)
                    ); )*
                    rows.push(row);
                )*
                rows
            }
        }
    };
}
pub(crate) use cm_path;
