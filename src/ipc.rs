//! The host CM service protocol: fixed little-endian records on a Unix
//! `SOCK_SEQPACKET` socket (one record per message, so a record's length is
//! the message's), between a process (`runtime::remote`) and `ibcm daemon`
//! (`service`). A burst of records goes as one `BATCH` message (events the
//! service has queued; one-way calls a process made in a `Device::batch`):
//! its body is records, each preceded by its `u32` length (see [`batch`]
//! and [`unbatch`]).
//!
//! Every record starts with the same 20-byte header:
//!
//! ```text
//!  0  u16  op      a request (`op::*`, `ONEWAY | op`), `REPLY | op`,
//!                  `EVENT`, `REFUSED` or `PORTS` (pushed: the device's
//!                  port tables changed)
//!  2  u16  zero    must be 0
//!  4  u64  seq     the request's number, echoed by its reply (a request
//!                  with 0 gets no reply: a destroy nobody waits for); in
//!                  `EVENT` and `REFUSED`, how many one-way calls on the
//!                  id the service had run when it read the id's state
//! 12  u64  handle  the id the record is about (0 for device-wide ops)
//! 20  ...  body
//! ```
//!
//! A reply's body starts with an `i32` errno (0 or negative) followed by
//! the id's public fields (`Public`) and the call's result. Every field is
//! read through [`Reader`], which fails with `-EPROTO` on a short record, a
//! length field longer than what follows, an enum value out of range or
//! bytes left over — the service decodes what a process sends exactly as
//! the engine decodes what the wire brings.

use crate::engine::*;
use crate::fabric::TransportCounters;
use crate::wire::Gid;

/// Bytes of the common header.
pub const HEADER: usize = 20;
/// The largest record either side sends or accepts.
pub const MAX_RECORD: usize = 65536;
/// Private data, ARI and info areas are at most this long on the wire.
const MAX_BYTES: usize = 256;

/// Request op codes.
pub mod op {
    pub const OPEN: u16 = 1;
    pub const CREATE_ID: u16 = 2;
    pub const LISTEN: u16 = 3;
    pub const SEND_REQ: u16 = 4;
    pub const SEND_REP: u16 = 5;
    pub const SEND_RTU: u16 = 6;
    pub const SEND_DREQ: u16 = 7;
    pub const SEND_DREP: u16 = 8;
    pub const SEND_REJ: u16 = 9;
    pub const PREPARE_MRA: u16 = 10;
    pub const NOTIFY: u16 = 11;
    pub const INIT_QP_ATTR: u16 = 12;
    pub const SIDR_REQ: u16 = 13;
    pub const SIDR_REP: u16 = 14;
    pub const DESTROY: u16 = 15;
    pub const STATE: u16 = 16;
    pub const STAT: u16 = 17;
    /// Every id on the host (no OPEN needed): `u32` first index → `IdList`.
    pub const IDS: u16 = 18;
    /// Every served device's counters (no OPEN needed) → `Box<[DeviceStat]>`.
    pub const HOST_STAT: u16 = 19;
    /// `bool`: the id's `set_prepare_mra_on_report` flag (usually sent
    /// one-way; a value other than 0/1 is `-EPROTO`).
    pub const MRA_ON_REPORT: u16 = 20;
    /// `bool`, on a listener: the service pushes the QP attributes of
    /// every connection REQ the listener reports (`QP_ATTRS`, just before
    /// the REQ's event), so that the process answers its `init_qp_attr`
    /// calls on the new id (rdma_accept: INIT, RTR, RTS) without a round
    /// trip each. Sent one-way (a service that does not know it answers
    /// with an `-EOPNOTSUPP` reply the process drops; the process then
    /// asks as before). A value other than 0/1 is `-EPROTO`.
    pub const QP_ATTRS_ON_REQ: u16 = 21;
    // 22 is reserved: it was `WAKE_BATCH` (the connection's service
    // thread in `SCHED_BATCH`, asked by `IBCM_SERVICE_WAKE=batch`),
    // removed 2026-12-02 after a same-boot A/B in the lab showed no effect
    // (docs/PERFORMANCE.md §5, "WAKE_BATCH on and off in one boot"). A
    // service answers it `-EOPNOTSUPP` like any unknown op; the library
    // that sent it (one-way) dropped that answer. Do not reuse it.
    /// `bool`, on no id (handle 0; after OPEN): the service pushes the QP
    /// attributes (`QP_ATTRS`) with this connection's `REP_RECEIVED`
    /// events from now on (false, the default: it pushes none). A process
    /// sends it once, when it first shows that it moves QPs with the CM's
    /// attributes (its first `init_qp_attr`, a listener marked
    /// `QP_ATTRS_ON_REQ`): a process that never asks (`ibcm bench`)
    /// costs the service no `init_qp_attr` and encode per REP, and itself
    /// no decode. Sent one-way; an older service (which pushes them with
    /// every REP) answers `-EOPNOTSUPP` (dropped). A value other than 0/1
    /// is `-EPROTO`.
    pub const QP_ATTRS_ON_REP: u16 = 23;
    /// The highest request op of the CM calls.
    pub const LAST: u16 = QP_ATTRS_ON_REP;
    /// Design B (`IBCM_SERVICE_MODE=forward`; docs/SERVICE.md, "Design
    /// B"): the first record on a connection, name → [`super::FwdOpened`].
    /// The connection then carries [`super::fwd`] records both ways: the
    /// process runs the device's engines and the service forwards their
    /// MADs. Never part of the CM calls of an `OPEN` connection.
    pub const FWD_OPEN: u16 = 0x200;
    /// rdma_cm's host-wide port table (`portspace`; no OPEN needed):
    /// port space, port, address, REUSEADDR, AFONLY, owner → `u16` port.
    pub const PORT_BIND: u16 = 0x100;
    /// Port space, port, owner: the owner's binding listens.
    pub const PORT_LISTEN: u16 = 0x101;
    /// Port space, port, owner: the binding goes (usually sent with seq 0).
    pub const PORT_RELEASE: u16 = 0x102;
    /// rdma_cm ports: reserve ephemeral ports of a port space for this
    /// connection's next ephemeral binds (port space, count ≤
    /// `portspace::MAX_LEASE` → the ports, at least one).
    pub const PORT_LEASE: u16 = 0x103;
    /// rdma_cm ports: this connection's token (no body → `u64` holder,
    /// `u64` secret), which lets another connection of the same process
    /// release this one's bindings (`PORT_RELEASE_BY`). A service older
    /// than it answers `-EOPNOTSUPP`.
    pub const PORT_TOKEN: u16 = 0x104;
    /// Holder, secret (a `PORT_TOKEN` answer), port space, port, owner:
    /// that connection's binding goes. Sent by a process on a device's
    /// connection in the message of the id's `DESTROY` (one message per
    /// `rdma_destroy_id`); refused (`-EPERM`, counted) unless the holder
    /// is a live connection of the same process (peer pid and uid) whose
    /// secret it is.
    pub const PORT_RELEASE_BY: u16 = 0x105;

    /// Set in a reply's op.
    pub const REPLY: u16 = 0x8000;
    /// An event pushed by the service.
    pub const EVENT: u16 = 0x4000;
    /// Several records in one message (both ways: a process sends the
    /// one-way calls of a `Device::batch` as one).
    pub const BATCH: u16 = 0x2000;
    /// Set in a request's op: a one-way call (`SEND_REQ`, `SEND_REP`,
    /// `SEND_RTU`, `SEND_DREQ`, `SEND_DREP`, `SEND_REJ`, `MRA_ON_REPORT`,
    /// `QP_ATTRS_ON_REQ`) whose errno the
    /// process decided itself. No reply; if the service refuses it
    /// nevertheless, it pushes a `REFUSED` record.
    pub const ONEWAY: u16 = 0x1000;
    /// Pushed by the service: a one-way call it refused (`Refused`; header
    /// handle = the id's, seq = the id's one-way calls run so far).
    pub const REFUSED: u16 = 0x0800;
    /// Pushed by the service: the device's new port tables after a port
    /// event (GID added or removed, P_Key, LID, link state), as
    /// `Box<[PortInfo]>`; seq and handle 0. Checked by [`super::check_ports`]
    /// against the ports of the open before the process installs them.
    pub const PORTS: u16 = 0x0400;
    /// Pushed by the service just before a `REP_RECEIVED` event of a
    /// connection that asked (`QP_ATTRS_ON_REP`), and
    /// before a `REQ_RECEIVED` event of a listener marked with
    /// `QP_ATTRS_ON_REQ` (`QpAttrs`; header seq and handle those of the
    /// event: for a REQ, the new id's, which the process learns from the
    /// event that follows): the id's QP attributes for INIT, RTR and RTS
    /// as `INIT_QP_ATTR` answers them while the id is where the event
    /// leaves it, so that the process moves its QP to RTS and sends the
    /// RTU (the REP) without three round trips. A process that does not
    /// know it ignores it.
    pub const QP_ATTRS: u16 = 0x0200;
    /// Leases `u32` count (1..=`MAX_CREATE`) new IDLE ids to the process
    /// at once → `Box<[Created]>` (fewer when the id limit leaves less
    /// room; `-ENOMEM` when none). The process hands them out as its
    /// `create_id`s without a round trip each.
    pub const CREATE_IDS: u16 = 64;
    /// Ids one `CREATE_IDS` leases at most.
    pub const MAX_CREATE: u32 = 64;

    /// Whether `op` (the `ONEWAY` flag taken off) is a request the
    /// service knows.
    pub fn known(op: u16) -> bool {
        (1..=LAST).contains(&op) || op == CREATE_IDS || (PORT_BIND..=PORT_RELEASE_BY).contains(&op)
    }

    /// The requests that may be sent `ONEWAY`.
    pub fn oneway(op: u16) -> bool {
        matches!(
            op,
            SEND_REQ
                | SEND_REP
                | SEND_RTU
                | SEND_DREQ
                | SEND_DREP
                | SEND_REJ
                | MRA_ON_REPORT
                | QP_ATTRS_ON_REQ
                | QP_ATTRS_ON_REP
        )
    }
}

/// Packs `records` into as few messages as fit `MAX_RECORD`: a lone record
/// is sent as it is, several as a `BATCH`.
pub fn batch(records: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut msgs = Vec::new();
    let mut rest = &records[..];
    while !rest.is_empty() {
        let (n, msg) = batch_one(rest);
        msgs.push(msg);
        rest = &rest[n..];
    }
    msgs
}

/// The first message `batch` makes of `records` (not empty) and how many
/// of them it holds: as many leading records as fit `MAX_RECORD` (at
/// least one; a lone record as it is, several as a `BATCH`).
pub fn batch_one(records: &[Vec<u8>]) -> (usize, Vec<u8>) {
    let mut msg = Vec::new();
    let n = batch_into(records, &mut msg);
    if n == 1 {
        return (1, records[0].clone());
    }
    (n, msg)
}

/// Record buffers one thread keeps for reuse (the service's event
/// records, a process's sent records), so that a record costs no
/// `malloc`/`free` in the steady state: at most `max` buffers, each with a
/// capacity in `min_room..=max_room` (a larger one, a lease's or a port
/// table's record, is let go); a new buffer gets `min_room`.
pub struct Spares {
    bufs: Vec<Vec<u8>>,
    max: usize,
    min_room: usize,
    max_room: usize,
}

impl Spares {
    pub const fn new(max: usize, min_room: usize, max_room: usize) -> Spares {
        Spares {
            bufs: Vec::new(),
            max,
            min_room,
            max_room,
        }
    }

    /// A kept buffer (empty, with its capacity), or a new one.
    pub fn take(&mut self) -> Vec<u8> {
        self.bufs
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.min_room))
    }

    /// Keeps sent records' buffers of a record's size, up to `max`.
    pub fn keep(&mut self, recs: impl IntoIterator<Item = Vec<u8>>) {
        for r in recs {
            if self.bufs.len() >= self.max {
                break;
            }
            if (self.min_room..=self.max_room).contains(&r.capacity()) {
                self.bufs.push(r);
            }
        }
    }
}

/// `batch_one` written into `msg` (cleared first), so a sender reuses one
/// buffer: how many leading records it holds. When that is one, `msg` is
/// left empty and the record is sent as it is.
pub fn batch_into(records: &[Vec<u8>], msg: &mut Vec<u8>) -> usize {
    msg.clear();
    let (n, size) = batch_count(records, usize::MAX);
    if n == 1 {
        return 1;
    }
    msg.reserve(size);
    let mut w = Writer(std::mem::take(msg));
    Header {
        op: op::BATCH,
        seq: 0,
        handle: 0,
    }
    .put_into(&mut w);
    for r in &records[..n] {
        w.0.extend_from_slice(&(r.len() as u32).to_le_bytes());
        w.0.extend_from_slice(r);
    }
    *msg = w.0;
    n
}

/// How many leading records of `records` (not empty) one message holds
/// (at least one, at most `max`: as many as fit `MAX_RECORD`), and the
/// size of that message as a `BATCH`.
fn batch_count(records: &[Vec<u8>], max: usize) -> (usize, usize) {
    let mut size = HEADER;
    let mut n = 0;
    for r in records {
        if n > 0 && (n == max || size + 4 + r.len() > MAX_RECORD) {
            break;
        }
        size += 4 + r.len();
        n += 1;
    }
    (n, size)
}

/// The records of a `BATCH` message's body (`-EPROTO` for a short or
/// nested one: no record is returned then).
pub fn unbatch(body: &[u8]) -> Result<Vec<&[u8]>, Errno> {
    // Room for a burst of small records without growing.
    let mut out = Vec::with_capacity((body.len() / 64).clamp(1, 64));
    unbatch_with(body, |r| out.push(r))?;
    Ok(out)
}

