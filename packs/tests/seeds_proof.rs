//! The proofs SPEC-0031 REQ-9 and REQ-6 demand of the built-in catalog, pure and in-process
//! (issue 5, item 4): the packs, installed with `merge::install_candidate` as a confirm would
//! install them, route every case of the seeds to its `want`.
//!
//! - trusted-actors@1 then handoff-lanes@1, with the fleet cases' params, on an empty
//!   configuration: every fleet case routes to its `want`.
//! - no-self-review@1 (identity mode) plus drop-ci-noise@1 with `drop_deleted: false` and
//!   `keep_ci_success: true`: every pool-review case routes to its `want`.
//! - The adoption scenario: the fleet's 27 hand-written rules (`hand-written.json` beside the
//!   fleet cases) pasted by hand, then trusted-actors@1 and handoff-lanes@1 with `replaces`:
//!   within 32 rules at every step, params adopted, the replaced rules listed, and a replay
//!   over the cases reports `changed: 0`.
//! - Shared params agree across the catalog, and a retyped one is named.
//! - trusted-actors@2 supersedes version 1 exactly where the `trusted_actors` capability is on.
//! - No pack rule faults on any delivery shape, nor with any param it reads malformed.
//!
//! The hand-written `fleet.json` and `pool-review.json` these cases were written against left
//! `docs/routing/rule-packs/` once these proofs held (CHANGELOG.md); the cases' expectations
//! are what the packs are held to. Cases: `router/tests/data/routing/{fleet,pool-review}/
//! cases.json` (see the README there), read with `switchboard-testkit`; payloads:
//! `testkit/data/webhooks/`. The same fleet proof runs end to end, through the control API and
//! ingest, in `tests/all/seed_packs.rs`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};
use switchboard_model::{Action, Configuration, Label};
use switchboard_packs::merge::{Candidate, InstallRequest, install_candidate};
use switchboard_packs::plan::{Replayed, Routed, aggregate, pack_rule_faults};
use switchboard_packs::provenance::Provenance;
use switchboard_packs::{Catalog, Pack, ParamType, ResolveError};
use switchboard_proto::router::v1::{
    Decision, Outcome, RoutingContext, StoredDelivery, TrustedActors,
};
use switchboard_router::engine::validate::validate;
use switchboard_router::engine::{CompiledConfiguration, build_envelope};
use switchboard_testkit::seed_cases::{self, Case, Seed, raw_delivery};

/// Fleet rules 1, 3, 17 and 18 (1-based) are trusted-actors@1's; the rest handoff-lanes@1's.
const FLEET_TRUSTED_ACTOR_RULES: [usize; 4] = [1, 3, 17, 18];

// ------------------------------------------------------------------------------ cases

fn load(name: &str) -> Seed {
    Seed::load(name).unwrap_or_else(|e| panic!("{e}"))
}

fn delivery(seed: &Seed, index: usize) -> StoredDelivery {
    seed.delivery(index).unwrap_or_else(|e| panic!("{e}"))
}

/// The fleet's 27 hand-written rules with their params: what the adoption scenario pastes in.
fn hand_written(fleet: &Seed) -> Configuration {
    let (path, text) = fleet.hand_written().unwrap_or_else(|e| panic!("{e}"));
    let config: Configuration =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(config.params, fleet.params, "{path}: the cases' params");
    config
}

// ------------------------------------------------------------------------------ packs

fn catalog() -> Catalog {
    Catalog::builtin()
}

fn pack(catalog: &Catalog, name: &str, version: &str) -> Pack {
    catalog
        .find(name, version)
        .unwrap_or_else(|| panic!("{name}@{version} is not in the catalog"))
        .pack
        .clone()
}

