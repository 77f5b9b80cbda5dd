#!/usr/bin/env python3
"""scripts/bench_kernel.py OUT PAIRING... - the tables of scripts/bench-kernel.sh.

Reads OUT/runs/PAIRING/ (the guests' share of one pairing: scenarios.run, NAME.cli.out,
NAME.cli.rc, NAME.srv.rc, NAME.note, NAME.ts from interop/bench/stamp.sh, host.before/after)
and writes OUT/bench-kernel.md (also printed) and OUT/bench-kernel.json:
  * per cmtime N: cmtime's own per-step times (us per connection = the step's total wall time
    over all N connections / N) for each pairing, and the ratio to kernel-kernel
    (< 1: faster than the kernel CM);
  * the applications' view: seconds from the client's start to its first result line
    (rping: the first "ping data" line; perftest: the first row of numbers) and to its exit.
"""
import json
import os
import platform
import re
import subprocess
import sys
import time

REF = "kernel-kernel"
# cmtime v44: printf("%-13s: %11.2f%11.2f%11.2f%11.2f\n", step, total ms, max ms, min us, us/conn)
# (fields can run together: a step no connection finished prints min 1000000000.00)
CMTIME_ROW = re.compile(r"^([a-z][a-z ]*?)\s*:((?:\s*-?\d+\.\d\d){4})\s*$")
NUMBER = re.compile(r"-?\d+\.\d\d")
# cmtime's server serves until the driver stops it (SIGTERM: 143)
SERVER_RC = {"143": "stopped (served to the end)", "139": "139 (SIGSEGV)", "137": "137 (SIGKILL)", "124": "124 (timed out)"}
# cmtime's line for a connection that failed
CM_EVENT = re.compile(r"^(?:event: )?RDMA_CM_EVENT_(\w+), error: (-?\d+)", re.M)
# the client's output line that shows its connection is up (rping: its first ping came back;
# perftest: it prints the peer's QP after the rdma_cm exchange), and its first result line
CONNECTED = {
    "rping-C1": re.compile(r"ping data"),
    "ib_write_bw": re.compile(r"remote address:"),
    "ib_send_lat": re.compile(r"remote address:"),
}
FIRST_RESULT = {
    "ib_write_bw": re.compile(r"^\s*\d+\s+\d+\s+[\d.]+"),
    "ib_send_lat": re.compile(r"^\s*\d+\s+\d+\s+[\d.]+"),
}


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def parse_cmtime(text):
    """{step: {total_ms, max_ms, min_us, us_per_conn}} from cmtime's table (after its header)."""
    steps, seen_header = {}, False
    for line in text.splitlines():
        if line.startswith("step ") and "us / conn" in line:
            seen_header, steps = True, {}
            continue
        m = CMTIME_ROW.match(line) if seen_header else None
        if m:
            total_ms, max_ms, min_us, per_conn = (float(x) for x in NUMBER.findall(m.group(2)))
            # cmtime starts every min at 999999999 us: still there, no connection finished the step
            if min_us >= 999_999_999:
                steps[m.group(1).strip()] = {"completed": False}
                continue
            steps[m.group(1).strip()] = {
                "completed": True,
                "total_ms": total_ms,
                "max_ms": max_ms,
                "min_us": min_us,
                "us_per_conn": per_conn,
            }
    return steps


def parse_stamps(text, first_re):
    """(seconds to the first line matching first_re, seconds to exit, exit status) from stamp.sh."""
    start = first = end = None
    rc = None
    for line in text.splitlines():
        ts, _, rest = line.partition(" ")
        try:
            t = float(ts)
        except ValueError:
            continue
        if rest == "@start":
            start = t
        elif rest.startswith("@exit"):
            end = t
            rc = rest.split()[-1]
        elif first is None and first_re is not None and first_re.search(rest):
            first = t
    if start is None:
        return None, None, None
    return (None if first is None else first - start), (None if end is None else end - start), rc


def scenario_names(run):
    names = []
    for line in read(os.path.join(run, "scenarios.run")).splitlines():
        if line.strip():
            names.append(line.split("\t", 1)[0])
    return names


