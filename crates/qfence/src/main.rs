//! `qfence`: one binary, one subcommand per job. This file only wires.

fn main() {
    println!("qfence {}", env!("CARGO_PKG_VERSION"));
}
