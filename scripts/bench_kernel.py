#!/usr/bin/env python3
"""scripts/bench_kernel.py OUT PAIRING... - the tables of scripts/bench-kernel.sh.

Reads OUT/runs/PAIRING/ (the guests' share of one pairing: scenarios.run, NAME.cli.out,
NAME.cli.rc, NAME.srv.rc, NAME.note, NAME.ts from interop/bench/stamp.sh, host.before/after)
and writes OUT/bench-kernel.md (also printed) and OUT/bench-kernel.json:
  * per cmtime N: cmtime's own per-step times (us per connection = the step's total wall time
    over all N connections / N) for each pairing, and the ratio to kernel-kernel
    (< 1: faster than the kernel CM);
  * the applications' view: seconds from the client's start to its first result line
    (rping: the first "ping data" line; perftest: the first row of numbers) and to its exit;
  * many connections at once (cmtime-par-KxN, interop/bench/par.sh): K clients' completion time
    (first start to last exit), the connections they report failing, the kernel CM's own
    retry counters where it runs;
  * with a capture of guest A's NIC (BENCH_PCAP=1, OUT/runs/PAIRING/A.pcap): per scenario what
    `ibcm decode --summary` counts on the wire (connections, retransmissions, duplicates, timed
    out), cut at guest.sh's marks as interop/rdmacm/check.py cuts it;
  * with the guests' memory samples (OUT/runs/PAIRING/A.mem, B.mem: BENCH_MEM_SAMPLE), per cmtime
    scenario and guest the most memory in use during the client's run (the drop of MemAvailable
    from the boot's first sample) and the largest RSS of a cmtime / ibcm process;
  * libraries against each other in one boot (BENCH_LIBS, cmtime-N-LABEL-ROUND): one row per run
    with the host's load at its start (OUT/runs/PAIRING/host.load, sampled by the host) and its
    connect and disconnect steps against the first label's medians (the kernel CM's label,
    BENCH_LIBS's LABEL=kernel, when there is one: OUT/runs/PAIRING/kernel.label), then each
    library's median, and every step's median and spread per library.
"""
import json
import os
import platform
import re
import subprocess
import sys
import time

REF = "kernel-kernel"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IBCM = os.environ.get("BENCH_DECODER", os.path.join(ROOT, "target", "release", "ibcm"))
PAR = re.compile(r"^(?:kcm-)?cmtime-par-(\d+)x(\d+)$")
# cmtime-N; kcm-cmtime-N: the same in an ibcm-ibcm-udp boot with the kernel's librdmacm;
# cmtime-N-LABEL-ROUND: BENCH_LIBS's library LABEL, its ROUNDth run of the boot
CMTIME_NAME = re.compile(r"^(kcm-)?cmtime-(\d+)(?:-([a-z][a-z0-9]*)-(\d+))?$")
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


def stamp_bounds(text):
    """(start, exit, exit status) of one stamp.sh file, in the guest's clock (seconds)."""
    start = end = rc = None
    for line in text.splitlines():
        ts, _, rest = line.partition(" ")
        if rest == "@start":
            start = float(ts)
        elif rest.startswith("@exit"):
            end, rc = float(ts), rest.split()[-1]
    return start, end, rc


def guest_memory(run, guest):
    """[(epoch seconds, MemAvailable kB, {process name: RSS kB, the largest of that name})] of one
    guest's samples (GUEST.mem, interop/rdmacm/guest.sh's rdmacm_memwatch)."""
    samples = []
    for line in read(os.path.join(run, guest + ".mem")).splitlines():
        w = line.split()
        try:
            t = float(w[0])
        except (IndexError, ValueError):
            continue
        avail, rss = None, {}
        for f in w[1:]:
            k, _, v = f.partition(":")
            if k == "MemAvailable" and v.isdigit():
                avail = int(v)
            parts = f.split(":")
            if len(parts) == 3 and parts[2].isdigit():
                rss[parts[0]] = max(rss.get(parts[0], 0), int(parts[2]))
        if avail is not None:
            samples.append((t, avail, rss))
    return samples


