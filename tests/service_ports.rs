//! Port events for processes served by the host CM service: when the
//! service's device installs new port tables (`Device::update_ports`, as
//! its `ibcm-ports` thread does after a verbs port event), every process
//! that has the device open gets them (an `op::PORTS` record) and installs
//! them as an in-process device would: `ports()`, `query_gid`,
//! `init_path`, new `ib_gid_attr` objects with the older ones still valid.
//! A process opening the device later gets the new tables in its open.
//!
//! A `PORTS` record is input like any other: one that does not decode,
//! names other ports than the open's, or has a nonzero seq or handle is
//! dropped (a fake service sends them here).

#[path = "common/fake_service.rs"]
mod fake;
#[path = "common/net.rs"]
mod net;
#[path = "common/served.rs"]
mod served;

use ibcm::api::{Device, Gid, GidEntry, GidType, PortInfo};
use ibcm::ipc::{self, Header, Public, Stat, op, sock};

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

fn temp_socket(test: &str) -> PathBuf {
    fake::temp_socket("svc-ports", test)
}

fn gid(ip: &str) -> Gid {
    Gid::from(ip.parse::<IpAddr>().unwrap())
}

/// The tables of `ports` with `g` appended to port 1's GIDs.
fn with_gid(ports: &[PortInfo], g: Gid) -> Vec<PortInfo> {
    let mut p = ports.to_vec();
    p[0].gids.push(GidEntry {
        gid: g,
        gid_type: GidType::RoceV2,
    });
    p
}

#[test]
fn a_served_process_gets_the_port_tables_the_service_installs() {
    let (svc, socket) = served::start_service(temp_socket("push"));
    let name = &net::soft(1);
    let a = Device::open_served(name, &socket).unwrap();
    assert!(a.is_served());
    let sdev = svc.device(name).expect("the service serves the device");
    let before = sdev.ports();
    assert_eq!(*a.ports(), *before);
    assert!(a.query_gid(1, 1).is_err(), "no GID at index 1 yet");
    let old_attr = a.gid_attr(1, 0).expect("GID attribute of index 0");

    // An address added on the service's host: its port event installs the
    // new tables in the service's device.
    let new_gid = gid("10.77.1.2");
    let added = with_gid(&before, new_gid);
    sdev.update_ports(added.clone());
    assert!(
        served::wait_for(Duration::from_secs(2), || a.query_gid(1, 1) == Ok(new_gid)),
        "the new GID did not reach the served process: {:?}",
        a.ports()
    );
    assert_eq!(*a.ports(), added);
    assert_eq!(a.engine_config().ports, added);
    // A path to a peer on the new subnet starts at the new GID.
    let path = a.init_path(1, gid("10.77.1.3")).unwrap();
    assert_eq!(path.sgid, new_gid);
    // A new GID attribute object; the one handed out before stays valid.
    let attr = a.gid_attr(1, 1).expect("GID attribute of the new index");
    unsafe {
        assert_eq!((*attr).gid.raw, new_gid.0);
        assert_eq!((*attr).index, 1);
        assert_eq!((*attr).device, a.c_ptr());
        assert_eq!((*old_attr).gid.raw, before[0].gids[0].gid.0);
    }

    // A process opening the device now gets the new tables with its open.
    let b = Device::open_served(name, &socket).unwrap();
    assert_eq!(*b.ports(), added);

    // The address removed: both processes see it go.
    sdev.update_ports(before.to_vec());
    for (who, d) in [("a", &a), ("b", &b)] {
        assert!(
            served::wait_for(Duration::from_secs(2), || *d.ports() == *before),
            "process {who} kept the removed GID: {:?}",
            d.ports()
        );
        assert!(d.query_gid(1, 1).is_err());
    }
    a.close();
    b.close();
}

/// A service of one connection that answers OPEN with `ports`, then, on
/// the first STAT request, pushes `records` before the STAT reply, and
/// after the second STAT request pushes `last` before its reply.
fn fake_service(
    socket: PathBuf,
    ports: Vec<PortInfo>,
    records: Vec<Vec<u8>>,
    last: Vec<u8>,
) -> std::thread::JoinHandle<()> {
    let mut stats = 0;
    fake::serve(&socket, move |fd, h, _| match h.op {
        op::OPEN => Some(fake::opened(h, ports.clone())),
        op::STAT => {
            stats += 1;
            let push = if stats == 1 {
                records.clone()
            } else {
                vec![last.clone()]
            };
            for r in push {
                sock::send(fd, &r).unwrap();
            }
            Some(ipc::reply(h, 0, Public::default(), |w| {
                w.put(&Stat::default());
            }))
        }
        _ => None,
    })
}

fn ports_record(seq: u64, handle: u64, ports: &[PortInfo]) -> Vec<u8> {
    let mut w = Header {
        op: op::PORTS,
        seq,
        handle,
    }
    .record();
    w.put(&ports.to_vec().into_boxed_slice());
    w.into_bytes()
}

#[test]
fn a_ports_record_is_checked_like_any_input() {
    let socket = temp_socket("bad");
    let opened = vec![PortInfo::roce(1, gid(&net::ip(2)))];
    let good = with_gid(&opened, gid("10.77.2.2"));
    let mut other_port = good.clone();
    other_port[0].port_num = 2;
    let mut ib = good.clone();
    ib[0].is_roce = false;
    let mut no_pkeys = good.clone();
    no_pkeys[0].pkeys.clear();
    let two_ports = [good.clone(), good.clone()].concat();
    let full = ports_record(0, 0, &good);
    let mut trailing = full.clone();
    trailing.push(0);
    let bad = vec![
        ports_record(0, 0, &other_port),
        ports_record(0, 0, &ib),
        ports_record(0, 0, &no_pkeys),
        ports_record(0, 0, &two_ports),
        ports_record(0, 0, &[]),
        ports_record(1, 0, &good),
        ports_record(0, 5, &good),
        full[..full.len() - 1].to_vec(),
        trailing,
    ];
    let server = fake_service(socket.clone(), opened.clone(), bad, full);
    let d = Device::open_served(&net::soft(2), &socket).unwrap();
    assert_eq!(*d.ports(), opened);
    // The reply follows the pushed records: they have all been read.
    assert!(d.service_stat().is_some());
    assert_eq!(*d.ports(), opened, "a bad PORTS record was installed");
    assert!(d.service_stat().is_some());
    assert_eq!(*d.ports(), good, "the valid PORTS record was not installed");
    assert_eq!(d.query_gid(1, 1), Ok(gid("10.77.2.2")));
    d.close();
    server.join().unwrap();
}
