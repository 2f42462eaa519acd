//! Names and counters.
//!
//! Names are short identifiers an operator types: a letter or digit first, then letters, digits,
//! `-`, `_` or `.`, at most 63 characters. They appear in paths such as
//! `plans.erp-db.instances.dc1[2]`, in metrics labels and in URLs, so the character set is kept
//! narrow on purpose.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a string is not a valid name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("a name may not be empty")]
    Empty,
    #[error("{0:?} is longer than 63 characters")]
    TooLong(String),
    #[error(
        "{0:?} is not a valid name: use letters, digits, '-', '_' or '.', starting with a letter or digit"
    )]
    BadCharacter(String),
}

/// Checks a name against the rules in the module documentation.
pub fn check_name(s: &str) -> Result<(), NameError> {
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return Err(NameError::Empty);
    };
    if s.len() > 63 {
        return Err(NameError::TooLong(s.to_owned()));
    }
    if !first.is_ascii_alphanumeric()
        || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(NameError::BadCharacter(s.to_owned()));
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Makes the name, checking it.
            pub fn new(s: impl Into<String>) -> Result<Self, NameError> {
                let s = s.into();
                check_name(&s)?;
                Ok(Self(s))
            }

            /// The name as a string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = NameError;
            fn try_from(s: String) -> Result<Self, NameError> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = NameError;
            fn try_from(s: &str) -> Result<Self, NameError> {
                Self::new(s)
            }
        }

        impl From<$name> for String {
            fn from(n: $name) -> String {
                n.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
    };
}

name_type!(
    /// A site: a datacenter, a room or a cloud region. Plans run at sites.
    SiteId
);
name_type!(
    /// An orchestrator: one `qfence` daemon.
    OrchestratorId
);
name_type!(
    /// A controller: a system qfence acts through (a BMC, a Proxmox VE cluster, ...).
    ControllerId
);
name_type!(
    /// An availability plan.
    PlanId
);
name_type!(
    /// A reference to a secret, resolved by each orchestrator from its own store.
    SecretRef
);
name_type!(
    /// An OpenStack cloud watched by Instance HA (`instance_ha.NAME`).
    CloudId
);
name_type!(
    /// A binding's stable id within its list: named by the binding's `id:` key, or derived
    /// from its content ([`crate::config::Binding::stable_id`]). Unlike its position, it does
    /// not change when another binding is added, removed or moved.
    BindingId
);

/// A plan's generation: it grows by one with every change of owner, and every command carries
/// the generation it was decided at. A command from an older generation is refused.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Generation(pub u64);

impl Generation {
    /// The generation after this one.
    #[must_use]
    pub fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A leader's term in the orchestrator cluster. Commands carry the term of the leader that
/// decided them; an orchestrator that knows a newer term refuses them.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Term(pub u64);

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_accept_the_operator_alphabet_only() {
        assert!(SiteId::new("dc1").is_ok());
        assert!(PlanId::new("erp-db.v2_x").is_ok());
        assert_eq!(SiteId::new(""), Err(NameError::Empty));
        assert!(matches!(
            SiteId::new("-dc"),
            Err(NameError::BadCharacter(_))
        ));
        assert!(matches!(
            SiteId::new("dc 1"),
            Err(NameError::BadCharacter(_))
        ));
        assert!(matches!(
            SiteId::new("x".repeat(64)),
            Err(NameError::TooLong(_))
        ));
    }

    #[test]
    fn generation_only_moves_forward_by_one() {
        assert_eq!(Generation(7).next(), Generation(8));
    }
}
