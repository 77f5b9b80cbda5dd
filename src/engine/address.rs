//! Addresses: lookups in the port tables, the address vector of a path
//! (`cm_init_av_by_path`), the path fields of a REQ, and where a MAD goes.

use super::*;

impl Engine {
    pub(super) fn port(&self, port_num: u8) -> Option<&PortInfo> {
        self.cfg.ports.iter().find(|p| p.port_num == port_num)
    }

    pub(super) fn pkey_value(&self, port_num: u8, index: u16) -> u16 {
        self.port(port_num)
            .and_then(|p| p.pkeys.get(index as usize).copied())
            .unwrap_or(0xffff)
    }

    /// Index of `pkey` in the port's table (full members first, as the
    /// kernel's cached lookup).
    pub(super) fn pkey_index(&self, port_num: u8, pkey: u16) -> Option<u16> {
        let p = self.port(port_num)?;
        p.pkeys
            .iter()
            .position(|&k| k == pkey)
            .or_else(|| p.pkeys.iter().position(|&k| k & 0x7fff == pkey & 0x7fff))
            .map(|i| i as u16)
    }

    /// (port, GID index) of a local GID of the given record type.
    pub(super) fn find_gid(&self, gid: &Gid, rec_type: PathRecType) -> Option<(u8, u16)> {
        let want = match rec_type {
            PathRecType::RoceV1 => Some(GidType::RoceV1),
            PathRecType::RoceV2 => Some(GidType::RoceV2),
            _ => None,
        };
        for p in &self.cfg.ports {
            for (i, e) in p.gids.iter().enumerate() {
                if e.gid == *gid && want.is_none_or(|t| t == e.gid_type) {
                    return Some((p.port_num, i as u16));
                }
            }
        }
        None
    }

    pub(super) fn gid_at(&self, port_num: u8, index: u16) -> Option<GidEntry> {
        self.port(port_num)?.gids.get(index as usize).copied()
    }

    /// Address vector for a path (`cm_init_av_by_path`).
    pub(super) fn av_from_path(
        &self,
        path: &PathRec,
        sgid_attr: Option<(u8, u16)>,
    ) -> ApiResult<Av> {
        let (port, gid_index) = match sgid_attr {
            Some((port, idx)) => {
                self.gid_at(port, idx).ok_or(Errno::EINVAL)?;
                (port, idx)
            }
            None => self
                .find_gid(&path.sgid, path.rec_type)
                .ok_or(Errno::EINVAL)?,
        };
        let pinfo = self.port(port).ok_or(Errno::EINVAL)?;
        let roce = pinfo.is_roce || path.rec_type.is_roce();
        let lmc_mask = (1u32 << pinfo.lmc) - 1;
        let pkey_index = self.pkey_index(port, path.pkey).ok_or(Errno::ENOENT)?;
        let sgid = self
            .gid_at(port, gid_index)
            .map(|e| e.gid)
            .unwrap_or(path.sgid);
        Ok(Av {
            port,
            pkey_index,
            timeout: path.packet_life_time.saturating_add(1).min(31),
            sgid,
            ah: AhAttr {
                port_num: port,
                sl: path.sl,
                static_rate: path.rate,
                has_grh: roce || path.hop_limit > 0,
                dgid: path.dgid,
                sgid_index: gid_index,
                flow_label: path.flow_label,
                hop_limit: path.hop_limit,
                traffic_class: path.traffic_class,
                dlid: if roce { 0 } else { path.dlid },
                src_path_bits: if roce {
                    0
                } else {
                    (path.slid & lmc_mask) as u8
                },
                dmac: path.dmac,
                rec_type: if roce && !path.rec_type.is_roce() {
                    PathRecType::RoceV2
                } else {
                    path.rec_type
                },
            },
        })
    }

    /// The path fields of a REQ (`cm_format_req` path part).
    pub(super) fn req_path(&self, path: &PathRec, inbound: Option<&PathRec>) -> ReqPath {
        let local = path.hop_limit <= 1;
        ReqPath {
            local_lid: if local {
                path.slid as u16
            } else {
                inbound.map(|p| p.dlid as u16).unwrap_or(0xffff)
            },
            remote_lid: if local {
                if path.rec_type == PathRecType::Opa {
                    0
                } else {
                    path.dlid as u16
                }
            } else {
                0xffff
            },
            local_gid: path.sgid,
            remote_gid: path.dgid,
            flow_label: path.flow_label,
            packet_rate: path.rate,
            traffic_class: path.traffic_class,
            hop_limit: path.hop_limit,
            sl: path.sl,
            subnet_local: local,
            local_ack_timeout: ack_timeout(self.cfg.ack_delay, path.packet_life_time),
        }
    }

    pub(super) fn dest_of(&self, av: &Av) -> MadDest {
        MadDest {
            port: av.port,
            dgid: av.ah.dgid,
            sgid: av.sgid,
            dlid: av.ah.dlid as u16,
            sl: av.ah.sl,
            pkey: self.pkey_value(av.port, av.pkey_index),
            pkey_index: av.pkey_index,
            hop_limit: av.ah.hop_limit,
            traffic_class: av.ah.traffic_class,
            flow_label: av.ah.flow_label,
            has_grh: av.ah.has_grh,
            dest_qp: 1,
        }
    }

    /// Reply address for a received MAD (an AH built from the WC/GRH).
    pub(super) fn reply_dest(src: &MadSource) -> MadDest {
        MadDest::reply_to(src)
    }
}
