//! Control's messages as their views ([`crate::views`]) read them: JSON text fields parsed into
//! real JSON, enums as their lower-case names, empty strings as null. Pure functions, so the
//! MCP tools and the CLI show one answer the same way; a `*_json` field control sent that does
//! not parse is an internal error (logged, never shown).

use base64::Engine;
use serde_json::{Map, Value};
use switchboard_model::listing::Listing;
use switchboard_model::plan::{AppliedPack, CandidateReplay};
use switchboard_model::provenance::InstalledPack;
use switchboard_model::{Label, RecordedDecision};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::convert::json;
use switchboard_proto::convert::plan;
use switchboard_proto::convert::time;

use crate::error::CallError;
use crate::views::*;

/// A JSON text field of control's as a JSON value; empty text is `None`.
pub fn json_field(field: &str, text: &str) -> Result<Option<Value>, CallError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| CallError::internal(format!("control sent {field} that is not JSON: {e}")))
}

/// A JSON-object text field of control's; empty text is `{}`.
pub fn object_field(field: &str, text: &str) -> Result<Object, CallError> {
    match json_field(field, text)? {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map),
        Some(_) => Err(CallError::internal(format!(
            "control sent {field} that is not a JSON object"
        ))),
    }
}

/// Installed packs' provenance keyed by pack name, as the proto documents it. Control keeps
/// provenance as a list of `{name, version, …}`; either shape is read.
/// Installed packs keyed by name, each its provenance as the same type control stores.
pub fn installed_packs(packs: Vec<pb::InstalledPack>) -> Result<Object, CallError> {
    packs
        .into_iter()
        .map(|p| {
            let p = InstalledPack::from(p);
            Ok((
                p.name.clone(),
                serde_json::to_value(p).map_err(CallError::internal)?,
            ))
        })
        .collect()
}

/// A configuration message as the JSON object an agent reads.
fn configuration(c: Option<pb::Configuration>) -> Object {
    match json::configuration_json(c.unwrap_or_default()) {
        Value::Object(map) => map,
        _ => Object::new(),
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// A time control sent (a Timestamp) as the milliseconds since the epoch the views carry;
/// absent, or one that names no time, is `None`.
fn millis(t: Option<time::Timestamp>) -> Option<i64> {
    t.as_ref().and_then(|t| time::to_millis(t).ok())
}

/// A source type's name (`github`, …); `unspecified` for a value that names none.
pub fn source_name(source: i32) -> String {
    switchboard_proto::convert::source::source_type(source)
        .map_or("unspecified", |t| t.as_str())
        .to_string()
}

/// A webhook message is required where control always sends one.
pub fn required<T>(what: &str, value: Option<T>) -> Result<T, CallError> {
    value.ok_or_else(|| CallError::internal(format!("control sent no {what}")))
}

pub fn webhook(w: pb::Webhook) -> Result<WebhookOut, CallError> {
    Ok(WebhookOut {
        installed_packs: installed_packs(w.installed_packs)?,
        source_type: source_name(w.source_type),
        trusted_actors: w.trusted_actors.map(|t| TrustedActorsOut {
            humans: t.humans,
            agents: t.agents,
            bots: t.bots,
        }),
        id: w.id,
        name: w.name,
        owner_scope: w.owner_scope,
        grant: w.grant,
        default_queue: w.default_queue,
        reject_unverified: w.reject_unverified,
        config_version: w.config_version,
        config_digest: w.config_digest,
        ingest_path: w.ingest_path,
        created_at_ms: millis(w.created_at).unwrap_or_default(),
        confirm_policy: w.confirm_policy,
        guard_on_breach: w.guard_on_breach,
        approval_rule: w
            .approval_rule
            .as_ref()
            .map(switchboard_proto::convert::approval::approval_rule)
            .transpose()
            .map_err(|n| CallError::internal(format!("control sent approval risk {n}")))?,
        approval_rule_default: w.approval_rule_default,
    })
}

pub fn event_summary(e: pb::EventSummary) -> Result<EventSummaryOut, CallError> {
    Ok(EventSummaryOut {
        decision: e.decision.as_ref().map(decision).transpose()?,
        fault: e.fault.as_ref().map(json::fault_json),
        source: source_name(e.source),
        id: e.id,
        webhook_id: e.webhook_id,
        delivery_id: e.delivery_id,
        kind: e.kind,
        verified: e.verified,
        received_at_ms: millis(e.received_at).unwrap_or_default(),
        routed: e.routed,
    })
}

/// A retention window as an agent reads it.
pub fn retention(r: pb::RetentionWindow) -> RetentionOut {
    RetentionOut {
        max_age_days: r.max_age_ms / 86_400_000,
        max_events_per_webhook: r.max_events_per_webhook,
        kept_since_ms: millis(r.kept_since).unwrap_or_default(),
        oldest_event_at_ms: millis(r.oldest_event_at),
    }
}

/// A body as an agent reads it: parsed JSON when it is JSON, else text, else base64.
pub fn body(bytes: &[u8]) -> (Option<Value>, Option<String>, Option<String>) {
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        return (Some(value), None, None);
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => (None, Some(text.to_string()), Some("utf-8".into())),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
            Some("base64".into()),
        ),
    }
}