/// `unbatch` without a `Vec`: `each` is called with every record of the
/// body, in order, in place (slices of `body`), once the whole body has
/// been checked — on `-EPROTO` (a short or nested record, a length past
/// the end) it is called for none.
pub fn unbatch_with<'a>(body: &'a [u8], mut each: impl FnMut(&'a [u8])) -> Result<usize, Errno> {
    let bad = Errno(errno::EPROTO);
    let next = |body: &'a [u8]| -> Result<(&'a [u8], &'a [u8]), Errno> {
        let (len, rest) = body.split_first_chunk::<4>().ok_or(bad)?;
        let len = u32::from_le_bytes(*len) as usize;
        if len > rest.len() {
            return Err(bad);
        }
        Ok(rest.split_at(len))
    };
    let mut rest = body;
    let mut n = 0;
    while !rest.is_empty() {
        let (rec, after) = next(rest)?;
        if Header::parse(rec)?.0.op == op::BATCH {
            return Err(bad);
        }
        n += 1;
        rest = after;
    }
    let mut rest = body;
    while !rest.is_empty() {
        let (rec, after) = next(rest)?;
        each(rec);
        rest = after;
    }
    Ok(n)
}

/// The common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub op: u16,
    pub seq: u64,
    pub handle: u64,
}

impl Header {
    /// A record with this header and nothing after it yet.
    pub fn record(self) -> Writer {
        self.record_for(128)
    }

    /// `record` with room for `size` bytes in all (header included), so
    /// a record of a known bound is written without growing its buffer.
    pub fn record_for(self, size: usize) -> Writer {
        self.record_in(Vec::with_capacity(size.max(HEADER)))
    }

    /// `record` written into `buf` (cleared first): a sender reuses the
    /// buffers of records it has sent.
    pub fn record_in(self, mut buf: Vec<u8>) -> Writer {
        buf.clear();
        let mut w = Writer(buf);
        self.put_into(&mut w);
        w
    }

    /// The header's bytes, as `put_into` writes them.
    fn bytes(self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        let mut at = 0;
        self.op.write(&mut b, &mut at);
        0u16.write(&mut b, &mut at);
        self.seq.write(&mut b, &mut at);
        self.handle.write(&mut b, &mut at);
        b
    }

    fn put_into(self, w: &mut Writer) {
        self.op.put(w);
        0u16.put(w);
        self.seq.put(w);
        self.handle.put(w);
    }

    /// Splits a record into its header and body.
    pub fn parse(rec: &[u8]) -> Result<(Header, Reader<'_>), Errno> {
        if rec.len() < HEADER || rec.len() > MAX_RECORD {
            return Err(Errno(errno::EPROTO));
        }
        let mut r = Reader(rec);
        let op = u16::get(&mut r)?;
        if u16::get(&mut r)? != 0 {
            return Err(Errno(errno::EPROTO));
        }
        let seq = u64::get(&mut r)?;
        let handle = u64::get(&mut r)?;
        Ok((Header { op, seq, handle }, r))
    }
}

/// Builds a record.
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn put<T: Field>(&mut self, v: &T) -> &mut Self {
        v.put(self);
        self
    }
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// Reads a record's fields, each checked against what is left.
pub struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader(b)
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], Errno> {
        if self.0.len() < n {
            return Err(Errno(errno::EPROTO));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    pub fn get<T: Field>(&mut self) -> Result<T, Errno> {
        T::get(self)
    }
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.0.len()
    }
    /// Fails unless every byte was read.
    pub fn end(&self) -> Result<(), Errno> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Errno(errno::EPROTO))
        }
    }
}

/// A value with a fixed little-endian encoding.
pub trait Field: Sized {
    fn put(&self, w: &mut Writer);
    fn get(r: &mut Reader<'_>) -> Result<Self, Errno>;
}

macro_rules! int_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn put(&self, w: &mut Writer) {
                w.0.extend_from_slice(&self.to_le_bytes());
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
                let b = r.take(std::mem::size_of::<$t>())?;
                Ok(<$t>::from_le_bytes(b.try_into().expect("length taken")))
            }
        }
    )*};
}
int_field!(u8, u16, u32, u64, i32);

/// Fields of a fixed size (or a bounded one: an `Option` of them) written
/// into a stack array at an offset, so that a record's fixed part is
/// appended with one `extend_from_slice` instead of one bounds-checked,
/// capacity-checked push per field (`put_fixed`). Every offset is a
/// constant once inlined. The bytes are exactly `Field::put`'s.
trait Fixed: Sized {
    fn write(&self, b: &mut [u8], at: &mut usize);
    /// Reads the value `write` wrote at `at` (checked like `Field::get`).
    fn read(b: &[u8], at: &mut usize) -> Result<Self, Errno>;
}

macro_rules! int_fixed {
    ($($t:ty),*) => {$(
        impl Fixed for $t {
            #[inline(always)]
            fn write(&self, b: &mut [u8], at: &mut usize) {
                const N: usize = std::mem::size_of::<$t>();
                b[*at..*at + N].copy_from_slice(&self.to_le_bytes());
                *at += N;
            }
            #[inline(always)]
            fn read(b: &[u8], at: &mut usize) -> Result<Self, Errno> {
                const N: usize = std::mem::size_of::<$t>();
                let v = <$t>::from_le_bytes(b[*at..*at + N].try_into().expect("N bytes"));
                *at += N;
                Ok(v)
            }
        }
    )*};
}
int_fixed!(u8, u16, u32, u64, i32);

impl Fixed for bool {
    #[inline(always)]
    fn write(&self, b: &mut [u8], at: &mut usize) {
        (*self as u8).write(b, at)
    }
    #[inline(always)]
    fn read(b: &[u8], at: &mut usize) -> Result<Self, Errno> {
        match u8::read(b, at)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Errno(errno::EPROTO)),
        }
    }
}

impl<const N: usize> Fixed for [u8; N] {
    #[inline(always)]
    fn write(&self, b: &mut [u8], at: &mut usize) {
        b[*at..*at + N].copy_from_slice(self);
        *at += N;
    }
    #[inline(always)]
    fn read(b: &[u8], at: &mut usize) -> Result<Self, Errno> {
        let v = b[*at..*at + N].try_into().expect("N bytes");
        *at += N;
        Ok(v)
    }
}

impl Fixed for Gid {
    #[inline(always)]
    fn write(&self, b: &mut [u8], at: &mut usize) {
        self.0.write(b, at)
    }
    #[inline(always)]
    fn read(b: &[u8], at: &mut usize) -> Result<Self, Errno> {
        Ok(Gid(<[u8; 16]>::read(b, at)?))
    }
}

impl<A: Fixed, B: Fixed> Fixed for (A, B) {
    #[inline(always)]
    fn write(&self, b: &mut [u8], at: &mut usize) {
        self.0.write(b, at);
        self.1.write(b, at);
    }
    #[inline(always)]
    fn read(b: &[u8], at: &mut usize) -> Result<Self, Errno> {
        Ok((A::read(b, at)?, B::read(b, at)?))
    }
}

impl<T: Fixed> Fixed for Option<T> {
    #[inline(always)]
    fn write(&self, b: &mut [u8], at: &mut usize) {
        match self {
            None => false.write(b, at),
            Some(v) => {
                true.write(b, at);
                v.write(b, at)
            }
        }
    }
    #[inline(always)]
    fn read(b: &[u8], at: &mut usize) -> Result<Self, Errno> {
        Ok(if bool::read(b, at)? {
            Some(T::read(b, at)?)
        } else {
            None
        })
    }
}

/// The most `put_fixed` writes at once (an event's head with a REQ's two
/// paths: 254 bytes).
const FIXED_ROOM: usize = 320;

/// Appends what `fill` writes (at most `FIXED_ROOM` bytes) with one copy.
#[inline(always)]
fn put_fixed(w: &mut Writer, fill: impl FnOnce(&mut [u8], &mut usize)) {
    let mut b = [0u8; FIXED_ROOM];
    let mut at = 0;
    fill(&mut b, &mut at);
    w.0.extend_from_slice(&b[..at]);
}

impl Field for bool {
    fn put(&self, w: &mut Writer) {
        (*self as u8).put(w)
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
        match u8::get(r)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Errno(errno::EPROTO)),
        }
    }
}

impl<const N: usize> Field for [u8; N] {
    fn put(&self, w: &mut Writer) {
        w.0.extend_from_slice(self)
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
        Ok(r.take(N)?.try_into().expect("length taken"))
    }
}

impl Field for Gid {
    fn put(&self, w: &mut Writer) {
        self.0.put(w)
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
        Ok(Gid(<[u8; 16]>::get(r)?))
    }
}

/// Byte strings (private data, ARI, info, names): a u16 length, at most
/// `MAX_BYTES` bytes.
impl Field for Vec<u8> {
    fn put(&self, w: &mut Writer) {
        let n = self.len().min(MAX_BYTES);
        (n as u16).put(w);
        w.0.extend_from_slice(&self[..n]);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
        let n = u16::get(r)? as usize;
        if n > MAX_BYTES {
            return Err(Errno(errno::EPROTO));
        }
        Ok(r.take(n)?.to_vec())
    }
}

impl<T: Field> Field for Option<T> {
    fn put(&self, w: &mut Writer) {
        match self {
            None => false.put(w),
            Some(v) => {
                true.put(w);
                v.put(w)
            }
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
        Ok(if bool::get(r)? {
            Some(T::get(r)?)
        } else {
            None
        })
    }
}

impl<A: Field, B: Field> Field for (A, B) {
    fn put(&self, w: &mut Writer) {
        self.0.put(w);
        self.1.put(w);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
        Ok((A::get(r)?, B::get(r)?))
    }
}

/// Lists (ports, GID tables, P_Keys): a u16 count, at most 4096 entries.
impl<T: Field> Field for Box<[T]> {
    fn put(&self, w: &mut Writer) {
        let n = self.len().min(4096);
        (n as u16).put(w);
        for v in &self[..n] {
            v.put(w);
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
        let n = u16::get(r)? as usize;
        if n > 4096 {
            return Err(Errno(errno::EPROTO));
        }
        (0..n).map(|_| T::get(r)).collect()
    }
}

/// `repr(u8)` enums: encoded as their value, decoded only if valid.
macro_rules! enum_field {
    ($t:ty, $from:expr) => {
        impl Field for $t {
            fn put(&self, w: &mut Writer) {
                (*self as u8).put(w)
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
                let f: fn(u8) -> Option<$t> = $from;
                f(u8::get(r)?).ok_or(Errno(errno::EPROTO))
            }
        }
        impl Fixed for $t {
            #[inline(always)]
            fn write(&self, b: &mut [u8], at: &mut usize) {
                (*self as u8).write(b, at)
            }
            #[inline(always)]
            fn read(b: &[u8], at: &mut usize) -> Result<Self, Errno> {
                let f: fn(u8) -> Option<$t> = $from;
                f(u8::read(b, at)?).ok_or(Errno(errno::EPROTO))
            }
        }
    };
}
enum_field!(PathRecType, |v| PathRecType::from_u32(v as u32));
enum_field!(GidType, |v| match v {
    0 => Some(GidType::Ib),
    1 => Some(GidType::RoceV1),
    2 => Some(GidType::RoceV2),
    _ => None,
});
enum_field!(State, |v| State::ALL.get(v as usize).copied());

/// Structs encoded as their fields in order.
macro_rules! struct_field {
    ($t:ident { $($f:ident),* $(,)? }) => {
        impl Field for $t {
            fn put(&self, w: &mut Writer) {
                $(self.$f.put(w);)*
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
                Ok($t { $($f: Field::get(r)?,)* })
            }
        }
    };
}

/// `struct_field!` for structs of `Fixed` fields, `$n` bytes encoded:
/// the same bytes, put at once (`put_fixed`) and read from one `$n`-byte
/// take (one length check; every offset a constant once inlined), and
/// `Fixed` itself (nested in an event's head).
macro_rules! fixed_field {
    ($t:ident [$n:expr] { $($f:ident),* $(,)? }) => {
        impl Field for $t {
            fn put(&self, w: &mut Writer) {
                put_fixed(w, |b, at| self.write(b, at))
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
                let b: &[u8; $n] = r.take($n)?.try_into().expect("length taken");
                let mut at = 0;
                let v = Self::read(b, &mut at)?;
                debug_assert_eq!(at, $n, "{}'s encoded size", stringify!($t));
                Ok(v)
            }
        }
        impl Fixed for $t {
            #[inline(always)]
            fn write(&self, b: &mut [u8], at: &mut usize) {
                $(self.$f.write(b, at);)*
            }
            #[inline(always)]
            fn read(b: &[u8], at: &mut usize) -> Result<Self, Errno> {
                Ok($t { $($f: Fixed::read(b, at)?,)* })
            }
        }
    };
}

/// `PathRec`'s encoded size.
const PATH_BYTES: usize = 81;
fixed_field!(PathRec[PATH_BYTES] {
    dgid,
    sgid,
    service_id,
    flow_label,
    hop_limit,
    traffic_class,
    reversible,
    numb_path,
    pkey,
    qos_class,
    sl,
    mtu_selector,
    mtu,
    rate_selector,
    rate,
    packet_life_time_selector,
    packet_life_time,
    preference,
    rec_type,
    flags,
    dlid,
    slid,
    raw_traffic,
    route_resolved,
    dmac,
});
fixed_field!(Ece[8] {
    vendor_id,
    attr_mod
});
struct_field!(AhAttr {
    port_num,
    sl,
    static_rate,
    has_grh,
    dgid,
    sgid_index,
    flow_label,
    hop_limit,
    traffic_class,
    dlid,
    src_path_bits,
    dmac,
    rec_type,
});
struct_field!(QpAttr {
    mask,
    qp_state,
    qp_access_flags,
    pkey_index,
    port_num,
    ah_attr,
    path_mtu,
    dest_qp_num,
    rq_psn,
    max_dest_rd_atomic,
    min_rnr_timer,
    alt_ah_attr,
    alt_port_num,
    alt_pkey_index,
    alt_timeout,
    sq_psn,
    retry_cnt,
    rnr_retry,
    max_rd_atomic,
    timeout,
    path_mig_state,
});
struct_field!(ReqParams {
    primary_path,
    primary_path_inbound,
    primary_path_outbound,
    alternate_path,
    sgid_attr,
    service_id,
    qp_num,
    qp_type,
    starting_psn,
    private_data,
    responder_resources,
    initiator_depth,
    remote_cm_response_timeout,
    flow_control,
    local_cm_response_timeout,
    retry_count,
    rnr_retry_count,
    max_cm_retries,
    srq,
    ece,
});
struct_field!(RepParams {
    qp_num,
    starting_psn,
    private_data,
    responder_resources,
    initiator_depth,
    failover_accepted,
    flow_control,
    rnr_retry_count,
    srq,
    ece,
});
struct_field!(SidrReqParams {
    path,
    sgid_attr,
    service_id,
    timeout_ms,
    private_data,
    max_cm_retries,
});
struct_field!(SidrRepParams {
    qp_num,
    qkey,
    status,
    info,
    private_data,
    ece
});
fixed_field!(RepEvent[35] {
    remote_ca_guid,
    remote_qkey,
    remote_qpn,
    starting_psn,
    responder_resources,
    initiator_depth,
    target_ack_delay,
    failover_accepted,
    flow_control,
    rnr_retry_count,
    srq,
    ece,
});
struct_field!(SidrRepEvent {
    status,
    qkey,
    qpn,
    info_len,
    sgid_attr
});
struct_field!(GidEntry { gid, gid_type });
impl Field for PortInfo {
    fn put(&self, w: &mut Writer) {
        self.port_num.put(w);
        Box::<[GidEntry]>::from(self.gids.as_slice()).put(w);
        Box::<[u16]>::from(self.pkeys.as_slice()).put(w);
        self.lid.put(w);
        self.lmc.put(w);
        self.is_roce.put(w);
        self.mtu.put(w);
        self.rate.put(w);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
        Ok(PortInfo {
            port_num: r.get()?,
            gids: Box::<[GidEntry]>::get(r)?.into_vec(),
            pkeys: Box::<[u16]>::get(r)?.into_vec(),
            lid: r.get()?,
            lmc: r.get()?,
            is_roce: r.get()?,
            mtu: r.get()?,
            rate: r.get()?,
        })
    }
}

/// A counters struct by its one field list (`fields()`, `fields_mut()`):
/// every value in declaration order, so a counter is added at the end of
/// its declaration (that order is the service protocol's).
macro_rules! counters_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn put(&self, w: &mut Writer) {
                for (_, row) in self.fields() {
                    for v in row {
                        v.put(w);
                    }
                }
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
                let mut c = <$t>::default();
                for (_, row) in c.fields_mut() {
                    for v in row {
                        *v = r.get()?;
                    }
                }
                Ok(c)
            }
        }
    )*};
}
counters_field!(Counters, TransportCounters);

