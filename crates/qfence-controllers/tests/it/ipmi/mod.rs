//! The IPMI driver's tests: against `ipmi_sim` (`sim`), an in-process spec-following BMC
//! (`fake_bmc`) and misbehaving BMCs (`faults`); `support` holds what they share (also used
//! by the IPMI benchmark).

mod fake_bmc;
mod faults;
mod sim;
pub mod support;