def memory_during(samples, start, end):
    """{"used_mb": the most memory in use in [start, end] over the boot's first sample (its drop of
    MemAvailable), "rss_mb": {process name: largest RSS}} (MB); None when no sample falls there."""
    if not samples or start is None:
        return None
    inside = [x for x in samples if start <= x[0] and (end is None or x[0] <= end)]
    if not inside:
        return None
    base = samples[0][1]
    rss = {}
    for _, _, r in inside:
        for k, v in r.items():
            rss[k] = max(rss.get(k, 0), v)
    return {"used_mb": round((base - min(a for _, a, _ in inside)) / 1024, 1),
            "rss_mb": {k: round(v / 1024, 1) for k, v in sorted(rss.items())}}


def parse_par(run, name, k, n):
    """The K clients of a cmtime-par-KxN scenario: completion (first start to last exit), the
    failures they report, their exit statuses, the kernel CM's counters (guest B)."""
    starts, ends, rcs, failed, steps = [], [], [], {}, []
    for i in range(1, k + 1):
        start, end, rc = stamp_bounds(read(os.path.join(run, f"{name}.{i}.ts")))
        if start is not None:
            starts.append(start)
        if end is not None:
            ends.append(end)
        rcs.append(rc if rc is not None else "none")
        out = read(os.path.join(run, f"{name}.{i}.out"))
        for m in CM_EVENT.finditer(out):
            key = f"{m.group(1)} {m.group(2)}"
            failed[key] = failed.get(key, 0) + 1
        steps.append(parse_cmtime(out))
    res = {"k": k, "n": n, "client_rcs": rcs, "failed": failed, "steps": steps}
    res["completion_s"] = (max(ends) - min(starts)) if starts and len(ends) == k else None
    kcm = {}
    for line in read(os.path.join(run, name + ".kcm")).splitlines():
        w = line.split()
        if len(w) == 4:
            kcm[w[0]] = [int(x) for x in w[1:]]
    if "before" in kcm and "after" in kcm:
        d = [a - b for a, b in zip(kcm["after"], kcm["before"])]
        res["kernel_cm"] = {"tx_retries": d[0], "rx_duplicates": d[1], "tx_req": d[2]}
    return res


def host_loads(run):
    """[(epoch seconds, 1-min load)] of the host's samples during the run (host.load)."""
    samples = []
    for line in read(os.path.join(run, "host.load")).splitlines():
        w = line.split()
        try:
            samples.append((float(w[0]), float(w[1])))
        except (IndexError, ValueError):
            continue
    return samples


def load_during(samples, start, end):
    """(the host's 1-min load at `start`: the last sample before it, the highest of that and the
    samples up to `end`); None for what no sample covers. The guests' clocks are the host's."""
    if start is None or not samples:
        return None, None
    before = [v for t, v in samples if t <= start]
    during = [v for t, v in samples if start < t <= (start if end is None else end)]
    at = before[-1] if before else None
    seen = ([at] if at is not None else []) + during
    return at, (max(seen) if seen else None)


