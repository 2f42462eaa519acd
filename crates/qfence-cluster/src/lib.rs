//! qfence-cluster: see the crate description in Cargo.toml. Not yet built.
