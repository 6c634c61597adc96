//! A human's role in an owner scope (SPEC-0033 as BASE.md fixes it). Here, not in control,
//! so that [`crate::Verb::role`] can name the role each verb needs.

use std::fmt;
use std::str::FromStr;

/// A human's role in a scope. Ordered: each role can do everything the one before it can.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads.
    Viewer,
    /// Also changes rules and installs packs.
    Editor,
    /// Also manages webhooks and endpoints.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Editor => "editor",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "viewer" => Ok(Role::Viewer),
            "editor" => Ok(Role::Editor),
            "admin" => Ok(Role::Admin),
            _ => Err(format!("{s:?} is not a role (viewer, editor, admin)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered() {
        assert!(Role::Viewer < Role::Editor && Role::Editor < Role::Admin);
        assert_eq!("editor".parse::<Role>(), Ok(Role::Editor));
        assert!("owner".parse::<Role>().is_err());
    }
}
