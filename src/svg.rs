//! SVG pictures, as plain strings (no dependencies): connection ladders of
//! a capture ([`ladder_svg`]), latency CDFs ([`latency_cdf_svg`]) and a rate
//! over time ([`rate_svg`]). Every text is XML-escaped ([`xml_escape`]);
//! the output is a standalone SVG 1.1 document a browser displays.
//!
//! Structure the tests (and other tools) can rely on:
//!
//! * ladder: one `<line class="lane">` per endpoint (IP address); one
//!   `<g class="mad ...">` per MAD, its class also `retx` (a
//!   retransmission, orange, labelled `retx N`), `dup` (a duplicate, grey,
//!   `dup N`) or `rej` (a REJ or a refusing SIDR_REP, red, with the reason
//!   text); one
//!   `<text class="state">` per CM state change.
//! * CDF: one `<path class="cdf">` per series that has values.
//! * rate: one `<path class="rate">` when there are points.
//!
//! What `ibcm bench` collects fits directly: per-connection step latencies
//! in nanoseconds and completion times since the start:
//!
//! ```
//! use ibcm::svg::{latency_cdf_svg, ns_to_us, rate_series, rate_svg};
//! let connect_ns: Vec<u64> = vec![41_000, 52_000, 47_500]; // t_est - t_req
//! let udp_ns: Vec<u64> = vec![20_000, 22_000, 25_000]; // the UDP baseline
//! let cdf = latency_cdf_svg(&[
//!     ("ibcm connect", ns_to_us(&connect_ns)),
//!     ("UDP baseline", ns_to_us(&udp_ns)),
//! ]);
//! let established_s = [0.010, 0.012, 0.250]; // t_est, seconds since the start
//! let rate = rate_svg(&rate_series(&established_s, 0.1), "connections established per second");
//! assert_eq!(cdf.matches("class=\"cdf\"").count(), 2);
//! assert!(rate.contains("class=\"rate\""));
//! ```

use std::fmt::Write as _;

use crate::ladder::{Connection, MadInfo, Repeat, Summary, duration_text};
use crate::wire::attr;

/// Escapes `& < > " '` and replaces the characters XML 1.0 does not allow
/// (controls other than tab, newline and carriage return) with U+FFFD.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Series colours (colour-blind safe, Okabe-Ito order).
const PALETTE: [&str; 8] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000",
];

const FONT: &str = "font-family=\"sans-serif\"";

fn open_svg(out: &mut String, w: f64, h: f64, title: &str) {
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{w:.0}\" height=\"{h:.0}\" viewBox=\"0 0 {w:.0} {h:.0}\" {FONT} font-size=\"12\">\n\
         <title>{}</title>\n\
         <rect x=\"0\" y=\"0\" width=\"{w:.0}\" height=\"{h:.0}\" fill=\"#ffffff\"/>\n",
        xml_escape(title)
    );
}

fn text(out: &mut String, x: f64, y: f64, anchor: &str, attrs: &str, s: &str) {
    let _ = writeln!(
        out,
        "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\"{}{attrs}>{}</text>",
        if attrs.is_empty() { "" } else { " " },
        xml_escape(s)
    );
}

/// The frame of a chart: the plot area (left `l`, top `t`, width `pw`,
/// height `ph`) inside a `w` × `h` picture. One place draws the title,
/// grid lines with their tick labels, the border and the axis titles, for
/// every chart.
struct Plot {
    h: f64,
    l: f64,
    t: f64,
    pw: f64,
    ph: f64,
}

impl Plot {
    /// `w` × `h`, with margins left, right, top and bottom.
    fn new((w, h): (f64, f64), (l, r, t, b): (f64, f64, f64, f64)) -> Plot {
        Plot {
            h,
            l,
            t,
            pw: w - l - r,
            ph: h - t - b,
        }
    }

    fn title(&self, out: &mut String, title: &str) {
        text(
            out,
            self.l + self.pw / 2.0,
            24.0,
            "middle",
            "font-size=\"15\" font-weight=\"bold\"",
            title,
        );
    }

