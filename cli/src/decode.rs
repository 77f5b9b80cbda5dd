//! `ibcm decode [--json] [--oneline | --summary [--svg FILE] [--conn N]...]
//! FILE...`: prints the CM MADs found in pcap / pcapng captures (see
//! `ibcm::capture` for what is recognised and `ibcm::decode` for the output
//! formats), or, with `--summary`, the connections they form
//! (`ibcm::ladder`) and their ladder diagram (`ibcm::svg`).
//!
//! Files are read one after the other. A file that cannot be read, or whose
//! records stop making sense, gets one message on stderr naming the file and
//! the byte offset; the MADs before the bad record are still printed, the
//! exit status becomes 1 and decoding goes on with the next file. A CM MAD
//! that does not parse is printed with its error and does not change the
//! exit status.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{self, Read, Write};

use ibcm::capture::{self, CaptureError, Reader, Skipped};
use ibcm::decode::{self as render, Field, Value};
use serde::ser::{Serialize, SerializeMap, Serializer};

/// The long description in `ibcm decode --help`.
pub const ABOUT: &str = "Prints every InfiniBand CM MAD (RoCEv2, UDP port 4791) found in pcap or \
pcapng captures.";

/// `ibcm decode`'s command line.
#[derive(clap::Args, Debug)]
#[command(
    override_usage = "ibcm decode [--json] [--oneline] FILE...\n       \
                      ibcm decode --summary [--json] [--svg FILE] [--conn N]... FILE...",
    after_help = "\
At the end, one summary line per file: packets, CM MADs by attribute,
malformed MADs, ICRC failures and the other packets skipped, by cause.
With --summary: one line per connection (the MADs of every file together),
then totals and latency percentiles per step.
Exit status: 0 if every file was read to its end, 1 if one was not,
2 for usage errors."
)]
pub struct Args {
    /// one JSON object per CM MAD per line (keys: see the ibcm::decode
    /// docs); the per-file summaries go to stderr
    #[arg(long)]
    pub json: bool,
    /// one line per CM MAD instead of all fields (with --json: the frame,
    /// transport and MAD header keys only)
    #[arg(long, conflicts_with = "summary")]
    pub oneline: bool,
    /// one line per connection: service ID, comm IDs, endpoints, the
    /// message sequence with step times, CM states, outcome,
    /// retransmissions; then totals and latency percentiles per step
    /// (with --json: one JSON document)
    #[arg(long)]
    pub summary: bool,
    /// write a ladder diagram (SVG, for a browser) of the connections to
    /// FILE; implies --summary
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub svg: Option<std::path::PathBuf>,
    /// draw only connection N (the #N of --summary) in the SVG; repeatable
    #[arg(long = "conn", value_name = "N", requires = "svg")]
    pub conns: Vec<usize>,
    /// pcap or pcapng capture files; '-' reads standard input
    #[arg(value_name = "FILE", required = true, value_hint = clap::ValueHint::FilePath)]
    pub files: Vec<OsString>,
}

/// A [`Field`]'s value in its JSON form (see `ibcm::decode::frame_fields`).
struct JsonValue<'a>(&'a Value);

impl Serialize for JsonValue<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Hex(v, _) | Value::Dec(v) => s.serialize_u64(*v),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Text(t) => s.serialize_str(t),
            Value::Gid(g) => s.collect_str(g),
            Value::Ip(ip) => s.collect_str(ip),
            Value::Bytes(b) => s.serialize_str(&ibcm::wire::hex(b)),
        }
    }
}

/// One CM MAD's fields as one JSON object, keys in the library's order.
struct JsonFrame(Vec<Field>);

impl Serialize for JsonFrame {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for f in &self.0 {
            m.serialize_entry(f.name, &JsonValue(&f.value))?;
        }
        m.end()
    }
}

/// What one file held.
#[derive(Default)]
struct FileReport {
    packets: u64,
    mads: u64,
    by_attr: BTreeMap<u16, u64>,
    malformed: u64,
    icrc_bad: u64,
    skipped: Skipped,
    /// Byte offset and message of the error that stopped the file.
    error: Option<(u64, String)>,
}

impl FileReport {
    fn summary_line(&self, name: &str) -> String {
        let attrs: Vec<String> = self
            .by_attr
            .iter()
            .map(|(&a, n)| format!("{} {n}", render::attr_label(a)))
            .collect();
        let attrs = if attrs.is_empty() {
            String::new()
        } else {
            format!(" ({})", attrs.join(", "))
        };
        let mut s = format!(
            "{name}: {} packets, {} CM MADs{attrs}, {} malformed, {} ICRC failures, {} other packets skipped ({})",
            self.packets,
            self.mads,
            self.malformed,
            self.icrc_bad,
            self.skipped.total(),
            self.skipped
        );
        if let Some((off, msg)) = &self.error {
            s.push_str(&format!(
                "; stopped by an error at byte offset {off}: {msg}"
            ));
        }
        s
    }
}

