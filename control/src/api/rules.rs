//! The `WebhookRules` service (SPEC-0020 as BASE.md states it, with RFC-0003's history and
//! optimistic concurrency): list, set, update and delete rules, dry runs, and history.
//!
//! Control never parses an expression: every candidate is validated by a router
//! (`Routers::validate`) and every dry run evaluated by one (`Routers::evaluate`). What control
//! checks itself is what only it knows: which `--` rule ids were put there by pack installs.

use serde_json::{Map, Value};
use switchboard_model::{
    Configuration, ConfigurationChange, Rule, SourceType, is_pack_rule_id, kind,
};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::webhook_rules_server::WebhookRules;
use switchboard_proto::convert::json;
use switchboard_proto::router::v1::{
    Configuration as RouterConfiguration, EvaluateRequest, Header as RouterHeader, Problem,
    StoredDelivery,
};
use tonic::{Request, Response, Status};

use super::auth::{Caller, authorize};
use super::convert;
use super::respond;
use super::status::ApiError;
use super::streaming::{EventStream, with_progress};
use crate::error::{Error, VERSION_MISMATCH};
use crate::rule_packs::Progress;
use crate::secrets::random_hex;
use crate::state::ControlState;
use crate::store::{MAX_CONFIGURATION_BYTES, SaveConfiguration, Webhook};

/// A write that lost a race with another write (and named no `expected_version`) is rebuilt
/// on the newer configuration and tried again, at most this many times in all.
const SAVE_ATTEMPTS: usize = 3;
/// A dry-run payload is at most what ingest accepts.
const MAX_TEST_PAYLOAD_BYTES: usize = 1024 * 1024;
/// A dry-run payload carries at most this many headers.
const MAX_TEST_HEADERS: usize = 100;

pub struct WebhookRulesApi {
    state: ControlState,
}

impl WebhookRulesApi {
    pub fn new(state: ControlState) -> Self {
        Self { state }
    }

