//! Single facts read from a raw CM MAD without parsing all of it: what the
//! engine needs to route a received MAD to its shard, count a MAD it
//! sends, or find an area of a MAD it keeps. Every read goes through the
//! views of [`crate::wire::mad`] and [`crate::wire::cm`], so the field positions live
//! in one place.
//!
//! These never panic: a buffer too short for the field gives `None`.

use super::cm::{
    AprPacket, DrepPacket, DreqPacket, LapPacket, MraPacket, RejPacket, RepPacket, ReqPacket,
    RtuPacket, SidrRepPacket, SidrReqPacket, pdata, rej_reason,
};
use super::mad::{MadPacket, attr};
use super::{MAD_HDR_LEN, MAD_LEN};

/// The AttributeID of a MAD (`None`: shorter than a MAD header).
pub fn attr_id(mad: &[u8]) -> Option<u16> {
    (mad.len() >= MAD_HDR_LEN).then(|| MadPacket::new_unchecked(mad).attr_id())
}

/// The AttributeID of a whole MAD.
pub fn attr_id_of(mad: &[u8; MAD_LEN]) -> u16 {
    MadPacket::new_unchecked(&mad[..]).attr_id()
}

/// The TransactionID of a MAD (`None`: shorter than a MAD header).
pub fn tid(mad: &[u8]) -> Option<u64> {
    (mad.len() >= MAD_HDR_LEN).then(|| MadPacket::new_unchecked(mad).tid())
}

/// The whole 256-byte MAD, or `None` when `mad` is shorter.
fn whole(mad: &[u8]) -> Option<&[u8]> {
    mad.get(..MAD_LEN)
}

/// The Reason of a REJ (`None`: not a REJ, or truncated).
pub fn rej_reason(mad: &[u8]) -> Option<u16> {
    let mad = whole(mad)?;
    (attr_id(mad)? == attr::REJ).then(|| RejPacket::new_unchecked(mad).reason())
}

/// How a received CM MAD names the connection it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressing {
    /// It names the receiver's ID: the RemoteCommID of MRA, REJ, REP, RTU,
    /// DREQ, DREP, LAP and APR, the RequestID of SIDR_REP.
    Receiver(u32),
    /// It names only the sender (CA GUID, LocalCommID): a REQ, and a REJ
    /// with reason TIMEOUT, whose ARI is the rejecting CA's GUID (IBTA
    /// 12.6.7: it may come from a CM that never learnt our ID).
    Sender { ca_guid: u64, comm_id: u32 },
    /// A SIDR_REQ: only its RequestID, unique per requester port.
    SidrRequest(u32),
}

/// What [`Addressing`] a CM MAD carries (`None`: not a CM message that
/// names a connection, e.g. ClassPortInfo, or shorter than a MAD).
pub fn addressing(mad: &[u8]) -> Option<Addressing> {
    let mad = whole(mad)?;
    Some(match attr_id(mad)? {
        attr::REQ => {
            let p = ReqPacket::new_unchecked(mad);
            Addressing::Sender {
                ca_guid: p.local_ca_guid(),
                comm_id: p.local_comm_id(),
            }
        }
        attr::SIDR_REQ => Addressing::SidrRequest(SidrReqPacket::new_unchecked(mad).request_id()),
        attr::SIDR_REP => Addressing::Receiver(SidrRepPacket::new_unchecked(mad).request_id()),
        attr::REJ => {
            let p = RejPacket::new_unchecked(mad);
            if p.reason() == rej_reason::TIMEOUT {
                let guid: [u8; 8] = p.ari()[..8].try_into().unwrap();
                Addressing::Sender {
                    ca_guid: u64::from_be_bytes(guid),
                    comm_id: p.local_comm_id(),
                }
            } else {
                Addressing::Receiver(p.remote_comm_id())
            }
        }
        attr::MRA => Addressing::Receiver(MraPacket::new_unchecked(mad).remote_comm_id()),
        attr::REP => Addressing::Receiver(RepPacket::new_unchecked(mad).remote_comm_id()),
        attr::RTU => Addressing::Receiver(RtuPacket::new_unchecked(mad).remote_comm_id()),
        attr::DREQ => Addressing::Receiver(DreqPacket::new_unchecked(mad).remote_comm_id()),
        attr::DREP => Addressing::Receiver(DrepPacket::new_unchecked(mad).remote_comm_id()),
        attr::LAP => Addressing::Receiver(LapPacket::new_unchecked(mad).remote_comm_id()),
        attr::APR => Addressing::Receiver(AprPacket::new_unchecked(mad).remote_comm_id()),
        _ => return None,
    })
}

/// Where the private-data area of a message with AttributeID `attr_id`
/// lies in its MAD: (offset, length). Every CM message's private data
/// fills the tail of the MAD (IBTA tables 106-118), so the offset is
/// `MAD_LEN - length`. `None` for ClassPortInfo and unknown attributes.
pub fn private_data_range(attr_id: u16) -> Option<(usize, usize)> {
    let len = match attr_id {
        attr::REQ => pdata::REQ,
        attr::MRA => pdata::MRA,
        attr::REJ => pdata::REJ,
        attr::REP => pdata::REP,
        attr::RTU => pdata::RTU,
        attr::DREQ => pdata::DREQ,
        attr::DREP => pdata::DREP,
        attr::SIDR_REQ => pdata::SIDR_REQ,
        attr::SIDR_REP => pdata::SIDR_REP,
        attr::LAP => pdata::LAP,
        attr::APR => pdata::APR,
        _ => return None,
    };
    Some((MAD_LEN - len, len))
}