pub fn get_event(r: pb::GetWebhookEventResponse) -> Result<GetWebhookEventOut, CallError> {
    let (payload, body, body_encoding) = body(&r.body);
    Ok(GetWebhookEventOut {
        event: event_summary(required("event", r.event)?)?,
        headers: r
            .headers
            .into_iter()
            .map(|h| HeaderOut {
                name: h.name,
                value: h.value,
            })
            .collect(),
        payload,
        body,
        body_encoding,
    })
}

pub fn explain_event(
    r: pb::ExplainWebhookEventResponse,
) -> Result<ExplainWebhookEventOut, CallError> {
    let status = match pb::RecordedVersion::try_from(r.recorded_version_status)
        .unwrap_or(pb::RecordedVersion::Unspecified)
    {
        pb::RecordedVersion::Known => RecordedVersionOut::Known,
        pb::RecordedVersion::NotInHistory => RecordedVersionOut::NotInHistory,
        pb::RecordedVersion::Unknown | pb::RecordedVersion::Unspecified => {
            RecordedVersionOut::Unknown
        }
    };
    let rules = r
        .rules
        .into_iter()
        .map(|rule| {
            let outcome = match pb::RuleOutcome::try_from(rule.outcome)
                .unwrap_or(pb::RuleOutcome::Unspecified)
            {
                pb::RuleOutcome::Matched => RuleOutcomeOut::Matched,
                pb::RuleOutcome::NotMatched => RuleOutcomeOut::NotMatched,
                pb::RuleOutcome::Fault => RuleOutcomeOut::Fault,
                pb::RuleOutcome::Unspecified => {
                    return Err(CallError::internal(
                        "control sent a rule without an outcome",
                    ));
                }
            };
            Ok(ExplainedRuleOut {
                index: rule.index,
                rule_id: rule.rule_id,
                outcome,
                action: rule.action,
                fault_code: rule.fault_code,
                reason: rule.reason,
                deciding: rule.deciding,
            })
        })
        .collect::<Result<_, _>>()?;
    let current = required("current_decision", r.current_decision)?;
    Ok(ExplainWebhookEventOut {
        event_id: r.event_id,
        webhook_id: r.webhook_id,
        kind: r.kind,
        recorded_decision: r.recorded_decision.as_ref().map(decision).transpose()?,
        recorded_version_status: status,
        recorded_version: r.recorded_version,
        recorded_digest: r.recorded_digest,
        rules,
        reevaluated_decision: r.reevaluated_decision.as_ref().map(decision).transpose()?,
        reevaluation_differs: r.reevaluation_differs,
        current_version: r.current_version,
        current_digest: r.current_digest,
        current_decision: decision(&current)?,
        current_differs: r.current_differs,
        trials: r
            .trials
            .into_iter()
            .map(|t| {
                Ok(ExplainedTrialOut {
                    decision: decision(&required("trials.decision", t.decision)?)?,
                    trial_id: t.trial_id,
                    plan_id: t.plan_id,
                    differs: t.differs,
                })
            })
            .collect::<Result<_, CallError>>()?,
    })
}