/// The public `ib_cm_id` fields of an id, in host order, sent with every
/// reply about an id and every event so the process's copy follows the
/// service's. `version` orders the snapshots: the service numbers them in
/// the order it reads them (so in the order of the id's state changes),
/// replies and events leave on different threads and may arrive out of
/// that order, and the process keeps only a snapshot newer than the one it
/// has. 0 = no snapshot (an error reply about no id): never applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Public {
    pub state: u32,
    pub lap_state: u32,
    pub local_id: u32,
    pub remote_id: u32,
    pub service_id: u64,
    pub version: u64,
}
/// Encoded as its fields in order (32 bytes); decoded from one 32-byte
/// take (every reply about an id and every event carries one: one length
/// check instead of six).
impl Field for Public {
    fn put(&self, w: &mut Writer) {
        put_fixed(w, |b, at| self.write(b, at))
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
        let b: &[u8; PUBLIC_BYTES] = r.take(PUBLIC_BYTES)?.try_into().expect("length taken");
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes of a 32-byte array"))
        };
        Ok(Public {
            state: u32_at(0),
            lap_state: u32_at(4),
            local_id: u32_at(8),
            remote_id: u32_at(12),
            service_id: u64_at(16),
            version: u64_at(24),
        })
    }
}

impl Fixed for Public {
    #[inline(always)]
    fn write(&self, b: &mut [u8], at: &mut usize) {
        self.state.write(b, at);
        self.lap_state.write(b, at);
        self.local_id.write(b, at);
        self.remote_id.write(b, at);
        self.service_id.write(b, at);
        self.version.write(b, at);
    }
    #[inline(always)]
    fn read(b: &[u8], at: &mut usize) -> Result<Self, Errno> {
        Ok(Public {
            state: Fixed::read(b, at)?,
            lap_state: Fixed::read(b, at)?,
            local_id: Fixed::read(b, at)?,
            remote_id: Fixed::read(b, at)?,
            service_id: Fixed::read(b, at)?,
            version: Fixed::read(b, at)?,
        })
    }
}

/// `Public`'s encoded size.
const PUBLIC_BYTES: usize = 32;

/// One id leased by `CREATE_IDS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Created {
    pub handle: u64,
    pub public: Public,
}
struct_field!(Created { handle, public });

/// A one-way call the service refused (`op::REFUSED`): the call's op, its
/// errno and the id's public fields after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub op: u16,
    pub err: i32,
    pub public: Public,
}
struct_field!(Refused { op, err, public });

/// The reply to `OPEN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    pub name: Vec<u8>,
    pub node_guid: u64,
    pub ports: Box<[PortInfo]>,
}
struct_field!(Opened {
    name,
    node_guid,
    ports
});

/// The reply to `FWD_OPEN`: the device as `OPEN` gives it, the key of its
/// comm ID permutation (every process on the device shares it) and the
/// process's slot, which its comm IDs carry (`engine::ids::IdLayout`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FwdOpened {
    pub opened: Opened,
    pub id_key: u64,
    pub proc_slot: u32,
    /// The first generation of the process's comm ID slots (a slot reused
    /// after another process's does not start where that one did).
    pub gen_base: u32,
}
struct_field!(FwdOpened {
    opened,
    id_key,
    proc_slot,
    gen_base
});

/// The reply to `STAT`: the device's counters and this connection's.
#[derive(Debug, Clone, Default)]
pub struct Stat {
    pub cm: Counters,
    pub transport: TransportCounters,
    /// This process's ids on the device.
    pub live_ids: u64,
    /// Every id of the device (all processes).
    pub device_ids: u64,
    pub pending_timers: u64,
    /// Processes using the device.
    pub clients: u64,
    /// Requests of this process refused by its limits.
    pub limit_refusals: u64,
    /// Records this process sent that failed to decode.
    pub bad_records: u64,
    /// One-way calls of this process the service refused (a race with an
    /// event in flight: `op::REFUSED`).
    pub oneway_refused: u64,
    /// `QP_ATTRS` records pushed to this process (REPs after
    /// `QP_ATTRS_ON_REP`, REQs of marked listeners).
    pub qp_attrs_pushed: u64,
    /// `INIT_QP_ATTR` requests of this process (round trips the pushed
    /// attributes did not save).
    pub qp_attr_requests: u64,
}
struct_field!(Stat {
    cm,
    transport,
    live_ids,
    device_ids,
    pending_timers,
    clients,
    limit_refusals,
    bad_records,
    oneway_refused,
    qp_attrs_pushed,
    qp_attr_requests,
});

/// One id as `ibcm ids` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdInfo {
    pub pid: i32,
    pub device: Vec<u8>,
    /// `enum ib_cm_state`.
    pub state: u32,
    pub local_id: u32,
    pub remote_id: u32,
    pub service_id: u64,
    /// The peer's GID (from the REQ sent or received), if known.
    pub peer: Option<Gid>,
    pub age_ms: u64,
}
struct_field!(IdInfo {
    pid,
    device,
    state,
    local_id,
    remote_id,
    service_id,
    peer,
    age_ms
});

/// A page of `IDS`: the ids from `first` on, and how many there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdList {
    pub total: u32,
    pub first: u32,
    pub ids: Box<[IdInfo]>,
}
struct_field!(IdList { total, first, ids });

/// Ids in one `IDS` reply, at most (a record stays under `MAX_RECORD`).
pub const IDS_PER_PAGE: usize = 256;

/// One served device in `HOST_STAT`.
#[derive(Debug, Clone)]
pub struct DeviceStat {
    pub name: Vec<u8>,
    pub clients: u64,
    pub ids: u64,
    pub pending_timers: u64,
    pub cm: Counters,
    pub transport: TransportCounters,
    /// One-way calls on the device the service refused (all processes).
    pub oneway_refused: u64,
}
struct_field!(DeviceStat {
    name,
    clients,
    ids,
    pending_timers,
    cm,
    transport,
    oneway_refused
});

/// An id's QP attributes pushed with its `REP_RECEIVED` (or a marked
/// listener's `REQ_RECEIVED`) event (`op::QP_ATTRS`): `INIT_QP_ATTR`'s answers for INIT, RTR and RTS, and
/// the public fields of the snapshot they go with (the event's: the
/// process uses them only while that snapshot is the id's newest and the
/// id is still in its state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttrs {
    pub public: Public,
    pub init: QpAttr,
    pub rtr: QpAttr,
    pub rts: QpAttr,
}
struct_field!(QpAttrs {
    public,
    init,
    rtr,
    rts
});

impl QpAttrs {
    /// The attributes for `qp_state` (INIT, RTR or RTS).
    pub fn get(&self, qp_state: u32) -> Option<QpAttr> {
        match qp_state {
            qp_state::INIT => Some(self.init),
            qp_state::RTR => Some(self.rtr),
            qp_state::RTS => Some(self.rts),
            _ => None,
        }
    }

    /// `-EPROTO` unless each set is for its state (what a service of
    /// this version sends).
    pub fn check(&self) -> Result<(), Errno> {
        if self.init.qp_state == qp_state::INIT
            && self.rtr.qp_state == qp_state::RTR
            && self.rts.qp_state == qp_state::RTS
        {
            Ok(())
        } else {
            Err(Errno(errno::EPROTO))
        }
    }
}

/// An event as the service pushes it (`op::EVENT`, header handle = the
/// id's). For REQ/SIDR_REQ events the header names the new id and
/// `listener` the listener it matched.
#[derive(Debug, Clone)]
pub struct WireEvent {
    pub public: Public,
    pub listener: u64,
    pub event: Event,
}

/// The most an event record takes (header, fields, a REQ's parameters
/// and the 256-byte MAD): `Header::record_for` reserves it, so encoding
/// an event never grows its buffer.
pub const EVENT_RECORD: usize = 1024;

/// Encodes an event as `WireEvent` does, from references: the service's
/// handler writes the engine's event without cloning it.
pub fn put_event(w: &mut Writer, public: &Public, listener: u64, ev: &Event) {
    // The head, and the parameters of the events every connection has
    // (REQ, REP, none), in one copy; the rarer ones field by field.
    let mut tail = None;
    put_fixed(w, |b, at| {
        public.write(b, at);
        listener.write(b, at);
        (ev.kind as u32 as u8).write(b, at);
        ev.local_id.write(b, at);
        match &ev.param {
            EventParam::None => 0u8.write(b, at),
            EventParam::Req(p) => {
                2u8.write(b, at);
                p.bth_pkey.write(b, at);
                p.port.write(b, at);
                p.primary_path.write(b, at);
                p.alternate_path.write(b, at);
                p.sgid_attr.write(b, at);
                p.remote_ca_guid.write(b, at);
                p.remote_qkey.write(b, at);
                p.remote_qpn.write(b, at);
                p.qp_type.write(b, at);
                p.starting_psn.write(b, at);
                p.responder_resources.write(b, at);
                p.initiator_depth.write(b, at);
                p.local_cm_response_timeout.write(b, at);
                p.flow_control.write(b, at);
                p.remote_cm_response_timeout.write(b, at);
                p.retry_count.write(b, at);
                p.rnr_retry_count.write(b, at);
                p.srq.write(b, at);
                p.ece.write(b, at);
            }
            EventParam::Rep(p) => {
                3u8.write(b, at);
                p.write(b, at)
            }
            other => tail = Some(other),
        }
    });
    match tail {
        None => {}
        Some(EventParam::SendStatus(s)) => {
            1u8.put(w);
            s.put(w)
        }
        Some(EventParam::Rej { reason, ari_length }) => {
            w.put(&4u8).put(reason).put(ari_length);
        }
        Some(EventParam::Mra { service_timeout }) => {
            w.put(&5u8).put(service_timeout);
        }
        Some(EventParam::Lap { alternate_path }) => {
            w.put(&6u8).put(&**alternate_path);
        }
        Some(EventParam::Apr {
            ap_status,
            info_len,
        }) => {
            w.put(&7u8).put(ap_status).put(info_len);
        }
        Some(EventParam::SidrReq(p)) => {
            w.put(&8u8)
                .put(&p.service_id)
                .put(&p.sgid_attr)
                .put(&p.bth_pkey)
                .put(&p.port)
                .put(&p.pkey);
        }
        Some(EventParam::SidrRep(p)) => {
            9u8.put(w);
            p.put(w)
        }
        Some(EventParam::None | EventParam::Req(_) | EventParam::Rep(_)) => {
            unreachable!("written with the head")
        }
    }
    // The MAD as `Option<[u8; 256]>` puts it, without the copy into one.
    match ev.mad.as_deref() {
        Some(m) => {
            w.0.push(1);
            w.0.extend_from_slice(m);
        }
        None => w.0.push(0),
    }
}

