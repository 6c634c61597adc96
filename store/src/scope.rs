//! Owner scopes and roles (SPEC-0033 as BASE.md fixes it). Pure: parsing, formatting, order.

use std::fmt;
use std::str::FromStr;

/// The role type lives in the model, next to the verbs that need each role.
pub use switchboard_model::Role;

/// The unit of tenancy: every webhook, event, todo, plan and endpoint belongs to exactly one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OwnerScope {
    /// `human:<login>`
    Human(String),
    /// `team:<slug>`
    Team(String),
}

impl OwnerScope {
    pub fn human(login: impl Into<String>) -> Self {
        OwnerScope::Human(login.into())
    }

    pub fn team(slug: impl Into<String>) -> Self {
        OwnerScope::Team(slug.into())
    }
}

impl fmt::Display for OwnerScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OwnerScope::Human(login) => write!(f, "human:{login}"),
            OwnerScope::Team(slug) => write!(f, "team:{slug}"),
        }
    }
}

impl FromStr for OwnerScope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            Some(("human", login)) if is_login(login) => Ok(OwnerScope::Human(login.to_string())),
            Some(("team", slug)) if is_slug(slug) => Ok(OwnerScope::Team(slug.to_string())),
            _ => Err(format!(
                "{s:?} is not an owner scope (human:<login> or team:<slug>)"
            )),
        }
    }
}

/// A human's login: 1–64 ASCII letters, digits, `.`, `_`, `-`, starting with a letter or digit.
pub fn is_login(s: &str) -> bool {
    let mut chars = s.chars();
    s.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A team's slug: 1–64 lower-case ASCII letters, digits and `-`, starting with a letter or digit.
pub fn is_slug(s: &str) -> bool {
    let mut chars = s.chars();
    s.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_round_trip() {
        for s in ["human:alice", "team:platform-ops", "human:a.b_c-d"] {
            assert_eq!(s.parse::<OwnerScope>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn malformed_scopes_are_refused() {
        for s in [
            "",
            "alice",
            "human:",
            "team:",
            "team:Ops",
            "robot:x",
            "human:-x",
            "human:a b",
            "team:a:b",
        ] {
            assert!(s.parse::<OwnerScope>().is_err(), "{s}");
        }
        assert!(
            format!("human:{}", "a".repeat(65))
                .parse::<OwnerScope>()
                .is_err()
        );
    }
}