/// The params of `params` that `pack` declares.
fn declared(pack: &Pack, params: &Map<String, Value>) -> Map<String, Value> {
    params
        .iter()
        .filter(|(k, _)| pack.params_schema.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Installs `pack` as a confirm would, looking installed manifests up in the catalog.
fn install(
    catalog: &Catalog,
    saved: &Configuration,
    provenance: &Provenance,
    pack: &Pack,
    request: InstallRequest,
) -> Candidate {
    let find = |n: &str, v: &str| catalog.find(n, v).map(|cp| cp.pack.clone());
    install_candidate(saved, provenance, pack, &request, &find)
        .unwrap_or_else(|e| panic!("installing {} fails: {e} ({})", pack.label(), e.reason()))
}

fn with_params(config: &Configuration, changes: Option<&Map<String, Value>>) -> Configuration {
    let mut c = config.clone();
    for (k, v) in changes.into_iter().flatten() {
        c.params.insert(k.clone(), v.clone());
    }
    c
}

fn compile(config: &Configuration) -> CompiledConfiguration {
    CompiledConfiguration::compile(config).unwrap_or_else(|e| panic!("does not compile: {e}"))
}

fn ctx(grant: &[String], capability: bool) -> RoutingContext {
    RoutingContext {
        grant: grant.to_vec(),
        trusted_actors_capability: capability,
        trusted_actors: None,
    }
}

fn is_fault(d: &Decision) -> bool {
    d.outcome == Outcome::Fault as i32
}

fn describe(d: &Decision) -> String {
    let by = if d.rule_id.is_empty() {
        "the default".to_string()
    } else {
        d.rule_id.clone()
    };
    if is_fault(d) {
        format!("fault {} in {by}: {}", d.fault_code, d.reason)
    } else {
        format!("{} by {by}", d.label())
    }
}

/// A pack rule's local id: `trusted-actors--unverified` → `unverified`.
fn local_id(rule_id: &str) -> &str {
    rule_id.split_once("--").map_or(rule_id, |(_, l)| l)
}

/// Routes every case of `seed` through `config` (with each case's params override), with and
/// without the trusted-actors capability (no rule of these packs reads `.actor`). Returns, per
/// case, its name, the case and the decision; panics on a disagreement between the two.
fn route(seed: &Seed, config: &Configuration) -> Vec<(Case, Decision)> {
    let base = compile(config);
    let mut out = Vec::new();
    let mut differ = Vec::new();
    for (i, case) in seed.cases.iter().enumerate() {
        let d = delivery(seed, i);
        let own;
        let compiled = match &case.params_override {
            Some(changes) => {
                own = compile(&with_params(config, Some(changes)));
                &own
            }
            None => &base,
        };
        let with = compiled.evaluate(
            &ctx(&seed.grant, true),
            &build_envelope(&d, &ctx(&seed.grant, true)),
        );
        let without = compiled.evaluate(
            &ctx(&seed.grant, false),
            &build_envelope(&d, &ctx(&seed.grant, false)),
        );
        if with != without {
            differ.push(format!(
                "{}: {} with the capability, {} without",
                case.name,
                describe(&with),
                describe(&without)
            ));
        }
        out.push((case.clone(), with));
    }
    assert!(
        differ.is_empty(),
        "{}:\n  {}",
        seed.name,
        differ.join("\n  ")
    );
    out
}

/// Asserts the configuration validates against the seed's grant, as a save would.
fn assert_validates(seed: &Seed, config: &Configuration) {
    let json = serde_json::to_string(config).expect("JSON");
    for capability in [true, false] {
        let v = validate(&json, &ctx(&seed.grant, capability));
        assert!(
            v.valid,
            "{}: the installed configuration does not validate (capability {capability}): {:?}",
            seed.name, v.problems
        );
    }
}

// ------------------------------------------------------------------------------ (a) fleet

/// trusted-actors@1 then handoff-lanes@1 with the fleet cases' params, onto an empty
/// configuration.
fn fleet_by_packs(catalog: &Catalog, fleet: &Seed) -> Configuration {
    let ta = pack(catalog, "trusted-actors", "1.0.0");
    let hl = pack(catalog, "handoff-lanes", "1.0.0");
    let step1 = install(
        catalog,
        &Configuration::default(),
        &Vec::new(),
        &ta,
        InstallRequest {
            params: declared(&ta, &fleet.params),
            ..Default::default()
        },
    );
    let step2 = install(
        catalog,
        &step1.configuration,
        &step1.provenance,
        &hl,
        InstallRequest {
            params: declared(&hl, &fleet.params),
            ..Default::default()
        },
    );
    step2.configuration
}

#[test]
fn trusted_actors_and_handoff_lanes_route_every_fleet_case() {
    let catalog = catalog();
    let fleet = load("fleet");
    assert!(fleet.cases.len() >= 80);
    let config = fleet_by_packs(&catalog, &fleet);
    assert_validates(&fleet, &config);

    // The installed configuration is the hand-written fleet with its trusted-actor rules in
    // front.
    let hand_written = hand_written(&fleet);
    assert_eq!(config.params, fleet.params, "the cases' params, no more");
    assert_eq!(config.default_action, Some(Action::Drop));
    let order: Vec<usize> = FLEET_TRUSTED_ACTOR_RULES
        .iter()
        .copied()
        .chain((1..=27).filter(|i| !FLEET_TRUSTED_ACTOR_RULES.contains(i)))
        .collect();
    assert_eq!(config.rules.len(), 27);
    for (rule, i) in config.rules.iter().zip(order) {
        let hand = &hand_written.rules[i - 1];
        let id = rule.id.as_deref().expect("id");
        let want_pack = if FLEET_TRUSTED_ACTOR_RULES.contains(&i) {
            "trusted-actors"
        } else {
            "handoff-lanes"
        };
        assert_eq!(
            id,
            format!("{want_pack}--{}", hand.id.as_deref().expect("id")),
            "rule {i}"
        );
        assert_eq!(
            (&rule.when, &rule.action),
            (&hand.when, &hand.action),
            "{id}"
        );
    }

    let mut failures = Vec::new();
    let mut decided = BTreeSet::new();
    for (case, got) in route(&fleet, &config) {
        let rule_ok = match &case.rule {
            None => got.rule_id.is_empty() || got.by_default_action,
            // Moving the trusted-actor rules in front can only let one drop rule decide in
            // place of another.
            Some(r) => {
                local_id(&got.rule_id) == r || (case.want == "drop" && !got.rule_id.is_empty())
            }
        };
        if is_fault(&got) || got.label().to_string() != case.want || !rule_ok {
            failures.push(format!(
                "{}: want {} by {}, got {}",
                case.name,
                case.want,
                case.rule.as_deref().unwrap_or("the default"),
                describe(&got)
            ));
        }
        if !got.rule_id.is_empty() && !got.by_default_action {
            decided.insert(got.rule_id.clone());
        }
    }
    for rule in &config.rules {
        let id = rule.id.clone().expect("id");
        if !decided.contains(&id) {
            failures.push(format!("{id} decides no fleet case"));
        }
    }
    assert!(
        failures.is_empty(),
        "trusted-actors@1 + handoff-lanes@1 disagree with the fleet cases:\n  {}",
        failures.join("\n  ")
    );
}

// ------------------------------------------------------------------------------ (b) pool

/// no-self-review@1 (identity mode) then drop-ci-noise@1 with the pool-review cases' params,
/// onto an empty configuration.
fn pool_by_packs(catalog: &Catalog, pool: &Seed) -> Configuration {
    let nsr = pack(catalog, "no-self-review", "1.0.0");
    let dcn = pack(catalog, "drop-ci-noise", "1.0.0");
    let identity = declared(&nsr, &pool.params);
    assert_eq!(identity["identity"], json!("reviewer-b"), "identity mode");
    let step1 = install(
        catalog,
        &Configuration::default(),
        &Vec::new(),
        &nsr,
        InstallRequest {
            params: identity,
            ..Default::default()
        },
    );
    let ci = declared(&dcn, &pool.params);
    assert_eq!(ci["drop_deleted"], json!(false));
    assert_eq!(ci["keep_ci_success"], json!(true));
    assert!(
        ci["bot_actors"].as_array().is_some_and(|a| !a.is_empty()),
        "bots to drop"
    );
    let step2 = install(
        catalog,
        &step1.configuration,
        &step1.provenance,
        &dcn,
        InstallRequest {
            params: ci,
            ..Default::default()
        },
    );
    step2.configuration
}

#[test]
fn no_self_review_and_drop_ci_noise_route_every_pool_review_case() {
    let catalog = catalog();
    let pool = load("pool-review");
    assert!(pool.cases.len() >= 60, "at least 60 pool-review cases");
    let forges: BTreeSet<&str> = pool.cases.iter().map(|c| c.source.as_str()).collect();
    for source in ["github", "gitea", "forgejo"] {
        assert!(forges.contains(source), "no pool-review case from {source}");
    }
    let config = pool_by_packs(&catalog, &pool);
    assert_validates(&pool, &config);
    assert_eq!(config.params, pool.params, "the cases' params, no more");
    assert_eq!(
        config.default_action, None,
        "the pool keeps what no rule drops"
    );

    let mut failures = Vec::new();
    let mut decided = BTreeSet::new();
    let mut defaults = 0;
    for (case, got) in route(&pool, &config) {
        let rule_ok = match &case.rule {
            None => got.rule_id.is_empty(),
            Some(r) => local_id(&got.rule_id) == r && !got.by_default_action,
        };
        if is_fault(&got) || got.label().to_string() != case.want || !rule_ok {
            failures.push(format!(
                "{}: want {} by {}, got {}",
                case.name,
                case.want,
                case.rule.as_deref().unwrap_or("the default"),
                describe(&got)
            ));
        }
        if got.rule_id.is_empty() {
            defaults += 1;
        }
        decided.insert(got.rule_id.clone());
    }
    for rule in &config.rules {
        let id = rule.id.clone().expect("id");
        // drop_deleted is false: the deleted rule is there and never matches.
        if !decided.contains(&id) && id != "drop-ci-noise--deleted" {
            failures.push(format!("{id} decides no pool-review case"));
        }
    }
    if defaults == 0 {
        failures.push("no pool-review case reaches the pool (the default)".into());
    }
    assert!(
        failures.is_empty(),
        "no-self-review@1 + drop-ci-noise@1 disagree with the pool-review cases:\n  {}",
        failures.join("\n  ")
    );
}

/// A same-family pair does not count, even when a hand edit of the params brings it back
/// after the install-time check (`cross-family-pairs`) refused it; without
/// require_cross_family it counts again.
#[test]
fn no_self_review_ignores_same_family_pairs() {
    let catalog = catalog();
    let pool = load("pool-review");
    let config = pool_by_packs(&catalog, &pool);
    let at = pool
        .position("gh-pr-opened-by-paired-author-kept")
        .unwrap_or_else(|e| panic!("{e}"));
    let d = delivery(&pool, at);
    let context = ctx(&pool.grant, false);
    let env = build_envelope(&d, &context);
    let decide = |changes: Value| {
        let m = changes.as_object().expect("object").clone();
        compile(&with_params(&config, Some(&m))).evaluate(&context, &env)
    };
    assert_eq!(
        decide(json!({})).label().to_string(),
        "default",
        "the case as written"
    );
    let same_family = json!({"families": {"Codertocat": "gpt", "reviewer-b": "gpt"}});
    let got = decide(same_family.clone());
    assert_eq!(
        (got.label().to_string().as_str(), got.rule_id.as_str()),
        ("drop", "no-self-review--unpaired-author"),
        "{}",
        describe(&got)
    );
    let mut relaxed = same_family;
    relaxed["require_cross_family"] = json!(false);
    assert_eq!(decide(relaxed).label().to_string(), "default");
}

// ------------------------------------------------------------------------------ (c) adoption

/// Both configurations over every fleet case (each with its params override, on both sides)
/// and every real payload, as a replay would see them.
fn replay(fleet: &Seed, before: &Configuration, after: &Configuration) -> Vec<Replayed> {
    let mut deliveries: Vec<(StoredDelivery, Option<Map<String, Value>>)> = fleet
        .cases
        .iter()
        .enumerate()
        .map(|(i, c)| (delivery(fleet, i), c.params_override.clone()))
        .collect();
    deliveries.extend(real_deliveries().into_iter().map(|d| (d, None)));
    let (b, a) = (compile(before), compile(after));
    let context = ctx(&fleet.grant, false);
    let routed = |d: &Decision| Routed {
        label: d.label().into_owned(),
        rule_id: (!d.rule_id.is_empty() && !d.by_default_action).then(|| d.rule_id.clone()),
    };
    deliveries
        .iter()
        .map(|(d, changes)| {
            let env = build_envelope(d, &context);
            let (x, y) = match changes {
                None => (b.evaluate(&context, &env), a.evaluate(&context, &env)),
                Some(m) => (
                    compile(&with_params(before, Some(m))).evaluate(&context, &env),
                    compile(&with_params(after, Some(m))).evaluate(&context, &env),
                ),
            };
            Replayed {
                event_id: d.event_id.clone(),
                received_at_ms: d.received_at_ms,
                source: d.source.clone(),
                before: routed(&x),
                after: routed(&y),
            }
        })
        .collect()
}

fn assert_changed_zero(fleet: &Seed, before: &Configuration, step: &Candidate, what: &str) {
    let replayed = replay(fleet, before, &step.configuration);
    let ids: Vec<String> = step
        .configuration
        .rules
        .iter()
        .filter_map(|r| r.id.clone())
        .collect();
    let report = aggregate(
        &replayed,
        &ids,
        &|id: &str| id.split_once("--").map(|(p, _)| p.to_string()),
        false,
        false,
        &|ms: i64| ms.to_string(),
    );
    assert_eq!(
        report.changed, 0,
        "{what}: the replay changes decisions: {:?}",
        report.transitions
    );
    assert_eq!(report.events_replayed as usize, fleet.cases.len() + 154);
    let faults = pack_rule_faults(&replayed, &step.pack_rule_ids);
    assert!(faults.is_empty(), "{what}: pack rules fault: {faults:?}");
    assert_eq!(report.totals.before, report.totals.after);
}

#[test]
fn adopting_the_pasted_fleet_configuration_changes_nothing() {
    let catalog = catalog();
    let fleet = load("fleet");
    let saved = hand_written(&fleet);
    assert_eq!(saved.rules.len(), 27);
    let ids: Vec<String> = saved
        .rules
        .iter()
        .map(|r| r.id.clone().expect("id"))
        .collect();
    let ta_ids: Vec<String> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| FLEET_TRUSTED_ACTOR_RULES.contains(&(i + 1)))
        .map(|(_, id)| id.clone())
        .collect();
    let hl_ids: Vec<String> = ids
        .iter()
        .filter(|id| !ta_ids.contains(id))
        .cloned()
        .collect();
    let ta = pack(&catalog, "trusted-actors", "1.0.0");
    let hl = pack(&catalog, "handoff-lanes", "1.0.0");

    // Step 1: trusted-actors@1 takes over rules 1, 3, 17 and 18, adopting their params.
    let step1 = install(
        &catalog,
        &saved,
        &Vec::new(),
        &ta,
        InstallRequest {
            replaces: ta_ids.clone(),
            ..Default::default()
        },
    );
    let c1 = &step1.configuration;
    assert!(c1.rules.len() <= 32, "{} rules", c1.rules.len());
    assert_eq!(c1.rules.len(), 27);
    assert_eq!(c1.params, saved.params, "values unchanged");
    assert_eq!(c1.default_action, saved.default_action);
    assert_eq!(step1.rule_diff.replaced, ta_ids);
    assert!(step1.rule_diff.removed.is_empty());
    assert!(step1.rule_diff.changed.is_empty());
    assert_eq!(
        step1.rule_diff.added,
        ta_ids
            .iter()
            .map(|id| format!("trusted-actors--{id}"))
            .collect::<Vec<_>>()
    );
    let adopted: BTreeSet<&str> = step1
        .param_diff
        .adopted
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(
        adopted,
        BTreeSet::from([
            "require_verified",
            "trusted_humans",
            "trusted_agents",
            "cairn_actors"
        ])
    );
    assert!(step1.param_diff.added.is_empty() && step1.param_diff.changed.is_empty());
    assert_changed_zero(
        &fleet,
        &saved,
        &step1,
        "trusted-actors@1 replacing rules 1, 3, 17, 18",
    );

    // Step 2: handoff-lanes@1 takes over the other 23.
    let step2 = install(
        &catalog,
        c1,
        &step1.provenance,
        &hl,
        InstallRequest {
            replaces: hl_ids.clone(),
            ..Default::default()
        },
    );
    let c2 = &step2.configuration;
    assert!(c2.rules.len() <= 32, "{} rules", c2.rules.len());
    assert_eq!(c2.rules.len(), 27);
    assert!(
        c2.rules
            .iter()
            .all(|r| r.id.as_deref().is_some_and(|id| id.contains("--"))),
        "no hand-written rule is left"
    );
    assert_eq!(c2.params, saved.params, "values unchanged");
    assert_eq!(c2.default_action, Some(Action::Drop));
    assert_eq!(step2.rule_diff.replaced, hl_ids);
    assert!(step2.rule_diff.removed.is_empty());
    assert!(step2.rule_diff.default_action.is_none(), "drop stays drop");
    let adopted: BTreeSet<&str> = step2
        .param_diff
        .adopted
        .iter()
        .map(String::as_str)
        .collect();
    let declared_by_hl: BTreeSet<&str> = hl.params_schema.keys().map(String::as_str).collect();
    assert_eq!(
        adopted, declared_by_hl,
        "every param handoff-lanes declares is adopted"
    );
    assert!(step2.param_diff.added.is_empty() && step2.param_diff.changed.is_empty());
    // A shared param names both packs.
    assert_eq!(
        step2.param_diff.owners["trusted_humans"],
        ["trusted-actors", "handoff-lanes"]
    );
    assert_eq!(step2.provenance.len(), 2);
    assert_changed_zero(
        &fleet,
        &saved,
        &step2,
        "then handoff-lanes@1 replacing the rest",
    );

    // And it is the configuration a fresh install builds.
    assert_eq!(*c2, fleet_by_packs(&catalog, &fleet));
}

// ------------------------------------------------------------------------------ (d) shared

#[test]
fn shared_params_agree() {
    let catalog = catalog();
    let packs: Vec<Pack> = catalog.packs().iter().map(|cp| cp.pack.clone()).collect();
    let conflicts = switchboard_packs::manifest::check_shared_param_types(&packs);
    assert!(conflicts.is_empty(), "{conflicts:?}");
    let ta = pack(&catalog, "trusted-actors", "1.0.0");
    let hl = pack(&catalog, "handoff-lanes", "1.0.0");
    for p in [&ta, &hl] {
        assert_eq!(
            p.params_schema["trusted_humans"].ty,
            ParamType::StringList,
            "{}",
            p.label()
        );
    }

    // A change that gives handoff-lanes' trusted_humans another type is refused, by name.
    let mut retyped = packs.clone();
    let at = retyped
        .iter()
        .position(|p| p.name == "handoff-lanes")
        .expect("handoff-lanes");
    retyped[at]
        .params_schema
        .get_mut("trusted_humans")
        .expect("declared")
        .ty = ParamType::String;
    let conflicts = switchboard_packs::manifest::check_shared_param_types(&retyped);
    assert!(!conflicts.is_empty(), "the retyped param is refused");
    for c in &conflicts {
        assert!(
            c.contains("param trusted_humans") && c.contains("handoff-lanes@1.0.0"),
            "{c}"
        );
    }
}

// ------------------------------------------------------------------------------ (f) v2

#[test]
fn trusted_actors_2_supersedes_1_only_with_the_capability() {
    let catalog = catalog();
    let v1 = catalog.find("trusted-actors", "1.0.0").expect("v1");
    let v2 = catalog.find("trusted-actors", "2.0.0").expect("v2");
    assert_eq!(v2.pack.supersedes, [1]);
    let note = v2.pack.upgrade_note.clone().expect("an upgrade note");
    assert!(v2.pack.sets_trusted_actors.is_some());

    // With the capability: v2 is available, v1 has left the catalog for new installs.
    let on = vec!["trusted_actors".to_string()];
    let a1 = catalog.availability(v1, &on);
    assert!(!a1.available && a1.retired, "{a1:?}");
    assert_eq!(a1.superseded_by.as_deref(), Some("2.0.0"));
    assert_eq!(a1.upgrade_note.as_deref(), Some(note.as_str()));
    assert!(catalog.availability(v2, &on).available);
    match catalog.resolve("trusted-actors", Some("1"), &on) {
        Err(ResolveError::UnavailableVersion {
            version,
            upgrade_note,
            reason,
            ..
        }) => {
            assert_eq!(version, "1.0.0");
            assert_eq!(upgrade_note.as_deref(), Some(note.as_str()));
            assert!(reason.contains("2.0.0"), "{reason}");
        }
        other => panic!("planning trusted-actors@1 with the capability: {other:?}"),
    }
    assert_eq!(
        catalog
            .resolve("trusted-actors", None, &on)
            .expect("resolves")
            .pack
            .version,
        "2.0.0"
    );

    // Without it: v2 is listed unavailable naming the capability, v1 stays.
    let off: Vec<String> = Vec::new();
    let a2 = catalog.availability(v2, &off);
    assert!(!a2.available && !a2.retired, "{a2:?}");
    assert_eq!(a2.missing_capabilities, ["trusted_actors"]);
    let a1 = catalog.availability(v1, &off);
    assert!(a1.available && !a1.retired, "{a1:?}");
    match catalog.resolve("trusted-actors", Some("2"), &off) {
        Err(ResolveError::UnavailableVersion { reason, .. }) => {
            assert!(reason.contains("trusted_actors"), "{reason}")
        }
        other => panic!("planning trusted-actors@2 without the capability: {other:?}"),
    }
    assert_eq!(
        catalog
            .resolve("trusted-actors", None, &off)
            .expect("resolves")
            .pack
            .version,
        "1.0.0"
    );
}

/// trusted-actors@2's install sets the webhook's first-class trusted actors from its params,
/// and its rule quarantines exactly the deliveries whose actor is not trusted.
#[test]
fn trusted_actors_2_quarantines_untrusted_actors() {
    let catalog = catalog();
    let v2 = pack(&catalog, "trusted-actors", "2.0.0");
    let mut params = Map::new();
    params.insert("trusted_humans".into(), json!(["Codertocat"]));
    params.insert("trusted_agents".into(), json!(["cairn-planner"]));
    params.insert("trusted_bots".into(), json!(["renovate[bot]"]));
    let c = install(
        &catalog,
        &Configuration::default(),
        &Vec::new(),
        &v2,
        InstallRequest {
            params,
            ..Default::default()
        },
    );
    assert_eq!(
        c.trusted_actors,
        Some(switchboard_model::TrustedActors {
            humans: vec!["Codertocat".into()],
            agents: vec!["cairn-planner".into()],
            bots: vec!["renovate[bot]".into()],
        })
    );
    let context = RoutingContext {
        grant: vec!["forge".into()],
        trusted_actors_capability: true,
        trusted_actors: Some(TrustedActors {
            humans: vec!["Codertocat".into()],
            agents: vec!["cairn-planner".into()],
            bots: vec!["renovate[bot]".into()],
        }),
    };
    let compiled = compile(&c.configuration);
    let mut seen = BTreeSet::new();
    for d in real_deliveries().into_iter().chain(cairn_deliveries()) {
        let got = compiled.evaluate(&context, &build_envelope(&d, &context));
        let trusted = d.verified && listed(&d, &context);
        let want = if trusted { "default" } else { "quarantine" };
        assert_eq!(
            got.label().to_string(),
            want,
            "{} {}: {}",
            d.source,
            d.event_id,
            describe(&got)
        );
        seen.insert(want);
    }
    assert_eq!(seen.len(), 2, "both decisions are reached");
}

/// Is the delivery's actor (the sender; for Cairn, the hand-off's actor) on a list?
fn listed(d: &StoredDelivery, context: &RoutingContext) -> bool {
    let body: Value = serde_json::from_slice(&d.body).unwrap_or(Value::Null);
    let login = if d.source == "cairn" {
        &body["actor"]["login"]
    } else {
        &body["sender"]["login"]
    };
    let lists = context.trusted_actors.as_ref().expect("lists");
    login.as_str().is_some_and(|l| {
        [&lists.humans, &lists.agents, &lists.bots]
            .iter()
            .any(|list| list.iter().any(|x| x == l))
    })
}

// ------------------------------------------------------------------------------ corpus

/// Every real payload, verified and not (154 deliveries).
fn real_deliveries() -> Vec<StoredDelivery> {
    let mut out = Vec::new();
    for p in seed_cases::real_payloads().unwrap_or_else(|e| panic!("{e}")) {
        for verified in [true, false] {
            let id = format!("real-{:04}", out.len());
            out.push(raw_delivery(
                p.forge,
                &p.event,
                p.body.clone(),
                verified,
                &id,
            ));
        }
    }
    assert_eq!(out.len(), 154, "the data set has 77 payloads");
    out
}

/// The documented Cairn hand-off examples (fenced ```json blocks of the hand-off page).
fn cairn_deliveries() -> Vec<StoredDelivery> {
    let examples = seed_cases::cairn_doc_examples().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        examples.len() >= 3,
        "{} has examples",
        seed_cases::CAIRN_DOC
    );
    examples
        .iter()
        .enumerate()
        .map(|(n, e)| {
            let body = serde_json::to_vec_pretty(e).expect("JSON");
            raw_delivery("cairn", "handoff", body, true, &format!("cairn-{n:04}"))
        })
        .collect()
}