impl Field for WireEvent {
    fn put(&self, w: &mut Writer) {
        put_event(w, &self.public, self.listener, &self.event);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, Errno> {
        let public = r.get()?;
        let listener: u64 = r.get()?;
        let kind = event_type(r.get()?).ok_or(Errno(errno::EPROTO))?;
        let local_id = r.get()?;
        let lid = Handle(listener);
        let param = match u8::get(r)? {
            0 => EventParam::None,
            1 => EventParam::SendStatus(r.get()?),
            2 => EventParam::Req(Box::new(ReqEvent {
                listen_id: lid,
                bth_pkey: r.get()?,
                port: r.get()?,
                primary_path: r.get()?,
                alternate_path: r.get()?,
                sgid_attr: r.get()?,
                remote_ca_guid: r.get()?,
                remote_qkey: r.get()?,
                remote_qpn: r.get()?,
                qp_type: r.get()?,
                starting_psn: r.get()?,
                responder_resources: r.get()?,
                initiator_depth: r.get()?,
                local_cm_response_timeout: r.get()?,
                flow_control: r.get()?,
                remote_cm_response_timeout: r.get()?,
                retry_count: r.get()?,
                rnr_retry_count: r.get()?,
                srq: r.get()?,
                ece: r.get()?,
            })),
            3 => EventParam::Rep(r.get()?),
            4 => EventParam::Rej {
                reason: r.get()?,
                ari_length: r.get()?,
            },
            5 => EventParam::Mra {
                service_timeout: r.get()?,
            },
            6 => EventParam::Lap {
                alternate_path: Box::new(r.get()?),
            },
            7 => EventParam::Apr {
                ap_status: r.get()?,
                info_len: r.get()?,
            },
            8 => EventParam::SidrReq(SidrReqEvent {
                listen_id: lid,
                service_id: r.get()?,
                sgid_attr: r.get()?,
                bth_pkey: r.get()?,
                port: r.get()?,
                pkey: r.get()?,
            }),
            9 => EventParam::SidrRep(r.get()?),
            _ => return Err(Errno(errno::EPROTO)),
        };
        // The MAD goes from the record straight into its box (one copy;
        // `Option<[u8; 256]>` went through two 256-byte temporaries).
        let mad = if bool::get(r)? {
            Some(boxed_mad(r.take(256)?))
        } else {
            None
        };
        Ok(WireEvent {
            public,
            listener,
            event: Event {
                id: Handle(0),
                kind,
                param,
                local_id,
                mad,
            },
        })
    }
}

/// A boxed copy of a MAD's 256 bytes, copied once from the record into
/// a box of this thread's pool when it has one (the thread that delivers
/// the event gives the box back to its pool: `recycle_event_mad`).
fn boxed_mad(b: &[u8]) -> Box<[u8; 256]> {
    crate::engine::boxed_event_mad(b)
}

fn event_type(v: u8) -> Option<EventType> {
    EventType::ALL.get(v as usize).copied()
}

/// A reply record: errno, the id's public fields, then `body`.
pub fn reply(req: Header, err: i32, public: Public, body: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Header {
        op: op::REPLY | req.op,
        seq: req.seq,
        handle: req.handle,
    }
    .record();
    w.put(&err).put(&public);
    if err == 0 {
        body(&mut w);
    }
    w.into_bytes()
}

/// Checks a pushed `PORTS` record (header and decoded tables) as the
/// process checks any input: seq and handle 0, and the ports of the open
/// (`opened`: same port numbers in the same order, same link layer — a
/// port event changes a port's tables, never the device's ports), each
/// port's P_Key table non-empty (every transport reports at least the
/// default P_Key; list lengths are bounded by the decoder). `-EPROTO`
/// otherwise.
pub fn check_ports(h: Header, ports: &[PortInfo], opened: &[PortInfo]) -> Result<(), Errno> {
    let bad = Err(Errno(errno::EPROTO));
    if h.op != op::PORTS || h.seq != 0 || h.handle != 0 || ports.len() != opened.len() {
        return bad;
    }
    for (p, o) in ports.iter().zip(opened) {
        if p.port_num != o.port_num || p.is_roce != o.is_roce || p.pkeys.is_empty() {
            return bad;
        }
    }
    Ok(())
}

/// The service socket: `$IBCM_SERVICE_SOCKET`, else [`default_socket`].
pub fn socket_path() -> std::path::PathBuf {
    std::env::var_os("IBCM_SERVICE_SOCKET")
        .filter(|v| !v.is_empty())
        .map(Into::into)
        .unwrap_or_else(default_socket)
}

/// `/run/ibcm/ibcmd.<N>.sock`, N the inode of this process's network
/// namespace: one service per namespace, since the service binds the
/// `soft:` addresses (and reaches the devices) of its own namespace — a
/// process in another namespace starts or finds that namespace's service.
/// `/run/ibcm/ibcmd.sock` if the namespace cannot be read.
pub fn default_socket() -> std::path::PathBuf {
    let ns = std::fs::read_link("/proc/self/ns/net").ok().and_then(|l| {
        let s = l.to_string_lossy().into_owned();
        let n = s.strip_prefix("net:[")?.strip_suffix(']')?;
        n.parse::<u64>().ok()
    });
    match ns {
        Some(n) => format!("{SOCKET_DIR}/ibcmd.{n}.sock").into(),
        None => format!("{SOCKET_DIR}/ibcmd.sock").into(),
    }
}

/// Where the service's sockets live.
pub const SOCKET_DIR: &str = "/run/ibcm";

/// `SOCK_SEQPACKET` Unix sockets: one record per message.
pub mod sock {
    use super::{Header, op};
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::path::Path;

    /// What `/proc/<pid>/stat` says of a process: what each end of a
    /// service connection reads of the other (`peer`'s pid). Each field is
    /// `None` when it is not there.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ProcStat {
        /// The state letter (field 3: `R`, `S`, `T`, `Z`, ...).
        pub state: Option<char>,
        /// The flags word (field 9; `PF_EXITING` is 0x4).
        pub flags: Option<u64>,
        /// The CPU time used so far, user + system (fields 14 and 15), in
        /// milliseconds: how a client tells a busy service (its CPU time
        /// grows) from a hung one.
        pub cpu_ms: Option<u64>,
    }

    /// Reads `/proc/<pid>/stat` (fields counted after the command's
    /// closing parenthesis, which may itself contain spaces). `Err`:
    /// unreadable (no such process, another PID namespace's pid, no
    /// `/proc` here).
    pub fn proc_stat(pid: i32) -> io::Result<ProcStat> {
        let st = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let f: Vec<&str> = st
            .rsplit_once(')')
            .map_or("", |(_, r)| r)
            .split_whitespace()
            .collect();
        let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let hz = if hz > 0 { hz as u64 } else { 100 };
        Ok(ProcStat {
            state: f.first().and_then(|s| s.chars().next()),
            // Field 9 is the 7th after the parenthesis (counted from 3),
            // fields 14 and 15 the 12th and 13th.
            flags: num(6),
            cpu_ms: num(11)
                .zip(num(12))
                .map(|(u, s)| (u + s).saturating_mul(1000) / hz),
        })
    }

