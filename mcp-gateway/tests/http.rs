//! The gateway over real HTTP in front of a fake control (real gRPC): authentication, the
//! allowlist, bad input of every kind (each a clear error, the gateway still serving),
//! business errors as `isError` results, progress and cancellation, and both protocol eras.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use switchboard_mcp_gateway::{BoundGateway, GatewayConfig};

mod support;

#[tokio::test]
async fn a_missing_or_unknown_credential_answers_401_with_the_bearer_challenge() {
    let (addr, fake) = gateway(|_| {}).await;
    for bearer in ["", "sbe_unknown"] {
        let r = post(addr, bearer, &list(1)).await;
        assert_eq!(r.status, 401, "{r:?}");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Bearer error=\"invalid_token\"")
        );
        assert_eq!(r.json()["error"]["code"], "unauthenticated");
    }
    // A malformed Authorization header is no credential either.
    let r = send(
        addr,
        mcp_request(
            addr,
            &[("Authorization", "Basic abc")],
            list(1).to_string().as_bytes(),
        ),
    )
    .await;
    assert_eq!(r.status, 401);
    // No credential costs control nothing; the unknown one was checked once.
    assert_eq!(fake.seen.who_am_i_calls.load(Ordering::SeqCst), 1);
    // And the gateway still serves a good caller.
    let r = post(addr, ALL, &list(2)).await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn every_control_call_carries_the_callers_own_bearer() {
    let (addr, fake) = gateway(|_| {}).await;
    let r = post(addr, FEW, &call(1, "list_webhooks", json!({}))).await;
    let result = tool_result(&r);
    assert_eq!(result["isError"], false, "{result}");
    let seen = fake.seen.authorizations.lock().unwrap().clone();
    // WhoAmI, then the verb: both with the caller's credential.
    assert_eq!(seen, vec![format!("Bearer {FEW}"), format!("Bearer {FEW}")]);
}

/// One MCP request takes one unit of the endpoint's budget: a tool call pays with its verb
/// (its WhoAmI is uncharged), anything else with its WhoAmI, and a tool call refused before
/// reaching control pays with a charged WhoAmI.
#[tokio::test]
async fn every_mcp_request_takes_exactly_one_unit_of_the_budget() {
    let (addr, fake) = gateway(|_| {}).await;
    let flags = |fake: &FakeControl| fake.seen.who_am_i_uncharged.lock().unwrap().clone();
    let calls = |fake: &FakeControl| fake.seen.authorizations.lock().unwrap().len();

    // tools/list: a charged WhoAmI and nothing else.
    let r = post(addr, FEW, &list(1)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(flags(&fake), vec![false]);
    assert_eq!(calls(&fake), 1);

    // A tool call that reaches control: an uncharged WhoAmI, then the verb (which pays).
    let r = post(addr, FEW, &call(2, "list_webhooks", json!({}))).await;
    assert_eq!(tool_result(&r)["isError"], false);
    assert_eq!(flags(&fake), vec![false, true]);
    assert_eq!(calls(&fake), 3);

    // Refused by the gateway (not on the allowlist; bad arguments; unknown tool): the
    // uncharged WhoAmI, then a charged one, so the refusal costs what a call costs.
    let refused = [
        call(3, "delete_webhook", json!({"webhook_id": "wh_1"})),
        call(4, "get_webhook", json!({"webhook_id": 42})),
        call(5, "no_such_tool", json!({})),
    ];
    for (i, message) in refused.iter().enumerate() {
        let r = post(addr, FEW, message).await;
        assert_eq!(r.status, 200, "{r:?}");
        let f = flags(&fake);
        assert_eq!(&f[f.len() - 2..], &[true, false], "refusal {i}: {f:?}");
        assert_eq!(calls(&fake), 3 + 2 * (i + 1), "refusal {i}");
    }
}

#[tokio::test]
async fn tools_list_shows_the_allowlist_privately() {
    let (addr, _) = gateway(|_| {}).await;
    let r = post(addr, FEW, &list(1)).await;
    let result = tool_result(&r);
    let names: Vec<&str> = result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "get_webhook",
            "list_rule_packs",
            "list_webhook_rules",
            "list_webhooks"
        ]
    );
    let r = post(addr, ALL, &list(2)).await;
    assert_eq!(
        tool_result(&r)["tools"].as_array().unwrap().len(),
        ALL_VERBS.len()
    );
}

