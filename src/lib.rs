//! `iwarp`: the library half of the iWARP appliance command line.
//!
//! The `iwarp` binary (`src/main.rs`) holds the command line itself; this library holds
//! the parts other programs and integration tests use directly:
//!
//! * [`mod@bench`]: the benchmark runner (`iwarp bench`) over the embedded in-memory link.
//! * [`driver`]: the consumer driver the apps share (one QP's endpoint: waits, retries,
//!   timeouts, errors, the close handshake).
//! * [`mpa`]: the MPA policy of every app and the one way the command line changes it.
//! * [`deploy`]: config-file deployments: a node on a DPDK port (`iwarp serve`,
//!   `iwarp bench --config`).
//! * [`metrics`]: the counters of a deployment for Prometheus (`iwarp serve`).
//! * [`plot`]: SVG charts of results (`--plot`, `iwarp report compare --plot`).
//! * [`report`]: the result reporting of `iwarp bench`, a perftest-like RDMA benchmark:
//!   bandwidth and latency meters, perftest 4.5's text layout, JSON, HdrHistogram
//!   percentile files (`--hgrm`) and a terminal progress line.
//! * [`perftest`]: perftest's `-R` (rdma_cm) exchange, both roles (`iwarp bench --perftest`).
//! * [`rping`]: rdma-core's `rping` protocol, client and server (`iwarp rping`).
#![forbid(unsafe_code)]

pub mod bench;
pub mod deploy;
pub mod driver;
pub mod metrics;
pub mod mpa;
pub mod perftest;
pub mod plot;
pub mod report;
pub mod rping;