    /// A connected pair of seqpacket sockets (the service's socket type),
    /// for tests that play both ends.
    #[cfg(test)]
    pub(crate) fn pair() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: a valid array of two descriptors.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0, "socketpair: {}", io::Error::last_os_error());
        // SAFETY: both were just opened and are owned here only.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    fn addr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
        use std::os::unix::ffi::OsStrExt;
        let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        a.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let b = path.as_os_str().as_bytes();
        if b.is_empty() || b.len() >= a.sun_path.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("socket path {} is empty or too long", path.display()),
            ));
        }
        for (d, s) in a.sun_path.iter_mut().zip(b) {
            *d = *s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sa_family_t>() + b.len() + 1;
        Ok((a, len as libc::socklen_t))
    }

    fn socket() -> io::Result<OwnedFd> {
        socket_with(0)
    }

    /// A seqpacket socket with `flags` (`SOCK_NONBLOCK`) besides `SOCK_CLOEXEC`.
    fn socket_with(flags: libc::c_int) -> io::Result<OwnedFd> {
        let fd = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | flags,
                0,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// `libc::connect` or `libc::bind`.
    type SockAddrCall =
        unsafe extern "C" fn(libc::c_int, *const libc::sockaddr, libc::socklen_t) -> libc::c_int;

    /// `connect` or `bind` (`call`) of `fd` to a socket address.
    fn at_addr(
        fd: &OwnedFd,
        (a, len): (libc::sockaddr_un, libc::socklen_t),
        call: SockAddrCall,
    ) -> io::Result<()> {
        let r = unsafe {
            call(
                fd.as_raw_fd(),
                &a as *const libc::sockaddr_un as *const libc::sockaddr,
                len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Connects to the service at `path` (blocking while its listen
    /// backlog is full: [`connect_within`] bounds that).
    pub fn connect(path: &Path) -> io::Result<OwnedFd> {
        let fd = socket()?;
        at_addr(&fd, addr(path)?, libc::connect)?;
        Ok(fd)
    }

    /// Connects to the service at `path`, waiting at most `d` for room in
    /// its listen backlog (a stopped or wedged service stops accepting;
    /// once its backlog is full a plain `connect` blocks until it accepts
    /// again): `ErrorKind::TimedOut` then. A Unix socket has no
    /// asynchronous connect (non-blocking, a full backlog is `EAGAIN` at
    /// once and nothing to `poll` for), but its `connect` waits at most the
    /// socket's `SO_SNDTIMEO` and then fails with `EAGAIN`: that bound is
    /// set first and stays `d` on the connected socket — the send bound
    /// its callers (a device's connection, the port table's, a query) set.
    /// A signal during the wait restarts it with the time left. Nobody
    /// listening is `ECONNREFUSED` / `ENOENT` at once, as for `connect`.
    pub fn connect_within(path: &Path, d: std::time::Duration) -> io::Result<OwnedFd> {
        let a = addr(path)?;
        let fd = socket()?;
        let deadline = std::time::Instant::now() + d;
        let mut left = d;
        loop {
            // A zero `SO_SNDTIMEO` would mean no bound at all.
            set_timeouts(&fd, left.max(std::time::Duration::from_micros(1)), false)?;
            let e = match at_addr(&fd, a, libc::connect) {
                Ok(()) => return Ok(fd),
                Err(e) => e,
            };
            left = deadline.saturating_duration_since(std::time::Instant::now());
            match e.kind() {
                io::ErrorKind::Interrupted if !left.is_zero() => continue,
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "no connection accepted within {} ms, the listen backlog stayed full",
                            d.as_millis()
                        ),
                    ));
                }
                _ => return Err(e),
            }
        }
    }

    /// Whether a socket listens at `path`, without waiting: a full
    /// backlog (`EAGAIN` from a non-blocking connect) is a listener too.
    fn listened(path: &Path) -> io::Result<bool> {
        let fd = socket_with(libc::SOCK_NONBLOCK)?;
        match at_addr(&fd, addr(path)?, libc::connect) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(true),
            Err(_) => Ok(false),
        }
    }

    /// Binds and listens at `path` (a stale socket file nobody answers
    /// on is replaced; a live one is `EADDRINUSE`). The socket is bound
    /// under a temporary name beside `path`, `prepare` runs on that file
    /// (owner, mode), and only once it listens is it renamed to `path`:
    /// a socket file at `path` always answers with its final owner and
    /// mode (a client that found it earlier could see them change under
    /// it, or be refused by a socket not yet listening).
    ///
    /// Two services starting at once (two processes opening a device with
    /// none running) must not both listen — the second rename would take
    /// the path from the first, which would go on serving its clients
    /// alone: the check and the rename are one step under an exclusive
    /// `flock` of the socket's directory (held for that step only), so the
    /// second finds the first listening and fails with `EADDRINUSE`. A
    /// live service whose backlog is full is found listening too, without
    /// waiting.
    pub fn listen(
        path: &Path,
        prepare: impl FnOnce(&Path) -> io::Result<()>,
    ) -> io::Result<OwnedFd> {
        addr(path)?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let dir = std::fs::File::open(dir)?;
        uninterrupted(|| unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) as isize })?;
        if path.exists() {
            if listened(path)? {
                return Err(io::Error::from_raw_os_error(libc::EADDRINUSE));
            }
            let _ = std::fs::remove_file(path);
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}", std::process::id()));
        let tmp = std::path::PathBuf::from(tmp);
        let a = addr(&tmp)?;
        let _ = std::fs::remove_file(&tmp);
        let fd = socket()?;
        at_addr(&fd, a, libc::bind)?;
        let ready = prepare(&tmp).and_then(|()| {
            if unsafe { libc::listen(fd.as_raw_fd(), 128) } < 0 {
                return Err(io::Error::last_os_error());
            }
            std::fs::rename(&tmp, path)
        });
        if let Err(e) = ready {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(fd)
    }

    /// Runs a system call until it is not interrupted (`EINTR`): its
    /// non-negative result, or the error it set.
    fn uninterrupted(mut call: impl FnMut() -> isize) -> io::Result<usize> {
        loop {
            let n = call();
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// `Ok(None)` for a call that would have blocked (`MSG_DONTWAIT`).
    fn unless_would_block(r: io::Result<usize>) -> io::Result<Option<usize>> {
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            r => r.map(Some),
        }
    }

    /// Accepts a connection (blocking).
    pub fn accept(fd: &OwnedFd) -> io::Result<OwnedFd> {
        let c = uninterrupted(|| unsafe {
            libc::accept4(
                fd.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            ) as isize
        })?;
        Ok(unsafe { OwnedFd::from_raw_fd(c as libc::c_int) })
    }

    /// `send` of one record with `flags` (and `MSG_NOSIGNAL`: never
    /// raises SIGPIPE).
    fn send_with(fd: &OwnedFd, rec: &[u8], flags: libc::c_int) -> io::Result<usize> {
        uninterrupted(|| unsafe {
            libc::send(
                fd.as_raw_fd(),
                rec.as_ptr() as *const libc::c_void,
                rec.len(),
                flags | libc::MSG_NOSIGNAL,
            )
        })
    }

    /// `recv` of one record into `buf` with `flags`.
    fn recv_with(fd: &OwnedFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
        uninterrupted(|| unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                flags,
            )
        })
    }

    /// Sends one record (never raises SIGPIPE).
    pub fn send(fd: &OwnedFd, rec: &[u8]) -> io::Result<()> {
        send_with(fd, rec, 0).map(|_| ())
    }

    /// Sends one record if the socket has room now: `Ok(false)` when it
    /// would block (never raises SIGPIPE).
    pub fn try_send(fd: &OwnedFd, rec: &[u8]) -> io::Result<bool> {
        unless_would_block(send_with(fd, rec, libc::MSG_DONTWAIT)).map(|n| n.is_some())
    }

    /// The most records `try_send_batch` puts in one message: two iovecs
    /// each (length, bytes) and the header's, within `IOV_MAX` (1024).
    pub const BATCH_IOVECS: usize = 511;

    thread_local! {
        /// `try_send_batch`'s lengths and iovecs, reused (emptied before
        /// each use: the pointers of the last call are never read).
        static IOV: std::cell::RefCell<(Vec<[u8; 4]>, Vec<libc::iovec>)> =
            const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    }

    /// Sends, without waiting, the first message `batch_one` makes of
    /// `records` (not empty; at most `BATCH_IOVECS` records in it) without
    /// copying the records: one `sendmsg` whose iovecs are the `BATCH`
    /// header, then each record's length and bytes (a lone record as it
    /// is). How many records it held, or `None` when the socket had no
    /// room: a `SOCK_SEQPACKET` message leaves whole or not at all, so
    /// nothing was sent then.
    pub fn try_send_batch(fd: &OwnedFd, records: &[Vec<u8>]) -> io::Result<Option<usize>> {
        let (n, _) = super::batch_count(records, BATCH_IOVECS);
        if n == 1 {
            return Ok(try_send(fd, &records[0])?.then_some(1));
        }
        let head = Header {
            op: op::BATCH,
            seq: 0,
            handle: 0,
        }
        .bytes();
        IOV.with(|s| {
            let (lens, iov) = &mut *s.borrow_mut();
            lens.clear();
            iov.clear();
            // Every length first: `iov` points into `lens`, which must not
            // move after.
            lens.extend(records[..n].iter().map(|r| (r.len() as u32).to_le_bytes()));
            let v = |p: *const u8, len: usize| libc::iovec {
                iov_base: p as *mut libc::c_void,
                iov_len: len,
            };
            iov.push(v(head.as_ptr(), head.len()));
            for (r, l) in records[..n].iter().zip(lens.iter()) {
                iov.push(v(l.as_ptr(), 4));
                iov.push(v(r.as_ptr(), r.len()));
            }
            // SAFETY: an all-zero msghdr is a valid empty header; its
            // iovecs point at `head`, `lens` and the records, all alive
            // and unchanged until `sendmsg` returns.
            let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
            m.msg_iov = iov.as_mut_ptr();
            m.msg_iovlen = iov.len() as _;
            let sent = uninterrupted(|| unsafe {
                libc::sendmsg(fd.as_raw_fd(), &m, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
            });
            unless_would_block(sent).map(|s| s.map(|_| n))
        })
    }

    /// Receives one record into `buf`; `Ok(0)` when the peer has gone. A
    /// record longer than `buf` is cut (and then fails to decode).
    pub fn recv(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
        recv_with(fd, buf, 0)
    }

    /// Messages one `recvmmsg` reads while a wake-up drains (each into a
    /// buffer of `MAX_RECORD`, allocated at a reader's first drain; their
    /// zeroed pages are mapped only as records fill them): the service's
    /// and the forward transport's readers.
    pub const RECV_MANY: usize = 8;

    /// Receives the records queued now, one per buffer of `bufs` (at most
    /// that many), in one `recvmmsg`: their lengths in `lens`, how many
    /// came (`0` when none was queued). A zero length is the peer gone; a
    /// record longer than its buffer is cut (and then fails to decode).
    pub fn try_recv_many(
        fd: &OwnedFd,
        bufs: &mut [Vec<u8>],
        lens: &mut [usize],
    ) -> io::Result<usize> {
        let k = bufs.len().min(lens.len());
        let mut iov: Vec<libc::iovec> = bufs[..k]
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: an all-zero mmsghdr is a valid empty header.
        let mut hdrs: Vec<libc::mmsghdr> = (0..k).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (h, v) in hdrs.iter_mut().zip(iov.iter_mut()) {
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
        }
        let got = unless_would_block(uninterrupted(|| unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                hdrs.as_mut_ptr(),
                k as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            ) as isize
        }))?
        .unwrap_or(0);
        for (l, h) in lens.iter_mut().zip(&hdrs[..got]) {
            *l = h.msg_len as usize;
        }
        Ok(got)
    }

    /// Waits until the socket has a record to read, or its end or an
    /// error to report (`poll`, no timeout).
    pub fn wait_readable(fd: &OwnedFd) -> io::Result<()> {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        uninterrupted(|| unsafe { libc::poll(&mut p, 1, -1) as isize }).map(|_| ())
    }

    /// Bytes of the records queued on the socket and not read yet
    /// (`SIOCINQ`: for a `SOCK_SEQPACKET` socket Linux sums every queued
    /// record, `unix_inq_len`).
    pub fn queued(fd: &OwnedFd) -> io::Result<usize> {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD (SIOCINQ) writes one int.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n.max(0) as usize)
    }

    /// Receives one record if one is queued now: `Ok(None)` when none is
    /// (`Ok(Some(0))` when the peer has gone).
    pub fn try_recv(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
        unless_would_block(recv_with(fd, buf, libc::MSG_DONTWAIT))
    }

    /// Ends both directions: a thread blocked in `recv` on it returns 0.
    pub fn shutdown(fd: &OwnedFd) {
        unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) };
    }

    /// The process at the other end (`SO_PEERCRED`): pid, uid.
    pub fn peer(fd: &OwnedFd) -> (i32, u32) {
        let mut c: libc::ucred = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                &mut c as *mut libc::ucred as *mut libc::c_void,
                &mut len,
            )
        };
        if r < 0 { (0, u32::MAX) } else { (c.pid, c.uid) }
    }

    /// Bounds this socket's blocking `send` (`SO_SNDTIMEO`) and, with
    /// `recv_too`, its blocking `recv` (`SO_RCVTIMEO`) to `d`: a call
    /// that waited that long fails with `WouldBlock` (`EAGAIN`). Set once
    /// per connection; no cost per call.
    pub fn set_timeouts(fd: &OwnedFd, d: std::time::Duration, recv_too: bool) -> io::Result<()> {
        let tv = libc::timeval {
            tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_usec: d.subsec_micros() as libc::suseconds_t,
        };
        let opts: &[libc::c_int] = if recv_too {
            &[libc::SO_SNDTIMEO, libc::SO_RCVTIMEO]
        } else {
            &[libc::SO_SNDTIMEO]
        };
        for &opt in opts {
            let r = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    &tv as *const libc::timeval as *const libc::c_void,
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// A binding's release that rides in the message of the id's `DESTROY`
/// on a device's connection (`ipc` op `PORT_RELEASE_BY`; from
/// `portspace::HostPorts::release_ticket`), so that `rdma_destroy_id` sends one
/// message, not two. Not sent: the caller releases the binding with
/// `portspace::HostPorts::release`.
#[derive(Debug)]
pub struct PortRelease(pub(crate) Vec<u8>);

/// An EVENT record `n` (sequence and handle `n`) padded to `len` bytes
/// of `n` (tests of the records' batching and backlog).
#[cfg(test)]
pub(crate) fn test_record(n: u64, len: usize) -> Vec<u8> {
    let mut w = Header {
        op: op::EVENT,
        seq: n,
        handle: n,
    }
    .record();
    w.0.resize(len, n as u8);
    w.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::test_record as rec;
    use super::*;

    /// `Spares` keeps only buffers of a record's size, at most `max`, and
    /// hands them back before making a new one of `min_room`.
    #[test]
    fn spares_keep_record_sized_buffers_up_to_their_max() {
        let mut s = Spares::new(2, 128, 1024);
        let fresh = s.take();
        assert_eq!((fresh.len(), fresh.capacity()), (0, 128));
        s.keep([
            Vec::with_capacity(64),
            Vec::with_capacity(2048),
            Vec::with_capacity(300),
            Vec::with_capacity(1024),
            Vec::with_capacity(128),
        ]);
        assert_eq!(s.take().capacity(), 1024);
        assert_eq!(s.take().capacity(), 300);
        assert_eq!(s.take().capacity(), 128, "a third kept past max");
    }

    /// The counters' wire positions are the service protocol's, whatever
    /// the Rust declarations say: typed in here, not derived from them.
    #[test]
    fn counters_keep_their_wire_positions() {
        let mut c = Counters::default();
        c.tx[0] = 1;
        c.timeouts[11] = 2;
        c.rej_tx[0] = 3;
        c.drops[0] = 4;
        c.ids_created = 5;
        c.rx_off_path = 6;
        let t = TransportCounters {
            rx_datagrams: 7,
            tx_unroutable: 8,
            ..TransportCounters::default()
        };
        let mut w = Writer(Vec::new());
        w.put(&c).put(&t);
        let b = w.into_bytes();
        let at = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        assert_eq!(b.len(), 8 * (148 + 7));
        let pinned = [(0, 1), (59, 2), (60, 3), (134, 4), (142, 5), (147, 6)];
        for (i, v) in pinned.into_iter().chain([(148, 7), (154, 8)]) {
            assert_eq!(at(i), v, "u64 {i} of the record");
        }
        let mut r = Reader::new(&b);
        assert_eq!(r.get::<Counters>().unwrap(), c);
        assert_eq!(r.get::<TransportCounters>().unwrap(), t);
    }

    #[test]
    fn records_round_trip() {
        let p = ReqParams {
            primary_path: PathRec {
                dgid: Gid([7; 16]),
                rec_type: PathRecType::RoceV2,
                dmac: [1, 2, 3, 4, 5, 6],
                route_resolved: true,
                ..PathRec::default()
            },
            alternate_path: Some(PathRec::default()),
            sgid_attr: Some((1, 3)),
            service_id: 0x1234,
            private_data: vec![9; 92],
            ece: Ece {
                vendor_id: 5,
                attr_mod: 6,
            },
            ..ReqParams::default()
        };
        let mut w = Header {
            op: op::SEND_REQ,
            seq: 7,
            handle: 9,
        }
        .record();
        w.put(&p);
        let rec = w.into_bytes();
        let (h, mut r) = Header::parse(&rec).unwrap();
        assert_eq!((h.op, h.seq, h.handle), (op::SEND_REQ, 7, 9));
        let q: ReqParams = r.get().unwrap();
        r.end().unwrap();
        assert_eq!(format!("{p:?}"), format!("{q:?}"));
        // Every truncation is refused, never a panic.
        for n in 0..rec.len() {
            let res = Header::parse(&rec[..n]).and_then(|(_, mut r)| {
                let v: ReqParams = r.get()?;
                r.end().map(|()| v)
            });
            assert!(res.is_err(), "truncated at {n} accepted");
        }
    }

    #[test]
    fn the_default_socket_is_per_network_namespace() {
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        assert_eq!(
            default_socket(),
            std::path::PathBuf::from(format!("/run/ibcm/ibcmd.{ino}.sock"))
        );
    }

    /// `Public` from one 32-byte take: each field at its own offset
    /// (distinct values), nothing read past it; an event's MAD copied
    /// whole into its box; every cut of an event record (in the public
    /// fields, in the MAD) and a MAD flag other than 0/1 refused.
    #[test]
    fn public_fields_and_the_mad_decode_in_place() {
        let p = Public {
            state: 0x0403_0201,
            lap_state: 0x0807_0605,
            local_id: 0x0c0b_0a09,
            remote_id: 0x100f_0e0d,
            service_id: 0x1817_1615_1413_1211,
            version: 0x201f_1e1d_1c1b_1a19,
        };
        let mut w = Writer(Vec::new());
        w.put(&p).put(&0xeeu8);
        let b = w.into_bytes();
        assert_eq!(b.len(), PUBLIC_BYTES + 1);
        let mut r = Reader::new(&b);
        assert_eq!(r.get::<Public>(), Ok(p));
        assert_eq!(r.get::<u8>(), Ok(0xee), "read past the public fields");
        for n in 0..PUBLIC_BYTES {
            assert!(Reader::new(&b[..n]).get::<Public>().is_err(), "cut at {n}");
        }
        let mad = patterned_mad(1);
        let b = encoded_event(p, 7, EventType::DreqReceived, 5, mad);
        let got: WireEvent = Reader::new(&b).get().unwrap();
        assert_eq!(got.public, p);
        assert_eq!(got.event.mad.as_deref(), Some(&mad));
        for n in 0..b.len() {
            assert!(
                Reader::new(&b[..n]).get::<WireEvent>().is_err(),
                "event cut at {n} of {} accepted",
                b.len()
            );
        }
        let flag = b.len() - 257;
        assert_eq!(b[flag], 1);
        let mut bad = b.clone();
        bad[flag] = 2;
        assert!(Reader::new(&bad).get::<WireEvent>().is_err());
    }

    /// A MAD whose byte i is i × `mul` (mod 256).
    fn patterned_mad(mul: u8) -> [u8; 256] {
        std::array::from_fn(|i| (i as u8).wrapping_mul(mul))
    }

    /// The wire bytes of an event of `kind` on `local_id` carrying `mad`.
    fn encoded_event(
        public: Public,
        listener: u64,
        kind: EventType,
        local_id: u32,
        mad: [u8; 256],
    ) -> Vec<u8> {
        let ev = WireEvent {
            public,
            listener,
            event: Event {
                id: Handle(0),
                kind,
                param: EventParam::None,
                local_id,
                mad: Some(Box::new(mad)),
            },
        };
        let mut w = Writer(Vec::new());
        w.put(&ev);
        w.into_bytes()
    }

    /// A served process decodes an event's MAD into a box of its
    /// thread's pool (the boxes its deliveries gave back): the box is
    /// reused, and holds this record's bytes, none of the stale ones.
    #[test]
    fn an_events_mad_is_decoded_into_a_recycled_box_with_its_own_bytes() {
        let stale = Box::new([0xee; 256]);
        let addr = &*stale as *const [u8; 256];
        crate::engine::recycle_event_mad(stale);
        let mad = patterned_mad(7);
        let w = encoded_event(Public::default(), 0, EventType::RepReceived, 9, mad);
        let got: WireEvent = Reader::new(&w).get().unwrap();
        let b = got.event.mad.expect("the MAD");
        assert_eq!(&*b as *const [u8; 256], addr, "the pool's box not reused");
        assert_eq!(*b, mad, "stale bytes in the reused box");
    }

    /// A path record is read from one `PATH_BYTES` take at constant
    /// offsets: each field back at its own offset (fields drawn to differ),
    /// nothing read past it, every cut refused, and a bad `rec_type` or
    /// `route_resolved` byte refused as field by field reading did.
    #[test]
    fn a_path_record_decodes_from_one_take_with_its_checks() {
        let mut g = crate::testsupport::Junk(0x9a7b_0016_0000_0081);
        let mut bytes = |n: usize| g.bytes(n);
        let p = PathRec {
            dgid: Gid(bytes(16).try_into().unwrap()),
            sgid: Gid(bytes(16).try_into().unwrap()),
            service_id: u64::from_le_bytes(bytes(8).try_into().unwrap()),
            flow_label: 0x0a0b_0c0d,
            hop_limit: 1,
            traffic_class: 2,
            reversible: 3,
            numb_path: 4,
            pkey: 0x0506,
            qos_class: 0x0708,
            sl: 9,
            mtu_selector: 10,
            mtu: 11,
            rate_selector: 12,
            rate: 13,
            packet_life_time_selector: 14,
            packet_life_time: 15,
            preference: 16,
            rec_type: PathRecType::RoceV2,
            flags: 0x1112_1314,
            dlid: 0x1516_1718,
            slid: 0x191a_1b1c,
            raw_traffic: 29,
            route_resolved: true,
            dmac: [30, 31, 32, 33, 34, 35],
        };
        let mut w = Writer(Vec::new());
        w.put(&p).put(&0xeeu8);
        let b = w.into_bytes();
        assert_eq!(b.len(), PATH_BYTES + 1);
        let mut r = Reader::new(&b);
        let got: PathRec = r.get().unwrap();
        assert_eq!(format!("{got:?}"), format!("{p:?}"));
        assert_eq!(r.get::<u8>(), Ok(0xee), "read past the path record");
        for n in 0..PATH_BYTES {
            assert!(Reader::new(&b[..n]).get::<PathRec>().is_err(), "cut at {n}");
        }
        // rec_type after the 60 bytes before it; route_resolved 13 later.
        for (at, bad) in [(60, 9u8), (74, 2)] {
            assert_eq!(b[at], if at == 60 { 2 } else { 1 });
            let mut x = b.clone();
            x[at] = bad;
            assert!(
                Reader::new(&x).get::<PathRec>().is_err(),
                "{bad} at {at} accepted"
            );
        }
    }

    #[test]
    fn events_round_trip_and_garbage_is_refused() {
        let ev = WireEvent {
            public: Public {
                state: 3,
                local_id: 0x55,
                ..Public::default()
            },
            listener: 42,
            event: Event {
                id: Handle(0),
                kind: EventType::RejReceived,
                param: EventParam::Rej {
                    reason: 28,
                    ari_length: 4,
                },
                local_id: 0,
                mad: Some(Box::new([3; 256])),
            },
        };
        let mut w = Writer(Vec::new());
        w.put(&ev);
        let b = w.into_bytes();
        let got: WireEvent = Reader::new(&b).get().unwrap();
        assert_eq!(got.public, ev.public);
        assert_eq!(got.event.kind, EventType::RejReceived);
        assert_eq!(got.event.mad.as_deref(), ev.event.mad.as_deref());
        // An out-of-range event type, parameter tag or bool fails.
        let mut bad = b.clone();
        bad[40] = 200; // kind (after Public: 32 bytes, listener: 8)
        assert!(Reader::new(&bad).get::<WireEvent>().is_err());
        let mut bad = b.clone();
        bad[45] = 77; // parameter tag
        assert!(Reader::new(&bad).get::<WireEvent>().is_err());
        // Bytes from a fixed-seed generator never panic the decoder.
        let mut g = crate::testsupport::Junk(0x1234_5678_9abc_def0);
        for _ in 0..2000 {
            let n = (g.0 % 600) as usize;
            let junk = g.bytes(n);
            let _ = Reader::new(&junk).get::<WireEvent>();
            let _ = Reader::new(&junk).get::<ReqParams>();
            let _ = Header::parse(&junk);
        }
    }

    /// The service encodes events from references (`put_event`) into
    /// buffers of `EVENT_RECORD` bytes it reuses: the bytes are those of
    /// `WireEvent`, and the largest event (a REQ with both paths, its
    /// MAD) fits without growing the buffer.
    #[test]
    fn an_event_encoded_from_references_fits_its_reused_buffer() {
        let path = PathRec {
            dgid: Gid([0xfe; 16]),
            sgid: Gid([0xfd; 16]),
            rec_type: PathRecType::RoceV2,
            dmac: [1, 2, 3, 4, 5, 6],
            route_resolved: true,
            ..PathRec::default()
        };
        let req = ReqEvent {
            listen_id: Handle(u64::MAX),
            bth_pkey: 0xffff,
            port: 1,
            primary_path: path,
            alternate_path: Some(path),
            sgid_attr: (1, u16::MAX),
            remote_ca_guid: u64::MAX,
            remote_qkey: u32::MAX,
            remote_qpn: 0xff_ffff,
            qp_type: 2,
            starting_psn: 0xff_ffff,
            responder_resources: 255,
            initiator_depth: 255,
            local_cm_response_timeout: 31,
            flow_control: 1,
            remote_cm_response_timeout: 31,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 1,
            ece: Ece {
                vendor_id: u32::MAX,
                attr_mod: u32::MAX,
            },
        };
        let ev = WireEvent {
            public: Public {
                state: 5,
                version: u64::MAX,
                ..Public::default()
            },
            listener: u64::MAX,
            event: Event {
                id: Handle(0),
                kind: EventType::ReqReceived,
                param: EventParam::Req(Box::new(req)),
                local_id: u32::MAX,
                mad: Some(Box::new([0xab; 256])),
            },
        };
        let h = Header {
            op: op::EVENT,
            seq: u64::MAX,
            handle: u64::MAX,
        };
        let mut whole = h.record();
        whole.put(&ev);
        // A reused buffer holding an older, longer record.
        let mut old = Vec::with_capacity(EVENT_RECORD);
        old.resize(EVENT_RECORD, 0x55);
        let ptr = old.as_ptr();
        let mut w = h.record_in(old);
        put_event(&mut w, &ev.public, ev.listener, &ev.event);
        assert_eq!(w.0, whole.0, "put_event differs from WireEvent");
        assert!(w.0.len() <= EVENT_RECORD, "{} bytes", w.0.len());
        assert_eq!(w.0.as_ptr(), ptr, "the buffer grew");
        let (_, mut r) = Header::parse(&w.0).unwrap();
        let got: WireEvent = r.get().unwrap();
        assert_eq!(got.listener, u64::MAX);
        assert!(matches!(got.event.param, EventParam::Req(ref p) if p.alternate_path.is_some()));
    }

    /// `put_event` writes an event's head and a REQ's or REP's
    /// parameters at once (`put_fixed`), the rarer ones field by field:
    /// every kind of event, its fields drawn at random (so a field at
    /// another offset or of another width reads back as another value),
    /// encoded into one reused buffer full of older records' bytes, one
    /// after the other, decodes (field by field, `WireEvent::get`) to the
    /// same event with no byte left over, and is byte for byte what a
    /// fresh buffer gets.
    #[test]
    fn events_encoded_at_once_into_a_reused_buffer_decode_to_their_fields() {
        let mut g = crate::testsupport::Junk(0x5eed_0016_c0de_0001);
        let mut u = |bits: u32| g.next_u64() & (u64::MAX >> (64 - bits));
        let path = |u: &mut dyn FnMut(u32) -> u64| PathRec {
            dgid: Gid((u(64) as u128 | (u(64) as u128) << 64).to_le_bytes()),
            sgid: Gid((u(64) as u128 | (u(64) as u128) << 64).to_le_bytes()),
            service_id: u(64),
            flow_label: u(32) as u32,
            hop_limit: u(8) as u8,
            traffic_class: u(8) as u8,
            reversible: u(8) as u8,
            numb_path: u(8) as u8,
            pkey: u(16) as u16,
            qos_class: u(16) as u16,
            sl: u(8) as u8,
            mtu_selector: u(8) as u8,
            mtu: u(8) as u8,
            rate_selector: u(8) as u8,
            rate: u(8) as u8,
            packet_life_time_selector: u(8) as u8,
            packet_life_time: u(8) as u8,
            preference: u(8) as u8,
            rec_type: PathRecType::from_u32(u(2) as u32).unwrap(),
            flags: u(32) as u32,
            dlid: u(32) as u32,
            slid: u(32) as u32,
            raw_traffic: u(8) as u8,
            route_resolved: u(1) == 1,
            dmac: u(48).to_le_bytes()[..6].try_into().unwrap(),
        };
        let listener = u(64);
        let mut params = Vec::new();
        for alt in [true, false] {
            params.push(EventParam::Req(Box::new(ReqEvent {
                listen_id: Handle(listener),
                bth_pkey: u(16) as u16,
                port: u(8) as u8,
                primary_path: path(&mut u),
                alternate_path: alt.then(|| path(&mut u)),
                sgid_attr: (u(8) as u8, u(16) as u16),
                remote_ca_guid: u(64),
                remote_qkey: u(32) as u32,
                remote_qpn: u(32) as u32,
                qp_type: u(32) as u32,
                starting_psn: u(32) as u32,
                responder_resources: u(8) as u8,
                initiator_depth: u(8) as u8,
                local_cm_response_timeout: u(8) as u8,
                flow_control: u(8) as u8,
                remote_cm_response_timeout: u(8) as u8,
                retry_count: u(8) as u8,
                rnr_retry_count: u(8) as u8,
                srq: u(8) as u8,
                ece: Ece {
                    vendor_id: u(32) as u32,
                    attr_mod: u(32) as u32,
                },
            })));
        }
        params.push(EventParam::Rep(RepEvent {
            remote_ca_guid: u(64),
            remote_qkey: u(32) as u32,
            remote_qpn: u(32) as u32,
            starting_psn: u(32) as u32,
            responder_resources: u(8) as u8,
            initiator_depth: u(8) as u8,
            target_ack_delay: u(8) as u8,
            failover_accepted: u(8) as u8,
            flow_control: u(8) as u8,
            rnr_retry_count: u(8) as u8,
            srq: u(8) as u8,
            ece: Ece {
                vendor_id: u(32) as u32,
                attr_mod: u(32) as u32,
            },
        }));
        params.push(EventParam::None);
        params.push(EventParam::SendStatus(u(32) as u32));
        params.push(EventParam::Rej {
            reason: u(32) as u32,
            ari_length: u(8) as u8,
        });
        params.push(EventParam::Mra {
            service_timeout: u(8) as u8,
        });
        params.push(EventParam::Lap {
            alternate_path: Box::new(path(&mut u)),
        });
        params.push(EventParam::Apr {
            ap_status: u(32) as u32,
            info_len: u(8) as u8,
        });
        params.push(EventParam::SidrReq(SidrReqEvent {
            listen_id: Handle(listener),
            service_id: u(64),
            sgid_attr: (u(8) as u8, u(16) as u16),
            bth_pkey: u(16) as u16,
            port: u(8) as u8,
            pkey: u(16) as u16,
        }));
        params.push(EventParam::SidrRep(SidrRepEvent {
            status: u(32) as u32,
            qkey: u(32) as u32,
            qpn: u(32) as u32,
            info_len: u(8) as u8,
            sgid_attr: (u(8) as u8, u(16) as u16),
        }));
        // One buffer, reused for every record, starting full of junk.
        let mut buf = vec![0x55u8; EVENT_RECORD];
        let mut kinds = 0;
        for (i, param) in params.into_iter().enumerate() {
            let mut mad = [0u8; 256];
            mad.iter_mut().for_each(|m| *m = u(8) as u8);
            let public = Public {
                state: u(32) as u32,
                lap_state: u(32) as u32,
                local_id: u(32) as u32,
                remote_id: u(32) as u32,
                service_id: u(64),
                version: u(64),
            };
            let ev = Event {
                id: Handle(0),
                kind: EventType::ALL[i % EventType::ALL.len()],
                param,
                local_id: u(32) as u32,
                mad: (i % 2 == 0).then(|| Box::new(mad)),
            };
            let h = Header {
                op: op::EVENT,
                seq: u(64),
                handle: u(64),
            };
            let mut w = h.record_in(buf);
            put_event(&mut w, &public, listener, &ev);
            let mut fresh = h.record();
            put_event(&mut fresh, &public, listener, &ev);
            assert_eq!(w.0, fresh.0, "event {i}: the reused buffer's bytes differ");
            let (got_h, mut r) = Header::parse(&w.0).unwrap();
            assert_eq!((got_h.seq, got_h.handle), (h.seq, h.handle));
            let got: WireEvent = r.get().unwrap();
            assert_eq!(r.end(), Ok(()), "event {i}: bytes left over");
            assert_eq!(got.public, public, "event {i}");
            assert_eq!(got.listener, listener, "event {i}");
            assert_eq!(got.event.kind, ev.kind, "event {i}");
            assert_eq!(got.event.local_id, ev.local_id, "event {i}");
            assert_eq!(got.event.mad.as_deref(), ev.mad.as_deref(), "event {i}");
            assert_eq!(
                format!("{:?}", got.event.param),
                format!("{:?}", ev.param),
                "event {i}"
            );
            // The next record goes into this one's buffer, stale bytes
            // past its new end.
            buf = w.into_bytes();
            buf.resize(EVENT_RECORD, 0xaa);
            kinds += 1;
        }
        assert_eq!(kinds, 11);
    }

    /// The service writes a `QP_ATTRS` record into a reused event buffer
    /// (`EVENT_RECORD` bytes): every field has a fixed size, and the
    /// record fits without growing the buffer.
    #[test]
    fn a_qp_attrs_record_fits_a_reused_event_buffer() {
        let ah = AhAttr {
            port_num: u8::MAX,
            sl: u8::MAX,
            static_rate: u8::MAX,
            has_grh: true,
            dgid: Gid([0xfe; 16]),
            sgid_index: u16::MAX,
            flow_label: u32::MAX,
            hop_limit: u8::MAX,
            traffic_class: u8::MAX,
            dlid: u32::MAX,
            src_path_bits: u8::MAX,
            dmac: [0xff; 6],
            rec_type: PathRecType::RoceV2,
        };
        let qp = QpAttr {
            mask: u32::MAX,
            ah_attr: ah,
            alt_ah_attr: ah,
            ..QpAttr::default()
        };
        let a = QpAttrs {
            public: Public {
                version: u64::MAX,
                ..Public::default()
            },
            init: qp,
            rtr: qp,
            rts: qp,
        };
        let h = Header {
            op: op::QP_ATTRS,
            seq: u64::MAX,
            handle: u64::MAX,
        };
        let mut old = Vec::with_capacity(EVENT_RECORD);
        old.resize(EVENT_RECORD, 0x55);
        let ptr = old.as_ptr();
        let mut w = h.record_in(old);
        w.put(&a);
        assert!(w.0.len() <= EVENT_RECORD, "{} bytes", w.0.len());
        assert_eq!(w.0.as_ptr(), ptr, "the buffer grew");
        let (got_h, mut r) = Header::parse(&w.0).unwrap();
        assert_eq!(got_h.op, op::QP_ATTRS);
        assert_eq!(r.get::<QpAttrs>().unwrap(), a);
        r.end().unwrap();
    }

    /// `batch_into` reuses one buffer across messages and makes what
    /// `batch_one` makes; a lone record leaves it empty.
    #[test]
    fn a_batch_assembled_in_a_reused_buffer_is_the_batch() {
        let recs: Vec<Vec<u8>> = (1..=5).map(|n| rec(n, 20_000)).collect();
        let mut msg = vec![9u8; 100];
        let mut at = 0;
        while at < recs.len() {
            let (n, want) = batch_one(&recs[at..]);
            assert_eq!(batch_into(&recs[at..], &mut msg), n);
            if n == 1 {
                assert!(msg.is_empty());
                assert_eq!(want, recs[at]);
            } else {
                assert_eq!(msg, want);
                let (h, r) = Header::parse(&msg).unwrap();
                assert_eq!(h.op, op::BATCH);
                let got = unbatch(&msg[msg.len() - r.remaining()..]).unwrap();
                assert_eq!(
                    got,
                    recs[at..at + n].iter().map(|r| &r[..]).collect::<Vec<_>>()
                );
            }
            at += n;
        }
        assert_eq!(at, recs.len());
    }

    /// `try_recv_many` reads what is queued, in order, one record per
    /// buffer and at most as many as it has buffers; nothing queued is
    /// `0`; a peer gone is a zero length.
    #[test]
    fn queued_records_are_read_many_per_call_in_order() {
        let (a, b) = sock::pair();
        let rec = |i: usize| vec![i as u8; 10 + i * 700];
        for i in 0..11 {
            sock::send(&a, &rec(i)).unwrap();
        }
        let mut bufs: Vec<Vec<u8>> = (0..4).map(|_| vec![0u8; MAX_RECORD]).collect();
        let mut lens = [0usize; 4];
        let mut got = Vec::new();
        loop {
            let n = sock::try_recv_many(&b, &mut bufs, &mut lens).unwrap();
            assert!(n <= 4);
            if n == 0 {
                break;
            }
            for (buf, &l) in bufs.iter().zip(&lens[..n]) {
                got.push(buf[..l].to_vec());
            }
        }
        assert_eq!(got, (0..11).map(rec).collect::<Vec<_>>());
        drop(a);
        let n = sock::try_recv_many(&b, &mut bufs, &mut lens).unwrap();
        assert!(
            n >= 1 && lens[0] == 0,
            "the peer's end is not a zero length"
        );
    }

    /// The socket file appears at its path only listening and with its
    /// final mode: during `prepare` it is not there (and its temporary
    /// name refuses connections), afterwards it answers with that mode.
    #[test]
    fn a_socket_listens_only_once_prepared() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ibcm-ipc-prepare-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let fd = sock::listen(&path, |p| {
            assert!(!path.exists(), "the socket file is there before it listens");
            let e = sock::connect(p).expect_err("connected before listen");
            assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED));
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o640))
        })
        .unwrap();
        assert!(sock::connect(&path).is_ok());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        // A failed preparation leaves no socket file behind.
        drop(fd);
        let again = dir.join("t.sock");
        let r = sock::listen(&again, |_| Err(std::io::Error::other("no")));
        assert!(r.is_err());
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "a file was left"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two services starting at once on one path: while the first is
    /// between its check of the path and its rename onto it (`prepare`
    /// runs there), the second waits, then finds it listening. Without
    /// the directory lock both would listen, the second's socket taking
    /// the path from the first.
    #[test]
    fn two_services_starting_at_once_leave_one_listening() {
        let dir = std::env::temp_dir().join(format!("ibcm-ipc-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let (tx, rx) = std::sync::mpsc::channel();
        let starts: Vec<_> = (0..2)
            .map(|_| {
                let (path, tx) = (path.clone(), tx.clone());
                std::thread::spawn(move || {
                    sock::listen(&path, |_| {
                        tx.send(()).unwrap();
                        std::thread::sleep(std::time::Duration::from_millis(300));
                        Ok(())
                    })
                })
            })
            .collect();
        let got: Vec<std::io::Result<std::os::fd::OwnedFd>> =
            starts.into_iter().map(|t| t.join().unwrap()).collect();
        // Only one was ever between its check and its rename.
        assert_eq!(rx.try_iter().count(), 1);
        assert_eq!(got.iter().filter(|r| r.is_ok()).count(), 1);
        let e = got.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE), "{e}");
        assert!(sock::connect(&path).is_ok());
        drop(got);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_burst_is_batched_and_unbatched_in_order() {
        let one = batch(vec![rec(1, 40)]);
        assert_eq!(one, vec![rec(1, 40)]);
        // 3 records of 30,000 bytes: two fit a message, the third does not.
        let burst: Vec<Vec<u8>> = (1..=3).map(|n| rec(n, 30_000)).collect();
        let msgs = batch(burst.clone());
        assert_eq!(msgs.len(), 2);
        // The first message alone, and how many records it took.
        assert_eq!(batch_one(&burst), (2, msgs[0].clone()));
        assert_eq!(batch_one(&burst[2..]), (1, burst[2].clone()));
        let mut got = Vec::new();
        for m in &msgs {
            assert!(m.len() <= MAX_RECORD);
            let (h, r) = Header::parse(m).unwrap();
            if h.op == op::BATCH {
                got.extend(
                    unbatch(&m[m.len() - r.remaining()..])
                        .unwrap()
                        .into_iter()
                        .map(<[u8]>::to_vec),
                );
            } else {
                got.push(m.clone());
            }
        }
        assert_eq!(got, burst);
        // A short length and a nested batch are refused.
        let b = &batch(vec![rec(1, 40), rec(2, 40)])[0];
        let body = &b[HEADER..];
        assert!(unbatch(&body[..body.len() - 1]).is_err());
        let mut nested = (b.len() as u32).to_le_bytes().to_vec();
        nested.extend_from_slice(b);
        assert!(unbatch(&nested).is_err());
    }

    /// `unbatch_with` hands out a batch's records in place and in order,
    /// and none at all of a body that is broken anywhere (a short length,
    /// a length past the end, a record too short for a header, a nested
    /// batch), however far into the body the damage is — and never panics
    /// on any cut or corruption of a good body.
    #[test]
    fn unbatch_with_gives_records_in_place_or_none() {
        let recs: Vec<Vec<u8>> = (1..=4).map(|n| rec(n, 30 + n as usize)).collect();
        let m = &batch(recs.clone())[0];
        let body = &m[HEADER..];
        let mut got: Vec<&[u8]> = Vec::new();
        assert_eq!(unbatch_with(body, |r| got.push(r)), Ok(4));
        assert_eq!(got, recs.iter().map(|r| &r[..]).collect::<Vec<_>>());
        // In place: slices of the body itself.
        let span = body.as_ptr_range();
        assert!(got.iter().all(|r| span.contains(&r.as_ptr())));
        // Every cut of the body (but at a record boundary) is refused,
        // and `each` is called for no record of it.
        let mut bounds = vec![0];
        for r in &recs {
            bounds.push(bounds.last().unwrap() + 4 + r.len());
        }
        for cut in 0..body.len() {
            let mut calls = 0;
            let res = unbatch_with(&body[..cut], |_| calls += 1);
            if let Some(k) = bounds.iter().position(|&b| b == cut) {
                assert_eq!(res, Ok(k), "cut at {cut}");
                assert_eq!(calls, k);
            } else {
                assert_eq!(res, Err(Errno(errno::EPROTO)), "cut at {cut}");
                assert_eq!(calls, 0, "records handed out of a broken body (cut {cut})");
            }
        }
        // A broken last record: none of the good ones before it.
        let mut bad = body.to_vec();
        let last = bounds[3];
        bad[last..last + 4].copy_from_slice(&3u32.to_le_bytes());
        let mut calls = 0;
        assert!(unbatch_with(&bad, |_| calls += 1).is_err());
        assert_eq!(calls, 0);
        // Garbage of every byte value at every position: no panic.
        for at in 0..body.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut g = body.to_vec();
                g[at] = v;
                let _ = unbatch_with(&g, |r| assert!(r.len() >= HEADER));
            }
        }
    }
}

