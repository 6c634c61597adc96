//! Who is calling and whether they may: the bearer credential, the endpoint's request budget,
//! the verb allowlist, and the role the verb needs (SPEC-0014, SPEC-0033 as BASE.md fixes
//! them). Every API call goes through [`authorize`] (or [`authenticate`] for `WhoAmI`)
//! before it touches anything else.

use std::time::Duration;

use tonic::metadata::MetadataMap;

use super::status::ApiError;
use crate::scope::{OwnerScope, Role};
use crate::state::ControlState;
use crate::store::{Actor, Endpoint};
use crate::verbs::Verb;

/// The rate-limit budget every API call of an endpoint takes from.
pub const API_BUDGET: &str = "api";
/// The window `requests_per_endpoint_per_minute` counts in.
pub const API_WINDOW: Duration = Duration::from_secs(60);

/// An authenticated, authorized caller.
#[derive(Clone, Debug)]
pub struct Caller {
    pub endpoint: Endpoint,
    /// The role the endpoint's human holds in the endpoint's owner scope right now.
    pub role: Role,
}

impl Caller {
    /// The one owner scope every read and write of this caller is confined to.
    pub fn scope(&self) -> &OwnerScope {
        &self.endpoint.owner_scope
    }

    /// The actor recorded in history: the endpoint and its human.
    pub fn actor(&self) -> Actor {
        Actor::endpoint(&self.endpoint)
    }
}

/// The role a verb needs ([`Verb::role`]): viewer reads; editor changes rules, runs dry runs
/// and takes work; admin manages webhooks. A name that is not a known verb needs admin
/// (closed by default).
pub fn required_role(verb: &str) -> Role {
    Verb::parse(verb).map_or(Role::Admin, Verb::role)
}

/// The credential in `authorization: Bearer <credential>`, if the header is there and well formed.
pub(crate) fn bearer(metadata: &MetadataMap) -> Option<&str> {
    let value = metadata.get("authorization")?.to_str().ok()?;
    let (scheme, credential) = value.trim().split_once(' ')?;
    let credential = credential.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !credential.is_empty()).then_some(credential)
}

/// The endpoint behind the call's credential, after taking one unit of its request budget.
/// Missing, unknown and revoked credentials are `unauthenticated`; unknown and revoked answer
/// alike.
pub async fn authenticate(
    state: &ControlState,
    metadata: &MetadataMap,
) -> Result<Endpoint, ApiError> {
    let endpoint = identify(state, metadata).await?;
    charge(state, &endpoint).await?;
    Ok(endpoint)
}

/// The endpoint behind the call's credential, taking nothing from its budget (an uncharged
/// `WhoAmI`, whose MCP request pays when it calls its verb).
pub async fn identify(state: &ControlState, metadata: &MetadataMap) -> Result<Endpoint, ApiError> {
    let credential = bearer(metadata).ok_or(ApiError::Unauthenticated(
        "send the endpoint credential as `authorization: Bearer <credential>`",
    ))?;
    state
        .store
        .authenticate(credential)
        .await?
        .ok_or(ApiError::Unauthenticated(
            "the credential is unknown or revoked",
        ))
}

/// Takes one unit of the endpoint's request budget (`rate_limited` when it is spent).
async fn charge(state: &ControlState, endpoint: &Endpoint) -> Result<(), ApiError> {
    state
        .store
        .try_take(
            &endpoint.id,
            API_BUDGET,
            state.limits.requests_per_endpoint_per_minute.max(1),
            API_WINDOW,
        )
        .await?;
    Ok(())
}

/// Authenticates the call and checks that `verb` is on the endpoint's allowlist and that its
/// human holds the role the verb needs in the endpoint's owner scope.
pub async fn authorize(
    state: &ControlState,
    metadata: &MetadataMap,
    verb: &'static str,
) -> Result<Caller, ApiError> {
    let endpoint = authenticate(state, metadata).await?;
    if !endpoint.allows(verb) {
        return Err(ApiError::PermissionDenied(format!(
            "{verb} is not on this endpoint's allowlist"
        )));
    }
    let needed = required_role(verb);
    let role = state
        .store
        .role_in_scope(&endpoint.human_login, &endpoint.owner_scope)
        .await?;
    match role {
        Some(role) if role >= needed => Ok(Caller { endpoint, role }),
        held => Err(ApiError::PermissionDenied(format!(
            "{verb} needs the {needed} role in {}; {} holds {}",
            endpoint.owner_scope,
            endpoint.human_login,
            held.map_or("no role", Role::as_str)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::FAMILIES;

    fn metadata(value: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", value.parse().unwrap());
        m
    }

    #[test]
    fn bearer_is_read_strictly() {
        assert_eq!(bearer(&metadata("Bearer sbe_x")), Some("sbe_x"));
        assert_eq!(bearer(&metadata("bearer  sbe_x ")), Some("sbe_x"));
        assert_eq!(bearer(&metadata("Basic sbe_x")), None);
        assert_eq!(bearer(&metadata("Bearer ")), None);
        assert_eq!(bearer(&metadata("sbe_x")), None);
        assert_eq!(bearer(&MetadataMap::new()), None);
    }

    #[test]
    fn every_verb_needs_the_role_the_spec_gives_it() {
        for family in FAMILIES {
            for verb in family.verbs().iter().map(|v| v.as_str()) {
                let role = required_role(verb);
                // Reads, and explaining a decision (a read that asks a router, writes nothing).
                let expected = if verb.starts_with("list_")
                    || verb.starts_with("get_")
                    || verb.starts_with("explain_")
                {
                    Role::Viewer
                } else if matches!(
                    verb,
                    "create_webhook" | "delete_webhook" | "rotate_webhook_secret"
                ) {
                    Role::Admin
                } else {
                    Role::Editor
                };
                assert_eq!(role, expected, "{verb}");
            }
        }
        assert_eq!(required_role("drop_database"), Role::Admin);
    }
}
