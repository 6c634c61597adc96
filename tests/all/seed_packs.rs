//! SPEC-0031 REQ-9, "The seed packs are preserved", end to end: WHEN the fleet fixture suite
//! runs against a webhook with trusted-actors@1 and handoff-lanes@1 installed, THEN every case
//! routes to the decision it routed to under the hand-written fleet.json: its `want`
//! (`router/tests/data/routing/fleet/cases.json`, read with switchboard-testkit as
//! `router/tests/seeds.rs` and `packs/tests/seeds_proof.rs` read it).
//!
//! Everything goes through the real surfaces. The webhooks are created, and each pack planned
//! and confirmed (InstallRulePack twice per pack), over control's gRPC API; every case is
//! POSTed to `/hooks/<webhook_id>` signed with the webhook's secret (or, for an unverified
//! case, with a wrong signature) and a real `switchboard router` process decides. Ingest takes
//! a delivery's source from its webhook and the fleet's rules read `.source`, so there is one
//! webhook per source the cases come from (GitHub, Gitea, Forgejo, Cairn), each with the same
//! two installs. A case with `params_override` is one ingest cannot express (ingest routes
//! with the webhook's saved params): it is delivered all the same, then its stored event is
//! routed again with TestWebhookRules, the candidate being the saved configuration with the
//! case's params. Runs on SQLite and, with `SWITCHBOARD_TEST_DATABASE_URL`, on PostgreSQL.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Map, Value};
use switchboard_control::ingest::signature::sign;
use switchboard_control::state::{Capabilities, Limits};
use switchboard_packs::Catalog;
use switchboard_proto::control::v1::{
    CreateWebhookRequest, GetWebhookEventRequest, InstallRulePackRequest, ListWebhookRulesRequest,
    SourceType, TestWebhookRulesRequest,
};
use switchboard_proto::router::v1::StoredDelivery;
use switchboard_testkit::seed_cases::{Case, Seed};

use crate::control_harness::{Control, ControlSetup, TestDb, on_every_backend};
use crate::pack_api::{Api, owner};
use crate::support::RouterProcess;

on_every_backend!(the_seed_packs_are_preserved);

/// The packs REQ-9 composes for the fleet, in install order.
const FLEET_PACKS: [&str; 2] = ["trusted-actors", "handoff-lanes"];

/// A fleet webhook of one source, with both packs installed.
struct FleetWebhook {
    id: String,
    secret: String,
    /// The saved configuration after both confirms.
    configuration: Value,
}

fn source_type(source: &str) -> SourceType {
    match source {
        "github" => SourceType::Github,
        "gitea" => SourceType::Gitea,
        "forgejo" => SourceType::Forgejo,
        "cairn" => SourceType::Cairn,
        other => panic!("no webhook source for the cases' {other}"),
    }
}