#[tokio::test]
async fn a_verb_off_the_allowlist_is_refused_when_called_directly() {
    let (addr, fake) = gateway(|_| {}).await;
    let before = fake.seen.authorizations.lock().unwrap().len();
    let r = post(
        addr,
        FEW,
        &call(
            1,
            "install_rule_pack",
            json!({"webhook_id": "wh_1", "name": "drop-ci-noise"}),
        ),
    )
    .await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "permission_denied");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("install_rule_pack")
    );
    assert!(error["details"]["allowed"].as_array().unwrap().len() == 4);
    // Only WhoAmI reached control (uncharged, then charged for the refusal): the call
    // itself never left the gateway.
    assert_eq!(fake.seen.authorizations.lock().unwrap().len(), before + 2);
    assert_eq!(fake.seen.who_am_i_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_read_only_gateway_refuses_writes() {
    let (addr, _) = gateway(|c| c.read_only = true).await;
    let r = post(addr, ALL, &list(1)).await;
    let tools = tool_result(&r)["tools"].as_array().unwrap().clone();
    assert!(
        tools
            .iter()
            .all(|t| t["annotations"]["readOnlyHint"] == true)
    );
    let r = post(
        addr,
        ALL,
        &call(
            1,
            "create_webhook",
            json!({"source_type": "github", "grant": ["forge"]}),
        ),
    )
    .await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "permission_denied");
    assert!(error["message"].as_str().unwrap().contains("read-only"));
}

#[tokio::test]
async fn results_are_structured_and_the_same_json_as_text() {
    let (addr, _) = gateway(|_| {}).await;
    let r = post(addr, ALL, &call(1, "list_webhooks", json!({}))).await;
    let result = tool_result(&r);
    let structured = result["structuredContent"].clone();
    let webhook = &structured["webhooks"][0];
    assert_eq!(webhook["source_type"], "github");
    // JSON text fields of the proto arrive as real JSON.
    assert_eq!(
        webhook["installed_packs"]["drop-ci-noise"]["version"],
        "1.0.0"
    );
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, structured);

    let r = post(
        addr,
        ALL,
        &call(2, "get_webhook_event", json!({"event_id": "ev_1"})),
    )
    .await;
    let event = tool_result(&r)["structuredContent"].clone();
    assert_eq!(event["payload"]["number"], 7);
    assert_eq!(event["event"]["decision"]["queue"], "review");
    assert_eq!(event["event"]["fault"], Value::Null);
}

#[tokio::test]
async fn explain_is_typed_and_a_missing_event_names_the_next_call() {
    let (addr, _) = gateway(|_| {}).await;
    let r = post(
        addr,
        ALL,
        &call(1, "explain_webhook_event", json!({"event_id": "ev_1"})),
    )
    .await;
    let explained = tool_result(&r)["structuredContent"].clone();
    assert_eq!(
        explained,
        json!({
            "event_id": "ev_1",
            "webhook_id": "wh_00000000000000000000000000000001",
            "kind": "pull_request.opened",
            "recorded_decision": {"decision": "queue:review", "queue": "review", "rule_id": "r-2"},
            "recorded_version_status": "known",
            "recorded_version": 1,
            "recorded_digest": "d1",
            "rules": [
                {"index": 0, "rule_id": "r-1", "outcome": "fault", "action": "drop",
                 "fault_code": "rule_fault", "reason": "null (null) has no keys", "deciding": false},
                {"index": 1, "rule_id": "r-2", "outcome": "matched", "action": "queue:review",
                 "fault_code": null, "reason": null, "deciding": true},
            ],
            "reevaluated_decision": {"decision": "queue:review", "queue": "review", "rule_id": "r-2"},
            "reevaluation_differs": false,
            "current_version": 2,
            "current_digest": "d2",
            "current_decision": {"decision": "queue:forge", "queue": "forge", "rule_id": "r-9"},
            "current_differs": true,
            "trials": [
                {"trial_id": "tr_1", "plan_id": "pl_1", "differs": true,
                 "decision": {"decision": "drop", "rule_id": "drop-ci-noise--ci-noise"}},
            ],
        })
    );

    let r = post(
        addr,
        ALL,
        &call(2, "explain_webhook_event", json!({"event_id": "ev_nope"})),
    )
    .await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "not_found");
    assert!(
        error["details"]["next"]
            .as_str()
            .unwrap()
            .contains("list_webhook_events")
    );
}