/// Design B's records (after `FWD_OPEN`): a message is one or more
/// records, each `u16 kind, u16 body length, body`, little-endian. A MAD
/// record carries its 52-byte address (what the engine's `MadDest` says
/// towards the service, what its `MadSource` must say from it) and the
/// 256-byte MAD. Decoding never panics: a record shorter than its length,
/// a length that does not fit its kind, an unknown kind are errors the
/// reader counts and drops.
pub mod fwd {
    use crate::engine::{MadDest, MadSource};
    use crate::wire::Gid;

    /// A MAD: process → service `MadDest`, service → process `MadSource`.
    pub const MAD: u16 = 1;
    /// Process → service: `u64 seq, u64 service ID`: claim a listen in the
    /// host's table.
    pub const LISTEN: u16 = 2;
    /// Service → process: `u64 seq, i32 errno` (0 or negative).
    pub const LISTENED: u16 = 3;
    /// Process → service: `u64 service ID`: the listen is released.
    pub const UNLISTEN: u16 = 4;
    /// Service → process: the device's new port tables after a port event
    /// (`Box<[PortInfo]>` as `OPEN`'s reply carries them).
    pub const PORTS: u16 = 5;
    /// Service → process: `u64 CA GUID, u32 QPN`: a REQ or REP for
    /// another process named this QP, which a connection of this process
    /// holds (the host-wide stale-connection check): the process sends
    /// that connection's DREQ, as the kernel's CM does for the old one.
    pub const STALE: u16 = 6;
    /// Service → process: `u64 seq`: list your ids (`ibcm ids`).
    pub const IDS_ASK: u16 = 7;
    /// Process → service: `u64 seq, u8 last` and a `Box<[IdInfo]>` (pid
    /// and device left for the service to fill): a part of the answer to
    /// `IDS_ASK` `seq`, the last one with `last` 1.
    pub const IDS: u16 = 8;
    /// Service → process: `u64 seq`: send your CM counters (`ibcm stat`).
    pub const STAT_ASK: u16 = 9;
    /// Process → service: `u64 seq` and the device's `Counters`: the
    /// answer to `STAT_ASK` `seq`, or, with seq [`LAST_STAT`], unasked,
    /// the process's last counters as it closes the device or exits.
    pub const STAT: u16 = 10;
    /// The seq of a `STAT` the process sends unasked when it leaves: the
    /// service keeps its counts in the device's once the process is gone.
    pub const LAST_STAT: u64 = u64::MAX;
    /// Ids per `IDS` record (a record stays under 64 KiB).
    pub const IDS_PER_REC: usize = 512;

