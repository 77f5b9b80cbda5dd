#!/usr/bin/env python3
"""interop/pcapcheck.py - check one scenario's capture.

usage: pcapcheck.py --ibcm BIN --host IP --expect REGEX [--tshark BIN] PCAP

1. `ibcm decode --json PCAP`: every CM MAD, each with a good ICRC (the
   kernel's MADs and ibcm's). The MADs become one line, each as
   `h:ATTR` (sent by the host = ibcm) or `g:ATTR` (sent by the guest =
   the kernel CM), e.g. `h:REQ g:REP h:RTU h:DREQ g:DREP`; REGEX must match
   all of it (Python `re.fullmatch`).
2. `tshark -T json PCAP`: the same CM frames, and every field tshark
   decodes that `ibcm decode` also reports has the same value (tshark 4.0
   decodes the fields of REQ, REP, RTU, REJ, DREQ and DREP; for MRA and
   SIDR it names the attribute only, so only the headers are compared).
   Known tshark 4.0 misreadings of the REQ (flow label, packet rate, the
   reserved bits between them) are skipped; cli/tests/decode_cli.rs asserts
   them byte by byte.

Prints one line `wire: ...` and one line `tshark: ...`; exit 0 when both
checks pass, 1 otherwise (with the reasons).
"""
import argparse
import ipaddress
import json
import re
import subprocess
import sys

