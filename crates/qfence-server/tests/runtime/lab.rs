//! The demo lab in one process, from the `testing` feature (`qfence_server::testing::lab`):
//! the simulators on the runtime tests' clock, examples/lab.yaml pointed at them, and
//! orchestrators started, joined and restarted. One copy, shared with the API, console and
//! CLI tests' [`qfence_server::testing::LabRuntime`].

pub use qfence_server::testing::lab::*;