#[tokio::test]
async fn redrive_plans_typed_and_its_stale_confirm_names_the_next_call() {
    let (addr, _) = gateway(|_| {}).await;
    let r = post(
        addr,
        ALL,
        &call(
            1,
            "redrive_webhook_events",
            json!({"webhook_id": "wh_1", "filter": {"decisions": ["quarantine"]}}),
        ),
    )
    .await;
    let plan = tool_result(&r)["structuredContent"].clone();
    assert_eq!(plan["events"][0]["before"], "quarantine");
    assert_eq!(plan["events"][0]["after"], "queue:review");
    assert_eq!(
        plan["events"][0]["before_decision"],
        json!({"decision": "quarantine", "rule_id": "r-1"})
    );
    assert_eq!(plan["totals_after"], json!({"queue:review": 1}));
    assert_eq!(
        plan["confirm_with"],
        json!({"tool": "confirm_webhook_redrive", "webhook_id": "wh_1",
               "plan_token": "sbp_redrive", "note": "Nothing was changed."})
    );

    let r = post(
        addr,
        ALL,
        &call(
            2,
            "confirm_webhook_redrive",
            json!({"webhook_id": "wh_1", "plan_token": "sbp_redrive"}),
        ),
    )
    .await;
    let done = tool_result(&r)["structuredContent"].clone();
    assert_eq!(
        (done["applied"].clone(), done["todos_created"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(done["events"][0]["todo_id"], "td_1");

    let r = post(
        addr,
        ALL,
        &call(
            3,
            "confirm_webhook_redrive",
            json!({"webhook_id": "wh_1", "plan_token": "sbp_used"}),
        ),
    )
    .await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "plan_stale");
    assert!(
        error["details"]["next"]
            .as_str()
            .unwrap()
            .contains("redrive_webhook_events")
    );
}

#[tokio::test]
async fn business_errors_name_what_was_wrong_and_the_next_call() {
    let (addr, _) = gateway(|_| {}).await;
    let r = post(
        addr,
        ALL,
        &call(1, "get_webhook", json!({"webhook_id": "wh_nope"})),
    )
    .await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "not_found");
    assert_eq!(error["message"], "webhook not found");
    assert!(
        error["details"]["next"]
            .as_str()
            .unwrap()
            .contains("list_webhooks")
    );

    let r = post(
        addr,
        ALL,
        &call(
            2,
            "confirm_rule_pack_plan",
            json!({"webhook_id": "wh_1", "plan_token": "tok_stale"}),
        ),
    )
    .await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "plan_stale");
    // Why, from the status's PreconditionFailure: a word to branch on.
    assert_eq!(error["details"]["cause"], "used", "{error}");
    assert!(
        error["details"]["next"]
            .as_str()
            .unwrap()
            .contains("plan again with the call that made the plan")
    );

    // The planning tools only plan: a confirm sent to one is told where confirms went, and
    // nothing reaches control.
    let r = post(
        addr,
        ALL,
        &call(
            2,
            "install_rule_pack",
            json!({"webhook_id": "wh_1", "name": "drop-ci-noise", "confirm": "tok_fresh"}),
        ),
    )
    .await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "invalid_argument");
    assert_eq!(error["details"]["field"], "confirm");
    assert!(
        error["details"]["next"]
            .as_str()
            .unwrap()
            .starts_with("confirm_rule_pack_plan")
    );

    // An error in the middle of a plan's stream is a business error too.
    let r = post(
        addr,
        ALL,
        &call(
            3,
            "install_rule_pack",
            json!({"webhook_id": "wh_1", "name": "faulty"}),
        ),
    )
    .await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "pack_rule_faults");
    assert_eq!(error["details"]["faults"][0]["event_ids"][1], "ev_2");

    // A verb control does not serve yet is named as such.
    let r = post(
        addr,
        ALL,
        &call(4, "delete_webhook", json!({"webhook_id": "wh_1"})),
    )
    .await;
    assert_eq!(tool_error(&tool_result(&r))["code"], "unimplemented");
}

