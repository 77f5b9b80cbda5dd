//! `ibcm devices` and `ibcm completions`, end to end: the device list
//! against a fake sysfs / dev tree (one Soft-RoCE device, `rxe0`, with two
//! RoCE v2 GIDs, the kernel CM loaded) and against this machine, and a
//! completion script per shell.

use std::path::Path;

mod common;

use common::{Run, TempDir, ibcm_command};
use serde_json::Value;

fn ibcm(args: &[&str], sysfs: Option<&Path>, dev: Option<&Path>) -> Run {
    let mut c = ibcm_command();
    c.args(args)
        .env_remove("IBCM_SYSFS_ROOT")
        .env_remove("IBCM_DEV_ROOT");
    if let Some(s) = sysfs {
        c.arg("--sysfs-root").arg(s);
    }
    if let Some(d) = dev {
        c.env("IBCM_DEV_ROOT", d);
    }
    Run::of(&mut c)
}

/// sysfs (`<root>/sys`) and /dev (`<root>/dev`) of a host with rxe0 on
/// eth1: GID 0 the link-local, GID 1 the IPv4-mapped 10.0.0.2, both RoCE v2;
/// GID 2 unused (zeros). ib_cm and ib_umad loaded, umad0 for port 1.
fn fake_host(t: &TempDir) {
    let d = "sys/class/infiniband/rxe0";
    t.write(&format!("{d}/node_guid"), "0211:22ff:fe33:4455\n");
    t.write(&format!("{d}/node_type"), "1: CA\n");
    t.write(&format!("{d}/parent"), "eth1\n");
    let p = format!("{d}/ports/1");
    t.write(&format!("{p}/state"), "4: ACTIVE\n");
    t.write(&format!("{p}/phys_state"), "5: LinkUp\n");
    t.write(&format!("{p}/link_layer"), "Ethernet\n");
    t.write(&format!("{p}/lid"), "0x0\n");
    t.write(
        &format!("{p}/gids/0"),
        "fe80:0000:0000:0000:0211:22ff:fe33:4455\n",
    );
    t.write(
        &format!("{p}/gids/1"),
        "0000:0000:0000:0000:0000:ffff:0a00:0002\n",
    );
    t.write(
        &format!("{p}/gids/2"),
        "0000:0000:0000:0000:0000:0000:0000:0000\n",
    );
    for i in 0..2 {
        t.write(&format!("{p}/gid_attrs/types/{i}"), "RoCE v2\n");
        t.write(&format!("{p}/gid_attrs/ndevs/{i}"), "eth1\n");
    }
    t.write("sys/class/infiniband_mad/umad0/ibdev", "rxe0\n");
    t.write("sys/class/infiniband_mad/umad0/port", "1\n");
    t.dir("sys/module/ib_cm");
    t.dir("sys/module/ib_umad");
    t.write("dev/infiniband/umad0", "");
}

#[test]
fn fake_rxe_device_text() {
    let t = TempDir::new("devices", "text");
    fake_host(&t);
    let r = ibcm(&["devices"], Some(&t.0.join("sys")), Some(&t.0.join("dev")));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let o = &r.stdout;
    for want in [
        "rxe0: node GUID 0211:22ff:fe33:4455, CA, on eth1",
        "port 1: ACTIVE (LinkUp), link layer Ethernet, umad0",
        "GID 0   fe80::211:22ff:fe33:4455  RoCE v2  eth1",
        "GID 1   ::ffff:10.0.0.2  RoCE v2  eth1  (10.0.0.2)",
        "open as: rxe0, soft:10.0.0.2@rxe0",
        "Kernel CM (ib_cm): loaded",
        "use soft:<ip>@<dev>, or unload the kernel CM (see README \"Real devices\")",
        "umad (ib_umad): umad0",
        "soft:127.0.0.1",
    ] {
        assert!(o.contains(want), "{want:?} not in:\n{o}");
    }
    assert!(!o.contains("GID 2"), "an unused GID is listed:\n{o}");
    assert!(!o.contains("No RDMA devices"), "{o}");
}

