//! Tests of the simulated wire.
