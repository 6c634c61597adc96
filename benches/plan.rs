//! Issue 4's benchmark: how long a rule-pack plan takes for a 1,000-delivery replay with a
//! 32-rule candidate, on 1, 2 and 4 router processes, against the same 2 × 1,000 envelope
//! evaluations done in-process. Numbers and how to read them: docs/benchmarks.md.
//!
//! The webhook holds trusted-actors@1 + handoff-lanes@1 (27 rules, installed by plan and
//! confirm) and 1,000 stored GitHub deliveries from the real payloads; the plan installs
//! no-self-review@1 in front (5 rules: a 32-rule candidate). Each round times, in a new
//! order: the plan itself (`RulePacks::install` without confirm, as the API runs it), its
//! storage read alone (`recent_events` of 1,000), and its evaluation alone (both
//! configurations over the 1,000 deliveries through the same routers, in the same chunks).
//! What is left of the plan (fixtures, aggregation, the plan's own writes) is the rest.
//!
//! Run: `cargo bench --bench plan` (`PLAN_BENCH_ROUNDS`, default 9; `PLAN_BENCH_ROUTERS`,
//! default `1,2,3`). SQLite on a temp file.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use switchboard_control::routing::{RouterSource, Routers};
use switchboard_control::rule_packs::{Caller, InstallArgs, ReplayWindow, RulePacks};
use switchboard_control::state::{Capabilities, ControlState, Limits};
use switchboard_control::store::{Actor, NewEvent, NewWebhook, SourceType};
use switchboard_control::wire::{routing_context, stored_delivery};
use switchboard_control::{OwnerScope, Store};
use switchboard_packs::Catalog;
use switchboard_proto::router::v1::{Configuration as WireConfiguration, StoredDelivery};
use switchboard_router::engine::{CompiledConfiguration, build_envelope};
use switchboard_testkit::router_process::RouterProcess;
use switchboard_testkit::seed_cases::{Seed, raw_delivery, real_payloads};

const DELIVERIES: usize = 1_000;

