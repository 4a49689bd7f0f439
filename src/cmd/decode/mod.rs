//! `iwarp decode`: one half connection's byte stream ([`stream`]) or every iWARP
//! connection of a pcap capture ([`pcap`]), with the DDP/RDMAP of each FPDU
//! ([`ulpdu`]).

pub mod pcap;
pub mod stream;
pub mod ulpdu;

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::Args;
use wire::mpa::fpdu::FpduMode;

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `iwarp decode`'s arguments.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["hex", "bin", "pcap"])))]
pub struct DecodeArgs {
    /// Read the stream as hex text from FILE ("-" for standard input); white space,
    /// ':' and '-' separators and '#' comments are ignored.
    #[arg(long, value_name = "FILE")]
    hex: Option<PathBuf>,
    /// Read the stream as raw octets from FILE ("-" for standard input).
    #[arg(long, value_name = "FILE")]
    bin: Option<PathBuf>,
    /// Read a libpcap capture from FILE ("-" for standard input): every TCP connection is
    /// reassembled per direction, its MPA Request and Reply found and both directions
    /// decoded in the mode they negotiated (implies --startup; --markers/--crc not used).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["startup", "markers", "crc"])]
    pcap: Option<PathBuf>,
    /// The stream begins with an MPA Request or Reply; the marker origin is the octet
    /// after it. Without it the stream starts at the marker origin.
    #[arg(long)]
    startup: bool,
    /// This half connection carries markers (the other side set M).
    #[arg(long)]
    markers: bool,
    /// CRC is in use on this connection (either side set C): check every FPDU's CRC.
    #[arg(long)]
    crc: bool,
    /// One JSON object per line instead of the readable listing.
    #[arg(long)]
    json: bool,
}

fn read_input(path: &PathBuf) -> std::io::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut v = Vec::new();
        std::io::stdin().read_to_end(&mut v)?;
        Ok(v)
    } else {
        std::fs::read(path)
    }
}

/// Prints `records` (JSON lines or text), stopping quietly when the reader goes away
/// (e.g. `| head`).
fn print_records(records: &[stream::Record], json: bool, text: fn(&stream::Record) -> String) {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for r in records {
        let line = if json {
            serde_json::Value::Object(r.clone()).to_string()
        } else {
            text(r)
        };
        if writeln!(out, "{line}").is_err() {
            return;
        }
    }
    let _ = out.flush();
}

/// Runs `iwarp decode`: true when everything decoded without error.
pub fn run(args: DecodeArgs) -> Result<bool, String> {
    if let Some(path) = &args.pcap {
        return run_pcap(path, args.json);
    }
    let (path, is_hex) = match (&args.hex, &args.bin) {
        (Some(p), _) => (p, true),
        (None, Some(p)) => (p, false),
        (None, None) => return Err("one of --hex or --bin is required".into()),
    };
    let raw = read_input(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bytes = if is_hex {
        let text = String::from_utf8(raw)
            .map_err(|_| format!("{}: not text; use --bin for raw octets", path.display()))?;
        stream::parse_hex(&text).map_err(|e| format!("{}: {e}", path.display()))?
    } else {
        raw
    };
    let decoded = stream::decode(
        &bytes,
        stream::DecodeOptions {
            startup: args.startup,
            mode: FpduMode {
                markers: args.markers,
                crc: args.crc,
            },
        },
    );
    print_records(&decoded.records, args.json, stream::render_text);
    Ok(!decoded.failed)
}

fn run_pcap(path: &PathBuf, json: bool) -> Result<bool, String> {
    let raw = read_input(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let decoded = pcap::decode_pcap(&raw).map_err(|e| format!("{}: {e}", path.display()))?;
    print_records(&decoded.records, json, pcap::render_text);
    if decoded.mpa_connections == 0 {
        eprintln!(
            "iwarp: {}: no MPA connection found among {} TCP connections",
            path.display(),
            decoded.connections
        );
    }
    Ok(!decoded.failed)
}