    /// `test_webhook_rules`: a dry run over one event or payload, or (with `replay`) the
    /// REQ-5 report over the webhook's stored deliveries, reporting replay progress.
    async fn test_rules(
        &self,
        caller: &Caller,
        req: &pb::TestWebhookRulesRequest,
        progress: Option<Progress>,
    ) -> Result<pb::TestWebhookRulesResponse, ApiError> {
        let sources = [
            !req.event_id.is_empty(),
            req.payload.is_some(),
            req.replay.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() != 1 {
            return Err(ApiError::invalid(
                "event_id",
                "give exactly one of event_id, payload and replay",
            ));
        }
        if let Some(replay) = &req.replay {
            let w = self
                .state
                .store
                .get_webhook(caller.scope(), &req.webhook_id)
                .await?;
            let candidate = match request_configuration(req.configuration.as_ref())? {
                Some(candidate) => candidate,
                None => w.configuration.clone(),
            };
            let who = crate::rule_packs::Caller {
                endpoint_id: caller.endpoint.id.clone(),
                human: caller.endpoint.human_login.clone(),
                scope: caller.scope().clone(),
            };
            // The deprecated `since_ms` is read for one release (0: not given).
            #[allow(deprecated)]
            let since_ms = (replay.since_ms > 0).then_some(replay.since_ms);
            let window = crate::rule_packs::ReplayWindow {
                limit: (replay.limit > 0).then_some(replay.limit),
                since: convert::time_bound("replay.since", since_ms, replay.since.as_ref())?,
            };
            let report = crate::rule_packs::Replayer::new(self.state.clone())
                .replay_candidate(&who, &w.id, candidate, &window, progress)
                .await
                .map_err(ApiError::RulePack)?;
            return Ok(pb::TestWebhookRulesResponse {
                webhook_id: w.id.clone(),
                saved_version: w.config_version,
                replay_report: Some(pb::ReplayReport::from(&report.report)),
                replay_rule_diff: Some(pb::RuleDiff::from(&report.rule_diff)),
                minted_rule_ids: report.minted_rule_ids,
                ..Default::default()
            });
        }
        let mut candidate = request_configuration(req.configuration.as_ref())?;
        let store = &self.state.store;
        let w = store.get_webhook(caller.scope(), &req.webhook_id).await?;
        let delivery = match &req.payload {
            Some(payload) => payload_delivery(&self.state, &w, payload)?,
            None => {
                let event = store.get_event(caller.scope(), &req.event_id).await?;
                // After the one scoped read: another webhook's event costs what an unknown one does.
                if event.webhook_id != w.id {
                    return Err(Error::NotFound { resource: "event" }.into());
                }
                convert::stored_delivery(&event)
            }
        };
        let saved = w.configuration.clone();
        let mut configurations = vec![RouterConfiguration::from(&w.configuration)];
        let mut minted = Vec::new();
        if let Some(candidate) = candidate.as_mut() {
            minted = prepare_candidate(&self.state, &w, &saved, candidate).await?;
            configurations.push(RouterConfiguration::from(&*candidate));
        }
        let kind = delivery.kind.clone();
        let results = self
            .state
            .routers
            .evaluate(EvaluateRequest {
                context: Some(convert::routing_context(&self.state, &w)),
                configurations,
                deliveries: vec![delivery],
                budget_ms: u32::try_from(self.state.limits.evaluation_budget.as_millis())
                    .unwrap_or(u32::MAX),
                work_class: switchboard_proto::router::v1::WorkClass::Interactive as i32,
                tenant: w.owner_scope.to_string(),
                max_child_faults: 0,
            })
            .await?;
        let decisions = match results.as_slice() {
            [one] if one.decisions.len() == 1 + usize::from(candidate.is_some()) => &one.decisions,
            _ => {
                return Err(ApiError::internal(format!(
                    "a router answered a dry run with {} results",
                    results.len()
                )));
            }
        };
        Ok(pb::TestWebhookRulesResponse {
            saved_decision: Some(pb::Decision::from(&decisions[0])),
            candidate_decision: decisions.get(1).map(pb::Decision::from),
            candidate_configuration: candidate.as_ref().map(pb::Configuration::from),
            webhook_id: w.id.clone(),
            event_id: req.event_id.clone(),
            kind,
            saved_version: w.config_version,
            changed: decisions
                .get(1)
                .is_some_and(|c| c.label() != decisions[0].label()),
            candidate_digest: candidate
                .as_ref()
                .map(Configuration::digest)
                .unwrap_or_default(),
            minted_rule_ids: minted,
            ..Default::default()
        })
    }
}

/// One problem that is the configuration's as a whole (rule_index -1).
fn configuration_problem(code: &str, message: String) -> Problem {
    Problem {
        rule_id: String::new(),
        rule_index: -1,
        code: code.into(),
        message,
        field: String::new(),
    }
}

/// The caller's configuration JSON, parsed (not validated: that is the router's).
fn parse_candidate(field: &'static str, text: &str) -> Result<Configuration, ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::invalid(
            field,
            "give a configuration: {\"rules\": [...], \"default_action\"?: {...}, \"params\"?: {...}}",
        ));
    }
    if text.len() > MAX_CONFIGURATION_BYTES {
        return Err(ApiError::invalid(
            field,
            format!("larger than {MAX_CONFIGURATION_BYTES} bytes"),
        ));
    }
    Configuration::from_json(text).map_err(|message| {
        ApiError::InvalidConfiguration(vec![configuration_problem(
            "invalid_configuration",
            message,
        )])
    })
}

/// `--` ids belong to pack rules (`<pack>--<local-id>`). A candidate may keep (or edit) a `--`
/// rule already saved on the webhook, which only a confirmed pack install puts there, but may
/// not bring in a new one by hand.
fn reserved_id_problems(candidate: &Configuration, saved: &Configuration) -> Vec<Problem> {
    let saved_ids: Vec<&str> = saved.rules.iter().filter_map(|r| r.id.as_deref()).collect();
    candidate
        .rules
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| {
            let id = rule.id.as_deref()?;
            (is_pack_rule_id(id) && !saved_ids.contains(&id)).then(|| Problem {
                rule_id: id.to_string(),
                rule_index: i32::try_from(i).unwrap_or(i32::MAX),
                code: "reserved_rule_id".into(),
                message: format!(
                    "ids with `--` are reserved for rules installed by rule packs, and {id} is not one on this webhook; choose an id without `--`"
                ),
                field: format!("rules[{i}].id"),
            })
        })
        .collect()
}

