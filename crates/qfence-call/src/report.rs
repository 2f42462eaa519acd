//! What a controller says it is, and what registering it found.

use std::collections::BTreeMap;
use std::fmt;

use qfence_model::{ControllerId, Grade, OrchestratorId, SiteId};
use serde::{Deserialize, Serialize};

/// What a controller says it is, read by a connectivity test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// A value that is the same for every controller pointing at the same system (a Redfish
    /// service UUID, a Proxmox cluster name, an engine ID). Two controllers with the same
    /// identity are warned of.
    pub id: String,
    /// Further facts worth showing (vendor, version, serial).
    #[serde(default)]
    pub facts: BTreeMap<String, String>,
    /// For TLS targets: the SHA-256 fingerprint of the certificate it showed, to compare and pin.
    #[serde(default)]
    pub tls_fingerprint: Option<String>,
}

/// One capability's grade after a probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityGrade {
    pub capability: String,
    pub grade: Grade,
    /// Why that grade, in a sentence.
    pub reason: String,
}

/// The result of a probe: identity and every capability graded. A probe changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    pub identity: Identity,
    pub grades: Vec<CapabilityGrade>,
    /// Things the operator should know that are not errors.
    pub warnings: Vec<String>,
}

/// A resource a capability can act on, found by discovery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovered {
    pub capability: String,
    pub resource: String,
    /// A short description (`VM 101 "erp-db" on pve-dc1-01, running`).
    pub description: String,
}

/// How one registration step went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Ok,
    /// Passed, with something the operator should look at.
    Warning,
    Failed,
    /// Not run because an earlier step failed.
    Skipped,
}

impl StepStatus {
    /// `ok`, `warning`, `failed` or `skipped`, as the API shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Ok => "ok",
            StepStatus::Warning => "warning",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
        }
    }
}

impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One of the four registration steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub number: u8,
    /// `configuration`, `secret`, `connectivity` or `capabilities`.
    pub name: String,
    pub status: StepStatus,
    /// What was found, in sentences.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The check of one binding that names the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingCheck {
    /// Where it is in the configuration (`plans.erp-db.instances.dc1[0]`).
    pub path: String,
    pub capability: String,
    pub resource: String,
    /// Empty when the binding is fine.
    pub problems: Vec<String>,
}

/// What registration found. Never holds a secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub controller: ControllerId,
    pub controller_type: String,
    /// The orchestrator that ran the check.
    pub orchestrator: OrchestratorId,
    pub site: Option<SiteId>,
    pub steps: Vec<Step>,
    pub identity: Option<Identity>,
    pub grades: Vec<CapabilityGrade>,
    #[serde(default)]
    pub bindings: Vec<BindingCheck>,
    /// Every note that made a step pass with a warning, in step order (also among the
    /// steps' notes), so a caller can list them apart.
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl Report {
    /// Whether every step passed (warnings allowed).
    pub fn passed(&self) -> bool {
        self.steps
            .iter()
            .all(|s| matches!(s.status, StepStatus::Ok | StepStatus::Warning))
    }
}

/// The report as the command line prints it: one line per step, its notes, the grades.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "controller {} ({}) tested from orchestrator {}{}",
            self.controller,
            self.controller_type,
            self.orchestrator,
            self.site
                .as_ref()
                .map(|s| format!(" at site {s}"))
                .unwrap_or_default()
        )?;
        for s in &self.steps {
            let status = match s.status {
                StepStatus::Ok => "ok",
                StepStatus::Warning => "ok, with warnings",
                StepStatus::Failed => "FAILED",
                StepStatus::Skipped => "skipped",
            };
            writeln!(f, "{}. {}: {status}", s.number, s.name)?;
            for n in &s.notes {
                writeln!(f, "   - {n}")?;
            }
            if s.number == 4 && s.status != StepStatus::Skipped {
                for g in &self.grades {
                    writeln!(
                        f,
                        "   {:<16} {:<13} {}",
                        g.capability,
                        g.grade.as_str(),
                        g.reason
                    )?;
                }
                for b in &self.bindings {
                    if b.problems.is_empty() {
                        writeln!(f, "   {} {} {}: ok", b.path, b.capability, b.resource)?;
                    } else {
                        writeln!(
                            f,
                            "   {} {} {}: {}",
                            b.path,
                            b.capability,
                            b.resource,
                            b.problems.join("; ")
                        )?;
                    }
                }
            }
        }
        write!(
            f,
            "{}",
            if self.passed() {
                "result: passed"
            } else {
                "result: FAILED"
            }
        )
    }
}
