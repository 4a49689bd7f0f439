//! Deployment files of the iWARP appliance.
//!
//! A TOML file describes one deployment: the DPDK EAL ([`Eal`]), the ports ([`Port`]), the
//! dataplane lcores ([`Lcore`]), the control thread ([`Control`]), MPA policy ([`Mpa`]),
//! TCP tuning ([`Tcp`]), queue pair limits ([`Qp`]), listeners ([`Listener`]) and `iwarp
//! bench` defaults ([`Bench`]). `config/README.md` documents every field with examples.
//!
//! [`load`] and [`from_str`] parse a file into a [`Config`] and validate it, touching no
//! device. Every problem is reported as `FILE:LINE:COL: FIELD: MESSAGE`, e.g.
//!
//! ```text
//! config/af_packet.toml:18:8: ports[0].ipv4: invalid IPv4 prefix "10.0.0.1/33": prefix length must be at most 32
//! ```
//!
//! Syntax errors, unknown fields, missing fields and values of the wrong type are found
//! while parsing (one error: parsing stops there); the semantic checks that follow (every
//! address in its prefix, lcores unique, every port polled by exactly one lcore, listeners
//! on existing ports, IRD/ORD and private data limits, ...) report every problem found, in
//! file order. Each one points at the field at fault, or, for a field left out, at the
//! table it is missing from.
//!
//! The embedded default ([`LOOPBACK_TOML`], [`loopback`]) joins two `mem` ports in one
//! process: no EAL, no NIC, no root.

use std::fmt;
use std::path::Path;

mod eal;
mod host;
mod schema;
mod spans;
mod validate;
mod value;

pub use eal::device_names;
pub use host::{Host, System};
pub use schema::{
    Bench, Config, Control, Driver, Eal, Lcore, Limits, Listener, MemifRole, Mpa, MpaDialect,
    MpaOverrides, Port, Qp, RtrType, Tcp, DEFAULT_STARTUP_OCTETS, ENHANCED_DATA_LEN, MAX_IRD_ORD,
    MAX_PRIVATE_DATA,
};
pub use value::{HexBytes, Ipv4Prefix, MacAddr, Millis};

use serde::Deserialize;
use spans::{line_col, SpanIndex};
use toml::de::DeTable;

/// The embedded default deployment, `config/loopback.toml`: two `mem` ports joined in
/// one process.
pub const LOOPBACK_TOML: &str = include_str!("../loopback.toml");

/// The origin name [`loopback`] reports in diagnostics.
pub const LOOPBACK_ORIGIN: &str = "<embedded config/loopback.toml>";

/// The embedded default deployment, parsed ([`LOOPBACK_TOML`]).
pub fn loopback() -> Config {
    // The embedded file is checked by this crate's tests; failing here is a build defect.
    from_str(LOOPBACK_TOML, LOOPBACK_ORIGIN).expect("the embedded config/loopback.toml is valid")
}

/// What went wrong, broadly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The file could not be read.
    Io,
    /// Not valid TOML.
    Syntax,
    /// Valid TOML that does not fit the schema: unknown field, missing field, wrong type
    /// or malformed value.
    Schema,
    /// A value that fits the schema but breaks a rule (ranges, cross references).
    Semantic,
    /// A deployment this machine cannot run ([`load_on`]).
    Host,
}

/// One problem, located in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The kind of problem.
    pub kind: ErrorKind,
    /// The file name (or other origin) given to [`load`] / [`from_str`].
    pub origin: String,
    /// 1-based line; 0 when there is no position (I/O errors).
    pub line: usize,
    /// 1-based column in characters; 0 when there is no position.
    pub column: usize,
    /// The field path, e.g. `ports[0].ipv4` or `lcores[1].ports[0]`; empty when the
    /// problem is not about one field (syntax errors outside any field, I/O errors).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.origin)?;
        if self.line > 0 {
            write!(f, "{}:{}:", self.line, self.column)?;
        }
        if !self.field.is_empty() {
            write!(f, " {}:", self.field)?;
        }
        write!(f, " {}", self.message)
    }
}

/// Why a deployment file was refused: one or more [`Diagnostic`]s, in file order.
/// Displays as one `FILE:LINE:COL: FIELD: MESSAGE` line per diagnostic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    diagnostics: Vec<Diagnostic>,
}

impl ConfigError {
    fn one(d: Diagnostic) -> ConfigError {
        ConfigError {
            diagnostics: vec![d],
        }
    }