    /// A vertical grid line at `x`, labelled `label` under the plot (no
    /// label when empty).
    fn x_grid(&self, out: &mut String, x: f64, stroke: &str, label: &str) {
        let (t, ph) = (self.t, self.ph);
        let _ = writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{t:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{stroke}\"/>",
            t + ph
        );
        if !label.is_empty() {
            text(out, x, t + ph + 18.0, "middle", "", label);
        }
    }

    /// A horizontal grid line at `y`, labelled `label` left of the plot.
    fn y_grid(&self, out: &mut String, y: f64, stroke: &str, label: &str) {
        let (l, pw) = (self.l, self.pw);
        let _ = writeln!(
            out,
            "<line x1=\"{l:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{stroke}\"/>",
            l + pw
        );
        text(out, l - 8.0, y + 4.0, "end", "", label);
    }

    /// The border, the x axis title under it and the y axis title turned
    /// up its left side.
    fn frame(&self, out: &mut String, x_title: &str, y_title: &str) {
        let (l, t, pw, ph) = (self.l, self.t, self.pw, self.ph);
        let _ = writeln!(
            out,
            "<rect x=\"{l:.1}\" y=\"{t:.1}\" width=\"{pw:.1}\" height=\"{ph:.1}\" fill=\"none\" stroke=\"#333333\"/>"
        );
        text(out, l + pw / 2.0, self.h - 16.0, "middle", "", x_title);
        let _ = writeln!(
            out,
            "<text x=\"18\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {:.1})\">{}</text>",
            t + ph / 2.0,
            t + ph / 2.0,
            xml_escape(y_title)
        );
    }
}

// ---------------------------------------------------------------------------
// Ladder

const LANE_X0: f64 = 270.0;
const LANE_GAP: f64 = 330.0;
const ROW: f64 = 46.0;
const ARROW_DROP: f64 = 12.0;

/// Arrow styles: class suffix, colour, dashed.
fn style_of(c: &Connection, m: usize) -> (&'static str, &'static str, bool) {
    let msg = &c.messages[m];
    match msg.repeat {
        Repeat::Retransmission(_) => ("retx", "#e67300", false),
        Repeat::Duplicate(_) => ("dup", "#808080", true),
        Repeat::First
            if msg.attr_id == attr::REJ
                || matches!(msg.info, MadInfo::SidrRep { status, .. } if status != 0) =>
        {
            ("rej", "#cc0000", false)
        }
        Repeat::First => ("", "#1f3b73", false),
    }
}