def collect(out, pairing):
    run = os.path.join(out, "runs", pairing)
    res = {"pairing": pairing, "scenarios": {}}
    if os.path.exists(os.path.join(run, "skipped")):
        res["skipped"] = read(os.path.join(run, "skipped")).strip()
        return res
    res["host_before"] = read(os.path.join(run, "host.before")).strip().splitlines()[0:1]
    res["host_before"] = res["host_before"][0] if res["host_before"] else ""
    res["host_after"] = read(os.path.join(run, "host.after")).strip()
    wall = re.search(r"^wall: ([\d.]+) s", read(os.path.join(run, "pair.log")), re.M)
    res["wall_s"] = float(wall.group(1)) if wall else None
    for name in scenario_names(run):
        cli = read(os.path.join(run, name + ".cli.out"))
        s = {
            "client_rc": read(os.path.join(run, name + ".cli.rc"), "none").strip(),
            "server_rc": read(os.path.join(run, name + ".srv.rc"), "none").strip(),
            "note": read(os.path.join(run, name + ".note")).strip(),
        }
        ts = read(os.path.join(run, name + ".ts"))
        s["connected_s"], s["exit_s"], _ = parse_stamps(ts, CONNECTED.get(name))
        s["first_result_s"] = parse_stamps(ts, FIRST_RESULT.get(name))[0]
        if name.startswith("cmtime-"):
            s["n"] = int(name.split("-", 1)[1])
            s["steps"] = parse_cmtime(cli)
            # the connections cmtime reported failing, by event and status
            s["failed"] = {}
            for m in CM_EVENT.finditer(cli):
                key = f"{m.group(1)} {m.group(2)}"
                s["failed"][key] = s["failed"].get(key, 0) + 1
        if s["client_rc"] != "0":
            # the tool's own last line (ibcm's log lines name ibcm)
            lines = [ln for ln in cli.splitlines() if ln.strip() and "ibcm" not in ln.lower()]
            s["error"] = lines[-1][:200] if lines else "no output"
        res["scenarios"][name] = s
    return res


def ratio(v, ref):
    if v is None or ref is None or ref <= 0:
        return None
    return v / ref


def fmt(v, r, digits=1):
    if v is None:
        return "—"
    s = f"{v:.{digits}f}"
    return s if r is None else f"{s} (×{r:.2f})"


def machine():
    cpu = ""
    for line in read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    try:
        qemu = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        qemu = "qemu: unknown"
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": platform.node(),
        "kernel": platform.release(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "qemu": qemu,
    }