# tshark field -> (ibcm decode --json key, kind)
FIELDS = {
    "frame.number": ("frame", "int"),
    "ip.src": ("src", "ip"),
    "ip.dst": ("dst", "ip"),
    "udp.srcport": ("src_port", "int"),
    "udp.dstport": ("dst_port", "int"),
    "infiniband.bth.opcode": ("bth_opcode", "int"),
    "infiniband.bth.se": ("bth_se", "bool"),
    "infiniband.bth.m": ("bth_mig_req", "bool"),
    "infiniband.bth.padcnt": ("bth_pad_count", "int"),
    "infiniband.bth.p_key": ("bth_pkey", "int"),
    "infiniband.bth.destqp": ("bth_dest_qp", "int"),
    "infiniband.bth.a": ("bth_ack_req", "bool"),
    "infiniband.bth.psn": ("psn", "int"),
    "infiniband.deth.q_key": ("deth_qkey", "int"),
    "infiniband.deth.srcqp": ("deth_src_qp", "int"),
    "infiniband.invariant.crc": ("icrc", "icrc"),
    "infiniband.mad.method": ("method", "int"),
    "infiniband.mad.status": ("mad_status", "int"),
    "infiniband.mad.classspecific": ("class_specific", "int"),
    "infiniband.mad.transactionid": ("tid", "int"),
    "infiniband.mad.attributeid": ("attr_id", "int"),
    "infiniband.mad.attributemodifier": ("attr_mod", "int"),
    "infiniband.cm.req": ("local_comm_id", "int"),
    "infiniband.cm.req.serviceid": ("service_id", "int"),
    "infiniband.cm.req.localcaguid": ("local_ca_guid", "int"),
    "infiniband.cm.rep.localcaguid": ("local_ca_guid", "int"),
    "infiniband.cm.req.localqkey": ("local_qkey", "int"),
    "infiniband.cm.rep.localqkey": ("local_qkey", "int"),
    "infiniband.cm.req.localqpn": ("local_qpn", "int"),
    "infiniband.cm.rep.localqpn": ("local_qpn", "int"),
    "infiniband.cm.req.responderres": ("responder_resources", "int"),
    "infiniband.cm.rep.respres": ("responder_resources", "int"),
    "infiniband.cm.req.localeecn": ("local_eecn", "int"),
    "infiniband.cm.rep.localeecn": ("local_eecn", "int"),
    "infiniband.cm.req.initdepth": ("initiator_depth", "int"),
    "infiniband.cm.rep.initdepth": ("initiator_depth", "int"),
    "infiniband.cm.req.remoteeecn": ("remote_eecn", "int"),
    "infiniband.cm.req.remoteresptout": ("remote_cm_response_timeout", "int"),
    "infiniband.cm.req.transpsvctype": ("transport_service_type", "int"),
    "infiniband.cm.req.e2eflowctrl": ("end_to_end_flow_control", "bool"),
    "infiniband.cm.rep.e2eflowctrl": ("end_to_end_flow_control", "bool"),
    "infiniband.cm.req.startpsn": ("starting_psn", "int"),
    "infiniband.cm.rep.startpsn": ("starting_psn", "int"),
    "infiniband.cm.req.localresptout": ("local_cm_response_timeout", "int"),
    "infiniband.cm.req.retrcount": ("retry_count", "int"),
    "infiniband.cm.req.pkey": ("pkey", "int"),
    "infiniband.cm.req.pppmtu": ("path_mtu", "int"),
    "infiniband.cm.req.rdcexist": ("rdc_exists", "bool"),
    "infiniband.cm.req.rnrretrcount": ("rnr_retry_count", "int"),
    "infiniband.cm.rep.rnrretrcount": ("rnr_retry_count", "int"),
    "infiniband.cm.req.maxcmretr": ("max_cm_retries", "int"),
    "infiniband.cm.req.srq": ("srq", "bool"),
    "infiniband.cm.rep.srq": ("srq", "bool"),
    "infiniband.cm.req.ext_transport": ("extended_transport_type", "int"),
    "infiniband.cm.req.prim_locallid": ("primary_local_lid", "int"),
    "infiniband.cm.req.prim_remotelid": ("primary_remote_lid", "int"),
    "infiniband.cm.req.prim_localgid": ("primary_local_gid", "gid"),
    "infiniband.cm.req.prim_localgid_ipv4": ("primary_local_gid", "gid"),
    "infiniband.cm.req.prim_remotegid": ("primary_remote_gid", "gid"),
    "infiniband.cm.req.prim_remotegid_ipv4": ("primary_remote_gid", "gid"),
    "infiniband.cm.req.prim_tfcclass": ("primary_traffic_class", "int"),
    "infiniband.cm.req.prim_hoplim": ("primary_hop_limit", "int"),
    "infiniband.cm.req.prim_sl": ("primary_sl", "int"),
    "infiniband.cm.req.prim_subnetlocal": ("primary_subnet_local", "bool"),
    "infiniband.cm.req.prim_localacktout": ("primary_local_ack_timeout", "int"),
    "infiniband.cm.req.alt_locallid": ("alternate_local_lid", "int"),
    "infiniband.cm.req.alt_remotelid": ("alternate_remote_lid", "int"),
    "infiniband.cm.req.alt_tfcclass": ("alternate_traffic_class", "int"),
    "infiniband.cm.req.alt_hoplim": ("alternate_hop_limit", "int"),
    "infiniband.cm.req.alt_sl": ("alternate_sl", "int"),
    "infiniband.cm.req.alt_subnetlocal": ("alternate_subnet_local", "bool"),
    "infiniband.cm.req.alt_localacktout": ("alternate_local_ack_timeout", "int"),
    "infiniband.cm.req.ip_cm.ipv": ("rdma_cm_ip_version", "int"),
    "infiniband.cm.req.ip_cm.sport": ("rdma_cm_src_port", "int"),
    "infiniband.cm.req.ip_cm.sip4": ("rdma_cm_src_addr", "ip"),
    "infiniband.cm.req.ip_cm.sip6": ("rdma_cm_src_addr", "ip"),
    "infiniband.cm.req.ip_cm.dip4": ("rdma_cm_dst_addr", "ip"),
    "infiniband.cm.req.ip_cm.dip6": ("rdma_cm_dst_addr", "ip"),
    "infiniband.cm.rep": ("local_comm_id", "int"),
    "infiniband.cm.rtu.localcommid": ("local_comm_id", "int"),
    "infiniband.cm.rej.localcommid": ("local_comm_id", "int"),
    "infiniband.cm.dreq.localcommid": ("local_comm_id", "int"),
    "infiniband.cm.drsp.localcommid": ("local_comm_id", "int"),
    "infiniband.cm.rep.remotecommid": ("remote_comm_id", "int"),
    "infiniband.cm.rtu.remotecommid": ("remote_comm_id", "int"),
    "infiniband.cm.rej.remotecommid": ("remote_comm_id", "int"),
    "infiniband.cm.dreq.remotecommid": ("remote_comm_id", "int"),
    "infiniband.cm.drsp.remotecommid": ("remote_comm_id", "int"),
    "infiniband.cm.rep.tgtackdelay": ("target_ack_delay", "int"),
    "infiniband.cm.rep.failoveracc": ("failover_accepted", "int"),
    "infiniband.cm.rej.rejinfolen": ("ari_length", "int"),
    "infiniband.cm.rej.reason": ("reason", "int"),
    "infiniband.cm.req.remoteqpneecn": ("remote_qpn", "int"),
    "infiniband.cm.req.private": ("private_data", "hex"),
    "infiniband.cm.rep.private": ("private_data", "hex"),
    "infiniband.cm.rtu.private": ("private_data", "hex"),
    "infiniband.cm.rej.private": ("private_data", "hex"),
    "infiniband.cm.dreq.private": ("private_data", "hex"),
    "infiniband.cm.drsp.private": ("private_data", "hex"),
}
MSG_CODES = {0: "REQ", 1: "REP", 2: "LAP"}