#[tokio::test]
async fn a_spent_budget_answers_rate_limited_with_a_retry_hint() {
    let (addr, _) = gateway(|_| {}).await;
    let r = post(addr, SPENT, &call(1, "list_webhooks", json!({}))).await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "rate_limited");
    assert_eq!(error["details"]["retry_after_ms"], 2500);
    assert!(
        error["details"]["next"]
            .as_str()
            .unwrap()
            .contains("2500 ms")
    );
    // tools/list has no tool result to carry it: a JSON-RPC error with the same data.
    let r = post(addr, SPENT, &list(2)).await;
    let message = r.response();
    assert_eq!(message["error"]["data"]["code"], "rate_limited");
    assert_eq!(message["error"]["data"]["retry_after_ms"], 2500);
}

#[tokio::test]
async fn wrong_types_unknown_fields_and_missing_fields_are_clear_tool_errors() {
    let (addr, _) = gateway(|_| {}).await;
    let cases = [
        (json!({"webhook_id": 42}), "invalid type"),
        (
            json!({"webhook_id": "wh_1", "colour": "red"}),
            "unknown field `colour`",
        ),
        (json!({}), "missing field `webhook_id`"),
    ];
    for (i, (arguments, expected)) in cases.into_iter().enumerate() {
        let r = post(addr, ALL, &call(i as u64, "get_webhook", arguments)).await;
        let error = tool_error(&tool_result(&r));
        assert_eq!(error["code"], "invalid_argument");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(expected), "{message}");
        assert!(message.contains("get_webhook"), "{message}");
    }
    // A JSON-string field of the proto must be an object here.
    let r = post(
        addr,
        ALL,
        &call(
            9,
            "set_webhook_rules",
            json!({"webhook_id": "wh_1", "configuration": "[]"}),
        ),
    )
    .await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "invalid_argument");
    assert_eq!(error["details"]["field"], "configuration");
    // Still serving.
    assert_eq!(post(addr, ALL, &list(10)).await.status, 200);
}

#[tokio::test]
async fn an_agents_configuration_and_patch_are_checked_for_shape_before_control() {
    // The fake control answers every rule write `unimplemented`: these answers are the gateway's.
    let (addr, _) = gateway(|_| {}).await;
    for (i, configuration) in [
        json!({"rules": [], "extra": 1}),
        json!({"rules": {}}),
        json!({"rules": [{"when": "true", "action": {"drop": false}}]}),
    ]
    .into_iter()
    .enumerate()
    {
        let r = post(
            addr,
            ALL,
            &call(
                i as u64,
                "set_webhook_rules",
                json!({"webhook_id": "wh_1", "configuration": configuration}),
            ),
        )
        .await;
        let error = tool_error(&tool_result(&r));
        assert_eq!(error["code"], "invalid_configuration", "{error}");
        let problems = error["details"]["problems"].as_array().expect("problems");
        assert_eq!(problems.len(), 1, "{error}");
        assert_eq!(problems[0]["code"], "invalid_configuration");
        assert_eq!(problems[0]["rule_index"], -1);
        assert!(
            problems[0]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("not a configuration")),
            "{error}"
        );
        assert!(error["details"]["next"].as_str().is_some(), "{error}");
    }
    let r = post(
        addr,
        ALL,
        &call(
            7,
            "update_webhook_rule",
            json!({"webhook_id": "wh_1", "rule_id": "r-1", "rule": {"whenn": "true"}}),
        ),
    )
    .await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "invalid_argument", "{error}");
    assert_eq!(error["details"]["field"], "rule");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("\"whenn\" is not a rule field")),
        "{error}"
    );
    // A well-formed write gets through to control (whose fake does not serve it).
    let r = post(
        addr,
        ALL,
        &call(
            8,
            "update_webhook_rule",
            json!({"webhook_id": "wh_1", "rule_id": "r-1", "rule": {"when": "true"}}),
        ),
    )
    .await;
    assert_eq!(tool_error(&tool_result(&r))["code"], "unimplemented");
}