/// Gives id-less rules their ids and validates the candidate as a save would, through a
/// router, with the webhook's grant and capabilities. Every problem comes back at once.
async fn prepare_candidate(
    state: &ControlState,
    w: &Webhook,
    saved: &Configuration,
    candidate: &mut Configuration,
) -> Result<Vec<String>, ApiError> {
    let minted = candidate.mint_rule_ids();
    let mut problems = reserved_id_problems(candidate, saved);
    let checked = state
        .routers
        .validate(candidate, &convert::routing_context(state, w))
        .await?;
    if !checked.valid && checked.problems.is_empty() {
        return Err(ApiError::internal(
            "the router called a configuration invalid without a problem",
        ));
    }
    problems.extend(checked.problems);
    if problems.is_empty() {
        Ok(minted)
    } else {
        // Configuration-wide problems first, then rule by rule; stable within a rule.
        problems.sort_by_key(|p| p.rule_index);
        Err(ApiError::InvalidConfiguration(problems))
    }
}

/// A request's candidate, when it gives one: the typed message goes through the parsing and
/// validation a saved configuration does (an agent's JSON shape was checked by the gateway).
fn request_configuration(c: Option<&pb::Configuration>) -> Result<Option<Configuration>, ApiError> {
    let Some(c) = c else {
        return Ok(None);
    };
    if let Some((at, label)) = json::bad_action_label(c) {
        return Err(ApiError::invalid(
            "configuration",
            format!("{at} is {label:?}: an action is queue:<name>, drop or quarantine"),
        ));
    }
    parse_candidate(
        "configuration",
        &json::configuration_json(c.clone()).to_string(),
    )
    .map(Some)
}

/// An update's fields as the JSON object merged into the saved rule; absent: nothing changes.
fn patch_fields(p: Option<&pb::RulePatch>) -> Result<Map<String, Value>, ApiError> {
    let Some(p) = p else {
        return Ok(Map::new());
    };
    if let Some(label) = p.action.as_deref().filter(|a| !json::is_action_label(a)) {
        return Err(ApiError::invalid(
            "patch",
            format!("action is {label:?}: an action is queue:<name>, drop or quarantine"),
        ));
    }
    match json::rule_patch_json(p.clone()) {
        Value::Object(fields) => Ok(fields),
        _ => Err(ApiError::internal("a rule patch is not a JSON object")),
    }
}

/// What a rule write does to the saved configuration.
enum Edit {
    Set(Configuration),
    Update {
        rule_id: String,
        patch: Map<String, Value>,
    },
    Delete {
        rule_id: String,
    },
}

fn rule_index(config: &Configuration, rule_id: &str) -> Result<usize, ApiError> {
    config
        .rules
        .iter()
        .position(|r| r.id.as_deref() == Some(rule_id))
        .ok_or(ApiError::Control(Error::NotFound { resource: "rule" }))
}

impl Edit {
    /// The candidate this edit makes of `saved`, and the change to record in history.
    fn apply(
        &self,
        saved: &Configuration,
    ) -> Result<(Configuration, ConfigurationChange), ApiError> {
        match self {
            Edit::Set(candidate) => Ok((
                candidate.clone(),
                ConfigurationChange::op("set_webhook_rules"),
            )),
            Edit::Update { rule_id, patch } => {
                let i = rule_index(saved, rule_id)?;
                let mut rule = match serde_json::to_value(&saved.rules[i]) {
                    Ok(Value::Object(m)) => m,
                    _ => return Err(ApiError::internal("a saved rule is not a JSON object")),
                };
                for (key, value) in patch {
                    if key == "description" && value.is_null() {
                        rule.remove(key);
                    } else {
                        rule.insert(key.clone(), value.clone());
                    }
                }
                let rule: Rule = serde_json::from_value(Value::Object(rule))
                    .map_err(|e| ApiError::invalid("patch", e.to_string()))?;
                let mut candidate = saved.clone();
                let mut fields: Vec<String> = patch.keys().cloned().collect();
                fields.sort();
                let change = ConfigurationChange {
                    rule_id: Some(rule_id.clone()),
                    fields: Some(fields),
                    new_rule_id: rule.id.clone().filter(|id| id.as_str() != rule_id.as_str()),
                    ..ConfigurationChange::op("update_webhook_rule")
                };
                candidate.rules[i] = rule;
                Ok((candidate, change))
            }
            Edit::Delete { rule_id } => {
                let i = rule_index(saved, rule_id)?;
                let mut candidate = saved.clone();
                candidate.rules.remove(i);
                Ok((
                    candidate,
                    ConfigurationChange {
                        rule_id: Some(rule_id.clone()),
                        ..ConfigurationChange::op("delete_webhook_rule")
                    },
                ))
            }
        }
    }
}