fn counts(m: std::collections::HashMap<String, u64>) -> Map<String, Value> {
    let mut sorted: Vec<_> = m.into_iter().collect();
    sorted.sort();
    sorted
        .into_iter()
        .map(|(k, v)| (k, Value::from(v)))
        .collect()
}

/// A decision control sent, its label read with the one reader label text has.
fn decision(d: &pb::Decision) -> Result<RecordedDecision, CallError> {
    RecordedDecision::try_from(d)
        .map_err(|e| CallError::internal(format!("control sent a decision {e}")))
}

/// A label control sent, read with the one reader label text has.
fn label(what: &str, text: &str) -> Result<Label<'static>, CallError> {
    text.parse()
        .map_err(|e| CallError::internal(format!("control sent {what} {text:?}: {e}")))
}

pub fn redrive_plan(r: pb::RedrivePlan) -> Result<RedrivePlanOut, CallError> {
    let with = required("confirm_with", r.confirm_with)?;
    Ok(RedrivePlanOut {
        events: r
            .events
            .into_iter()
            .map(|e| {
                Ok(RedriveEventOut {
                    event_id: e.event_id,
                    kind: e.kind,
                    received_at_ms: millis(e.received_at).unwrap_or_default(),
                    before: e.before,
                    before_decision: e.before_decision.as_ref().map(decision).transpose()?,
                    after: label("a redrive's label", &e.after)?,
                    after_decision: e.after_decision.as_ref().map(decision).transpose()?,
                    changes: e.changes,
                })
            })
            .collect::<Result<_, CallError>>()?,
        totals_before: counts(r.totals_before),
        totals_after: counts(r.totals_after),
        changes: r.changes,
        transitions: r
            .transitions
            .into_iter()
            .map(|t| {
                Ok(RedriveTransitionOut {
                    from: t.from,
                    to: label("a redrive's transition to", &t.to)?,
                    count: t.count,
                    example_event_ids: t.example_event_ids,
                })
            })
            .collect::<Result<_, CallError>>()?,
        truncated: r.truncated,
        expires_at: time::to_rfc3339_or_empty(r.expires_at_time.as_ref()),
        confirm_with: RedriveConfirmWithOut {
            tool: with.tool,
            webhook_id: with.webhook_id,
            plan_token: r.plan_token.clone(),
            note: with.note,
        },
        plan_token: r.plan_token,
        webhook_id: r.webhook_id,
        config_version: r.config_version,
        config_digest: r.config_digest,
    })
}

pub fn confirm_redrive(r: pb::ConfirmWebhookRedriveResponse) -> ConfirmWebhookRedriveOut {
    ConfirmWebhookRedriveOut {
        webhook_id: r.webhook_id,
        redrive_id: r.redrive_id,
        config_version: r.config_version,
        config_digest: r.config_digest,
        events: r
            .events
            .into_iter()
            .map(|o| RedriveOutcomeOut {
                event_id: o.event_id,
                before: o.before,
                after: o.after,
                applied: o.applied,
                todo_id: o.todo_id,
                todo_created: o.todo_created,
            })
            .collect(),
        applied: r.applied,
        skipped: r.skipped,
        todos_created: r.todos_created,
    }
}

pub fn list_rules(r: pb::ListWebhookRulesResponse) -> Result<ListWebhookRulesOut, CallError> {
    Ok(ListWebhookRulesOut {
        configuration: configuration(r.configuration),
        installed_packs: installed_packs(r.installed_packs)?,
        webhook_id: r.webhook_id,
        version: r.version,
        digest: r.digest,
        grant: r.grant,
        trusted_actors_capability: r.trusted_actors_capability,
    })
}

pub fn save(r: pb::SaveRulesResponse) -> Result<SaveRulesOut, CallError> {
    Ok(SaveRulesOut {
        configuration: configuration(r.configuration),
        webhook_id: r.webhook_id,
        version: r.version,
        digest: r.digest,
        duplicate: r.duplicate,
        minted_rule_ids: r.minted_rule_ids,
    })
}

