//! The answer: a reading, or an error that says what may be concluded.

use std::fmt;
use std::time::SystemTime;

use qfence_model::{ControllerId, ControllerType, OrchestratorId, Verdict};
use serde::{Deserialize, Serialize};

use crate::report::{Discovered, Report};

/// What a check read. For a fence, `Holds` is FENCED (the resource reads stopped) and `NotHeld`
/// is FAILED; for health, healthy; for readiness, ready; for a shield, raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Observed {
    /// An independent read-back shows the condition.
    Holds,
    /// A read-back shows the condition does not hold.
    NotHeld,
    /// Nothing could be read (unreachable, timeout, refused).
    Unknown,
}

impl std::str::FromStr for Observed {
    type Err = String;

    /// `holds` (or `fenced`, `ready`), `not-held` (or `failed`) or `unknown`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "holds" | "fenced" | "ready" | "healthy" => Ok(Observed::Holds),
            "not-held" | "failed" | "not-ready" | "unhealthy" => Ok(Observed::NotHeld),
            "unknown" => Ok(Observed::Unknown),
            _ => Err(format!(
                "{s:?} is not a reading: holds (fenced, ready), not-held (failed) or unknown"
            )),
        }
    }
}

/// A read of a capability's condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reading {
    /// Whether the condition holds (host off, VM running, VIP at this site, replica fresh).
    pub holds: bool,
    /// What was read, in words an operator can check ("PowerState=Off").
    pub detail: String,
    /// When it was read.
    pub at: SystemTime,
    /// Which orchestrator read it.
    pub by: OrchestratorId,
    /// For a reading that does not hold: whether it is the target's own word (a server that
    /// refused the connection while its host answered, so nothing listens), which needs no
    /// waiting window to be believed, rather than a reading that could be a lost or late
    /// answer. Drivers that cannot tell say `false`.
    #[serde(default)]
    pub definitive: bool,
}

impl Reading {
    /// The same reading of the opposite condition: an undo's read-back (the VM runs) is a
    /// reading of the fence's condition (the VM is stopped) that does not hold.
    pub fn negated(self) -> Reading {
        Reading {
            holds: !self.holds,
            ..self
        }
    }

    /// What this reading observed: `Holds` or `NotHeld` (a reading is never `Unknown`; a
    /// failed read is an error).
    pub fn observed(&self) -> Observed {
        if self.holds {
            Observed::Holds
        } else {
            Observed::NotHeld
        }
    }

    /// The fence verdict this reading gives: FENCED when the condition holds, FAILED when not.
    pub fn verdict(&self) -> Verdict {
        if self.holds {
            Verdict::Fenced
        } else {
            Verdict::Failed
        }
    }
}

/// The verdict of a fence check: UNKNOWN whenever the read failed.
pub fn fence_verdict(result: &Result<Reading, DriverError>) -> Verdict {
    match result {
        Ok(r) => r.verdict(),
        Err(_) => Verdict::Unknown,
    }
}

/// The kind of a driver error; it decides what the caller may conclude.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The deadline passed.
    Timeout,
    /// The target could not be reached (connection refused, no route, DNS, TLS handshake).
    Unreachable,
    /// Credentials were refused or the secret could not be resolved.
    Auth,
    /// The target answered and refused the request.
    Rejected,
    /// The target or driver does not offer this.
    Unsupported,
    /// The target answered something that does not follow its protocol.
    Protocol,
    /// The call was cancelled.
    Cancelled,
}

/// An error from a driver call, naming the controller and the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverError {
    pub kind: ErrorKind,
    pub controller: ControllerId,
    /// The call, such as `power.off` or `GET /redfish/v1/Systems/1`.
    pub call: String,
    /// What went wrong. Never contains a secret.
    pub message: String,
    /// Whether the target's state may have changed without us knowing (a fence sent whose
    /// answer was lost). Callers must read it back before relying on it.
    pub state_unknown: bool,
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.controller, self.call, self.message)
    }
}

impl std::error::Error for DriverError {}

impl DriverError {
    /// The error every driver's `build` gives a configuration of another type.
    pub fn wrong_type(
        controller: &ControllerId,
        config: &qfence_model::config::ControllerConfig,
        expected: ControllerType,
    ) -> Self {
        Self::new(
            ErrorKind::Unsupported,
            controller,
            "build",
            format!(
                "controller is of type {}, not {expected}",
                config.controller_type()
            ),
            false,
        )
    }

    /// Makes an error.
    pub fn new(
        kind: ErrorKind,
        controller: &ControllerId,
        call: impl Into<String>,
        message: impl Into<String>,
        state_unknown: bool,
    ) -> Self {
        Self {
            kind,
            controller: controller.clone(),
            call: call.into(),
            message: message.into(),
            state_unknown,
        }
    }
}

/// The answer to a [`Call`](crate::Call), by its verb.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// A check, perform, undo or renewal: the driver's reading, or its error.
    Reading(Result<Reading, DriverError>),
    /// A registration check: its report.
    Report(Box<Report>),
    /// A discovery: the resources found.
    Discovered(Vec<Discovered>),
    /// A binding's check: its problems, empty when fine.
    Problems(Vec<String>),
}

impl Answer {
    /// The answer's kind, for a caller that got another than it asked for.
    pub fn kind(&self) -> &'static str {
        match self {
            Answer::Reading(_) => "a reading",
            Answer::Report(_) => "a registration report",
            Answer::Discovered(_) => "a discovery",
            Answer::Problems(_) => "a binding's problems",
        }
    }
}

impl From<Result<Reading, DriverError>> for Answer {
    fn from(r: Result<Reading, DriverError>) -> Self {
        Answer::Reading(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_kind_travels_as_its_name_and_comes_back_as_itself() {
        let e = DriverError::new(
            ErrorKind::Rejected,
            &ControllerId::new("bmc-dc1").unwrap(),
            "power.off",
            "no",
            false,
        );
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["kind"], "rejected");
        assert_eq!(serde_json::from_value::<DriverError>(json).unwrap(), e);
        assert_eq!(e.to_string(), "bmc-dc1: power.off: no");
    }

    #[test]
    fn a_reading_observes_what_it_read() {
        let r = Reading {
            holds: true,
            detail: "PowerState=Off".into(),
            at: SystemTime::UNIX_EPOCH,
            by: OrchestratorId::new("dc1-a").unwrap(),
            definitive: false,
        };
        assert_eq!(r.observed(), Observed::Holds);
        assert_eq!(r.clone().negated().observed(), Observed::NotHeld);
        assert_eq!(fence_verdict(&Ok(r)), Verdict::Fenced);
    }
}