    /// Every problem found (at least one), in file order.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// The first problem.
    pub fn first(&self) -> &Diagnostic {
        &self.diagnostics[0]
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Reads, parses and validates the deployment file at `path`. Diagnostics name the file
/// as `path` is displayed.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::one(Diagnostic {
            kind: ErrorKind::Io,
            origin: origin.clone(),
            line: 0,
            column: 0,
            field: String::new(),
            message: format!("cannot read the file: {e}"),
        })
    })?;
    from_str(&text, &origin)
}

/// Like [`load`], then checks the deployment against `host`, the machine it is to run on
/// ([`System`]: this one): interfaces, lcores, hugepages, PCI devices and memif socket
/// directories, each problem at its field. Touches no device.
pub fn load_on(path: &Path, host: &dyn Host) -> Result<Config, ConfigError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::one(Diagnostic {
            kind: ErrorKind::Io,
            origin: origin.clone(),
            line: 0,
            column: 0,
            field: String::new(),
            message: format!("cannot read the file: {e}"),
        })
    })?;
    parse(&text, &origin, Some(host))
}

/// Like [`from_str`], then checks the deployment against `host` (see [`load_on`]).
pub fn from_str_on(text: &str, origin: &str, host: &dyn Host) -> Result<Config, ConfigError> {
    parse(text, origin, Some(host))
}

/// Parses and validates deployment text; `origin` (a file name) starts every diagnostic.
pub fn from_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
    parse(text, origin, None)
}

fn parse(text: &str, origin: &str, host: Option<&dyn Host>) -> Result<Config, ConfigError> {
    let at = |kind, offset: usize, field: String, message: String| {
        let (line, column) = line_col(text, offset);
        Diagnostic {
            kind,
            origin: origin.to_string(),
            line,
            column,
            field,
            message,
        }
    };
    let root = DeTable::parse(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        ConfigError::one(at(
            ErrorKind::Syntax,
            offset,
            String::new(),
            e.message().trim_end().to_string(),
        ))
    })?;
    let index = SpanIndex::build(root.get_ref());
    let config = Config::deserialize(toml::de::Deserializer::from(root)).map_err(|e| {
        let message = e.message().trim_end().to_string();
        let offset = e.span().map_or(0, |s| s.start);
        let node = index.innermost(offset);
        let mut field = node.map(|n| n.path.clone()).unwrap_or_default();
        let mut offset = node.map_or(offset, |n| {
            if n.value.start == offset {
                offset
            } else {
                n.start()
            }
        });
        if let Some(missing) = message
            .strip_prefix("missing field `")
            .and_then(|m| m.strip_suffix('`'))
        {
            // Reported on the table it is missing from: its header, or the document start.
            let span = e.span().unwrap_or(0..0);
            offset = span.start;
            field = match index.with_value_span(&span) {
                Some(table) => format!("{}.{missing}", table.path),
                None => missing.to_string(),
            };
        }
        ConfigError::one(at(ErrorKind::Schema, offset, field, message))
    })?;
    let problems = validate::validate(&config);
    // The machine is asked only about a deployment that is right in itself.
    let (kind, problems) = match host {
        Some(h) if problems.is_empty() => (ErrorKind::Host, host::check(&config, h)),
        _ => (ErrorKind::Semantic, problems),
    };
    if problems.is_empty() {
        return Ok(config);
    }
    let mut diagnostics: Vec<(usize, Diagnostic)> = problems
        .into_iter()
        .map(|(path, message)| {
            let offset = index.lookup(&path).map_or(0, |n| n.start());
            (offset, at(kind, offset, path, message))
        })
        .collect();
    diagnostics.sort_by_key(|(offset, _)| *offset);
    Err(ConfigError {
        diagnostics: diagnostics.into_iter().map(|(_, d)| d).collect(),
    })
}

impl Config {
    /// Whether this deployment needs the DPDK EAL: false when every port is `mem`.
    pub fn needs_eal(&self) -> bool {
        self.ports.iter().any(|p| p.driver != Driver::Mem)
    }

    /// The full EAL argv for this deployment: [`Eal::eal_argv`] with, unless `[eal]
    /// lcores` is set, `-l` built from the `[control]` lcore and every `[[lcores]]` id,
    /// and `--main-lcore` for the `[control]` lcore.
    pub fn eal_argv(&self) -> Vec<String> {
        eal::config_argv(self)
    }

    /// The port named `name`.
    pub fn port(&self, name: &str) -> Option<&Port> {
        self.ports.iter().find(|p| p.name == name)
    }

    /// The MPA policy of `listener`: `[mpa]` with its overrides applied.
    pub fn listener_mpa(&self, listener: &Listener) -> Mpa {
        match &listener.mpa {
            Some(o) => self.mpa.with_overrides(o),
            None => self.mpa.clone(),
        }
    }
}