def render(data):
    pairs = [p for p in data["pairings"]]
    res = data["results"]
    ref = res.get(REF, {}).get("scenarios", {})
    m = data["machine"]
    md = ["# ibcm vs the kernel CM: the same binaries, one run (scripts/bench-kernel.sh)", ""]
    md.append(f"{m['date_utc']}; host {m['host']} ({m['cpus']} CPUs, {m['cpu']}, Linux {m['kernel']}); "
              f"{m['qemu']}; two single-vCPU TCG guests per pairing, Debian 12 rdmacm-utils 44 / perftest 4.5.")
    md.append("")
    md.append("Host load at each pairing's start → end (uptime):")
    md.append("")
    for p in pairs:
        r = res[p]
        if "skipped" in r:
            md.append(f"* {p}: skipped — {r['skipped']}")
            continue
        la = lambda s: s.split("load average:")[-1].strip() if "load average" in s else "?"
        wall = f", {r['wall_s']:.0f} s wall" if r.get("wall_s") else ""
        md.append(f"* {p}: {la(r.get('host_before', ''))} → {la(r.get('host_after', ''))}{wall}")
    md.append("")
    md.append("TCG guests make the absolute times meaningless for real hardware; both CMs run under the same "
              "emulated CPU in the same run, so the ratios (×, to kernel-kernel; < 1 is faster) compare.")
    ns = sorted({s["n"] for r in res.values() for s in r.get("scenarios", {}).values() if "n" in s})
    for n in ns:
        name = f"cmtime-{n}"
        md += ["", f"## cmtime -c {n}: µs per connection per step (cmtime's own times, client side)", ""]
        steps = []
        for p in pairs:
            for st in res[p].get("scenarios", {}).get(name, {}).get("steps", {}):
                if st not in steps:
                    steps.append(st)
        md.append("| step | " + " | ".join(pairs) + " |")
        md.append("|---|" + "---|" * len(pairs))
        refsteps = ref.get(name, {}).get("steps", {})
        for st in steps:
            row = [st]
            for p in pairs:
                cell = res[p].get("scenarios", {}).get(name, {}).get("steps", {}).get(st, {})
                if cell.get("completed") is False:
                    row.append("none finished")
                    continue
                v = cell.get("us_per_conn")
                rv = refsteps.get(st, {}).get("us_per_conn")
                row.append(fmt(v, ratio(v, rv) if p != REF else None))
            md.append("| " + " | ".join(row) + " |")
        row = ["failed connections"]
        for p in pairs:
            s = res[p].get("scenarios", {}).get(name)
            f = (s or {}).get("failed") or {}
            row.append(", ".join(f"{v} {k}" for k, v in sorted(f.items())) or ("—" if s is None else "0"))
        md.append("| " + " | ".join(row) + " |")
        row = ["client exit status"]
        for p in pairs:
            s = res[p].get("scenarios", {}).get(name)
            rc = None if s is None else ("124 (stopped at the bound)" if s["client_rc"] == "124" else s["client_rc"])
            row.append("—" if s is None else rc + (f": {s['error']}" if s.get("error") else ""))
        md.append("| " + " | ".join(row) + " |")
        row = ["server exit status"]
        for p in pairs:
            s = res[p].get("scenarios", {}).get(name)
            row.append("—" if s is None else SERVER_RC.get(s["server_rc"], s["server_rc"]))
        md.append("| " + " | ".join(row) + " |")
    apps = [n for n in ("rping-C1", "ib_write_bw", "ib_send_lat") if any(n in res[p].get("scenarios", {}) for p in pairs)]
    if apps:
        md += app_table(pairs, res, ref, apps)
    notes = [(p, n, s["note"]) for p in pairs for n, s in res[p].get("scenarios", {}).items() if s.get("note")]
    if notes:
        md += ["", "Driver notes:", ""] + [f"* {p} {n}: {t}" for p, n, t in notes]
    return "\n".join(md) + "\n"


def app_table(pairs, res, ref, apps):
    md = []
    md += ["", "## Applications: seconds from the client's start (measured outside it) to the line that shows "
           "its connection up, to its first result line, and to its exit", ""]
    md.append("| tool | " + " | ".join(pairs) + " |")
    md.append("|---|" + "---|" * len(pairs))
    labels = {"rping-C1": "rping -C 1", "ib_write_bw": "ib_write_bw -R -n 200", "ib_send_lat": "ib_send_lat -R -n 200"}
    for name in apps:
        label = labels[name]
        keys = [("connected_s", "connected"), ("exit_s", "exit")]
        if name in FIRST_RESULT:
            keys.insert(1, ("first_result_s", "first result"))
        for key, what in keys:
            row = [f"{label}: {what}"]
            for p in pairs:
                s = res[p].get("scenarios", {}).get(name)
                v = None if s is None else s.get(key)
                rv = ref.get(name, {}).get(key)
                cell = fmt(v, ratio(v, rv) if p != REF else None, 2)
                if s is not None and s["client_rc"] != "0":
                    cell += f" rc={s['client_rc']}"
                row.append(cell)
            md.append("| " + " | ".join(row) + " |")
    return md


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    out, pairs = sys.argv[1], sys.argv[2:]
    data = {"machine": machine(), "pairings": pairs, "results": {p: collect(out, p) for p in pairs}}
    md = render(data)
    with open(os.path.join(out, "bench-kernel.json"), "w") as f:
        json.dump(data, f, indent=1)
    with open(os.path.join(out, "bench-kernel.md"), "w") as f:
        f.write(md)
    print(md, end="")
    ok = data["results"].get(REF, {}).get("scenarios", {})
    if REF in pairs and not any(s.get("steps") for s in ok.values()):
        print(f"bench-kernel: the {REF} reference produced no cmtime table", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
