//! `iwarp`: the iWARP appliance command line.
//!
//! * `iwarp decode`: decode one half connection of an iWARP byte stream (MPA startup
//!   frame, FPDUs with CRC and marker checks, DDP/RDMAP headers).
#![forbid(unsafe_code)]

mod decode;
mod ulpdu;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use dataplane::mpa::fpdu::FpduMode;

#[derive(Parser)]
#[command(
    name = "iwarp",
    version,
    about = "Userspace iWARP (RDMAP/DDP/MPA over TCP)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode one half connection's byte stream: MPA startup frame, FPDUs, DDP/RDMAP.
    Decode(DecodeArgs),
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["hex", "bin"])))]
struct DecodeArgs {
    /// Read the stream as hex text from FILE ("-" for standard input); white space,
    /// ':' and '-' separators and '#' comments are ignored.
    #[arg(long, value_name = "FILE")]
    hex: Option<PathBuf>,
    /// Read the stream as raw octets from FILE ("-" for standard input).
    #[arg(long, value_name = "FILE")]
    bin: Option<PathBuf>,
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

fn run_decode(args: DecodeArgs) -> Result<bool, String> {
    let (path, is_hex) = match (&args.hex, &args.bin) {
        (Some(p), _) => (p, true),
        (None, Some(p)) => (p, false),
        (None, None) => return Err("one of --hex or --bin is required".into()),
    };
    let raw = read_input(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bytes = if is_hex {
        let text = String::from_utf8(raw)
            .map_err(|_| format!("{}: not text; use --bin for raw octets", path.display()))?;
        decode::parse_hex(&text).map_err(|e| format!("{}: {e}", path.display()))?
    } else {
        raw
    };
    let decoded = decode::decode(
        &bytes,
        decode::DecodeOptions {
            startup: args.startup,
            mode: FpduMode {
                markers: args.markers,
                crc: args.crc,
            },
        },
    );
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for r in &decoded.records {
        let line = if args.json {
            serde_json::Value::Object(r.clone()).to_string()
        } else {
            decode::render_text(r)
        };
        if writeln!(out, "{line}").is_err() {
            // Reader went away (e.g. `| head`): stop quietly.
            return Ok(!decoded.failed);
        }
    }
    let _ = out.flush();
    Ok(!decoded.failed)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(args) => run_decode(args),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("iwarp: {e}");
            ExitCode::from(2)
        }
    }
}
