//! `iwarp`: the appliance command line.
#![forbid(unsafe_code)]

fn main() {
    println!("iwarp: being written");
}