#[tokio::test]
async fn oversize_arguments_are_refused_and_the_gateway_keeps_serving() {
    let (addr, _) = gateway(|_| {}).await;
    // Over the 1 MiB argument cap but under the body limit: a tool error.
    let big = "x".repeat(1024 * 1024 + 10);
    let r = post(
        addr,
        ALL,
        &call(1, "get_webhook", json!({"webhook_id": big})),
    )
    .await;
    let error = tool_error(&tool_result(&r));
    assert_eq!(error["code"], "payload_too_large");
    assert_eq!(error["details"]["limit_bytes"], 1024 * 1024);
    // Over the body limit: 413 before anything is parsed.
    let huge = "x".repeat(3 * 1024 * 1024);
    let r = post(
        addr,
        ALL,
        &call(2, "get_webhook", json!({"webhook_id": huge})),
    )
    .await;
    assert_eq!(r.status, 413, "{}", r.body);
    assert!(r.body.contains("larger than"), "{}", r.body);
    assert_eq!(post(addr, ALL, &list(3)).await.status, 200);
}

#[tokio::test]
async fn malformed_json_rpc_is_a_json_rpc_error() {
    let (addr, _) = gateway(|_| {}).await;
    let auth = format!("Bearer {ALL}");
    let cases: [(&[u8], i64); 4] = [
        (b"{not json", -32700),
        (b"[]", -32600),
        (br#"{"jsonrpc":"2.0","id":1}"#, -32600),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":7}"#,
            -32600,
        ),
    ];
    for (body, code) in cases {
        let r = send(addr, mcp_request(addr, &[("Authorization", &auth)], body)).await;
        assert_eq!(r.status, 400, "{r:?}");
        let error = r.json();
        assert_eq!(error["jsonrpc"], "2.0");
        assert_eq!(error["error"]["code"], code, "{error}");
    }
    // An unknown tool and an unknown method are protocol faults too.
    let r = post(addr, ALL, &call(5, "drop_database", json!({}))).await;
    let message = r.response();
    assert_eq!(message["error"]["code"], -32602, "{message}");
    let r = post(
        addr,
        ALL,
        &json!({"jsonrpc": "2.0", "id": 6, "method": "no/such_method"}),
    )
    .await;
    assert!(r.response()["error"]["code"].is_i64(), "{r:?}");
    assert_eq!(post(addr, ALL, &list(7)).await.status, 200);
}

