//! rdma_cm's conventions on top of the IB CM (docs/CM_RULES.md §rdma-cm):
//! port spaces and the service IDs they give a port, the 36-byte IP header
//! rdma_cm puts in front of the user's private data in a REQ or SIDR_REQ,
//! the private-data room left to the user and the lengths rdma_cm reports,
//! and how each IB CM event becomes an rdma_cm event with its status.
//!
//! Pure functions over wire and engine types: `ibcm connect/listen
//! --rdma-cm` use them today; the librdmacm layer will build on them.

use crate::engine::{Event, EventParam, EventType};
use crate::wire::pdata;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `enum rdma_ucm_port_space`.
pub mod port_space {
    pub const IPOIB: u16 = 0x0002;
    pub const TCP: u16 = 0x0106;
    pub const UDP: u16 = 0x0111;
    pub const IB: u16 = 0x013f;

    /// "TCP", "UDP", "IB", "IPOIB", or the number.
    pub fn name(ps: u16) -> String {
        match ps {
            IPOIB => "IPOIB".into(),
            TCP => "TCP".into(),
            UDP => "UDP".into(),
            IB => "IB".into(),
            _ => format!("port space {ps:#06x}"),
        }
    }
}

/// The Q_Key rdma_cm uses on UD (`RDMA_PS_UDP`, `RDMA_PS_IPOIB`) ids.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Size of rdma_cm's IP header in a REQ's or SIDR_REQ's private data.
pub const HEADER_LEN: usize = 36;

/// The only header version rdma_cm accepts (`CMA_VERSION`).
pub const CMA_VERSION: u8 = 0;

/// Private data left to the user of an rdma_cm REQ (92 − 36).
pub const REQ_USER_DATA: usize = pdata::REQ - HEADER_LEN;

/// Private data left to the user of an rdma_cm SIDR_REQ (216 − 36).
pub const SIDR_REQ_USER_DATA: usize = pdata::SIDR_REQ - HEADER_LEN;

/// The service ID of port `port` in port space `ps`
/// (`rdma_get_service_id`: `ps << 16 | port`).
pub fn service_id(ps: u16, port: u16) -> u64 {
    ((ps as u64) << 16) | port as u64
}

/// (port space, port) of a service ID in one of rdma_cm's IP port spaces
/// (TCP, UDP, IB, IPOIB; the `RDMA_IB_IP_PS_*` ranges); `None` for any
/// other service ID.
pub fn split_service_id(sid: u64) -> Option<(u16, u16)> {
    let ps = (sid >> 16) as u16;
    let known = matches!(
        ps,
        port_space::IPOIB | port_space::TCP | port_space::UDP | port_space::IB
    );
    (sid >> 32 == 0 && known).then_some((ps, sid as u16))
}

/// rdma_cm's IP header (`struct cma_hdr`): the active side's source port
/// and both addresses. The destination port is the service ID's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpHeader {
    pub src_port: u16,
    pub src: IpAddr,
    pub dst: IpAddr,
}

/// Why private data holds no valid rdma_cm IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// Shorter than [`HEADER_LEN`].
    TooShort(usize),
    /// `cma_version` is not [`CMA_VERSION`].
    Version(u8),
    /// The IP version nibble is neither 4 nor 6.
    IpVersion(u8),
    /// Source and destination of different families cannot be written.
    MixedFamilies,
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            HeaderError::TooShort(n) => write!(f, "{n} bytes, the header needs {HEADER_LEN}"),
            HeaderError::Version(v) => write!(f, "cma_version {v} (not {CMA_VERSION})"),
            HeaderError::IpVersion(v) => write!(f, "ip_version {v} (not 4 or 6)"),
            HeaderError::MixedFamilies => write!(f, "source and destination of different families"),
        }
    }
}

impl std::error::Error for HeaderError {}

fn ip_area(ip: IpAddr) -> [u8; 16] {
    match ip {
        // IPv4 sits in the last four bytes (`union cma_ip_addr`).
        IpAddr::V4(a) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&a.octets());
            b
        }
        IpAddr::V6(a) => a.octets(),
    }
}

impl IpHeader {
    /// The IP version rdma_cm writes (4 or 6).
    pub fn ip_version(&self) -> u8 {
        if self.src.is_ipv4() { 4 } else { 6 }
    }