    /// Bytes of a MAD record's address.
    pub const ADDR: usize = 52;
    /// Bytes of a MAD record's body.
    pub const MAD_BODY: usize = ADDR + 256;
    /// Bytes of a MAD record.
    pub const MAD_REC: usize = 4 + MAD_BODY;
    /// MAD records per message at most (a message stays under 10 KiB).
    pub const PER_MSG: usize = 32;

    /// One decoded record.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Rec<'a> {
        /// The address bytes (decoded by the side that knows which one
        /// it is) and the MAD.
        Mad(&'a [u8; ADDR], &'a [u8; 256]),
        Listen {
            seq: u64,
            service_id: u64,
        },
        Listened {
            seq: u64,
            err: i32,
        },
        Unlisten {
            service_id: u64,
        },
        /// The encoded port tables (decoded by the process, which checks
        /// them against its open's).
        Ports(&'a [u8]),
        Stale {
            guid: u64,
            qpn: u32,
        },
        IdsAsk {
            seq: u64,
        },
        /// The encoded ids (decoded by the service: [`ids`]).
        Ids {
            seq: u64,
            last: bool,
            body: &'a [u8],
        },
        StatAsk {
            seq: u64,
        },
        /// The encoded counters (decoded by the service: [`stat`]).
        Stat {
            seq: u64,
            body: &'a [u8],
        },
    }