/// A ladder (sequence) diagram of the connections `selection` picks from
/// `summary` (indices into [`Summary::connections`]; empty: all of them).
/// Indices that do not exist are named in a note at the top.
///
/// One vertical lane per endpoint IP address, in order of appearance; one
/// arrow per MAD, top to bottom in capture time order, labelled with the
/// attribute and (with several connections) `#N`; on the left the MAD's
/// time relative to its connection's first MAD; beside the lanes the CM
/// state each end enters. Retransmissions are orange and say `retx N`,
/// duplicates grey and dashed (`dup N`), REJs red with the reason text.
pub fn ladder_svg(summary: &Summary, selection: &[usize]) -> String {
    let mut missing = Vec::new();
    let conns: Vec<&Connection> = if selection.is_empty() {
        summary.connections.iter().collect()
    } else {
        let mut v = Vec::new();
        for &i in selection {
            match summary.connections.get(i) {
                Some(c) if !v.iter().any(|x: &&Connection| x.index == i) => v.push(c),
                Some(_) => {}
                None => missing.push(i),
            }
        }
        v
    };
    let several = conns.len() > 1;
    // Lanes in order of appearance.
    let mut lanes: Vec<std::net::IpAddr> = Vec::new();
    for c in &conns {
        for e in &c.ends {
            if !lanes.contains(&e.ip) {
                lanes.push(e.ip);
            }
        }
    }
    // Messages in time order: (connection, message index).
    let mut rows: Vec<(&Connection, usize)> = conns
        .iter()
        .flat_map(|c| (0..c.messages.len()).map(move |m| (*c, m)))
        .collect();
    rows.sort_by_key(|&(c, m)| (c.messages[m].ts_nanos, c.index, m));

    let mut header: Vec<(String, bool)> = Vec::new();
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(|i| format!("#{i}")).collect();
        header.push((
            format!(
                "not in the capture: {} (it has {} connection(s))",
                list.join(", "),
                summary.connections.len()
            ),
            true,
        ));
    }
    if conns.is_empty() {
        header.push(("no connection to draw".to_string(), false));
    }
    for c in &conns {
        let mut line = format!("#{} ", c.index);
        if let Some(sid) = c.service_id {
            let _ = write!(line, "service {sid:#018x}: ");
        }
        line.push_str(&c.outcome.text());
        for (i, e) in c.ends.iter().enumerate() {
            let _ = write!(
                line,
                "; {} {} ({})",
                if i == 0 { 'A' } else { 'B' },
                e.ip,
                c.role(i)
            );
            if let Some(id) = e.comm_id {
                let _ = write!(line, " id {id:#010x}");
            }
            if let Some(q) = e.qpn {
                let _ = write!(line, " qpn {q:#08x}");
            }
        }
        header.push((line, false));
    }

    let lane_x = |ip: std::net::IpAddr| -> f64 {
        let i = lanes.iter().position(|&l| l == ip).unwrap_or(0);
        LANE_X0 + i as f64 * LANE_GAP
    };
    // About 7 px per character of the 12 px sans-serif header text.
    let header_w = header
        .iter()
        .map(|(l, _)| 20.0 + 7.0 * l.chars().count() as f64)
        .fold(0.0, f64::max);
    let width = (LANE_X0 + (lanes.len().max(2) - 1) as f64 * LANE_GAP + 200.0)
        .max(header_w)
        .max(900.0);
    let head_h = 30.0 + 16.0 * header.len() as f64;
    let lane_top = head_h + 10.0;
    let first_row = lane_top + 50.0;
    let height = first_row + rows.len() as f64 * ROW + 30.0;

    let mut out = String::new();
    open_svg(&mut out, width, height, "CM connection ladder");
    out.push_str("<defs>\n");
    for (id, colour) in [
        ("ah", "#1f3b73"),
        ("ah-retx", "#e67300"),
        ("ah-dup", "#808080"),
        ("ah-rej", "#cc0000"),
    ] {
        let _ = writeln!(
            out,
            "<marker id=\"{id}\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"8\" markerHeight=\"8\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"{colour}\"/></marker>"
        );
    }
    out.push_str("</defs>\n");
    for (i, (line, warn)) in header.iter().enumerate() {
        let attrs = if *warn {
            "fill=\"#cc0000\""
        } else {
            "fill=\"#222222\""
        };
        text(&mut out, 10.0, 20.0 + 16.0 * i as f64, "start", attrs, line);
    }
    // Lanes.
    for ip in &lanes {
        let x = lane_x(*ip);
        let _ = writeln!(
            out,
            "<rect x=\"{:.1}\" y=\"{lane_top:.1}\" width=\"180\" height=\"26\" rx=\"4\" fill=\"#eef2f8\" stroke=\"#1f3b73\"/>",
            x - 90.0
        );
        text(
            &mut out,
            x,
            lane_top + 17.0,
            "middle",
            "font-weight=\"bold\"",
            &ip.to_string(),
        );
        let _ = writeln!(
            out,
            "<line class=\"lane\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#9aa8c0\" stroke-width=\"2\"/>",
            lane_top + 26.0,
            height - 10.0
        );
    }
    // Arrows.
    let leftmost = LANE_X0;
    for (k, &(c, m)) in rows.iter().enumerate() {
        let msg = &c.messages[m];
        let y = first_row + k as f64 * ROW;
        let (sx, dx) = (lane_x(c.ends[msg.from].ip), lane_x(c.ends[msg.to()].ip));
        let (cls, colour, dashed) = style_of(c, m);
        let marker = if cls.is_empty() {
            "ah".to_string()
        } else {
            format!("ah-{cls}")
        };
        let class = if cls.is_empty() {
            "mad".to_string()
        } else {
            format!("mad {cls}")
        };
        let mut label = String::new();
        if several {
            let _ = write!(label, "#{} ", c.index);
        }
        label.push_str(msg.attr);
        match msg.repeat {
            Repeat::Retransmission(n) => {
                let _ = write!(label, " retx {n}");
            }
            Repeat::Duplicate(n) => {
                let _ = write!(label, " dup {n}");
            }
            Repeat::First => {}
        }
        if let Some(d) = msg.info.text() {
            let _ = write!(label, ": {d}");
        }
        let _ = writeln!(out, "<g class=\"{class}\">");
        let _ = writeln!(
            out,
            "<title>{}</title>",
            xml_escape(&format!(
                "frame {} {} -> {} {} tid {:#018x} local {:#010x} remote {:#010x}",
                msg.frame,
                c.ends[msg.from].ip,
                c.ends[msg.to()].ip,
                msg.attr,
                msg.tid,
                msg.local_comm_id,
                msg.remote_comm_id
            ))
        );
        let dash = if dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        if (sx - dx).abs() < 1.0 {
            let _ = writeln!(
                out,
                "<path d=\"M{sx:.1},{y:.1} h60 v{ARROW_DROP:.1} h-58\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.6\"{dash} marker-end=\"url(#{marker})\"/>"
            );
            text(
                &mut out,
                sx + 66.0,
                y + 4.0,
                "start",
                &format!("fill=\"{colour}\""),
                &label,
            );
        } else {
            let _ = writeln!(
                out,
                "<line x1=\"{sx:.1}\" y1=\"{y:.1}\" x2=\"{dx:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"1.6\"{dash} marker-end=\"url(#{marker})\"/>",
                y + ARROW_DROP
            );
            text(
                &mut out,
                (sx + dx) / 2.0,
                y - 2.0,
                "middle",
                &format!("fill=\"{colour}\""),
                &label,
            );
        }
        text(
            &mut out,
            10.0,
            y + 8.0,
            "start",
            "fill=\"#555555\" class=\"time\"",
            &format!(
                "{}+{}",
                if several {
                    format!("#{} ", c.index)
                } else {
                    String::new()
                },
                duration_text(msg.t_ns)
            ),
        );
        out.push_str("</g>\n");
        // States beside the lanes: the sender's at the arrow's start, the
        // receiver's at its end.
        for (end, sy) in [(msg.from, y), (msg.to(), y + ARROW_DROP)] {
            let Some(st) = msg.states[end] else { continue };
            let x = lane_x(c.ends[end].ip);
            let (tx, anchor) = if x <= leftmost {
                (x - 8.0, "end")
            } else {
                (x + 8.0, "start")
            };
            let name = if several {
                format!("#{} {}", c.index, st.name())
            } else {
                st.name().to_string()
            };
            text(
                &mut out,
                tx,
                sy + 14.0,
                anchor,
                "class=\"state\" fill=\"#2e7d32\" font-size=\"11\" font-style=\"italic\"",
                &name,
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

// ---------------------------------------------------------------------------
// Charts

/// `1 µs`, `10 µs`, `1 ms`, `100 ms`, `1 s`, `10 s` for powers of ten of µs.
fn us_label(v: f64) -> String {
    let (n, unit) = if v >= 1e6 {
        (v / 1e6, "s")
    } else if v >= 1e3 {
        (v / 1e3, "ms")
    } else {
        (v, "µs")
    };
    format!("{} {unit}", trim_num(n))
}

/// A number with at most 3 decimals, trailing zeros removed.
fn trim_num(n: f64) -> String {
    let s = format!("{n:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], q: f64) -> f64 {
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// At most this many steps per CDF path (larger series are sampled at
/// evenly spaced ranks, always keeping the last).
const CDF_MAX_POINTS: usize = 2000;

/// Latency CDFs: one step curve per series (`(label, values in µs)`), x axis
/// logarithmic in µs (whole decades), y the fraction of values ≤ x, and a
/// legend with each series' count, p50 and p99. Values that are not finite
/// and > 0 are left out; a series left empty gets a legend entry `no data`
/// and no curve.
pub fn latency_cdf_svg(series: &[(&str, Vec<f64>)]) -> String {
    let (w, h) = (900.0, 480.0);
    let plot = Plot::new((w, h), (70.0, 290.0, 40.0, 60.0));
    let (l, t, pw, ph) = (plot.l, plot.t, plot.pw, plot.ph);
    let clean: Vec<Vec<f64>> = series
        .iter()
        .map(|(_, v)| {
            let mut v: Vec<f64> = v
                .iter()
                .copied()
                .filter(|x| x.is_finite() && *x > 0.0)
                .collect();
            v.sort_by(f64::total_cmp);
            v
        })
        .collect();
    let lo_v = clean
        .iter()
        .filter_map(|v| v.first())
        .copied()
        .fold(f64::INFINITY, f64::min);
    let hi_v = clean
        .iter()
        .filter_map(|v| v.last())
        .copied()
        .fold(0.0, f64::max);
    let (mut d0, mut d1) = if lo_v.is_finite() {
        (lo_v.log10().floor() as i32, hi_v.log10().ceil() as i32)
    } else {
        (0, 3)
    };
    if d1 <= d0 {
        d1 = d0 + 1;
    }
    d0 = d0.max(-3);
    d1 = d1.max(d0 + 1);
    let x_of = |v: f64| l + (v.log10() - d0 as f64) / (d1 - d0) as f64 * pw;
    let y_of = |p: f64| t + (1.0 - p) * ph;

    let mut out = String::new();
    open_svg(&mut out, w, h, "Latency CDF");
    plot.title(&mut out, "Latency CDF");
    // Grid and x ticks.
    for d in d0..=d1 {
        let v = 10f64.powi(d);
        plot.x_grid(&mut out, x_of(v), "#cccccc", &us_label(v));
        if d < d1 {
            for m in 2..10 {
                plot.x_grid(&mut out, x_of(v * m as f64), "#eeeeee", "");
            }
        }
    }
    for i in 0..=4 {
        let p = i as f64 / 4.0;
        plot.y_grid(&mut out, y_of(p), "#dddddd", &trim_num(p));
    }
    plot.frame(&mut out, "latency (log scale)", "fraction of connections");
    // Curves and legend.
    for (i, ((label, _), v)) in series.iter().zip(&clean).enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let ly = t + 10.0 + i as f64 * 40.0;
        let lx = l + pw + 20.0;
        let _ = writeln!(
            out,
            "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"3\"/>",
            lx + 24.0
        );
        text(
            &mut out,
            lx + 30.0,
            ly + 4.0,
            "start",
            "font-weight=\"bold\"",
            label,
        );
        let stats = if v.is_empty() {
            "no data".to_string()
        } else {
            format!(
                "n={} p50={} p99={}",
                v.len(),
                us_text(pct(v, 0.5)),
                us_text(pct(v, 0.99))
            )
        };
        text(&mut out, lx + 30.0, ly + 20.0, "start", "", &stats);
        if v.is_empty() {
            continue;
        }
        let n = v.len();
        let stride = n.div_ceil(CDF_MAX_POINTS);
        let mut d = format!("M{:.1},{:.1}", x_of(v[0]), y_of(0.0));
        for (k, &x) in v.iter().enumerate() {
            if (k + 1) % stride != 0 && k + 1 != n {
                continue;
            }
            let _ = write!(
                d,
                " H{:.1} V{:.1}",
                x_of(x),
                y_of((k + 1) as f64 / n as f64)
            );
        }
        let _ = writeln!(
            out,
            "<path class=\"cdf\" d=\"{d}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"><title>{}</title></path>",
            xml_escape(label)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// A latency in µs as text with its unit.
fn us_text(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.3} s", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.3} ms", v / 1e3)
    } else {
        format!("{v:.1} µs")
    }
}

/// Latencies in nanoseconds (what [`Summary::step_values`] and `ibcm bench`
/// collect) as µs for [`latency_cdf_svg`].
pub fn ns_to_us(ns: &[u64]) -> Vec<f64> {
    ns.iter().map(|&v| v as f64 / 1e3).collect()
}

/// Event times (seconds since the start) as a rate: events per second in
/// consecutive bins of `bin_s` seconds, one point per bin at its middle,
/// from 0 to the last event. Empty for no events or a bin that is not
/// finite and > 0.
pub fn rate_series(times_s: &[f64], bin_s: f64) -> Vec<(f64, f64)> {
    if !(bin_s.is_finite() && bin_s > 0.0) {
        return Vec::new();
    }
    let times: Vec<f64> = times_s
        .iter()
        .copied()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .collect();
    let Some(last) = times.iter().copied().reduce(f64::max) else {
        return Vec::new();
    };
    let bins = ((last / bin_s).floor() as usize + 1).min(1_000_000);
    let mut counts = vec![0u64; bins];
    for t in times {
        let i = ((t / bin_s).floor() as usize).min(bins - 1);
        counts[i] += 1;
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, &n)| ((i as f64 + 0.5) * bin_s, n as f64 / bin_s))
        .collect()
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let f = raw / p;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * p
}

/// A rate over time: `points` are (seconds, events per second), drawn as
/// one line in time order; linear axes from 0, titled `label`. Points
/// that are not finite are left out.
pub fn rate_svg(points: &[(f64, f64)], label: &str) -> String {
    let (w, h) = (900.0, 420.0);
    let plot = Plot::new((w, h), (80.0, 30.0, 40.0, 60.0));
    let (l, t, pw, ph) = (plot.l, plot.t, plot.pw, plot.ph);
    let mut pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let x_max = pts.iter().map(|p| p.0).fold(0.0, f64::max);
    let y_max = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let x_min = pts.iter().map(|p| p.0).fold(0.0, f64::min);
    let y_min = pts.iter().map(|p| p.1).fold(0.0, f64::min);
    let xs = nice_step((x_max - x_min).max(1e-9) / 8.0);
    let ys = nice_step((y_max - y_min).max(1e-9) / 6.0);
    let (x0, x1) = ((x_min / xs).floor() * xs, (x_max / xs).ceil().max(1.0) * xs);
    let (y0, y1) = ((y_min / ys).floor() * ys, (y_max / ys).ceil().max(1.0) * ys);
    let x_of = |x: f64| l + (x - x0) / (x1 - x0) * pw;
    let y_of = |y: f64| t + (1.0 - (y - y0) / (y1 - y0)) * ph;

    let mut out = String::new();
    open_svg(&mut out, w, h, label);
    plot.title(&mut out, label);
    let mut x = x0;
    while x <= x1 + xs / 2.0 {
        plot.x_grid(&mut out, x_of(x), "#eeeeee", &trim_num(x));
        x += xs;
    }
    let mut y = y0;
    while y <= y1 + ys / 2.0 {
        plot.y_grid(&mut out, y_of(y), "#eeeeee", &trim_num(y));
        y += ys;
    }
    plot.frame(&mut out, "time (s)", "per second");
    if !pts.is_empty() {
        let mut d = String::new();
        for (i, (x, y)) in pts.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1}",
                if i == 0 { "M" } else { " L" },
                x_of(*x),
                y_of(*y)
            );
        }
        let _ = writeln!(
            out,
            "<path class=\"rate\" d=\"{d}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"><title>{}</title></path>",
            PALETTE[0],
            xml_escape(label)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// Pictures made by this module one above the other in one document:
/// each keeps its own size and viewBox and is moved down by the heights
/// of those before it (what `ibcm bench --svg` writes).
pub fn stack(docs: &[String]) -> String {
    // The size attributes `open_svg` writes on a document's root element.
    let size = |d: &str, attr: &str| -> f64 {
        let tag = d.find("<svg").map(|i| &d[i..]).unwrap_or("");
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        tag.find(&format!(" {attr}=\""))
            .and_then(|i| tag[i + attr.len() + 3..].split('"').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let width = docs.iter().map(|d| size(d, "width")).fold(0.0, f64::max);
    let height: f64 = docs.iter().map(|d| size(d, "height")).sum();
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
         version=\"1.1\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\">\n"
    );
    let mut y = 0.0;
    for d in docs {
        let body = d.find("<svg").map(|i| &d[i..]).unwrap_or(d);
        out.push_str(&body.replacen("<svg", &format!("<svg y=\"{y:.0}\""), 1));
        out.push('\n');
        y += size(d, "height");
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacked_pictures_keep_their_sizes() {
        let cdf = latency_cdf_svg(&[("a", vec![1.0, 2.0])]);
        let rate = rate_svg(&[(0.0, 1.0), (1.0, 2.0)], "r");
        let s = stack(&[cdf.clone(), rate.clone()]);
        let attr = |d: &str, a: &str| -> String {
            let t = &d[d.find("<svg").unwrap()..];
            let t = &t[..t.find('>').unwrap()];
            let i = t.find(&format!(" {a}=\"")).unwrap() + a.len() + 3;
            t[i..].split('"').next().unwrap().to_string()
        };
        let h1: f64 = attr(&cdf, "height").parse().unwrap();
        let h2: f64 = attr(&rate, "height").parse().unwrap();
        assert_eq!(attr(&s, "height").parse::<f64>().unwrap(), h1 + h2);
        assert_eq!(s.matches("<svg").count(), 3);
        assert_eq!(s.matches("<?xml").count(), 1, "one prolog");
        assert!(s.contains("<svg y=\"0\""));
        assert!(
            s.contains(&format!("<svg y=\"{h1:.0}\"")),
            "the second one below the first"
        );
    }

    #[test]
    fn escapes() {
        assert_eq!(
            xml_escape("a<b>&\"c\"'d'"),
            "a&lt;b&gt;&amp;&quot;c&quot;&apos;d&apos;"
        );
        assert_eq!(xml_escape("x\u{1}y\tz\u{ffff}"), "x\u{fffd}y\tz\u{fffd}");
        assert_eq!(xml_escape("µs ✓"), "µs ✓");
    }

    #[test]
    fn axis_helpers() {
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(1.0), 1.0);
        assert_eq!(nice_step(130.0), 200.0);
        assert_eq!(nice_step(6000.0), 10000.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
        assert_eq!(trim_num(2.5), "2.5");
        assert_eq!(trim_num(100.0), "100");
        assert_eq!(trim_num(-0.0001), "0");
        assert_eq!(us_label(1e-1), "0.1 µs");
        assert_eq!(us_label(1e4), "10 ms");
        assert_eq!(us_label(1e6), "1 s");
        assert_eq!(us_text(1234.5), "1.234 ms");
    }

    #[test]
    fn rate_bins() {
        assert!(rate_series(&[], 1.0).is_empty());
        assert!(rate_series(&[1.0], 0.0).is_empty());
        assert_eq!(
            rate_series(&[0.1, 0.2, 1.5, f64::NAN, -1.0], 1.0),
            [(0.5, 2.0), (1.5, 1.0)]
        );
        assert_eq!(ns_to_us(&[1500, 2_000_000]), [1.5, 2000.0]);
    }
}