fn read_input(name: &OsString) -> io::Result<Vec<u8>> {
    if name == "-" {
        let mut v = Vec::new();
        io::stdin().lock().read_to_end(&mut v)?;
        Ok(v)
    } else {
        std::fs::read(name)
    }
}

/// Decodes one file, writing its MADs to `out`. Only errors writing `out`
/// are returned; problems with the file are in the report.
fn decode_file(
    o: &Args,
    file_key: Option<&str>,
    data: &[u8],
    out: &mut impl Write,
) -> io::Result<FileReport> {
    let mut r = FileReport::default();
    let reader = match Reader::new(data) {
        Ok(reader) => reader,
        Err(e) => {
            r.error = Some((e.offset, e.message));
            return Ok(r);
        }
    };
    let mut t0 = None;
    for p in reader {
        let p = match p {
            Ok(p) => p,
            Err(CaptureError { offset, message }) => {
                r.error = Some((offset, message));
                break;
            }
        };
        r.packets += 1;
        let f = match capture::decode_packet(&p) {
            Ok(f) => f,
            Err(reason) => {
                r.skipped.add(reason);
                continue;
            }
        };
        r.mads += 1;
        let attr_id = u16::from_be_bytes([f.mad[16], f.mad[17]]);
        *r.by_attr.entry(attr_id).or_default() += 1;
        if render::parse(&f).is_err() {
            r.malformed += 1;
        }
        if !f.icrc_ok {
            r.icrc_bad += 1;
        }
        let t0 = *t0.get_or_insert(f.ts_nanos);
        if o.json {
            let frame = JsonFrame(render::frame_fields(&f, file_key, !o.oneline));
            serde_json::to_writer(&mut *out, &frame)?;
            writeln!(out)?;
        } else if o.oneline {
            writeln!(out, "{}", render::frame_summary_line(&f, t0))?;
        } else {
            if r.mads > 1 {
                writeln!(out)?;
            }
            write!(out, "{}", render::frame_text(&f, t0))?;
        }
    }
    Ok(r)
}

/// `--summary` / `--svg`: the connections of every file together.
fn run_summary(o: &Args) -> io::Result<i32> {
    let mut status = 0;
    let mut frames = Vec::new();
    for file in &o.files {
        let name = file.to_string_lossy().into_owned();
        let data = match read_input(file) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("ibcm decode: {name}: cannot read the file: {e}");
                status = 1;
                continue;
            }
        };
        let reader = match Reader::new(&data) {
            Ok(r) => r,
            Err(CaptureError { offset, message }) => {
                eprintln!(
                    "ibcm decode: {name}: error at byte offset {offset} ({offset:#x}): {message}"
                );
                status = 1;
                continue;
            }
        };
        for p in reader {
            match p {
                Ok(p) => {
                    if let Ok(f) = capture::decode_packet(&p) {
                        frames.push(f);
                    }
                }
                Err(CaptureError { offset, message }) => {
                    eprintln!(
                        "ibcm decode: {name}: error at byte offset {offset} ({offset:#x}): {message}"
                    );
                    status = 1;
                    break;
                }
            }
        }
    }
    let summary = ibcm::ladder::summarize(&frames);
    if let Some(path) = &o.svg {
        let svg = ibcm::svg::ladder_svg(&summary, &o.conns);
        if let Err(e) = std::fs::write(path, svg) {
            eprintln!("ibcm decode: cannot write {}: {e}", path.display());
            return Ok(1);
        }
    }
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    if o.json {
        writeln!(out, "{}", summary.to_json())?;
    } else {
        write!(out, "{}", summary.to_text())?;
    }
    out.flush()?;
    Ok(status)
}

fn run(o: &Args) -> io::Result<i32> {
    if o.summary || o.svg.is_some() {
        return run_summary(o);
    }
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let several = o.files.len() > 1;
    let mut status = 0;
    let mut summaries = Vec::with_capacity(o.files.len());
    for (i, file) in o.files.iter().enumerate() {
        let name = file.to_string_lossy().into_owned();
        let file_key = several.then_some(name.as_str());
        if several && !o.json {
            if i > 0 {
                writeln!(out)?;
            }
            writeln!(out, "# {name}")?;
        }
        let report = match read_input(file) {
            Ok(data) => decode_file(o, file_key, &data, &mut out)?,
            Err(e) => FileReport {
                error: Some((0, format!("cannot read the file: {e}"))),
                ..FileReport::default()
            },
        };
        if let Some((off, msg)) = &report.error {
            out.flush()?;
            eprintln!("ibcm decode: {name}: error at byte offset {off} ({off:#x}): {msg}");
            status = 1;
        }
        summaries.push(report.summary_line(&name));
    }
    if o.json {
        out.flush()?;
        for s in &summaries {
            eprintln!("{s}");
        }
    } else {
        writeln!(out)?;
        for s in &summaries {
            writeln!(out, "{s}")?;
        }
        out.flush()?;
    }
    Ok(status)
}

pub fn main(o: &Args) -> i32 {
    match run(o) {
        Ok(status) => status,
        // The reader went away (`ibcm decode f.pcap | head`): stop quietly.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("ibcm decode: cannot write the output: {e}");
            1
        }
    }
}