    /// The 36 header bytes.
    pub fn to_bytes(&self) -> Result<[u8; HEADER_LEN], HeaderError> {
        if self.src.is_ipv4() != self.dst.is_ipv4() {
            return Err(HeaderError::MixedFamilies);
        }
        let mut h = [0u8; HEADER_LEN];
        h[0] = CMA_VERSION;
        h[1] = self.ip_version() << 4;
        h[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        h[4..20].copy_from_slice(&ip_area(self.src));
        h[20..36].copy_from_slice(&ip_area(self.dst));
        Ok(h)
    }

    /// The header followed by `user` data: a REQ's or SIDR_REQ's private
    /// data as rdma_cm sends it.
    pub fn with_user_data(&self, user: &[u8]) -> Result<Vec<u8>, HeaderError> {
        let mut v = self.to_bytes()?.to_vec();
        v.extend_from_slice(user);
        Ok(v)
    }

    /// Reads the header at the start of `pd`; returns it and the user data
    /// that follows.
    pub fn parse(pd: &[u8]) -> Result<(IpHeader, &[u8]), HeaderError> {
        let raw = RawHeader::read(pd).ok_or(HeaderError::TooShort(pd.len()))?;
        if raw.cma_version != CMA_VERSION {
            return Err(HeaderError::Version(raw.cma_version));
        }
        let (Some(src), Some(dst)) = (raw.src, raw.dst) else {
            return Err(HeaderError::IpVersion(raw.ip_version));
        };
        let h = IpHeader {
            src_port: raw.src_port,
            src,
            dst,
        };
        Ok((h, &pd[HEADER_LEN..]))
    }
}

/// The header bytes as they stand, checked for nothing but length (what a
/// decoder shows, malformed or not); the addresses only when the IP
/// version is 4 or 6. [`IpHeader::parse`] is the checked reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawHeader {
    pub cma_version: u8,
    /// The high nibble of the second byte.
    pub ip_version: u8,
    pub src_port: u16,
    pub src: Option<IpAddr>,
    pub dst: Option<IpAddr>,
}

impl RawHeader {
    /// `None` when `pd` is shorter than [`HEADER_LEN`].
    pub fn read(pd: &[u8]) -> Option<RawHeader> {
        let pd = pd.get(..HEADER_LEN)?;
        let ip_version = pd[1] >> 4;
        let ip = |at: usize| -> Option<IpAddr> {
            let b: [u8; 16] = pd[at..at + 16].try_into().unwrap();
            match ip_version {
                4 => Some(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))),
                6 => Some(IpAddr::V6(Ipv6Addr::from(b))),
                _ => None,
            }
        };
        Some(RawHeader {
            cma_version: pd[0],
            ip_version,
            src_port: u16::from_be_bytes([pd[2], pd[3]]),
            src: ip(4),
            dst: ip(20),
        })
    }
}

c_enum! {
    /// `enum rdma_cm_event_type`; `name()` is what `rdma_event_str()`
    /// returns for it.
    pub enum RdmaCmEventType: u32 {
        AddrResolved = 0, "RDMA_CM_EVENT_ADDR_RESOLVED";
        AddrError = 1, "RDMA_CM_EVENT_ADDR_ERROR";
        RouteResolved = 2, "RDMA_CM_EVENT_ROUTE_RESOLVED";
        RouteError = 3, "RDMA_CM_EVENT_ROUTE_ERROR";
        ConnectRequest = 4, "RDMA_CM_EVENT_CONNECT_REQUEST";
        ConnectResponse = 5, "RDMA_CM_EVENT_CONNECT_RESPONSE";
        ConnectError = 6, "RDMA_CM_EVENT_CONNECT_ERROR";
        Unreachable = 7, "RDMA_CM_EVENT_UNREACHABLE";
        Rejected = 8, "RDMA_CM_EVENT_REJECTED";
        Established = 9, "RDMA_CM_EVENT_ESTABLISHED";
        Disconnected = 10, "RDMA_CM_EVENT_DISCONNECTED";
        DeviceRemoval = 11, "RDMA_CM_EVENT_DEVICE_REMOVAL";
        MulticastJoin = 12, "RDMA_CM_EVENT_MULTICAST_JOIN";
        MulticastError = 13, "RDMA_CM_EVENT_MULTICAST_ERROR";
        AddrChange = 14, "RDMA_CM_EVENT_ADDR_CHANGE";
        TimewaitExit = 15, "RDMA_CM_EVENT_TIMEWAIT_EXIT";
    }
}

