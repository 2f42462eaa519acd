//! IPMI over LAN (RMCP+, `lanplus`, cipher suite 3 or 17): power fencing and the BMC watchdog
//! as a dead-man switch.
//!
//! # The model
//!
//! A BMC controls one host. qfence talks to it over UDP with IPMI v2.0 RMCP+ sessions:
//! every driver call opens a session (Open Session, RAKP 1-4 with HMAC-SHA1, then
//! HMAC-SHA1-96 integrity and AES-CBC-128 confidentiality on every message; suite 17 uses
//! SHA-256 and HMAC-SHA256-128 instead), sends a few commands and closes it. The session asks
//! for ADMINISTRATOR and steps down to OPERATOR, then USER, when the BMC refuses a level. Nothing is kept between calls, so a BMC reboot or a lost session
//! never poisons the next call, and no task outlives a call.
//!
//! Two capabilities (see `qfence_model::catalog`):
//!
//! - `power.off` (fence): condition "the host is off". Perform sends Chassis Control
//!   *power down* and then polls Get Chassis Status until it shows power off: Chassis Control
//!   only says the BMC accepted the command. "Already off" is success. Undo sends *power up*
//!   and polls until power is on. A power-down whose answer was lost leaves the state
//!   unknown; polling (re-opening the session when needed) goes on until the deadline.
//! - `watchdog` (dead-man): condition "the BMC will power the host off unless renewed".
//!   Perform arms it: Set Watchdog Timer (use SMS/OS, action power down, countdown from the
//!   binding's `timeout_seconds`, default 10), then Reset Watchdog Timer, which starts it.
//!   Renew is Reset Watchdog Timer (refused, as `rejected`, when the timer was never set:
//!   completion code 0x80). Undo sets action none and stops the timer. Check reads Get
//!   Watchdog Timer: armed means action power-down, the running bit set, and the initial
//!   countdown the binding sets; a countdown someone else set is not armed (a longer one
//!   would make a leader's "it has fired by now" premature). Perform and renew end with the
//!   same read-back in their session, and return it.
//!
//! # What is trusted
//!
//! The watchdog's running bit is only trusted from a complete (8-byte) Get Watchdog Timer
//! answer. OpenIPMI's `ipmi_sim` answers 6 bytes and echoes the Set request's "don't stop"
//! flag where the running bit belongs, so against such a BMC a plain check is UNKNOWN (an
//! error with `state_unknown`), while perform and renew, which just had Reset Watchdog Timer
//! accepted, report armed from that acceptance plus the action read back — and say so in the
//! reading's detail. Disarm is provable either way: action none is readable.
//! That the watchdog really powers the host off is shown by reading chassis power, never by
//! the watchdog's own registers.
//!
//! # Registration
//!
//! A probe reads the host's identity (Get System GUID, else Get Device GUID, else the GUID
//! the BMC sent in RAKP 2), the session's privilege (Get Session Info), Get Chassis Status
//! and Get Watchdog Timer, and grades: power control needs OPERATOR, so a session at
//! OPERATOR or above that reads chassis status is *proven*, or *inferred* when the BMC has
//! the IPMI 2.0 firmware firewall (Get NetFn Support answers), which may disable single
//! commands; a USER session is *unverifiable*. It never fences to test a permission.

mod driver;
mod session;
pub mod wire;

pub use driver::IpmiDriver;