def wire_summaries(run, names):
    """{scenario: totals of `ibcm decode --summary`} of guest A's capture, cut at the marks."""
    pcap = os.path.join(run, "A.pcap")
    if not os.path.exists(pcap) or not os.access(IBCM, os.X_OK):
        return {}
    sys.path.insert(0, os.path.join(ROOT, "interop", "rdmacm"))
    import check  # the matrix's cut at guest.sh's marks, side-channel frames made decodable

    slices = check.cut(pcap)[0]
    out = {}
    for name in names:
        if name not in slices:
            continue
        path = os.path.join(run, name + ".pcap")
        check.write_pcap(path, *slices[name])
        r = subprocess.run([IBCM, "decode", "--summary", "--json", path], capture_output=True, text=True)
        try:
            d = json.loads(r.stdout.splitlines()[0])
        except (IndexError, ValueError):
            out[name] = {"error": (r.stderr.strip().splitlines() or ["no output"])[-1][:200]}
            continue
        t = d.get("totals", {})
        lats = d.get("latency", {})
        lat = lats.get("connect", {})
        out[name] = {
            "mads": d.get("mads"),
            "connections": t.get("connections"),
            "established": t.get("established", 0) + t.get("disconnected", 0),
            "rejected": t.get("rejected"),
            "timed_out": t.get("timed_out"),
            "retransmissions": t.get("retransmissions"),
            "duplicates": t.get("duplicates"),
            "connect_p50_ms": lat.get("p50_ns", 0) / 1e6 if lat.get("count") else None,
            "connect_p99_ms": lat.get("p99_ns", 0) / 1e6 if lat.get("count") else None,
        }
        for st in ("req_rep", "rep_rtu"):  # the server's and the client's share of the connect
            sl = lats.get(st, {})
            out[name][st + "_p50_ms"] = sl.get("p50_ns", 0) / 1e6 if sl.get("count") else None
    return out


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
    # BENCH_LIBS's label of the kernel CM (LABEL=kernel): the base of that pairing's ratios
    res["kernel_label"] = read(os.path.join(run, "kernel.label")).strip() or None
    wall = re.search(r"^wall: ([\d.]+) s", read(os.path.join(run, "pair.log")), re.M)
    res["wall_s"] = float(wall.group(1)) if wall else None
    loads = host_loads(run)
    mems = {g: guest_memory(run, g) for g in ("A", "B")}
    for name in scenario_names(run):
        # the tool's stdout, then its stderr (guest.sh keeps them in two files)
        cli = read(os.path.join(run, name + ".cli.out")) + read(os.path.join(run, name + ".cli.err"))
        s = {
            "client_rc": read(os.path.join(run, name + ".cli.rc"), "none").strip(),
            "server_rc": read(os.path.join(run, name + ".srv.rc"), "none").strip(),
            "note": read(os.path.join(run, name + ".note")).strip(),
        }
        ts = read(os.path.join(run, name + ".ts"))
        s["connected_s"], s["exit_s"], _ = parse_stamps(ts, CONNECTED.get(name))
        s["first_result_s"] = parse_stamps(ts, FIRST_RESULT.get(name))[0]
        par = PAR.match(name)
        if par:
            s["par"] = parse_par(run, name, int(par.group(1)), int(par.group(2)))
        elif CMTIME_NAME.match(name):
            m = CMTIME_NAME.match(name)
            s["n"] = int(m.group(2))
            if m.group(3):
                s["lib"], s["round"] = m.group(3), int(m.group(4))
                start, end, _ = stamp_bounds(ts)
                s["host_load_start"], s["host_load_max"] = load_during(loads, start, end)
            s["steps"] = parse_cmtime(cli)
            start, end, _ = stamp_bounds(ts)
            if start is not None and end is None:
                # killed at its bound: stamp.sh wrote no exit; the driver's wall time of the run
                try:
                    end = start + float(read(os.path.join(run, name + ".cli.rc.time")).strip())
                except ValueError:
                    pass
            s["memory"] = {g: memory_during(mems[g], start, end) for g in ("A", "B")}
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
    for name, w in wire_summaries(run, list(res["scenarios"])).items():
        res["scenarios"][name]["wire"] = w
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
        "guest_cpus": int(os.environ.get("BENCH_GUEST_CPUS", "1")),
    }


def guests(cpus):
    """The guests of a pairing, as the report names them."""
    return "two single-vCPU TCG guests" if cpus == 1 else f"two TCG guests of {cpus} vCPUs each"