impl WebhookRulesApi {
    /// Reads the webhook, applies the edit, validates the candidate and saves it, conditional
    /// on the version it read: an edit is never applied to a configuration it did not see.
    async fn save_edit(
        &self,
        caller: &Caller,
        webhook_id: &str,
        expected_version: Option<i64>,
        edit: Edit,
    ) -> Result<pb::SaveRulesResponse, ApiError> {
        let store = &self.state.store;
        for attempt in 1..=SAVE_ATTEMPTS {
            let w = store.get_webhook(caller.scope(), webhook_id).await?;
            // A caller's stale expected_version is still built and handed to the store, which
            // answers a result equal to the saved configuration `duplicate: true` before it
            // checks the version (RFC-0003: the retry of a change that succeeded); an edit
            // that does not even apply to the newer configuration is the mismatch it is.
            let stale = expected_version.filter(|e| *e != w.config_version);
            let mismatch =
                || -> ApiError { Error::version_mismatch(Some(w.config_version)).into() };
            let saved = w.configuration.clone();
            let (mut candidate, mut change) = match edit.apply(&saved) {
                Ok(applied) => applied,
                Err(_) if stale.is_some() => return Err(mismatch()),
                Err(e) => return Err(e),
            };
            let minted = match prepare_candidate(&self.state, &w, &saved, &mut candidate).await {
                Ok(minted) => minted,
                Err(_) if stale.is_some() => return Err(mismatch()),
                Err(e) => return Err(e),
            };
            if !minted.is_empty() {
                change.minted_rule_ids = minted.clone();
            }
            let configuration = candidate.clone();
            let outcome = store
                .save_configuration(
                    caller.scope(),
                    webhook_id,
                    SaveConfiguration {
                        expected_version: Some(stale.unwrap_or(w.config_version)),
                        configuration,
                        actor: caller.actor(),
                        change,
                        ..SaveConfiguration::default()
                    },
                )
                .await;
            match outcome {
                Ok(saved) => {
                    if !saved.duplicate {
                        tracing::info!(
                            webhook = %webhook_id,
                            endpoint = %caller.endpoint.id,
                            version = saved.version,
                            "configuration saved"
                        );
                    }
                    return Ok(pb::SaveRulesResponse {
                        webhook_id: webhook_id.to_string(),
                        version: saved.version,
                        digest: saved.digest,
                        duplicate: saved.duplicate,
                        minted_rule_ids: minted,
                        configuration: Some(pb::Configuration::from(&candidate)),
                    });
                }
                Err(Error::FailedPrecondition { reason, .. })
                    if reason == VERSION_MISMATCH
                        && expected_version.is_none()
                        && attempt < SAVE_ATTEMPTS =>
                {
                    tracing::debug!(webhook = %webhook_id, attempt, "configuration moved during a write; rebuilding");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::internal("save attempts exhausted"))
    }
}

/// The kind ingest would record for this payload on a webhook of `source`: the same event
/// headers in the same order ([`kind::event`]), the same action ([`kind::kind`]); `None` when
/// no header names the event and the source has no default.
fn kind_of(source: SourceType, headers: &[pb::Header], payload: &[u8]) -> Option<String> {
    let header = |name: &str| {
        headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    };
    let event = kind::event(source, header)?;
    let payload = switchboard_model::payload_json(header("content-type"), payload);
    Some(kind::kind(&event, &payload))
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A delivery made up by the caller, shaped as ingest would store it.
fn payload_delivery(
    state: &ControlState,
    w: &Webhook,
    p: &pb::TestPayload,
) -> Result<StoredDelivery, ApiError> {
    if p.payload_json.len() > MAX_TEST_PAYLOAD_BYTES {
        return Err(ApiError::invalid(
            "payload.payload_json",
            format!("larger than {MAX_TEST_PAYLOAD_BYTES} bytes"),
        ));
    }
    serde_json::from_str::<serde::de::IgnoredAny>(&p.payload_json).map_err(|e| {
        ApiError::invalid("payload.payload_json", format!("not a JSON document: {e}"))
    })?;
    if p.headers.len() > MAX_TEST_HEADERS {
        return Err(ApiError::invalid(
            "payload.headers",
            format!("at most {MAX_TEST_HEADERS} headers"),
        ));
    }
    for h in &p.headers {
        if !is_header_name(&h.name)
            || h.value.len() > 8192
            || h.value.chars().any(|c| c.is_control() && c != '\t')
        {
            return Err(ApiError::invalid(
                "payload.headers",
                format!("{:?} is not a valid header", h.name),
            ));
        }
    }
    let kind = if p.kind.is_empty() {
        kind_of(w.source_type, &p.headers, p.payload_json.as_bytes()).ok_or_else(|| {
            ApiError::invalid(
                "payload.kind",
                "give the kind (`<event>` or `<event>.<action>`), or the forge's event header in headers",
            )
        })?
    } else {
        p.kind.clone()
    };
    if kind.len() > 200 || kind.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "payload.kind",
            "at most 200 characters, no control characters",
        ));
    }
    let delivery_id = if p.delivery_id.is_empty() {
        format!("test-{}", random_hex(8)?)
    } else if p.delivery_id.len() > 200 || p.delivery_id.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "payload.delivery_id",
            "at most 200 characters, no control characters",
        ));
    } else {
        p.delivery_id.clone()
    };
    Ok(StoredDelivery {
        event_id: "payload".into(),
        source: w.source_type.as_str().into(),
        kind,
        headers: p
            .headers
            .iter()
            .map(|h| RouterHeader {
                name: h.name.clone(),
                value: h.value.clone(),
            })
            .collect(),
        body: p.payload_json.clone().into_bytes().into(),
        verified: p.verified.unwrap_or(true),
        delivery_id,
        received_at_ms: state.store.clock().now_ms(),
    })
}