fn switchboard_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_switchboard"))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The params of `params` that `name@version` declares.
fn declared(catalog: &Catalog, name: &str, params: &Map<String, Value>) -> Map<String, Value> {
    let pack = &catalog
        .find(name, "1.0.0")
        .unwrap_or_else(|| panic!("{name}@1.0.0 is in the catalog"))
        .pack;
    params
        .iter()
        .filter(|(k, _)| pack.params_schema.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The plan's candidate, merged as control merges it: no-self-review@1 onto the saved
/// configuration.
fn candidate_of(
    catalog: &Catalog,
    webhook: &switchboard_control::store::Webhook,
    params: &Map<String, Value>,
) -> Value {
    let saved: switchboard_model::Configuration = webhook.configuration.clone();
    let provenance = webhook.provenance.clone();
    let pack = &catalog
        .find("no-self-review", "1.0.0")
        .expect("no-self-review@1")
        .pack;
    let request = switchboard_packs::merge::InstallRequest {
        params: declared(catalog, "no-self-review", params),
        ..Default::default()
    };
    let manifests = |name: &str, version: &str| catalog.find(name, version).map(|p| p.pack.clone());
    let candidate = switchboard_packs::merge::install_candidate(
        &saved,
        &provenance,
        pack,
        &request,
        &manifests,
    )
    .expect("the candidate merges");
    assert_eq!(
        candidate.configuration.rules.len(),
        32,
        "a 32-rule candidate"
    );
    serde_json::to_value(&candidate.configuration).expect("JSON")
}

fn install_args(webhook_id: &str, name: &str, params: Map<String, Value>) -> InstallArgs {
    InstallArgs {
        webhook_id: webhook_id.to_string(),
        name: name.to_string(),
        version: Some("1.0.0".into()),
        params: Some(params),
        replay: ReplayWindow {
            limit: Some(DELIVERIES as u32),
            since: None,
        },
        ..Default::default()
    }
}

fn caller(scope: &OwnerScope, n: usize) -> Caller {
    // A caller per plan: the 10-replays-per-minute limit is per endpoint.
    Caller {
        endpoint_id: format!("ep_bench_{n:06}"),
        human: "bench".into(),
        scope: scope.clone(),
    }
}

fn main() {
    let rounds: usize = std::env::var("PLAN_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9)
        .max(1);
    let router_counts: Vec<usize> = std::env::var("PLAN_BENCH_ROUTERS")
        .unwrap_or_else(|_| "1,2,3".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let payloads = match real_payloads() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("plan bench: the real payloads are missing ({e}); nothing measured");
            return;
        }
    };
    let github: Vec<_> = payloads
        .into_iter()
        .filter(|p| p.forge == "github")
        .collect();
    let fleet = Seed::load("fleet").expect("the fleet cases");
    let pool = Seed::load("pool-review").expect("the pool-review cases");
    let mut grant = fleet.grant.clone();
    grant.extend(pool.grant.iter().cloned());
    let catalog = Arc::new(Catalog::builtin());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir().expect("a temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("plan.db").display());

    rt.block_on(async {
        let store = Store::connect(
            &url,
            &switchboard_control::SealingKey::generate().expect("a key"),
        )
            .await
            .expect("open the store");
        store.create_human("bench", None).await.expect("a human");
        let scope = OwnerScope::human("bench");
        let webhook = store
            .create_webhook(NewWebhook {
                owner_scope: scope.clone(),
                source_type: SourceType::Github,
                secret: None,
                grant,
                reject_unverified: false,
                name: None,
                configuration: None,
                actor: Actor::operator(),
            })
            .await
            .expect("a webhook");
        // 1,000 stored deliveries cycling through the real GitHub payloads (1 in 50
        // unverified), each with its own delivery id, stored as ingest stores them.
        let mut bytes = 0usize;
        for i in 0..DELIVERIES {
            let p = &github[i % github.len()];
            let id = format!("00000000-0000-4000-8000-{i:012}");
            let d = raw_delivery("github", &p.event, p.body.clone(), i % 50 != 0, &id);
            bytes += p.body.len();
            store
                .insert_event(NewEvent {
                    webhook_id: webhook.id.clone(),
                    delivery_id: id,
                    kind: d.kind.clone(),
                    headers: d.headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
                    body: p.body.clone().into(),
                    verified: d.verified,
                })
                .await
                .expect("store a delivery");
        }
        println!(
            "stored {DELIVERIES} GitHub deliveries ({:.1} MiB of bodies) on SQLite",
            bytes as f64 / (1024.0 * 1024.0)
        );

        let mut results: BTreeMap<usize, [f64; 4]> = BTreeMap::new();
        let mut baseline = Vec::new();
        let mut plan_no = 0usize;
        let mut configs: Option<(Value, Value)> = None;
        for &n in &router_counts {
            let processes: Vec<RouterProcess> = (0..n).map(|_| RouterProcess::start(&switchboard_exe(), &[])).collect();
            let routers = Routers::new(
                RouterSource::Static(processes.iter().map(|p| p.addr.clone()).collect()),
                Duration::from_secs(60),
            )
            .await;
            let state = ControlState {
                trials: switchboard_control::trials::Trials::start(
                    store.clone(),
                    routers.clone(),
                    Default::default(),
                ),
                console_base: None,
                store: store.clone(),
                routers: routers.clone(),
                // trusted-actors@1 is for instances without the capability.
                capabilities: Capabilities {
                    trusted_actors: false,
                },
                limits: Limits::default(),
                catalog: catalog.clone(),
            };
            let packs = RulePacks::new(state.clone(), catalog.clone());
            // Once: the 27-rule saved configuration, installed by plan and confirm.
            if configs.is_none() {
                for name in ["trusted-actors", "handoff-lanes"] {
                    let args = install_args(&webhook.id, name, declared(&catalog, name, &fleet.params));
                    plan_no += 1;
                    let plan = packs
                        .install(&caller(&scope, plan_no), args.clone(), None)
                        .await
                        .unwrap_or_else(|e| panic!("plan {name}: {e:?}"));
                    let plan = serde_json::to_value(plan).expect("plan json");
                    let token = plan["plan_token"].as_str().expect("a plan token").to_string();
                    plan_no += 1;
                    packs
                        .install(
                            &caller(&scope, plan_no),
                            InstallArgs {
                                confirm: Some(token),
                                ..args
                            },
                            None,
                        )
                        .await
                        .unwrap_or_else(|e| panic!("confirm {name}: {e:?}"));
                }
            }
            let saved = store.get_webhook(&scope, &webhook.id).await.expect("the webhook");
            let ctx = routing_context(&saved, &state.capabilities);
            let candidate_args = install_args(
                &webhook.id,
                "no-self-review",
                declared(&catalog, "no-self-review", &pool.params),
            );
            // Warm: routers compile both configurations; the first plan also gives the
            // candidate for the in-process baseline.
            plan_no += 1;
            let plan = packs
                .install(&caller(&scope, plan_no), candidate_args.clone(), None)
                .await
                .unwrap_or_else(|e| panic!("plan no-self-review: {e:?}"));
            let plan = serde_json::to_value(plan).expect("plan json");
            assert_eq!(
                plan["events_replayed"].as_u64(),
                Some(DELIVERIES as u64),
                "the plan replays all {DELIVERIES}"
            );
            assert_eq!(plan["truncated"], false);
            if configs.is_none() {
                configs = Some((
                    serde_json::to_value(&saved.configuration).expect("json"),
                    Value::Null,
                ));
            }
            // What the plan replays: the saved configuration and the plan's candidate.
            let saved_json = configs.clone().expect("configurations").0;
            let candidate_json = candidate_of(&catalog, &saved, &pool.params);
            let wire = [
                WireConfiguration::text(saved_json.to_string()),
                WireConfiguration::text(candidate_json.to_string()),
            ];
            configs = Some((saved_json, candidate_json));
            let mut plan_ms = Vec::new();
            let mut read_ms = Vec::new();
            let mut eval_ms = Vec::new();
            for round in 0..rounds {
                let mut order = [0, 1, 2];
                order.rotate_left(round % 3);
                for step in order {
                    match step {
                        0 => {
                            plan_no += 1;
                            let t = Instant::now();
                            let plan = packs
                                .install(&caller(&scope, plan_no), candidate_args.clone(), None)
                                .await
                                .expect("plan");
                            plan_ms.push(ms(t.elapsed()));
                            let plan = serde_json::to_value(plan).expect("plan json");
                            assert!(plan["plan_token"].is_string());
                        }
                        1 => {
                            let t = Instant::now();
                            let events = store
                                .recent_events(&scope, &webhook.id, DELIVERIES as u32, None)
                                .await
                                .expect("read");
                            let ds: Vec<StoredDelivery> = events.iter().map(stored_delivery).collect();
                            read_ms.push(ms(t.elapsed()));
                            assert_eq!(ds.len(), DELIVERIES);
                        }
                        _ => {
                            let events = store
                                .recent_events(&scope, &webhook.id, DELIVERIES as u32, None)
                                .await
                                .expect("read");
                            let ds: Vec<StoredDelivery> = events.iter().map(stored_delivery).collect();
                            let t = Instant::now();
                            let out = routers
                                .evaluate_chunked(&ctx, &wire, ds, state.limits.replay_chunk, 50, "")
                                .await
                                .expect("evaluate");
                            eval_ms.push(ms(t.elapsed()));
                            assert_eq!(out.len(), DELIVERIES);
                        }
                    }
                }
            }
            let (p, r, e) = (median(plan_ms), median(read_ms), median(eval_ms));
            results.insert(n, [p, r, e, (p - r - e).max(0.0)]);
            drop(processes);
        }

        // The in-process reference: the same 2 × 1,000 evaluations, parse and envelope
        // included, one thread (docs/benchmarks.md (a) 2 configs).
        let (saved_json, candidate_json) = configs.expect("configurations");
        let compile = |v: &Value| {
            let c = switchboard_router::engine::validate::parse_configuration(&v.to_string())
                .expect("parses");
            CompiledConfiguration::compile(&c).expect("compiles")
        };
        let (a, b) = (compile(&saved_json), compile(&candidate_json));
        let saved = store.get_webhook(&scope, &webhook.id).await.expect("webhook");
        let ctx = routing_context(&saved, &Capabilities { trusted_actors: false });
        let events = store
            .recent_events(&scope, &webhook.id, DELIVERIES as u32, None)
            .await
            .expect("read");
        let ds: Vec<StoredDelivery> = events.iter().map(stored_delivery).collect();
        for _ in 0..rounds {
            let t = Instant::now();
            for d in &ds {
                let envelope = build_envelope(d, &ctx);
                std::hint::black_box(a.evaluate(&ctx, &envelope));
                std::hint::black_box(b.evaluate(&ctx, &envelope));
            }
            baseline.push(ms(t.elapsed()));
        }
        let base = median(baseline);
        println!();
        println!("in-process, 2 × {DELIVERIES} evaluations (parse + envelope + both configurations): {base:.1} ms (median of {rounds})");
        println!("target: plan ≤ 1.5 × that = {:.1} ms", 1.5 * base);
        println!();
        println!("| routers | plan ms | storage read ms | evaluation ms | rest ms | plan ÷ in-process | target ≤ 1.5× |");
        println!("|---:|---:|---:|---:|---:|---:|---|");
        for (n, [p, r, e, rest]) in &results {
            println!(
                "| {n} | {p:.1} | {r:.1} ({:.0} %) | {e:.1} ({:.0} %) | {rest:.1} ({:.0} %) | {:.2}× | {} |",
                100.0 * r / p,
                100.0 * e / p,
                100.0 * rest / p,
                p / base,
                if p / base <= 1.5 { "met" } else { "missed" }
            );
        }
    });
}