def render(data):
    pairs = [p for p in data["pairings"]]
    res = data["results"]
    ref = res.get(REF, {}).get("scenarios", {})
    m = data["machine"]
    md = ["# ibcm vs the kernel CM: the same binaries, one run (scripts/bench-kernel.sh)", ""]
    md.append(f"{m['date_utc']}; host {m['host']} ({m['cpus']} CPUs, {m['cpu']}, Linux {m['kernel']}); "
              f"{m['qemu']}; {guests(m.get('guest_cpus', 1))} per pairing, Debian 12 rdmacm-utils 44 / perftest 4.5.")
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
    ns = sorted({s["n"] for r in res.values() for s in r.get("scenarios", {}).values()
                 if "n" in s and "lib" not in s})
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
        md += memory_rows(pairs, res, name)
        md += wire_rows(pairs, res, name)
    for p in pairs:
        md += same_boot_tables(p, res[p].get("scenarios", {}))
        md += lib_tables(p, res[p].get("scenarios", {}), ref if p != REF else {}, res[p].get("kernel_label"))
    pars = sorted({n for r in res.values() for n, s in r.get("scenarios", {}).items()
                   if "par" in s and not n.startswith("kcm-")},
                  key=lambda n: [int(x) for x in PAR.match(n).groups()])
    for name in pars:
        md += par_table(pairs, res, name)
    apps = [n for n in ("rping-C1", "ib_write_bw", "ib_send_lat") if any(n in res[p].get("scenarios", {}) for p in pairs)]
    if apps:
        md += app_table(pairs, res, ref, apps)
    notes = [(p, n, s["note"]) for p in pairs for n, s in res[p].get("scenarios", {}).items() if s.get("note")]
    if notes:
        md += ["", "Driver notes:", ""] + [f"* {p} {n}: {t}" for p, n, t in notes]
    return "\n".join(md) + "\n"


def same_boot_tables(pairing, scen):
    """kcm-cmtime-N against cmtime-N of one boot (ibcm-ibcm-udp: the kernel CM is loaded there)."""
    md = []
    for n in sorted(int(m.group(2)) for m in map(CMTIME_NAME.match, scen) if m and m.group(1)):
        kern = scen.get(f"kcm-cmtime-{n}", {})
        ibcm = scen.get(f"cmtime-{n}", {})
        md += ["", f"## cmtime -c {n} in one boot of {pairing}: the kernel CM, then ibcm (µs per connection; "
               "× = ibcm / kernel)", ""]
        md.append("| step | kernel CM | ibcm |")
        md.append("|---|---|---|")
        steps = list(kern.get("steps", {})) + [st for st in ibcm.get("steps", {}) if st not in kern.get("steps", {})]
        for st in steps:
            k = kern.get("steps", {}).get(st, {})
            i = ibcm.get("steps", {}).get(st, {})
            kv = k.get("us_per_conn") if k.get("completed") else None
            iv = i.get("us_per_conn") if i.get("completed") else None
            md.append(f"| {st} | {fmt(kv, None) if k.get('completed', True) else 'none finished'} | "
                      f"{fmt(iv, ratio(iv, kv)) if i.get('completed', True) else 'none finished'} |")
        if any(m and any(m.values()) for m in (kern.get("memory"), ibcm.get("memory"))):
            md.append(f"| guest memory in use, MB (largest RSS) | {memory_cell(kern.get('memory'))} | "
                      f"{memory_cell(ibcm.get('memory'))} |")
        for label, key in (("failed connections", "failed"), ("client exit status", "client_rc")):
            cells = []
            for sc in (kern, ibcm):
                if not sc:
                    cells.append("—")
                elif key == "failed":
                    cells.append(", ".join(f"{v} {e}" for e, v in sorted(sc["failed"].items())) or "0")
                else:
                    cells.append(sc["client_rc"] + (f": {sc['error']}" if sc.get("error") else ""))
            md.append(f"| {label} | " + " | ".join(cells) + " |")
    return md


def median(vs):
    vs = sorted(vs)
    if not vs:
        return None
    h = len(vs) // 2
    return vs[h] if len(vs) % 2 else (vs[h - 1] + vs[h]) / 2


STEPS = ("create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy")