/// Bodies of the wrong shape: not JSON, and the wrong JSON types wherever an object, a
/// string or a list belongs, under many sources, events and actions.
fn hostile_deliveries() -> Vec<StoredDelivery> {
    let wrong = [
        json!("a string"),
        json!(7),
        Value::Null,
        json!([1, "x", null, {"name": 5}]),
        json!({"login": 5, "name": ["x"], "labels": "hold", "user": "mallory"}),
        json!(true),
    ];
    let mut bodies: Vec<Vec<u8>> = vec![
        b"payload=%7B%22action%22%3A%22opened%22%7D".to_vec(),
        b"".to_vec(),
        b"{\"action\": \"opened\", \"issue\": ".to_vec(),
        b"[]".to_vec(),
        b"null".to_vec(),
        b"\"handoff\"".to_vec(),
        b"42".to_vec(),
    ];
    for action in [
        None,
        Some("opened"),
        Some("labeled"),
        Some("label_updated"),
        Some("review_requested"),
        Some("synchronize"),
        Some("completed"),
        Some("reviewed"),
        Some("deleted"),
    ] {
        for w in &wrong {
            let mut flat = json!({
                "handoff": w, "actor": w, "issue": w, "pull_request": w, "sender": w,
                "repository": w, "requested_reviewer": w, "label": w, "review": w,
                "state": w, "check_run": w, "check_suite": w, "workflow_run": w,
                "workflow_job": w, "comment": w,
            });
            let nested = json!({"login": w, "user": w, "labels": w, "state": w,
                "full_name": w, "repo": w, "lane": w, "from": w, "to": w, "id": w,
                "conclusion": w, "name": w});
            let mut deep = json!({
                "handoff": nested, "actor": nested, "issue": nested,
                "pull_request": nested, "sender": nested, "repository": nested,
                "requested_reviewer": nested, "check_run": nested, "check_suite": nested,
                "workflow_run": nested, "workflow_job": nested, "state": w,
            });
            if let Some(a) = action {
                flat["action"] = json!(a);
                deep["action"] = json!(a);
            }
            bodies.push(serde_json::to_vec(&flat).expect("JSON"));
            bodies.push(serde_json::to_vec(&deep).expect("JSON"));
            // One key of the wrong type, everything else absent: `//` chains and `?` reach
            // the wrong value instead of stopping at an earlier one.
            for key in flat.as_object().expect("object").keys() {
                let mut one = json!({ key.clone(): w });
                if let Some(a) = action {
                    one["action"] = json!(a);
                }
                bodies.push(serde_json::to_vec(&one).expect("JSON"));
            }
        }
    }
    let pairs = [
        ("cairn", "handoff"),
        ("github", "issues"),
        ("github", "pull_request"),
        ("github", "label"),
        ("github", "pull_request_review"),
        ("github", "status"),
        ("github", "check_run"),
        ("github", "check_suite"),
        ("github", "workflow_run"),
        ("github", "workflow_job"),
        ("gitea", "issue_comment"),
        ("gitea", "pull_request_approved"),
        ("forgejo", "pull_request"),
        ("generic", "handoff"),
    ];
    let mut out = Vec::new();
    for body in &bodies {
        for (source, event) in pairs {
            let n = out.len();
            out.push(raw_delivery(
                source,
                event,
                body.clone(),
                true,
                &format!("hostile-{n:05}"),
            ));
        }
    }
    out
}