def tshark_int(v):
    v = v.strip()
    for s in (v, re.sub(r".*\(([^()]*)\)\s*$", r"\1", v)):
        try:
            return int(s, 0)
        except ValueError:
            pass
    return None


def tshark_bool(v):
    v = v.strip().lower()
    if v in ("true", "1", "0x01", "set"):
        return True
    if v in ("false", "0", "0x00", "not set"):
        return False
    n = tshark_int(v)
    return None if n is None else bool(n)


def same(kind, tv, ov):
    """Does tshark's text value `tv` say the same as our JSON value `ov`?"""
    if kind == "int":
        return tshark_int(tv) == ov
    if kind == "bool":
        return tshark_bool(tv) == ov
    if kind == "icrc":  # tshark prints the stored bytes as a big-endian number
        return tshark_int(tv) == int.from_bytes(ov.to_bytes(4, "little"), "big")
    if kind == "ip":
        return ipaddress.ip_address(tv.strip()) == ipaddress.ip_address(ov)
    if kind == "gid":
        a = ipaddress.ip_address(tv.strip())
        b = ipaddress.ip_address(ov)
        if a.version == 4:
            return b.version == 6 and b.ipv4_mapped == a
        return a == b
    if kind == "hex":  # tshark may cut long byte areas (ending them with an ellipsis)
        t = tv.replace(":", "").replace("…", "").strip().lower()
        return ov.lower().startswith(t)
    raise ValueError(kind)


def leaves(obj, out):
    """Every (key, string value) of tshark's JSON, duplicates kept."""
    if isinstance(obj, list):  # object_pairs_hook gives lists of pairs
        for k, v in obj:
            if isinstance(v, str):
                out.append((k, v))
            else:
                leaves(v, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ibcm", required=True)
    ap.add_argument("--host", required=True, help="the host's (ibcm's) IP address")
    ap.add_argument("--expect", required=True, help="regex over the h:/g: attribute line")
    ap.add_argument("--tshark", default="tshark")
    ap.add_argument("pcap")
    a = ap.parse_args()
    problems = []

    r = subprocess.run([a.ibcm, "decode", "--json", a.pcap], capture_output=True, text=True)
    if r.returncode != 0:
        print("wire: ibcm decode failed (%d): %s" % (r.returncode, r.stderr.strip()))
        return 1
    mads = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    seq = " ".join(("h:" if m["src"] == a.host else "g:") + m["attr"] for m in mads)
    bad_icrc = [m["frame"] for m in mads if not m.get("icrc_ok")]
    if bad_icrc:
        problems.append("ICRC wrong in frames %s" % bad_icrc)
    if not re.fullmatch(a.expect, seq):
        problems.append("wire sequence %r does not match %r" % (seq, a.expect))
    print("wire: %s  (%d CM MADs, ICRC ok on %d)" % (seq or "(none)", len(mads),
                                                  len(mads) - len(bad_icrc)))

    r = subprocess.run([a.tshark, "-r", a.pcap, "-n", "-T", "json",
                        "-Y", "infiniband.mad.mgmtclass == 0x07"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        problems.append("tshark failed: %s" % r.stderr.strip()[-300:])
        frames = []
    else:
        frames = json.loads(r.stdout or "[]", object_pairs_hook=lambda p: p)
    ours = {m["frame"]: m for m in mads}
    compared = 0
    names = []
    seen = set()
    for f in frames:
        lv = []
        leaves(f, lv)
        d = dict(lv)
        no = tshark_int(d.get("frame.number", ""))
        seen.add(no)
        m = ours.get(no)
        if m is None:
            problems.append("tshark frame %s is a CM MAD that ibcm decode did not report" % no)
            continue
        names.append(m["attr"])
        for k, v in lv:
            if k not in FIELDS:
                if k == "infiniband.cm.rej.msgrej":
                    want = MSG_CODES.get(tshark_int(v), "?")
                    if m.get("message_rejected") not in (want, tshark_int(v)):
                        problems.append("frame %s %s: tshark %s, ibcm %s" %
                                        (no, k, v, m.get("message_rejected")))
                    compared += 1
                continue
            key, kind = FIELDS[k]
            if key not in m:
                continue
            compared += 1
            try:
                ok = same(kind, v, m[key])
            except (ValueError, TypeError):
                ok = False
            if not ok:
                problems.append("frame %s %s: tshark %r, ibcm %s=%r" % (no, k, v, key, m[key]))
    missing = sorted(set(ours) - seen)
    if missing:
        problems.append("ibcm decode found CM MADs tshark did not: frames %s" % missing)
    print("tshark: %d CM frames, %d fields compared with ibcm decode, %s" %
          (len(frames), compared, "all agree" if not problems else "%d problem(s)" % len(problems)))
    for p in problems:
        print("  PROBLEM: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