def lib_tables(pairing, scen, ref=None, base_label=None):
    """BENCH_LIBS: the runs of each library in one boot, in the order they ran; with the
    kernel-kernel scenarios of the same invocation (`ref`, another boot), each library's median
    against its connect step too. The ratios are to `base_label`'s medians (the kernel CM's label,
    BENCH_LIBS's LABEL=kernel, in the same boot), else to the first label's; then every step's
    median and spread per label."""
    md = []
    runs = {}
    for name, s in scen.items():
        if "lib" in s:
            runs.setdefault(s["n"], []).append(s)

    def step(s, st):
        c = s.get("steps", {}).get(st, {})
        return c.get("us_per_conn") if c.get("completed") else None

    for n in sorted(runs):
        rows = runs[n]  # scenarios.run's order: the order they ran in
        labels = list(dict.fromkeys(s["lib"] for s in rows))
        bl = base_label if base_label in labels else labels[0]

        def values(lb, st):
            return [v for s in rows if s["lib"] == lb and (v := step(s, st)) is not None]

        done = {lb: values(lb, "connect") for lb in labels}
        base, dbase = median(done[bl]), median(values(bl, "disconnect"))
        md += ["", f"## cmtime -c {n} in one boot of {pairing}: libraries alternating (µs per connection; "
               f"× = connect, disconnect over {bl}'s median)", ""]
        wire = any(s.get("wire") for s in rows)
        md.append("| run | library | host load at start (max during) | connect | disconnect | failed | client exit |"
                  + (" wire: REQ→REP / REP→RTU p50 ms, re-sent |" if wire else ""))
        md.append("|---|---|---|---|---|---|---|" + ("---|" if wire else ""))
        for s in rows:
            at, peak = s.get("host_load_start"), s.get("host_load_max")
            load = "—" if at is None else f"{at:.2f} ({peak:.2f})"
            c, d = step(s, "connect"), step(s, "disconnect")
            failed = ", ".join(f"{v} {e}" for e, v in sorted(s.get("failed", {}).items())) or "0"
            row = (f"| {s['round']} | {s['lib']} | {load} | {fmt(c, ratio(c, base))} | {fmt(d, ratio(d, dbase))} | "
                   f"{failed} | {s['client_rc']}{': ' + s['error'] if s.get('error') else ''} |")
            if wire:
                w = s.get("wire") or {}
                row += (" — |" if not w or "error" in w else
                        f" {fmt(w.get('req_rep_p50_ms'), None)} / {fmt(w.get('rep_rtu_p50_ms'), None)}, "
                        f"{w['retransmissions']} |")
            md.append(row)
        kk = step((ref or {}).get(f"cmtime-{n}", {}), "connect")
        md += ["", "| library | runs (connect completed) | connect median | min – max |"
               + (f" × {REF} ({kk:.1f}, its own boot) |" if kk else ""),
               "|---|---|---|---|" + ("---|" if kk else "")]
        for lb in labels:
            vs, med = done[lb], median(done[lb])
            total = sum(1 for s in rows if s["lib"] == lb)
            spread = f"{min(vs):.1f} – {max(vs):.1f}" if vs else "—"
            md.append(f"| {lb} | {total} ({len(vs)}) | {fmt(med, ratio(med, base))} | {spread} |"
                      + (f" {fmt(ratio(med, kk), None, 2)} |" if kk else ""))
        steps = [st for st in STEPS if any(step(s, st) is not None for s in rows)]
        if len(steps) > 1:
            md += ["", f"| step: median (min – max), µs per connection | " + " | ".join(labels) + " |",
                   "|---|" + "---|" * len(labels)]
            for st in steps:
                bm = median(values(bl, st))
                cells = []
                for lb in labels:
                    vs = values(lb, st)
                    med = median(vs)
                    cells.append("—" if med is None else
                                 f"{fmt(med, ratio(med, bm) if lb != bl else None)} ({min(vs):.1f} – {max(vs):.1f})")
                md.append(f"| {st} | " + " | ".join(cells) + " |")
    return md


def memory_cell(mem):
    """guest A's and B's peak memory in use during a scenario, with its largest tool process."""
    cells = []
    for g in ("A", "B"):
        m = (mem or {}).get(g)
        if not m:
            cells.append(f"{g} —")
            continue
        rss = ", ".join(f"{k} {v:.0f}" for k, v in m["rss_mb"].items())
        cells.append(f"{g} {m['used_mb']:.0f}" + (f" ({rss})" if rss else ""))
    return " / ".join(cells)