#[tokio::test]
async fn a_wrong_host_or_origin_is_refused_before_the_credential_is_checked() {
    let (addr, fake) = gateway(|_| {}).await;
    let auth = format!("Bearer {ALL}");
    let body = list(1).to_string();
    let r = send(
        addr,
        mcp_request(
            addr,
            &[("Host", "evil.example:8090"), ("Authorization", &auth)],
            body.as_bytes(),
        ),
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body.contains("Host"), "{}", r.body);
    let r = send(
        addr,
        mcp_request(
            addr,
            &[("Origin", "https://evil.example"), ("Authorization", &auth)],
            body.as_bytes(),
        ),
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(fake.seen.who_am_i_calls.load(Ordering::SeqCst), 0);
    // A loopback page is allowed, and so is a name the operator allowed.
    let r = send(
        addr,
        mcp_request(
            addr,
            &[
                ("Origin", "http://localhost:3000"),
                ("Authorization", &auth),
            ],
            body.as_bytes(),
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let (addr, _) = gateway(|c| c.allowed_hosts.push("mcp.example.com".into())).await;
    let r = send(
        addr,
        mcp_request(
            addr,
            &[("Host", "mcp.example.com"), ("Authorization", &auth)],
            body.as_bytes(),
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
}

/// test_webhook_rules with `replay` streams: the replay's progress reaches the agent; a
/// dry run over one payload stays one unary call.
#[tokio::test]
async fn a_replay_of_hand_written_rules_forwards_progress() {
    let (addr, _) = gateway(|_| {}).await;
    let mut request = call(
        1,
        "test_webhook_rules",
        json!({"webhook_id": "wh_1", "replay": {"limit": 2}}),
    );
    request["params"]["_meta"] = json!({"progressToken": "r-1"});
    let r = post(addr, ALL, &request).await;
    let messages = r.messages();
    let progress: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 2, "{messages:?}");
    assert_eq!(progress[0]["params"]["progressToken"], "r-1");
    assert_eq!(progress[1]["params"]["progress"], 2.0);
    assert_eq!(progress[1]["params"]["total"], 2.0);
    let result = tool_result(&r);
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["kind"], "streamed", "{result}");

    let r = post(
        addr,
        ALL,
        &call(
            2,
            "test_webhook_rules",
            json!({"webhook_id": "wh_1", "payload": {"body": {"action": "opened"}}}),
        ),
    )
    .await;
    let result = tool_result(&r);
    assert_eq!(result["structuredContent"]["kind"], "unary", "{result}");
}

#[tokio::test]
async fn a_plan_forwards_progress_when_the_client_asks() {
    let (addr, _) = gateway(|_| {}).await;
    let mut request = call(
        1,
        "install_rule_pack",
        json!({"webhook_id": "wh_1", "name": "drop-ci-noise", "params": {"bot_actors": ["ci-bot"]}}),
    );
    request["params"]["_meta"] = json!({"progressToken": "p-1"});
    let r = post(addr, ALL, &request).await;
    assert_eq!(r.status, 200);
    let messages = r.messages();
    let progress: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{messages:?}");
    assert_eq!(progress[0]["params"]["progressToken"], "p-1");
    assert_eq!(progress[2]["params"]["progress"], 3.0);
    assert_eq!(progress[2]["params"]["total"], 3.0);
    let plan = tool_result(&r)["structuredContent"].clone();
    assert_eq!(plan["plan_token"], "tok_fresh");
    // params travelled to control as a Struct (the fake control says what it saw).
    let note = plan["confirm_with"]["note"].as_str().expect("a note");
    let seen: Value =
        serde_json::from_str(note.trim_start_matches("params seen: ")).expect("params json");
    assert_eq!(seen["bot_actors"][0], "ci-bot");
    assert_eq!(plan["nothing_saved"], true);

    // Without a progressToken, no notifications: just the result.
    let r = post(
        addr,
        ALL,
        &call(
            2,
            "install_rule_pack",
            json!({"webhook_id": "wh_1", "name": "drop-ci-noise"}),
        ),
    )
    .await;
    assert_eq!(r.messages().len(), 1, "{r:?}");
}

#[tokio::test]
async fn a_client_going_away_drops_the_replay_stream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (addr, fake) = gateway(|_| {}).await;
    let mut request = call(
        1,
        "install_rule_pack",
        json!({"webhook_id": "wh_1", "name": "slow"}),
    );
    request["params"]["_meta"] = json!({"progressToken": 7});
    let auth = format!("Bearer {ALL}");
    let bytes = mcp_request(
        addr,
        &[("Authorization", &auth)],
        request.to_string().as_bytes(),
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(&bytes).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&seen).contains("notifications/progress") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no progress arrived"
        );
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(!fake.seen.slow_stream_dropped.load(Ordering::SeqCst));
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !fake.seen.slow_stream_dropped.load(Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replay stream was not dropped after the client went away"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = fake.seen.slow_events_sent.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fake.seen.slow_events_sent.load(Ordering::SeqCst),
        sent,
        "the replay stopped"
    );
}

#[tokio::test]
async fn the_session_protocol_handshake_is_served_without_a_session() {
    let (addr, _) = gateway(|_| {}).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}
    }});
    let r = post(addr, ALL, &init).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.header("mcp-session-id").is_none(),
        "stateless: no session id"
    );
    let result = r.response()["result"].clone();
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert_eq!(result["serverInfo"]["name"], "switchboard-mcp-gateway");
    assert!(result["capabilities"]["tools"].is_object());
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(addr, ALL, &note).await.status, 202);
}