pub fn test(r: pb::TestWebhookRulesResponse) -> Result<TestWebhookRulesOut, CallError> {
    let candidate_configuration = r.candidate_configuration.map(|c| configuration(Some(c)));
    Ok(TestWebhookRulesOut {
        saved_decision: r.saved_decision.as_ref().map(decision).transpose()?,
        replay_report: match r.replay_report {
            None => None,
            Some(report) => Some(object(CandidateReplay {
                report: report.into(),
                minted_rule_ids: r.minted_rule_ids.clone(),
                rule_diff: r.replay_rule_diff.unwrap_or_default().into(),
                nothing_saved: true,
            })?),
        },
        candidate_decision: r.candidate_decision.as_ref().map(decision).transpose()?,
        candidate_configuration,
        webhook_id: r.webhook_id,
        event_id: non_empty(r.event_id),
        kind: r.kind,
        saved_version: r.saved_version,
        changed: r.changed,
        candidate_digest: non_empty(r.candidate_digest),
        minted_rule_ids: r.minted_rule_ids,
    })
}

pub fn history(r: pb::ListWebhookHistoryResponse) -> Result<ListWebhookHistoryOut, CallError> {
    let records = r
        .records
        .into_iter()
        .map(|h| {
            Ok(HistoryRecordOut {
                change: h.change.as_ref().map_or(Value::Null, json::change_json),
                provenance: h.provenance.as_ref().map(json::change_provenance_json),
                configuration: configuration(h.configuration),
                version: h.version,
                actor_endpoint_id: non_empty(h.actor_endpoint_id),
                actor_human: non_empty(h.actor_human),
                digest_before: non_empty(h.digest_before),
                digest_after: h.digest_after,
                saved_at_ms: millis(h.saved_at).unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>, CallError>>()?;
    Ok(ListWebhookHistoryOut {
        records,
        next_cursor: non_empty(r.next_cursor),
    })
}

/// The change log's entries as their owners read them: each entry read back from its own
/// canonical text (what its hash covers), so nothing is assembled twice.
pub fn changes(r: pb::ListWebhookChangesResponse) -> Result<ListWebhookChangesOut, CallError> {
    let changes = r
        .entries
        .into_iter()
        .map(|e| {
            let entry = serde_json::from_str(&e.canonical).map_err(CallError::internal)?;
            Ok(ChangeOut {
                entry,
                hash: e.hash,
            })
        })
        .collect::<Result<Vec<_>, CallError>>()?;
    Ok(ListWebhookChangesOut {
        changes,
        next_after_seq: (r.next_after_seq > 0).then_some(r.next_after_seq),
    })
}

pub fn rule_packs(r: pb::RulePacksResult) -> Result<ListRulePacksOut, CallError> {
    Ok(ListRulePacksOut {
        packs: Listing::from(r.listing.unwrap_or_default()).packs,
    })
}

pub fn plan_status(r: pb::RulePackPlanStatus) -> RulePackPlanOut {
    let some = |s: String| (!s.is_empty()).then_some(s);
    RulePackPlanOut {
        kind: plan::plan_kind(r.kind),
        plan_id: r.plan_id,
        webhook_id: r.webhook_id,
        state: plan::plan_state(r.state),
        stale_reason: some(r.stale_reason),
        pack: AppliedPack {
            name: r.pack_name,
            version: r.pack_version,
        },
        expires_at: time::to_rfc3339_or_empty(r.expires_at_time.as_ref()),
        console_url: some(r.console_url),
        proposed_by_endpoint: some(r.proposed_by_endpoint),
        proposed_by_human: some(r.proposed_by_human),
        decided_by: some(r.decided_by),
        reject_reason: some(r.reject_reason),
        guard: r.guard.map(switchboard_model::guard::GuardReport::from),
        approvals: r.approvals.map(switchboard_model::approval::Tally::from),
    }
}

/// A typed value as the JSON object it serializes to.
fn object<T: serde::Serialize>(value: T) -> Result<Object, CallError> {
    match serde_json::to_value(value).map_err(CallError::internal)? {
        Value::Object(map) => Ok(map),
        _ => Err(CallError::internal("a typed result is not a JSON object")),
    }
}

pub fn todo(t: pb::Todo) -> TodoOut {
    let state = match pb::TodoState::try_from(t.state).unwrap_or(pb::TodoState::Unspecified) {
        pb::TodoState::Open => "open",
        pb::TodoState::Claimed => "claimed",
        pb::TodoState::Completed => "completed",
        pb::TodoState::Unspecified => "unspecified",
    };
    TodoOut {
        id: t.id,
        webhook_id: t.webhook_id,
        event_id: t.event_id,
        delivery_id: t.delivery_id,
        queue: t.queue,
        rule_id: non_empty(t.rule_id),
        state: state.into(),
        created_at_ms: millis(t.created_at).unwrap_or_default(),
        claimed_by: non_empty(t.claimed_by),
        claimed_at_ms: millis(t.claimed_at),
        claim_expires_at: time::to_rfc3339_opt(t.claim_expires_at_time.as_ref()),
        completed_by: non_empty(t.completed_by),
        completed_at_ms: millis(t.completed_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_text_becomes_json() {
        assert_eq!(json_field("x", "").unwrap(), None);
        assert_eq!(
            json_field("x", "{\"a\":1}").unwrap(),
            Some(serde_json::json!({"a": 1}))
        );
        assert!(json_field("x", "{").is_err());
        assert!(object_field("x", "").unwrap().is_empty());
        assert!(object_field("x", "[1]").is_err());
    }

    /// The views read the Timestamps, not the deprecated fields beside them (which a control
    /// of the next release no longer fills): an absent time is none, as 0 or empty text was.
    #[test]
    fn a_todo_reads_its_times_from_the_timestamps() {
        let claimed = todo(pb::Todo {
            created_at: Some(time::from_millis(1_000)),
            claimed_at: Some(time::from_millis(-1)),
            claim_expires_at_time: Some(time::from_millis(1_800_000_030_123)),
            ..Default::default()
        });
        assert_eq!(claimed.created_at_ms, 1_000);
        assert_eq!(claimed.claimed_at_ms, Some(-1), "before 1970 too");
        assert_eq!(
            claimed.claim_expires_at.as_deref(),
            Some("2027-01-15T08:00:30.123Z")
        );
        assert_eq!(claimed.completed_at_ms, None);
        let out_of_range = todo(pb::Todo {
            completed_at: Some(time::Timestamp {
                seconds: i64::MAX,
                nanos: 0,
            }),
            ..Default::default()
        });
        assert_eq!(out_of_range.completed_at_ms, None, "no time, never a panic");
    }

    #[test]
    fn installed_packs_are_keyed_by_name() {
        let listed = installed_packs(vec![pb::InstalledPack {
            name: "drop-ci-noise".into(),
            version: "2.0.0".into(),
            ..Default::default()
        }])
        .unwrap();
        assert_eq!(listed["drop-ci-noise"]["version"], "2.0.0");
        assert_eq!(listed["drop-ci-noise"]["name"], "drop-ci-noise");
        assert!(installed_packs(Vec::new()).unwrap().is_empty());
    }

    #[test]
    fn bodies_are_json_text_or_base64() {
        let (payload, body_text, enc) = body(br#"{"action":"opened"}"#);
        assert_eq!(payload.unwrap()["action"], "opened");
        assert!(body_text.is_none() && enc.is_none());
        let (payload, body_text, enc) = body(b"a=1&b=2");
        assert!(payload.is_none());
        assert_eq!(body_text.as_deref(), Some("a=1&b=2"));
        assert_eq!(enc.as_deref(), Some("utf-8"));
        let (_, body_text, enc) = body(&[0xff, 0x00]);
        assert_eq!(body_text.as_deref(), Some("/wA="));
        assert_eq!(enc.as_deref(), Some("base64"));
    }

    #[test]
    fn installed_is_null_only_in_a_listing_for_a_webhook() {
        let listing = |for_webhook| {
            let r = pb::RulePacksResult {
                listing: Some(pb::RulePackListing {
                    for_webhook,
                    packs: vec![pb::ListedPack {
                        name: "drop-ci-noise".into(),
                        ..Default::default()
                    }],
                }),
            };
            serde_json::to_value(rule_packs(r).unwrap()).unwrap()
        };
        let general = listing(false);
        assert_eq!(general["packs"][0]["name"], "drop-ci-noise");
        assert!(general["packs"][0].get("installed").is_none());
        assert_eq!(listing(true)["packs"][0]["installed"], Value::Null);
    }
}