/// Malformed values every param a rule reads is tried with.
fn malformed_values() -> Vec<Value> {
    vec![
        json!("alice"),
        Value::Null,
        json!(42),
        json!(true),
        json!({"alice": "alice", "Codertocat": 1}),
        json!([1, null, "Codertocat", {"author": "reviewer-b"}]),
        json!([]),
        json!({}),
    ]
}

/// The params each pack is proven with: the cases' (the fleet's for the fleet packs, the
/// pool-review's for the review packs).
fn proof_params(p: &Pack, fleet: &Seed, pool: &Seed) -> Map<String, Value> {
    let seed = match p.name.as_str() {
        "trusted-actors" | "handoff-lanes" => &fleet.params,
        _ => &pool.params,
    };
    let mut params = p.default_params();
    params.extend(declared(p, seed));
    if p.name == "trusted-actors" && p.major() == 2 {
        params.insert("trusted_bots".into(), json!(["renovate[bot]"]));
    }
    params
}

/// No rule of any catalog pack faults, alone, on any real payload, documented hand-off, seed
/// case or hostile body: with its schema defaults, with the seeds' params, and with every
/// param it reads replaced by a malformed value. (REQ-4 refuses a plan whose pack rule
/// faults on any replayed delivery.)
#[test]
fn no_pack_rule_faults_on_any_shape_or_malformed_param() {
    let catalog = catalog();
    let (fleet, pool) = (load("fleet"), load("pool-review"));
    let mut wellformed = real_deliveries();
    wellformed.extend(cairn_deliveries());
    for seed in [&fleet, &pool] {
        wellformed.extend(seed.deliveries().unwrap_or_else(|e| panic!("{e}")));
    }
    let hostile = hostile_deliveries();
    let mut faults: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for cp in catalog.packs() {
        let p = &cp.pack;
        let capability = p
            .requires
            .capabilities
            .iter()
            .any(|c| c == "trusted_actors");
        let proof = proof_params(p, &fleet, &pool);
        let context = RoutingContext {
            grant: vec!["default".into()],
            trusted_actors_capability: capability,
            trusted_actors: capability.then(|| TrustedActors {
                humans: vec!["Codertocat".into()],
                agents: vec!["cairn-planner".into()],
                bots: vec!["renovate[bot]".into()],
            }),
        };
        let envs = |ds: &[StoredDelivery]| {
            ds.iter()
                .map(|d| {
                    (
                        d.event_id.clone(),
                        d.kind.clone(),
                        build_envelope(d, &context),
                    )
                })
                .collect::<Vec<_>>()
        };
        let (good, bad) = (envs(&wellformed), envs(&hostile));
        for rule in p.installed_rules() {
            let id = rule.id.clone().expect("id");
            let mut variants: Vec<(String, Map<String, Value>, bool)> = vec![
                ("the schema defaults".into(), p.default_params(), true),
                ("the seeds' params".into(), proof.clone(), true),
            ];
            for key in p.params_schema.keys() {
                if !rule.when.contains(&format!("$params.{key}")) {
                    continue;
                }
                for v in malformed_values() {
                    let mut m = proof.clone();
                    m.insert(key.clone(), v.clone());
                    variants.push((format!("{key} = {v}"), m, false));
                }
            }
            for (what, params, everything) in variants {
                let config = Configuration {
                    rules: vec![rule.clone()],
                    default_action: None,
                    params,
                };
                let compiled = compile(&config);
                let shapes = good
                    .iter()
                    .chain(if everything { bad.iter() } else { [].iter() });
                for (event_id, kind, env) in shapes {
                    let got = compiled.evaluate(&context, env);
                    if is_fault(&got) && got.fault_code != "not_granted" {
                        let n = faults
                            .entry(format!("{} {id} with {what}", p.label()))
                            .or_insert((0, String::new()));
                        n.0 += 1;
                        if n.1.is_empty() {
                            n.1 = format!("{} on {kind} ({event_id})", got.reason);
                        }
                    }
                }
            }
        }
    }
    let failures: Vec<String> = faults
        .iter()
        .map(|(what, (n, first))| format!("{what}: {n} faults, e.g. {first}"))
        .collect();
    assert!(
        failures.is_empty(),
        "pack rules fault:\n  {}",
        failures.join("\n  ")
    );
}

