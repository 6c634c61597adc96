//! Validating a configuration in a child ([`SandboxPool::validate`]): a validation takes a
//! child slot of its own (the interactive reserve while replays run), and lanes give theirs
//! up at chunk boundaries while one waits; if the child dies on the configuration, its
//! rules are validated one by one so the problem names the rule that killed it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use switchboard_proto::router::v1::{
    Configuration, Problem, RoutingContext, ValidateRequest, ValidateResponse, child_request,
    child_response,
};
use tokio::sync::OwnedSemaphorePermit;

use super::{Inner, SandboxError, SandboxPool};
use crate::engine::config::{Action, Configuration as Config, Rule};
use crate::engine::validate::{check_structure, read_configuration};
use crate::sandbox::schedule::Class;

impl SandboxPool {
    /// Validates a configuration in a child. If the child dies on it, the rules are
    /// validated one by one so the problem names the rule that killed it.
    pub async fn validate(
        &self,
        configuration: &Configuration,
        ctx: &RoutingContext,
    ) -> Result<ValidateResponse, SandboxError> {
        match self.validate_in_child(configuration, ctx).await? {
            Some(resp) => Ok(resp),
            None => self.validate_rule_by_rule(configuration, ctx).await,
        }
    }

    async fn validate_in_child(
        &self,
        configuration: &Configuration,
        ctx: &RoutingContext,
    ) -> Result<Option<ValidateResponse>, SandboxError> {
        let pool = &self.inner;
        let _slot = {
            let waiting = Waiting::new(pool);
            // A validation is interactive: while replays run, the interactive reserve slot if
            // it is free, so it does not wait for a replay's chunks; else the next child slot.
            let reserved = pool
                .may_reserve(Class::Interactive)
                .then(|| pool.reserve_interactive.clone().try_acquire_owned().ok())
                .flatten();
            let permit = match reserved {
                Some(permit) => permit,
                None => pool
                    .permits
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|e| SandboxError::Spawn(e.to_string()))?,
            };
            drop(waiting);
            // Lanes that gave their slot up for this one may have left jobs behind.
            pool.kick();
            Slot {
                pool: pool.clone(),
                permit: Some(permit),
            }
        };
        let mut child = pool.checkout(Class::Interactive).await?;
        let req = ValidateRequest {
            configuration: Some(configuration.clone()),
            context: Some(ctx.clone()),
        };
        if child
            .send(child_request::Request::Validate(req))
            .await
            .is_err()
        {
            pool.stats.crashed.fetch_add(1, Ordering::Relaxed);
            pool.forget(child.pid);
            return Ok(None);
        }
        match child.recv(pool.config.compile_budget).await {
            Ok(child_response::Response::Validated(resp)) => {
                pool.checkin(child);
                Ok(Some(resp))
            }
            _ => {
                pool.stats.crashed.fetch_add(1, Ordering::Relaxed);
                pool.forget(child.pid);
                Ok(None)
            }
        }
    }

    async fn validate_rule_by_rule(
        &self,
        configuration: &Configuration,
        ctx: &RoutingContext,
    ) -> Result<ValidateResponse, SandboxError> {
        let config = match read_configuration(configuration) {
            Ok(c) => c,
            Err(p) => {
                return Ok(ValidateResponse {
                    valid: false,
                    problems: vec![p],
                    digest: String::new(),
                });
            }
        };
        let mut problems = check_structure(&config, ctx);
        for (i, rule) in config.rules.iter().enumerate() {
            let id = rule.id.clone().unwrap_or_default();
            if problems
                .iter()
                .any(|p| p.rule_index == i as i32 && p.field.ends_with(".when"))
            {
                continue;
            }
            let alone = Config {
                rules: vec![Rule {
                    id: Some("r".into()),
                    description: None,
                    when: rule.when.clone(),
                    action: Action::Drop,
                }],
                ..Default::default()
            };
            match self
                .validate_in_child(&Configuration::from(&alone), ctx)
                .await?
            {
                Some(resp) => problems.extend(
                    resp.problems
                        .into_iter()
                        .filter(|p| p.field.ends_with(".when"))
                        .map(|p| Problem {
                            rule_id: id.clone(),
                            rule_index: i as i32,
                            field: format!("rules[{i}].when"),
                            ..p
                        }),
                ),
                None => problems.push(Problem {
                    rule_id: id.clone(),
                    rule_index: i as i32,
                    code: "sandbox_crashed".into(),
                    message: "the expression crashed or stalled the validator; simplify it".into(),
                    field: format!("rules[{i}].when"),
                }),
            }
        }
        Ok(ValidateResponse {
            valid: problems.is_empty(),
            problems,
            digest: config.digest(),
        })
    }
}

/// Counts a validation waiting for a child slot while it waits.
struct Waiting<'a>(&'a Inner);

impl<'a> Waiting<'a> {
    fn new(pool: &'a Inner) -> Self {
        pool.validations_waiting.fetch_add(1, Ordering::SeqCst);
        Self(pool)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.validations_waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A validation's child slot: given back, then lanes started for any queued jobs.
struct Slot {
    pool: Arc<Inner>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.pool.kick();
    }
}