/// An IB CM event as rdma_cm reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaCmEvent {
    pub kind: RdmaCmEventType,
    /// `rdma_cm_event.status`: 0, a negative errno, a positive IB REJ
    /// reason (REJECTED) or SIDR status (UNREACHABLE after SIDR_REP).
    pub status: i32,
    /// `private_data_len` as rdma_cm reports it: the whole MAD area (less
    /// the IP header for requests), not what the peer sent; 0 where the
    /// event carries none.
    pub private_data_len: u8,
}

const ETIMEDOUT: i32 = 110;

/// The rdma_cm event an IB CM event becomes on an id of the IP port
/// spaces, as the kernel's `cma_ib_handler`, `cma_ib_req_handler` and
/// `cma_sidr_rep_handler` translate them. `None`: rdma_cm reports nothing
/// (MRA, LAP/APR). A REP on the active side is CONNECT_RESPONSE here;
/// librdmacm turns it into ESTABLISHED after sending the RTU itself when
/// the id has a QP.
pub fn map_event(ev: &Event) -> Option<RdmaCmEvent> {
    use RdmaCmEventType as R;
    let e = |kind, status, len: usize| {
        Some(RdmaCmEvent {
            kind,
            status,
            private_data_len: len as u8,
        })
    };
    match ev.kind {
        EventType::ReqReceived => e(R::ConnectRequest, 0, REQ_USER_DATA),
        EventType::SidrReqReceived => e(R::ConnectRequest, 0, SIDR_REQ_USER_DATA),
        EventType::RepReceived => e(R::ConnectResponse, 0, pdata::REP),
        EventType::RtuReceived | EventType::UserEstablished => e(R::Established, 0, 0),
        EventType::ReqError | EventType::RepError | EventType::SidrReqError => {
            e(R::Unreachable, -ETIMEDOUT, 0)
        }
        EventType::RejReceived => {
            let reason = match ev.param {
                EventParam::Rej { reason, .. } => reason as i32,
                _ => 0,
            };
            e(R::Rejected, reason, pdata::REJ)
        }
        EventType::DreqReceived | EventType::DrepReceived => e(R::Disconnected, 0, 0),
        EventType::DreqError => e(R::Disconnected, -ETIMEDOUT, 0),
        EventType::TimewaitExit => e(R::TimewaitExit, 0, 0),
        EventType::SidrRepReceived => match &ev.param {
            EventParam::SidrRep(p) if p.status == 0 => e(R::Established, 0, pdata::SIDR_REP),
            EventParam::SidrRep(p) => e(R::Unreachable, p.status as i32, 0),
            _ => e(R::Unreachable, 0, 0),
        },
        EventType::MraReceived
        | EventType::LapError
        | EventType::LapReceived
        | EventType::AprReceived => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Handle, SidrRepEvent};

    #[test]
    fn service_ids_of_ports() {
        // TCP port 7471 (the kernel capture of ucmatose).
        assert_eq!(service_id(port_space::TCP, 7471), 0x0000_0000_0106_1d2f);
        assert_eq!(split_service_id(0x0106_1d2f), Some((port_space::TCP, 7471)));
        assert_eq!(split_service_id(0x0111_0007), Some((port_space::UDP, 7)));
        assert_eq!(split_service_id(0x013f_0001), Some((port_space::IB, 1)));
        // Not rdma_cm's: other port spaces, high bits set.
        assert_eq!(split_service_id(0x0107_0001), None);
        assert_eq!(split_service_id(0x1_0106_0001), None);
        assert_eq!(split_service_id(0x1000), None);
        assert_eq!(REQ_USER_DATA, 56);
        assert_eq!(SIDR_REQ_USER_DATA, 180);
    }

    #[test]
    fn ip_header_round_trips_both_families() {
        for (src, dst) in [("10.0.0.1", "10.0.0.2"), ("fd00::1", "fe80::2:3")] {
            let h = IpHeader {
                src_port: 0x9e1a,
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
            };
            let pd = h.with_user_data(b"hello").unwrap();
            assert_eq!(pd.len(), HEADER_LEN + 5);
            assert_eq!(pd[0], 0);
            assert_eq!(pd[1] >> 4, h.ip_version());
            let (back, user) = IpHeader::parse(&pd).unwrap();
            assert_eq!(back, h);
            assert_eq!(user, b"hello");
        }
        // IPv4 sits in the last 4 bytes of each 16-byte area.
        let h = IpHeader {
            src_port: 1,
            src: "1.2.3.4".parse().unwrap(),
            dst: "5.6.7.8".parse().unwrap(),
        };
        let b = h.to_bytes().unwrap();
        assert_eq!(&b[4..20], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]);
        assert_eq!(&b[32..36], &[5, 6, 7, 8]);
    }

    #[test]
    fn bad_headers_are_named() {
        assert_eq!(IpHeader::parse(&[0; 35]), Err(HeaderError::TooShort(35)));
        let mut pd = [0u8; 36];
        pd[0] = 1;
        assert_eq!(IpHeader::parse(&pd), Err(HeaderError::Version(1)));
        pd[0] = 0;
        pd[1] = 0x50;
        assert_eq!(IpHeader::parse(&pd), Err(HeaderError::IpVersion(5)));
        let mixed = IpHeader {
            src_port: 1,
            src: "1.2.3.4".parse().unwrap(),
            dst: "::1".parse().unwrap(),
        };
        assert_eq!(mixed.to_bytes(), Err(HeaderError::MixedFamilies));
    }

    /// The REQ the Linux kernel's rdma_cm sent in the ucmatose capture.
    #[test]
    fn kernel_req_header() {
        let data = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/ucmatose.pcap"
        ))
        .unwrap();
        let cap = crate::capture::read_bytes(&data).unwrap();
        let req = cap
            .frames
            .iter()
            .find_map(|f| match crate::wire::CmMad::parse(&f.mad).ok()?.msg {
                crate::wire::CmMsg::Req(r) => Some(r),
                _ => None,
            })
            .expect("a REQ");
        assert_eq!(
            split_service_id(req.service_id),
            Some((port_space::TCP, 7471))
        );
        let (h, user) = IpHeader::parse(&req.private_data).unwrap();
        assert_eq!(h.ip_version(), 4);
        assert_eq!(h.src_port, 0x9e1a);
        assert_eq!(h.src, req.primary.local_gid.to_ip());
        assert_eq!(h.dst, req.primary.remote_gid.to_ip());
        assert_eq!(user.len(), REQ_USER_DATA);
    }

    fn ev(kind: EventType, param: EventParam) -> Event {
        Event {
            id: Handle(1),
            kind,
            param,
            local_id: 1,
            mad: None,
        }
    }

    #[test]
    fn ib_cm_events_become_rdma_cm_events() {
        use RdmaCmEventType as R;
        let m = |k, p| map_event(&ev(k, p)).map(|e| (e.kind, e.status, e.private_data_len));
        let none = EventParam::None;
        assert_eq!(
            m(EventType::RepReceived, none.clone()),
            Some((R::ConnectResponse, 0, 196))
        );
        assert_eq!(
            m(EventType::RtuReceived, none.clone()),
            Some((R::Established, 0, 0))
        );
        assert_eq!(
            m(EventType::UserEstablished, none.clone()),
            Some((R::Established, 0, 0))
        );
        for k in [
            EventType::ReqError,
            EventType::RepError,
            EventType::SidrReqError,
        ] {
            assert_eq!(m(k, none.clone()), Some((R::Unreachable, -110, 0)), "{k:?}");
        }
        let rej = EventParam::Rej {
            reason: 8,
            ari_length: 0,
        };
        assert_eq!(m(EventType::RejReceived, rej), Some((R::Rejected, 8, 148)));
        assert_eq!(
            m(EventType::DreqReceived, none.clone()),
            Some((R::Disconnected, 0, 0))
        );
        assert_eq!(
            m(EventType::DrepReceived, none.clone()),
            Some((R::Disconnected, 0, 0))
        );
        assert_eq!(
            m(EventType::DreqError, none.clone()),
            Some((R::Disconnected, -110, 0))
        );
        assert_eq!(
            m(EventType::TimewaitExit, none.clone()),
            Some((R::TimewaitExit, 0, 0))
        );
        let sidr = |status| {
            EventParam::SidrRep(SidrRepEvent {
                status,
                qkey: 0,
                qpn: 0,
                info_len: 0,
                sgid_attr: (1, 0),
            })
        };
        let ok = sidr(0);
        assert_eq!(
            m(EventType::SidrRepReceived, ok),
            Some((R::Established, 0, 136))
        );
        let refused = sidr(2);
        assert_eq!(
            m(EventType::SidrRepReceived, refused),
            Some((R::Unreachable, 2, 0))
        );
        for k in [
            EventType::MraReceived,
            EventType::LapError,
            EventType::LapReceived,
            EventType::AprReceived,
        ] {
            assert_eq!(m(k, none.clone()), None, "{k:?}");
        }
        assert_eq!(R::Established.name(), "RDMA_CM_EVENT_ESTABLISHED");
        assert_eq!(R::TimewaitExit as u32, 15);
    }
}