#[test]
fn fake_rxe_device_json() {
    let t = TempDir::new("devices", "json");
    fake_host(&t);
    let r = ibcm(
        &["devices", "--json"],
        Some(&t.0.join("sys")),
        Some(&t.0.join("dev")),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).expect("devices --json is not JSON");
    assert_eq!(v["kernel_cm_loaded"], true);
    assert_eq!(v["ib_umad_loaded"], true);
    assert_eq!(v["umad_nodes"], serde_json::json!(["umad0"]));
    let rdma = v["rdma"].as_array().unwrap();
    assert_eq!(rdma.len(), 1, "{v}");
    let d = &rdma[0];
    assert_eq!(d["name"], "rxe0");
    assert_eq!(d["node_guid"], "0211:22ff:fe33:4455");
    assert_eq!(d["node_type"], "CA");
    assert_eq!(d["parent"], "eth1");
    assert_eq!(
        d["open_as"],
        serde_json::json!(["rxe0", "soft:10.0.0.2@rxe0"])
    );
    let port = &d["ports"][0];
    assert_eq!(port["port"], 1);
    assert_eq!(port["state"], "ACTIVE");
    assert_eq!(port["phys_state"], "LinkUp");
    assert_eq!(port["link_layer"], "Ethernet");
    assert_eq!(port["lid"], 0);
    assert_eq!(port["umad"], "umad0");
    assert_eq!(port["umad_node"], true);
    let gids = port["gids"].as_array().unwrap();
    assert_eq!(gids.len(), 2, "{port}");
    assert_eq!(gids[0]["index"], 0);
    assert_eq!(gids[0]["gid"], "fe80::211:22ff:fe33:4455");
    assert_eq!(gids[0]["type"], "RoCE v2");
    assert_eq!(gids[0]["netdev"], "eth1");
    assert_eq!(gids[1]["index"], 1);
    assert_eq!(gids[1]["gid"], "::ffff:10.0.0.2");
    assert_eq!(gids[1]["type"], "RoCE v2");
    assert_eq!(gids[1]["ip"], "10.0.0.2");
    let notes = v["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("soft:<ip>@<dev>")),
        "{v}"
    );
}

#[test]
fn no_rdma_devices_is_said_clearly() {
    let t = TempDir::new("devices", "none");
    t.dir("sys/class");
    t.dir("dev");
    let r = ibcm(&["devices"], Some(&t.0.join("sys")), Some(&t.0.join("dev")));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("RDMA devices ("), "{}", r.stdout);
    assert!(r.stdout.contains("): none"), "{}", r.stdout);
    assert!(
        r.stdout.contains("No RDMA devices on this host"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("Kernel CM (ib_cm): not loaded"),
        "{}",
        r.stdout
    );
    let r = ibcm(
        &["devices", "--json"],
        Some(&t.0.join("sys")),
        Some(&t.0.join("dev")),
    );
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["rdma"], serde_json::json!([]));
    assert_eq!(v["kernel_cm_loaded"], false);
}

/// This machine: the JSON parses and the loopback address is a soft device.
#[test]
fn this_host_lists_loopback_as_a_soft_device() {
    let r = ibcm(&["devices", "--json"], None, None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).expect("devices --json is not JSON");
    let soft = v["soft"].as_array().unwrap();
    assert!(
        soft.iter().any(|s| s["device"] == "soft:127.0.0.1"
            && s["address"] == "127.0.0.1"
            && s["interface"] == "lo"),
        "{v}"
    );
    assert!(v["rdma"].is_array() && v["kernel_cm_loaded"].is_boolean());
}

#[test]
fn completion_scripts() {
    for (shell, marker) in [
        ("bash", "complete -F _ibcm"),
        ("zsh", "#compdef ibcm"),
        ("fish", "complete -c ibcm"),
    ] {
        let r = ibcm(&["completions", shell], None, None);
        assert_eq!(r.code, 0, "{shell}: {}", r.stderr);
        assert!(r.stdout.contains(marker), "{shell}: not a {shell} script");
        for cmd in ["decode", "listen", "connect", "bench", "devices"] {
            assert!(r.stdout.contains(cmd), "{shell}: no {cmd}");
        }
        // The subcommands' options are completed too.
        for opt in ["service-id", "private-data", "concurrency", "summary"] {
            assert!(r.stdout.contains(opt), "{shell}: no --{opt}");
        }
    }
    let r = ibcm(&["completions", "tcsh"], None, None);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("possible values"), "{}", r.stderr);
}