    fn head(out: &mut Vec<u8>, kind: u16, len: usize) {
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&(len as u16).to_le_bytes());
    }

    pub fn put_dest(out: &mut Vec<u8>, d: &MadDest, mad: &[u8; 256]) {
        head(out, MAD, MAD_BODY);
        out.extend_from_slice(&[
            d.port,
            d.has_grh as u8,
            d.sl,
            d.hop_limit,
            d.traffic_class,
            0,
        ]);
        out.extend_from_slice(&d.dlid.to_le_bytes());
        out.extend_from_slice(&d.pkey.to_le_bytes());
        out.extend_from_slice(&d.pkey_index.to_le_bytes());
        out.extend_from_slice(&d.flow_label.to_le_bytes());
        out.extend_from_slice(&d.dest_qp.to_le_bytes());
        out.extend_from_slice(&d.dgid.0);
        out.extend_from_slice(&d.sgid.0);
        out.extend_from_slice(mad);
    }

    pub fn put_source(out: &mut Vec<u8>, s: &MadSource, mad: &[u8; 256]) {
        head(out, MAD, MAD_BODY);
        out.extend_from_slice(&[
            s.port,
            s.has_grh as u8,
            s.dlid_path_bits,
            s.sl,
            s.hop_limit,
            s.traffic_class,
        ]);
        out.extend_from_slice(&s.slid.to_le_bytes());
        out.extend_from_slice(&s.pkey.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&s.src_qp.to_le_bytes());
        out.extend_from_slice(&s.flow_label.to_le_bytes());
        out.extend_from_slice(&s.sgid.0);
        out.extend_from_slice(&s.dgid.0);
        out.extend_from_slice(mad);
    }

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([b[at], b[at + 1]])
    }
    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
    }
    fn gid_at(b: &[u8], at: usize) -> Gid {
        Gid(b[at..at + 16].try_into().expect("16 bytes"))
    }

    /// A MAD record's address as the process sent it.
    pub fn dest(a: &[u8; ADDR]) -> MadDest {
        MadDest {
            port: a[0],
            has_grh: a[1] != 0,
            sl: a[2],
            hop_limit: a[3],
            traffic_class: a[4],
            dlid: u16_at(a, 6),
            pkey: u16_at(a, 8),
            pkey_index: u16_at(a, 10),
            flow_label: u32_at(a, 12),
            dest_qp: u32_at(a, 16),
            dgid: gid_at(a, 20),
            sgid: gid_at(a, 36),
        }
    }

    /// A MAD record's address as the service sent it.
    pub fn source(a: &[u8; ADDR]) -> MadSource {
        MadSource {
            port: a[0],
            has_grh: a[1] != 0,
            dlid_path_bits: a[2],
            sl: a[3],
            hop_limit: a[4],
            traffic_class: a[5],
            slid: u16_at(a, 6),
            pkey: u16_at(a, 8),
            src_qp: u32_at(a, 12),
            flow_label: u32_at(a, 16),
            sgid: gid_at(a, 20),
            dgid: gid_at(a, 36),
        }
    }

    pub fn put_listen(out: &mut Vec<u8>, seq: u64, service_id: u64) {
        head(out, LISTEN, 16);
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&service_id.to_le_bytes());
    }

    pub fn put_listened(out: &mut Vec<u8>, seq: u64, err: i32) {
        head(out, LISTENED, 12);
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&err.to_le_bytes());
    }

    /// A port tables record; `false` (nothing written) when the tables do
    /// not fit one record.
    pub fn put_ports(out: &mut Vec<u8>, ports: &[crate::engine::PortInfo]) -> bool {
        let mut w = super::Writer(Vec::new());
        w.put(&ports.to_vec().into_boxed_slice());
        if w.0.len() > u16::MAX as usize {
            return false;
        }
        head(out, PORTS, w.0.len());
        out.extend_from_slice(&w.0);
        true
    }

    /// The port tables of a `PORTS` record's body.
    pub fn ports(body: &[u8]) -> Result<Vec<crate::engine::PortInfo>, crate::engine::Errno> {
        let mut r = super::Reader::new(body);
        let p: Box<[crate::engine::PortInfo]> = r.get()?;
        r.end()?;
        Ok(p.into_vec())
    }

    pub fn put_stale(out: &mut Vec<u8>, guid: u64, qpn: u32) {
        head(out, STALE, 12);
        out.extend_from_slice(&guid.to_le_bytes());
        out.extend_from_slice(&qpn.to_le_bytes());
    }

    pub fn put_ids_ask(out: &mut Vec<u8>, seq: u64) {
        head(out, IDS_ASK, 8);
        out.extend_from_slice(&seq.to_le_bytes());
    }

    /// A part of an `IDS` answer (at most [`IDS_PER_REC`] ids; more are
    /// not written).
    pub fn put_ids(out: &mut Vec<u8>, seq: u64, last: bool, ids: &[super::IdInfo]) {
        let mut w = super::Writer(Vec::new());
        w.put(
            &ids[..ids.len().min(IDS_PER_REC)]
                .to_vec()
                .into_boxed_slice(),
        );
        head(out, IDS, 9 + w.0.len());
        out.extend_from_slice(&seq.to_le_bytes());
        out.push(last as u8);
        out.extend_from_slice(&w.0);
    }

    pub fn put_stat_ask(out: &mut Vec<u8>, seq: u64) {
        head(out, STAT_ASK, 8);
        out.extend_from_slice(&seq.to_le_bytes());
    }

    pub fn put_stat(out: &mut Vec<u8>, seq: u64, c: &crate::engine::Counters) {
        let mut w = super::Writer(Vec::new());
        w.put(c);
        head(out, STAT, 8 + w.0.len());
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&w.0);
    }

    /// The counters of a `STAT` record's body.
    pub fn stat(body: &[u8]) -> Result<crate::engine::Counters, crate::engine::Errno> {
        let mut r = super::Reader::new(body);
        let c: crate::engine::Counters = r.get()?;
        r.end()?;
        Ok(c)
    }

    /// The ids of an `IDS` record's body.
    pub fn ids(body: &[u8]) -> Result<Vec<super::IdInfo>, crate::engine::Errno> {
        let mut r = super::Reader::new(body);
        let p: Box<[super::IdInfo]> = r.get()?;
        r.end()?;
        Ok(p.into_vec())
    }

    pub fn put_unlisten(out: &mut Vec<u8>, service_id: u64) {
        head(out, UNLISTEN, 8);
        out.extend_from_slice(&service_id.to_le_bytes());
    }

    /// The records of one message, in order; `Err(())` for the first one
    /// that does not decode (the rest of the message is not trusted).
    pub fn records(msg: &[u8]) -> impl Iterator<Item = Result<Rec<'_>, ()>> {
        let mut at = 0usize;
        let mut failed = false;
        std::iter::from_fn(move || {
            if failed || at >= msg.len() {
                return None;
            }
            let r = (|| {
                let h = msg.get(at..at + 4).ok_or(())?;
                let (kind, len) = (u16_at(h, 0), u16_at(h, 2) as usize);
                let b = msg.get(at + 4..at + 4 + len).ok_or(())?;
                let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
                let rec = match (kind, len) {
                    (MAD, MAD_BODY) => Rec::Mad(
                        b[..ADDR].try_into().expect("address"),
                        b[ADDR..].try_into().expect("MAD"),
                    ),
                    (LISTEN, 16) => Rec::Listen {
                        seq: u64_at(0),
                        service_id: u64_at(8),
                    },
                    (LISTENED, 12) => Rec::Listened {
                        seq: u64_at(0),
                        err: u32_at(b, 8) as i32,
                    },
                    (UNLISTEN, 8) => Rec::Unlisten {
                        service_id: u64_at(0),
                    },
                    (PORTS, _) => Rec::Ports(b),
                    (STALE, 12) => Rec::Stale {
                        guid: u64_at(0),
                        qpn: u32_at(b, 8),
                    },
                    (IDS_ASK, 8) => Rec::IdsAsk { seq: u64_at(0) },
                    (STAT_ASK, 8) => Rec::StatAsk { seq: u64_at(0) },
                    (STAT, n) if n >= 8 => Rec::Stat {
                        seq: u64_at(0),
                        body: &b[8..],
                    },
                    (IDS, n) if n >= 9 && b[8] <= 1 => Rec::Ids {
                        seq: u64_at(0),
                        last: b[8] == 1,
                        body: &b[9..],
                    },
                    _ => return Err(()),
                };
                at += 4 + len;
                Ok(rec)
            })();
            failed = r.is_err();
            Some(r)
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn records_round_trip_and_garbage_is_refused() {
            let d = MadDest {
                port: 1,
                dgid: "10.0.0.2".parse().unwrap(),
                sgid: "10.0.0.1".parse().unwrap(),
                dlid: 7,
                sl: 3,
                pkey: 0xffff,
                pkey_index: 2,
                hop_limit: 64,
                traffic_class: 5,
                flow_label: 0x12345,
                has_grh: true,
                dest_qp: 1,
            };
            let s = MadSource {
                port: 1,
                sgid: d.sgid,
                dgid: d.dgid,
                has_grh: true,
                slid: 9,
                dlid_path_bits: 1,
                sl: 2,
                src_qp: 1,
                pkey: 0x8001,
                hop_limit: 63,
                traffic_class: 4,
                flow_label: 0xabcde,
            };
            let mad = [0x5au8; 256];
            let mut m = Vec::new();
            put_dest(&mut m, &d, &mad);
            put_listen(&mut m, 7, 0x1234);
            put_source(&mut m, &s, &mad);
            put_listened(&mut m, 7, -16);
            put_unlisten(&mut m, 0x1234);
            let table = vec![crate::engine::PortInfo::roce(1, d.sgid)];
            assert!(put_ports(&mut m, &table));
            put_stale(&mut m, 0x0102_0304_0506_0708, 0x00ab_cdef);
            put_ids_ask(&mut m, 99);
            let row = super::super::IdInfo {
                pid: 0,
                device: Vec::new(),
                state: 11,
                local_id: 0x1234,
                remote_id: 0x5678,
                service_id: 0x1061c06,
                peer: Some(d.dgid),
                age_ms: 17,
            };
            put_ids(&mut m, 99, true, &vec![row.clone(); IDS_PER_REC + 3]);
            put_stat_ask(&mut m, 100);
            let mut c = crate::engine::Counters {
                ids_created: 5,
                ..Default::default()
            };
            c.tx[3] = 7;
            put_stat(&mut m, 100, &c);
            let recs: Vec<_> = records(&m).collect();
            assert_eq!(recs.len(), 11);
            assert_eq!(recs[9], Ok(Rec::StatAsk { seq: 100 }));
            match recs[10] {
                Ok(Rec::Stat { seq: 100, body }) => assert_eq!(stat(body), Ok(c)),
                _ => panic!("{:?}", recs[10]),
            }
            assert_eq!(recs[7], Ok(Rec::IdsAsk { seq: 99 }));
            match recs[8] {
                Ok(Rec::Ids {
                    seq: 99,
                    last: true,
                    body,
                }) => assert_eq!(ids(body), Ok(vec![row; IDS_PER_REC])),
                _ => panic!("{:?}", recs[8]),
            }
            assert_eq!(
                recs[6],
                Ok(Rec::Stale {
                    guid: 0x0102_0304_0506_0708,
                    qpn: 0x00ab_cdef
                })
            );
            match recs[5] {
                Ok(Rec::Ports(b)) => assert_eq!(ports(b), Ok(table)),
                _ => panic!("{:?}", recs[5]),
            }
            match recs[0] {
                Ok(Rec::Mad(a, b)) => {
                    assert_eq!(dest(a), d);
                    assert_eq!(b, &mad);
                }
                _ => panic!("{:?}", recs[0]),
            }
            assert_eq!(
                recs[1],
                Ok(Rec::Listen {
                    seq: 7,
                    service_id: 0x1234
                })
            );
            match recs[2] {
                Ok(Rec::Mad(a, _)) => assert_eq!(source(a), s),
                _ => panic!("{:?}", recs[2]),
            }
            assert_eq!(recs[3], Ok(Rec::Listened { seq: 7, err: -16 }));
            assert_eq!(recs[4], Ok(Rec::Unlisten { service_id: 0x1234 }));
            // Cut anywhere, a message decodes up to the cut and then fails
            // once; junk never panics.
            for cut in 0..m.len() {
                let r: Vec<_> = records(&m[..cut]).collect();
                assert!(r.iter().filter(|x| x.is_err()).count() <= 1);
            }
            let mut junk = crate::testsupport::Junk(3);
            for _ in 0..20_000 {
                let n = (junk.next_u64() % 700) as usize;
                let msg = junk.bytes(n);
                for r in records(&msg) {
                    let _ = r;
                }
            }
            // A wrong length for its kind is refused.
            let mut bad = Vec::new();
            head(&mut bad, LISTEN, 8);
            bad.extend_from_slice(&[0; 8]);
            assert_eq!(records(&bad).collect::<Vec<_>>(), vec![Err(())]);
        }
    }
}
