//! One controller call and its answer, as plain values.
//!
//! A fence travels from the decision to the driver and back as two values: a [`Call`] (which
//! driver method, on which [`Target`], within which timeout and before which absolute
//! deadline) and an [`Answer`] (a [`Reading`] or a [`DriverError`], or for the calls outside
//! any plan a registration [`Report`], the resources discovered, a binding's problems). The
//! runtime builds the call once per command, the cluster routes it, the drivers run it; the
//! same two types are used the whole way. Nothing here does I/O: a local call is a function
//! call with these values, and only a call forwarded to another orchestrator is serialised,
//! inside the signed envelope (ADR 0012).
//!
//! The error's [`ErrorKind`] decides what the caller may conclude, and `state_unknown` says
//! whether the target may have changed without us knowing: a refusal is FAILED, a lost answer
//! is UNKNOWN. No kind, grade or status is a string.

mod answer;
mod call;
mod report;

pub use answer::{Answer, DriverError, ErrorKind, Observed, Reading, fence_verdict};
pub use call::{Call, PreFence, Target, Verb};
pub use report::{
    BindingCheck, CapabilityGrade, Discovered, Identity, Probe, Report, Step, StepStatus,
};