def memory_rows(pairs, res, name):
    """The guests' memory during scenario `name` (none without their samples)."""
    mems = [res[p].get("scenarios", {}).get(name, {}).get("memory") for p in pairs]
    if not any(m and any(m.values()) for m in mems):
        return []
    return ["| guest memory in use, MB (largest RSS) | " + " | ".join(memory_cell(m) for m in mems) + " |"]


def wire_rows(pairs, res, name):
    """Rows of what the capture of guest A's NIC shows of scenario `name` (none without one)."""
    cells = [res[p].get("scenarios", {}).get(name, {}).get("wire") for p in pairs]
    if not any(cells):
        return []

    def cell(w, f):
        if not w:
            return "—"
        if "error" in w:
            return "decode failed: " + w["error"]
        return f(w)

    rows = [
        ("on the wire: connections (established)", lambda w: f"{w['connections']} ({w['established']})"),
        ("on the wire: retransmissions / duplicates", lambda w: f"{w['retransmissions']} / {w['duplicates']}"),
        ("on the wire: timed out / rejected", lambda w: f"{w['timed_out']} / {w['rejected']}"),
        ("on the wire: REQ→RTU p50 / p99 ms", lambda w: "—" if w["connect_p50_ms"] is None
         else f"{w['connect_p50_ms']:.1f} / {w['connect_p99_ms']:.1f}"),
    ]
    return ["| " + " | ".join([label] + [cell(w, f) for w in cells]) + " |" for label, f in rows]


def par_table(pairs, res, name):
    k, n = (int(x) for x in PAR.match(name).groups())
    md = ["", f"## Many connections at once: {k} `cmtime -c {n}` clients started together in guest B, "
          "one server", ""]
    # a pairing with the kernel CM in the same boot (kcm-NAME) gets that as a column of its own
    heads, cols, wires = [], [], []
    for p in pairs:
        for key, head in ((name, p), ("kcm-" + name, f"{p}: the kernel CM, same boot")):
            sc = res[p].get("scenarios", {}).get(key, {})
            if key == name or sc.get("par"):
                heads.append(head)
                cols.append(sc.get("par"))
                wires.append(sc.get("wire"))
    md.append("| | " + " | ".join(heads) + " |")
    md.append("|---|" + "---|" * len(heads))

    def row(label, f):
        md.append("| " + " | ".join([label] + ["—" if c is None else f(c) for c in cols]) + " |")

    row("completion (first start → last exit), s",
        lambda c: "—" if c["completion_s"] is None else f"{c['completion_s']:.2f}")
    row("connections/s (all clients)",
        lambda c: "—" if not c["completion_s"] else f"{c['k'] * c['n'] / c['completion_s']:.0f}")
    def slowest(step):
        def f(c):
            done = [st[step]["total_ms"] for st in c["steps"] if st.get(step, {}).get("completed")]
            return f"{max(done):.0f} ({len(done)} of {c['k']})" if done else "none finished"
        return f

    row("connect step: the slowest client's total ms (clients that finished it)", slowest("connect"))
    row("disconnect step: the same", slowest("disconnect"))
    row("failed connections (cmtime)",
        lambda c: ", ".join(f"{v} {e}" for e, v in sorted(c["failed"].items())) or "0")
    row("client exit statuses", lambda c: " ".join(c["client_rcs"]))
    row("kernel CM (guest B): REQs sent / retries / duplicates received",
        lambda c: "—" if "kernel_cm" not in c else
        f"{c['kernel_cm']['tx_req']} / {c['kernel_cm']['tx_retries']} / {c['kernel_cm']['rx_duplicates']}")
    md += wire_rows(heads, {h: {"scenarios": {name: {"wire": w}}} for h, w in zip(heads, wires)}, name)
    return md


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
    if REF in pairs and not any(s.get("steps") or any((s.get("par") or {}).get("steps", []))
                                for s in ok.values()):
        print(f"bench-kernel: the {REF} reference produced no cmtime table", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
