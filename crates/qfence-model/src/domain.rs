//! The words qfence decides with: roles, fence levels, verdicts, grades, and how host agents
//! are spread over orchestrators.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a binding does in its plan, and so when it runs (see `docs/specs/capabilities.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Stops the resource at a site the plan is given up by; its check says FENCED, FAILED or
    /// UNKNOWN. Runs in a failover for every site but the target, then continuously.
    Fence,
    /// Protects the owner site from the others while another site is not confirmed fenced.
    Shield,
    /// Says whether a site's copy may be promoted. Runs at the target before promotion.
    Readiness,
    /// Says whether the owner's copy is healthy. Runs every interval at the owner.
    Health,
    /// Restarts the copy in place, when health has been bad long enough, before any failover.
    Recovery,
    /// Promotes the application at the new owner.
    Switchover,
    /// A switch that powers the site off unless renewed (a BMC watchdog).
    DeadMan,
    /// Points clients at the owner (a VIP). Last in a failover, after every fence is verified.
    Service,
    /// Says a running standby is safe as one (in recovery, not writable, following the
    /// owner). Checked every interval at every site but the owner of a plan whose standbys
    /// are hot; never proof that a site stopped.
    Standby,
    /// Turns a site's stopped copy back into a replica of the owner (`db.rejoin`). Never
    /// promotes; only at a site that is not the owner (ADR 0023).
    Rejoin,
}

impl Role {
    /// Every role, in the order a failover uses them.
    pub const ALL: [Role; 10] = [
        Role::Fence,
        Role::Shield,
        Role::Readiness,
        Role::Health,
        Role::Recovery,
        Role::Switchover,
        Role::DeadMan,
        Role::Service,
        Role::Standby,
        Role::Rejoin,
    ];

    /// The role's name as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Fence => "fence",
            Role::Shield => "shield",
            Role::Readiness => "readiness",
            Role::Health => "health",
            Role::Recovery => "recovery",
            Role::Switchover => "switchover",
            Role::DeadMan => "dead-man",
            Role::Service => "service",
            Role::Standby => "standby",
            Role::Rejoin => "rejoin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        Role::ALL.into_iter().find(|r| r.as_str() == s).ok_or(())
    }
}

/// What a fence stops: the machine, its network, or the application.
///
/// Only `compute` and `network` fences can prove a site stopped; an `application` fence (a
/// demoted primary) runs first, while the site may still be up, and never proves anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FenceLevel {
    Compute,
    Network,
    Application,
}

impl FenceLevel {
    /// Every level.
    pub const ALL: [FenceLevel; 3] = [
        FenceLevel::Compute,
        FenceLevel::Network,
        FenceLevel::Application,
    ];

    /// The level's name as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            FenceLevel::Compute => "compute",
            FenceLevel::Network => "network",
            FenceLevel::Application => "application",
        }
    }
}

impl fmt::Display for FenceLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FenceLevel {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        FenceLevel::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or(())
    }
}

/// The answer of a fence check, and of a site as a whole.
///
/// UNKNOWN is never FENCED: a BMC that does not answer proves nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// An independent read-back shows the resource stopped.
    Fenced,
    /// A read-back shows the resource still running, or the target refused the fence.
    Failed,
    /// Nothing could be read, or what was read is too old to count.
    Unknown,
}

impl Verdict {
    /// The verdict as displayed.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Fenced => "FENCED",
            Verdict::Failed => "FAILED",
            Verdict::Unknown => "UNKNOWN",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How well a controller's ability to do something was checked at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Grade {
    /// The target showed it (the token holds the privilege on that VM).
    Proven,
    /// Everything visible says yes, but the target may still refuse.
    Inferred,
    /// The target does not show it; the first real use is the proof.
    Unverifiable,
    /// It cannot work as configured; no plan can bind this capability.
    Failed,
}

impl Grade {
    /// The grade as displayed.
    pub fn as_str(self) -> &'static str {
        match self {
            Grade::Proven => "proven",
            Grade::Inferred => "inferred",
            Grade::Unverifiable => "unverifiable",
            Grade::Failed => "failed",
        }
    }
}

impl fmt::Display for Grade {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How host agents are spread over the orchestrators they may use when they must move
/// (CloudStack's `indirect.agent.lb.algorithm`): `qfence_core::maintenance::spread` orders each
/// agent's list by it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentAlgorithm {
    /// Every agent in its configured order: all go to the first orchestrator left.
    #[default]
    Static,
    /// Evenly: the one that received the fewest first.
    RoundRobin,
    /// A random order per agent, from an injected seed.
    Shuffle,
}

impl AgentAlgorithm {
    pub const ALL: [AgentAlgorithm; 3] = [
        AgentAlgorithm::Static,
        AgentAlgorithm::RoundRobin,
        AgentAlgorithm::Shuffle,
    ];

    /// The name as written in configuration and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentAlgorithm::Static => "static",
            AgentAlgorithm::RoundRobin => "roundrobin",
            AgentAlgorithm::Shuffle => "shuffle",
        }
    }
}

impl fmt::Display for AgentAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AgentAlgorithm {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        AgentAlgorithm::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not an algorithm: static, roundrobin or shuffle"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_through_their_configuration_names() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
            let json = serde_json::to_string(&role).unwrap();
            assert_eq!(json, format!("\"{}\"", role.as_str()));
        }
        assert_eq!("deadman".parse::<Role>(), Err(()));
    }

    #[test]
    fn verdicts_serialize_in_capitals() {
        assert_eq!(
            serde_json::to_string(&Verdict::Unknown).unwrap(),
            "\"UNKNOWN\""
        );
    }
}