/// Creates a webhook of `source` with the fleet's grant, then plans and confirms
/// trusted-actors@1 and handoff-lanes@1, each with the fleet params it declares.
async fn fleet_webhook(api: &Api, catalog: &Catalog, fleet: &Seed, source: &str) -> FleetWebhook {
    let created = api
        .webhooks()
        .create_webhook(CreateWebhookRequest {
            source_type: source_type(source) as i32,
            grant: fleet.grant.clone(),
            secret: None,
            reject_unverified: false,
            name: format!("{source} fleet"),
        })
        .await
        .unwrap_or_else(|s| panic!("creating the {source} webhook: {s:?}"))
        .into_inner();
    let id = created.webhook.expect("the webhook").id;
    for name in FLEET_PACKS {
        let pack = &catalog
            .find(name, "1.0.0")
            .unwrap_or_else(|| panic!("{name}@1.0.0 is built in"))
            .pack;
        let params: Map<String, Value> = fleet
            .params
            .iter()
            .filter(|(k, _)| pack.params_schema.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let plan = api
            .install(InstallRulePackRequest {
                webhook_id: id.clone(),
                name: name.into(),
                version: "1".into(),
                params: crate::support::typed::params(&Value::Object(params)),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|s| panic!("planning {name}@1 on the {source} webhook: {s:?}"));
        assert_eq!(plan["nothing_saved"], true, "{name}: {plan}");
        assert_eq!(plan["pack"]["version"], "1.0.0", "{name}: {plan}");
        // A new webhook has no history to replay, and the plan says so.
        assert_eq!(plan["events_replayed"], 0, "{name}: {plan}");
        assert_eq!(plan["proven"], false, "{name}: {plan}");
        let token = plan["plan_token"].as_str().expect("a plan token");
        let done = api
            .install(InstallRulePackRequest {
                webhook_id: id.clone(),
                name: name.into(),
                confirm: token.to_string(),
                allow_unproven: true,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|s| panic!("confirming {name}@1 on the {source} webhook: {s:?}"));
        assert_eq!(done["saved"], true, "{name}: {done}");
        assert_eq!(done["pack"]["version"], "1.0.0", "{name}: {done}");
    }
    let saved = api
        .rules()
        .list_webhook_rules(ListWebhookRulesRequest {
            webhook_id: id.clone(),
        })
        .await
        .expect("list rules")
        .into_inner();
    let configuration: Value =
        serde_json::from_str(&crate::support::typed::config_text(&saved.configuration))
            .expect("configuration JSON");
    let rules = configuration["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 27, "{source}: the fleet's 27 rules");
    assert!(
        rules
            .iter()
            .all(|r| r["id"].as_str().is_some_and(|id| FLEET_PACKS
                .iter()
                .any(|p| id.starts_with(&format!("{p}--"))))),
        "{source}: every rule is a pack's"
    );
    assert_eq!(
        configuration["params"],
        Value::Object(fleet.params.clone()),
        "{source}: the fleet's params"
    );
    assert_eq!(
        configuration["default_action"],
        serde_json::json!({"drop": true})
    );
    // The provenance of each install, in install order (a list, whatever the proto's comment
    // says of an object keyed by pack name).
    let installed: Value =
        serde_json::from_str(&crate::support::typed::packs_text(&saved.installed_packs))
            .expect("JSON");
    let installed: Vec<(&str, &str)> = installed
        .as_array()
        .expect("a list of installs")
        .iter()
        .map(|p| {
            let field = |k: &str| p[k].as_str().unwrap_or("?");
            (field("name"), field("version"))
        })
        .collect();
    assert_eq!(
        installed,
        FLEET_PACKS.map(|name| (name, "1.0.0")),
        "{source}: both packs installed at version 1"
    );
    FleetWebhook {
        id,
        secret: created.secret,
        configuration,
    }
}

/// The case's headers as a forge sends them: signed with the webhook's secret when the case is
/// verified; otherwise the testkit's fixed digest, a well-formed signature that is wrong.
fn headers(d: &StoredDelivery, secret: &str, verified: bool) -> Vec<(String, String)> {
    let digest = sign(secret, &d.body);
    d.headers
        .iter()
        .map(|h| {
            let value = if verified && h.name.to_ascii_lowercase().contains("signature") {
                match h.value.strip_prefix("sha256=") {
                    Some(_) => format!("sha256={digest}"),
                    None => digest.clone(),
                }
            } else {
                h.value.clone()
            };
            (h.name.clone(), value)
        })
        .collect()
}

/// A pack rule's local id: `trusted-actors--unverified` → `unverified`.
fn local_id(rule_id: &str) -> &str {
    rule_id.split_once("--").map_or(rule_id, |(_, l)| l)
}

/// Whether `decision` (DecisionJson) is the case's `want`, decided by the case's `rule`.
/// The packs put the trusted-actor rules in front of the lane rules, which can only let one
/// drop rule decide in place of another (`router/tests/seeds.rs` proves that order decides
/// alike), so for a drop any rule will do.
fn judge(case: &Case, decision: &Value) -> Result<(), String> {
    let label = decision["decision"].as_str().unwrap_or("?");
    let rule = decision["rule_id"].as_str().unwrap_or("");
    let by_default = decision["by_default_action"] == true;
    let rule_ok = match &case.rule {
        None => rule.is_empty() || by_default,
        Some(r) => {
            !by_default && (local_id(rule) == r || (case.want == "drop" && !rule.is_empty()))
        }
    };
    if label == case.want && rule_ok {
        Ok(())
    } else {
        Err(format!(
            "{}: want {} by {}, got {decision}",
            case.name,
            case.want,
            case.rule.as_deref().unwrap_or("the default")
        ))
    }
}

pub async fn the_seed_packs_are_preserved(db: TestDb) {
    let fleet = Seed::load("fleet").unwrap_or_else(|e| panic!("{e}"));
    assert!(fleet.cases.len() >= 80, "at least 80 fleet cases");
    let router = tokio::task::spawn_blocking(|| RouterProcess::spawn(&["--children", "2"]))
        .await
        .expect("router");
    let setup = ControlSetup {
        // This checks decisions, not speed: budgets no loaded machine runs out of.
        limits: Limits {
            evaluation_budget: Duration::from_secs(5),
            replay_budget: Duration::from_secs(120),
            ..Limits::default()
        },
        // trusted-actors@1 is in the catalog only where the trusted_actors capability is off;
        // where it is on, version 2 supersedes it (docs/rule-packs/trusted-actors-v2.md).
        capabilities: Capabilities {
            trusted_actors: false,
        },
        ..ControlSetup::default()
    };
    let control = Control::start(&db.store, &[&router.addr], setup).await;
    let (scope, credential) = owner(
        &db.store,
        "mira",
        &["webhooks", "webhook-rules", "rule-pack-confirm"],
    )
    .await;
    // The fleet's agent creates its webhooks over the API, within what an operator allowed.
    db.store
        .set_grant_allowance(&scope, &fleet.grant)
        .await
        .expect("the operator allows the fleet's queues");
    let api = Api::connect(control.grpc, &credential).await;
    let catalog = Catalog::builtin();

    let sources: BTreeSet<&str> = fleet.cases.iter().map(|c| c.source.as_str()).collect();
    assert_eq!(
        sources,
        BTreeSet::from(["cairn", "forgejo", "gitea", "github"]),
        "the fleet cases come from every source"
    );
    let mut failures = Vec::new();
    let (mut by_ingest, mut by_dry_run) = (0, 0);
    for source in sources {
        let hook = fleet_webhook(&api, &catalog, &fleet, source).await;
        for (i, case) in fleet.cases.iter().enumerate() {
            if case.source != source {
                continue;
            }
            let d = fleet.delivery(i).unwrap_or_else(|e| panic!("{e}"));
            let resp = control
                .deliver(&hook.id, &headers(&d, &hook.secret, case.verified), &d.body)
                .await;
            assert_eq!(resp.status, 202, "{}: {resp:?}", case.name);
            let answer = resp.json();
            assert_eq!(answer["verified"], case.verified, "{}: {answer}", case.name);
            assert_eq!(answer["kind"], d.kind.as_str(), "{}: {answer}", case.name);
            let event_id = answer["event_id"].as_str().expect("event id").to_string();
            let outcome = match &case.params_override {
                None => {
                    // The decision ingest answered, with the rule it recorded.
                    let event = api
                        .webhooks()
                        .get_webhook_event(GetWebhookEventRequest {
                            webhook_id: hook.id.clone(),
                            event_id: event_id.clone(),
                        })
                        .await
                        .expect("the stored event")
                        .into_inner()
                        .event
                        .expect("its summary");
                    let recorded: Value = serde_json::from_str(
                        &crate::support::typed::decision_text(&event.decision),
                    )
                    .expect("decision JSON");
                    assert_eq!(
                        recorded["decision"], answer["decision"],
                        "{}: recorded as answered",
                        case.name
                    );
                    by_ingest += 1;
                    judge(case, &recorded)
                }
                Some(changes) => {
                    let mut candidate = hook.configuration.clone();
                    for (k, v) in changes {
                        candidate["params"][k] = v.clone();
                    }
                    let tested = api
                        .rules()
                        .test_webhook_rules(TestWebhookRulesRequest {
                            webhook_id: hook.id.clone(),
                            event_id: event_id.clone(),
                            configuration: crate::support::typed::config(&candidate),
                            ..Default::default()
                        })
                        .await
                        .unwrap_or_else(|s| panic!("{}: test_webhook_rules: {s:?}", case.name))
                        .into_inner();
                    let saved: Value = serde_json::from_str(&crate::support::typed::decision_text(
                        &tested.saved_decision,
                    ))
                    .expect("JSON");
                    assert_eq!(
                        saved["decision"], answer["decision"],
                        "{}: the dry run's saved decision is ingest's",
                        case.name
                    );
                    let with_params: Value = serde_json::from_str(
                        &crate::support::typed::decision_text(&tested.candidate_decision),
                    )
                    .expect("JSON");
                    by_dry_run += 1;
                    judge(case, &with_params)
                }
            };
            if let Err(failure) = outcome {
                failures.push(format!("{source}/{failure}"));
            }
        }
    }
    assert_eq!(
        by_ingest + by_dry_run,
        fleet.cases.len(),
        "every case was routed"
    );
    assert!(
        by_ingest > by_dry_run && by_dry_run > 0,
        "{by_ingest} by ingest, {by_dry_run} by dry run"
    );
    assert!(
        failures.is_empty(),
        "trusted-actors@1 + handoff-lanes@1 installed through the API route {} of {} fleet cases away from their want:\n  {}",
        failures.len(),
        fleet.cases.len(),
        failures.join("\n  ")
    );
    control.stop().await;
}