#[tokio::test]
async fn the_stateless_protocol_is_served_per_request() {
    let (addr, _) = gateway(|_| {}).await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "list_webhooks", "arguments": {}, "_meta": meta
    }});
    let auth = format!("Bearer {FEW}");
    let r = send(
        addr,
        mcp_request(
            addr,
            &[
                ("Authorization", &auth),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "list_webhooks"),
            ],
            body.to_string().as_bytes(),
        ),
    )
    .await;
    let result = tool_result(&r);
    assert_eq!(
        result["structuredContent"]["webhooks"][0]["default_queue"],
        "forge"
    );
    let body =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}});
    let r = send(
        addr,
        mcp_request(
            addr,
            &[
                ("Authorization", &auth),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/list"),
            ],
            body.to_string().as_bytes(),
        ),
    )
    .await;
    let result = tool_result(&r);
    assert_eq!(result["cacheScope"], "private", "{result}");
    assert_eq!(result["tools"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn health_needs_no_credential() {
    let (addr, _) = gateway(|_| {}).await;
    let r = send(
        addr,
        format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").into_bytes(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "ok");
}

#[tokio::test]
async fn a_session_id_never_carries_one_callers_identity_to_another() {
    // Stateless: there are no sessions to hijack. The same Mcp-Session-Id sent with two
    // credentials is served as two different callers, each as its own bearer says.
    let (addr, _) = gateway(|_| {}).await;
    let body = list(1).to_string();
    let tools = |r: HttpResponse| tool_result(&r)["tools"].as_array().unwrap().len();
    let mut counts = Vec::new();
    for bearer in [ALL, FEW, ALL] {
        let auth = format!("Bearer {bearer}");
        let r = send(
            addr,
            mcp_request(
                addr,
                &[
                    ("Authorization", &auth),
                    ("Mcp-Session-Id", "shared-session"),
                ],
                body.as_bytes(),
            ),
        )
        .await;
        counts.push(tools(r));
    }
    assert_eq!(counts, [ALL_VERBS.len(), 4, ALL_VERBS.len()]);
}

/// At shutdown readiness goes first: `/readyz` answers 503 while the gateway still serves
/// (`/healthz`, tool calls) for the readiness grace, then it stops.
#[tokio::test]
async fn shutdown_reports_not_ready_first_and_serves_through_the_grace() {
    let (control, _fake) = fake_control().await;
    let mut config = GatewayConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), control.to_string());
    config.readiness_grace = Duration::from_millis(700);
    let bound = BoundGateway::bind(config).await.expect("gateway binds");
    let addr = bound.local_addr;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(bound.serve(async move {
        let _ = stopped.await;
    }));
    let get = |path: &str| {
        send(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .into_bytes(),
        )
    };
    assert_eq!(get("/readyz").await.status, 200);

    let _ = stop.send(());
    let mut not_ready = None;
    for _ in 0..50 {
        let r = get("/readyz").await;
        if r.status == 503 {
            not_ready = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(not_ready.is_some(), "/readyz never answered 503");
    assert_eq!(
        get("/healthz").await.status,
        200,
        "still serving in the grace"
    );
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the gateway stops after the grace")
        .expect("the serve task")
        .expect("serves cleanly");
}