/// Where `area`, a slice a view handed out of `mad`, starts in `mad`.
fn offset_in(mad: &[u8], area: &[u8]) -> usize {
    area.as_ptr() as usize - mad.as_ptr() as usize
}

/// The whole additional-information area of a message with AttributeID
/// `attr_id` (REJ ARI, APR and SIDR_REP AdditionalInformation, 72 bytes);
/// the message's length field says how much of it is valid. `None` for
/// other attributes or a short buffer.
pub fn info_area(attr_id: u16, mad: &[u8]) -> Option<&[u8]> {
    let mad = whole(mad)?;
    let (off, len) = match attr_id {
        attr::REJ => {
            let p = RejPacket::new_unchecked(mad);
            (offset_in(mad, p.ari()), p.ari().len())
        }
        attr::APR => {
            let p = AprPacket::new_unchecked(mad);
            (offset_in(mad, p.info()), p.info().len())
        }
        attr::SIDR_REP => {
            let p = SidrRepPacket::new_unchecked(mad);
            (offset_in(mad, p.info()), p.info().len())
        }
        _ => return None,
    };
    Some(&mad[off..off + len])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{CmMad, CmMsg, Rej, Req, SidrReq, pdata_area};

    fn mad(msg: CmMsg) -> [u8; MAD_LEN] {
        CmMad::send(0x1122_3344_5566_7788, 0, msg).to_bytes()
    }

    #[test]
    fn header_fields() {
        let m = mad(CmMsg::Rej(Rej {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_rejected: crate::wire::MsgCode::Other,
            ari_length: 0,
            reason: rej_reason::STALE_CONN,
            ari: [0; 72],
            private_data: [0; pdata::REJ],
        }));
        assert_eq!(attr_id(&m), Some(attr::REJ));
        assert_eq!(attr_id_of(&m), attr::REJ);
        assert_eq!(tid(&m), Some(0x1122_3344_5566_7788));
        assert_eq!(rej_reason(&m), Some(rej_reason::STALE_CONN));
        assert_eq!(addressing(&m), Some(Addressing::Receiver(2)));
        assert_eq!(attr_id(&m[..23]), None);
        assert_eq!(rej_reason(&m[..255]), None);
        assert_eq!(addressing(&m[..255]), None);
    }

    #[test]
    fn addressing_of_requests() {
        let req = mad(CmMsg::Req(Req {
            local_comm_id: 0x0a0b_0c0d,
            local_ca_guid: 0x0102_0304_0506_0708,
            ..Req::default()
        }));
        assert_eq!(rej_reason(&req), None);
        assert_eq!(
            addressing(&req),
            Some(Addressing::Sender {
                ca_guid: 0x0102_0304_0506_0708,
                comm_id: 0x0a0b_0c0d
            })
        );
        let timeout = mad(CmMsg::Rej(Rej {
            local_comm_id: 0x0a0b_0c0d,
            remote_comm_id: 0,
            message_rejected: crate::wire::MsgCode::Req,
            ari_length: 8,
            reason: rej_reason::TIMEOUT,
            ari: pdata_area(&0x0102_0304_0506_0708u64.to_be_bytes()),
            private_data: [0; pdata::REJ],
        }));
        assert_eq!(addressing(&timeout), addressing(&req));
        let sidr = mad(CmMsg::SidrReq(SidrReq {
            request_id: 77,
            pkey: 0xffff,
            service_id: 5,
            private_data: [0; pdata::SIDR_REQ],
        }));
        assert_eq!(addressing(&sidr), Some(Addressing::SidrRequest(77)));
    }

    #[test]
    fn areas_match_the_views() {
        // Every attribute's private-data range is where its view finds
        // the private data.
        let mut raw = [0u8; MAD_LEN];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = i as u8;
        }
        for &a in &attr::ALL {
            let Some((off, len)) = private_data_range(a) else {
                assert_eq!(a, attr::CLASS_PORT_INFO);
                continue;
            };
            assert_eq!(off + len, MAD_LEN);
            macro_rules! view_range {
                ($view:ident) => {{
                    let v = $view::new_unchecked(&raw[..]);
                    (offset_in(&raw, v.private_data()), v.private_data().len())
                }};
            }
            let from_view = match a {
                attr::REQ => view_range!(ReqPacket),
                attr::MRA => view_range!(MraPacket),
                attr::REJ => view_range!(RejPacket),
                attr::REP => view_range!(RepPacket),
                attr::RTU => view_range!(RtuPacket),
                attr::DREQ => view_range!(DreqPacket),
                attr::DREP => view_range!(DrepPacket),
                attr::SIDR_REQ => view_range!(SidrReqPacket),
                attr::SIDR_REP => view_range!(SidrRepPacket),
                attr::LAP => view_range!(LapPacket),
                attr::APR => view_range!(AprPacket),
                _ => unreachable!(),
            };
            assert_eq!((off, len), from_view, "attribute {a:#06x}");
        }
        assert_eq!(info_area(attr::REJ, &raw).unwrap(), &raw[36..108]);
        assert_eq!(info_area(attr::APR, &raw).unwrap(), &raw[36..108]);
        assert_eq!(info_area(attr::SIDR_REP, &raw).unwrap(), &raw[48..120]);
        assert_eq!(info_area(attr::REP, &raw), None);
        assert_eq!(info_area(attr::REJ, &raw[..100]), None);
    }
}