// ------------------------------------------------------------------------------ param check

/// no-self-review's `cross-family-pairs` check, evaluated as control evaluates it: once per
/// element of `pairs`, as `.payload | (<expr>) | not`; a match (drop) is a refusal.
#[test]
fn the_cross_family_check_refuses_same_family_pairs() {
    let catalog = catalog();
    let nsr = pack(&catalog, "no-self-review", "1.0.0");
    let check = nsr
        .param_checks
        .iter()
        .find(|c| c.id == "cross-family-pairs")
        .expect("the check");
    assert_eq!(check.each.as_deref(), Some("pairs"));
    let refused = |params: Value| -> Vec<Value> {
        let params = params.as_object().expect("object").clone();
        let config = Configuration {
            rules: vec![switchboard_model::Rule {
                id: Some(check.id.clone()),
                description: None,
                when: switchboard_packs::admission::param_check_expression(&check.expr),
                action: Action::Drop,
            }],
            default_action: None,
            params: params.clone(),
        };
        let compiled = compile(&config);
        let context = ctx(&["default".to_string()], false);
        params["pairs"]
            .as_array()
            .expect("pairs")
            .iter()
            .filter(|pair| {
                let d = raw_delivery(
                    "generic",
                    "param_check",
                    serde_json::to_vec(pair).expect("JSON"),
                    true,
                    "check",
                );
                let got = compiled.evaluate(&context, &build_envelope(&d, &context));
                assert!(!is_fault(&got), "{}", describe(&got));
                got.label() != Label::Default
            })
            .cloned()
            .collect()
    };
    // The REQ-9 scenario: different families pass.
    let scenario = json!({
        "identity": "reviewer-b",
        "pairs": [{"author": "author-a", "reviewer": "reviewer-b"}],
        "families": {"author-a": "claude", "reviewer-b": "gpt"},
        "require_cross_family": true
    });
    assert!(refused(scenario.clone()).is_empty());
    // The same family is refused, naming the pair.
    let mut same = scenario.clone();
    same["families"]["author-a"] = json!("gpt");
    same["pairs"] = json!([
        {"author": "jony", "reviewer": "reviewer-b"},
        {"author": "author-a", "reviewer": "reviewer-b"}
    ]);
    assert_eq!(
        refused(same.clone()),
        [json!({"author": "author-a", "reviewer": "reviewer-b"})]
    );
    // Only with require_cross_family.
    same["require_cross_family"] = json!(false);
    assert!(refused(same).is_empty());
    // A login without a family is not a same-family pair.
    let mut unknown = scenario;
    unknown["families"] = json!({"reviewer-b": "gpt"});
    assert!(refused(unknown).is_empty());
    // The pool-review cases' params pass.
    let pool = load("pool-review");
    assert!(refused(Value::Object(pool.params.clone())).is_empty());
}