/// The decision label (`queue:<name>`, `drop`, …) of a decision JSON, for comparisons.
#[tonic::async_trait]
impl WebhookRules for WebhookRulesApi {
    async fn list_webhook_rules(
        &self,
        request: Request<pb::ListWebhookRulesRequest>,
    ) -> Result<Response<pb::ListWebhookRulesResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "list_webhook_rules").await?;
            let w = self
                .state
                .store
                .get_webhook(caller.scope(), &request.get_ref().webhook_id)
                .await?;
            Ok(pb::ListWebhookRulesResponse {
                webhook_id: w.id.clone(),
                configuration: Some(pb::Configuration::from(&w.configuration)),
                version: w.config_version,
                digest: w.config_digest.clone(),
                grant: w.grant.clone(),
                installed_packs: convert::installed_packs(&w.provenance),
                trusted_actors_capability: self.state.capabilities.trusted_actors,
            })
        })
        .await
    }

    async fn set_webhook_rules(
        &self,
        request: Request<pb::SetWebhookRulesRequest>,
    ) -> Result<Response<pb::SaveRulesResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "set_webhook_rules").await?;
            let req = request.get_ref();
            let candidate =
                request_configuration(req.configuration.as_ref())?.ok_or_else(|| {
                    ApiError::invalid("configuration", "required: the whole new configuration")
                })?;
            self.save_edit(
                &caller,
                &req.webhook_id,
                req.expected_version,
                Edit::Set(candidate),
            )
            .await
        })
        .await
    }

    async fn update_webhook_rule(
        &self,
        request: Request<pb::UpdateWebhookRuleRequest>,
    ) -> Result<Response<pb::SaveRulesResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "update_webhook_rule").await?;
            let req = request.get_ref();
            let patch = patch_fields(req.patch.as_ref())?;
            self.save_edit(
                &caller,
                &req.webhook_id,
                req.expected_version,
                Edit::Update {
                    rule_id: req.rule_id.clone(),
                    patch,
                },
            )
            .await
        })
        .await
    }

    async fn delete_webhook_rule(
        &self,
        request: Request<pb::DeleteWebhookRuleRequest>,
    ) -> Result<Response<pb::SaveRulesResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "delete_webhook_rule").await?;
            let req = request.get_ref();
            self.save_edit(
                &caller,
                &req.webhook_id,
                req.expected_version,
                Edit::Delete {
                    rule_id: req.rule_id.clone(),
                },
            )
            .await
        })
        .await
    }

    async fn test_webhook_rules(
        &self,
        request: Request<pb::TestWebhookRulesRequest>,
    ) -> Result<Response<pb::TestWebhookRulesResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "test_webhook_rules").await?;
            self.test_rules(&caller, request.get_ref(), None).await
        })
        .await
    }

    type TestWebhookRulesStreamStream = EventStream<pb::TestWebhookRulesEvent>;

    async fn test_webhook_rules_stream(
        &self,
        request: Request<pb::TestWebhookRulesRequest>,
    ) -> Result<Response<Self::TestWebhookRulesStreamStream>, Status> {
        let caller = authorize(&self.state, request.metadata(), "test_webhook_rules")
            .await
            .map_err(Status::from)?;
        let req = request.into_inner();
        let api = WebhookRulesApi::new(self.state.clone());
        Ok(Response::new(with_progress(
            move |progress| async move { api.test_rules(&caller, &req, Some(progress)).await },
            |replayed, total| pb::TestWebhookRulesEvent {
                event: Some(pb::test_webhook_rules_event::Event::Progress(
                    pb::ReplayProgress { replayed, total },
                )),
            },
            |result| pb::TestWebhookRulesEvent {
                event: Some(pb::test_webhook_rules_event::Event::Result(result)),
            },
        )))
    }

    type PlanWebhookRulesStream = EventStream<pb::RulePackEvent>;

    async fn plan_webhook_rules(
        &self,
        request: Request<pb::PlanWebhookRulesRequest>,
    ) -> Result<Response<Self::PlanWebhookRulesStream>, Status> {
        let caller = authorize(&self.state, request.metadata(), "plan_webhook_rules")
            .await
            .map_err(Status::from)?;
        let req = request.into_inner();
        let mut candidate =
            request_configuration(req.configuration.as_ref())?.ok_or_else(|| {
                ApiError::invalid("configuration", "required: the whole new configuration")
            })?;
        let webhook = self
            .state
            .store
            .get_webhook(caller.scope(), &req.webhook_id)
            .await
            .map_err(ApiError::from)?;
        // Checked as a save checks it: ids minted, reserved pack ids refused, validated.
        prepare_candidate(
            &self.state,
            &webhook,
            &webhook.configuration,
            &mut candidate,
        )
        .await?;
        let packs =
            crate::rule_packs::RulePacks::new(self.state.clone(), self.state.catalog.clone());
        let who = super::rule_packs::caller(&caller);
        let window = super::rule_packs::window(req.replay)?;
        let guard = super::rule_packs::guard_options(req.guard)?;
        Ok(Response::new(super::rule_packs::stream(
            move |progress| async move {
                packs
                    .plan_rules(&who, &webhook, candidate, &window, &guard, Some(progress))
                    .await
            },
        )))
    }

    async fn list_webhook_history(
        &self,
        request: Request<pb::ListWebhookHistoryRequest>,
    ) -> Result<Response<pb::ListWebhookHistoryResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "list_webhook_history").await?;
            let req = request.get_ref();
            let page = self
                .state
                .store
                .list_history(
                    caller.scope(),
                    &req.webhook_id,
                    &convert::page(&req.cursor, req.limit),
                )
                .await?;
            Ok(pb::ListWebhookHistoryResponse {
                records: page.items.iter().map(convert::history).collect(),
                next_cursor: page.next_cursor.unwrap_or_default(),
            })
        })
        .await
    }

    async fn list_webhook_changes(
        &self,
        request: Request<pb::ListWebhookChangesRequest>,
    ) -> Result<Response<pb::ListWebhookChangesResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "list_webhook_changes").await?;
            let req = request.get_ref();
            let webhook_id = req.webhook_id.trim();
            if !webhook_id.is_empty() {
                // Another scope's webhook is not_found, like one that does not exist.
                self.state
                    .store
                    .get_webhook(caller.scope(), webhook_id)
                    .await?;
            }
            let limit = super::convert::change_limit(req.limit)?;
            // The deprecated `since_ms`/`until_ms` are read for one release.
            #[allow(deprecated)]
            let deprecated = (req.since_ms, req.until_ms);
            let (since_ms, until_ms) =
                convert::change_bounds(deprecated, (req.since.as_ref(), req.until.as_ref()))?;
            let (entries, next) = crate::change_log::read(
                &self.state.store,
                Some(caller.scope()),
                switchboard_store::ChangeQuery {
                    after: req.after_seq,
                    limit,
                    webhook_id,
                    since_ms,
                    until_ms,
                },
                (!req.actor.trim().is_empty()).then(|| req.actor.trim()),
            )
            .await?;
            Ok(pb::ListWebhookChangesResponse {
                entries: entries.iter().map(pb::ChangeLogEntry::from).collect(),
                next_after_seq: next.unwrap_or(0),
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Configuration {
        Configuration::from_json(text).unwrap()
    }

    #[test]
    fn new_pack_ids_are_reserved_but_saved_ones_stay() {
        let saved = config(
            r#"{"rules":[{"id":"drop-ci-noise--bots","when":"true","action":{"drop":true}}]}"#,
        );
        let candidate = config(
            r#"{"rules":[
                {"id":"drop-ci-noise--bots","when":"false","action":{"drop":true}},
                {"id":"mine--sneaky","when":"true","action":{"drop":true}},
                {"id":"plain","when":"true","action":{"drop":true}}]}"#,
        );
        let problems = reserved_id_problems(&candidate, &saved);
        assert_eq!(problems.len(), 1);
        assert_eq!(
            (
                problems[0].code.as_str(),
                problems[0].rule_index,
                problems[0].field.as_str()
            ),
            ("reserved_rule_id", 1, "rules[1].id")
        );
    }

    #[test]
    fn updates_merge_fields_and_record_what_changed() {
        let saved = config(
            r#"{"rules":[{"id":"a","description":"old","when":"true","action":{"drop":true}}]}"#,
        );
        let patch = patch_fields(Some(&pb::RulePatch {
            when: Some("false".into()),
            clear_description: true,
            ..Default::default()
        }))
        .unwrap();
        let (candidate, change) = Edit::Update {
            rule_id: "a".into(),
            patch,
        }
        .apply(&saved)
        .unwrap();
        assert_eq!(candidate.rules[0].when, "false");
        assert_eq!(candidate.rules[0].description, None);
        assert_eq!(change.op, "update_webhook_rule");
        assert_eq!(
            change.fields,
            Some(vec!["description".into(), "when".into()])
        );
        let missing = Edit::Delete {
            rule_id: "zz".into(),
        }
        .apply(&saved);
        assert!(matches!(
            missing,
            Err(ApiError::Control(Error::NotFound { resource: "rule" }))
        ));
    }

    #[test]
    fn a_patch_action_that_is_no_action_is_refused() {
        let bad = patch_fields(Some(&pb::RulePatch {
            action: Some("default".into()),
            ..Default::default()
        }));
        assert!(
            matches!(
                bad,
                Err(ApiError::Control(Error::InvalidArgument {
                    field: "patch",
                    ..
                }))
            ),
            "{bad:?}"
        );
        assert!(patch_fields(None).unwrap().is_empty());
    }

    #[test]
    fn a_dry_run_classifies_as_ingest_does() {
        use axum::http::{HeaderMap, HeaderValue};
        type Case<'a> = (SourceType, &'a [(&'a str, &'a str)], &'a str);
        let cases: &[Case] = &[
            (
                SourceType::Gitea,
                &[
                    ("X-GitHub-Event", "pull_request"),
                    ("X-Gitea-Event", "issues"),
                ],
                r#"{"action": "opened"}"#,
            ),
            (SourceType::Github, &[("x-github-event", "push")], "{}"),
            // Before one definition, a dry run read only the forges' headers, kept names
            // uncleaned and knew no fine event type: each of these differed from ingest.
            (
                SourceType::Generic,
                &[("X-Switchboard-Event", "deploy")],
                "{}",
            ),
            (
                SourceType::Github,
                &[("X-GitHub-Event", "a.b c")],
                r#"{"action":"x.y"}"#,
            ),
            (
                SourceType::Gitea,
                &[("X-Gitea-Event", " "), ("X-Gitea-Event-Type", "package")],
                r#"{"action": ""}"#,
            ),
            (SourceType::Cairn, &[], r#"{"action": "claimed"}"#),
        ];
        for (source, pairs, payload) in cases {
            let headers: Vec<pb::Header> = pairs
                .iter()
                .map(|(name, value)| pb::Header {
                    name: name.to_string(),
                    value: value.to_string(),
                })
                .collect();
            let mut map = HeaderMap::new();
            for (name, value) in *pairs {
                map.append(
                    axum::http::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
                        .expect("a header name"),
                    HeaderValue::from_str(value).expect("a header value"),
                );
            }
            let ingest = crate::ingest::delivery::kind(*source, &map, payload.as_bytes());
            assert_eq!(
                kind_of(*source, &headers, payload.as_bytes()).as_deref(),
                Some(ingest.as_str()),
                "{source} {pairs:?}"
            );
        }
        // Nothing names the event of a forge's delivery: the caller is asked for the kind.
        assert_eq!(kind_of(SourceType::Github, &[], b"{}"), None);
    }
}
