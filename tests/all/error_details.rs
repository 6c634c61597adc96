//! Issue 49 item 1, one error shape: every RPC of control's API, called by a Python grpcio
//! client with a bad argument (tests/grpc/bad_arguments.py), answers a status whose typed
//! details say what was wrong — the reason in `ErrorInfo` (flat metadata, never JSON text),
//! each refused field in a `BadRequest`, a stale plan's cause in a `PreconditionFailure`, lists
//! in our `RefusalDetails` — and the message starts with the reason. A new RPC without a case
//! here fails the test.

use std::collections::BTreeSet;

use prost::Message;
use serde_json::{Value, json};

use crate::control_harness::{TestDb, on_every_backend};
use crate::rule_packs::{ALL, Env, Options};

/// What a bad argument must answer: the gRPC code, the reason, and the fields its
/// `BadRequest` names (empty: none is sent, as for `not_found`, which names nothing).
type Answer = (&'static str, &'static str, &'static [&'static str]);

/// Each RPC's [`Answer`].
fn expected() -> Vec<(&'static str, Answer)> {
    const NOT_FOUND: Answer = ("NOT_FOUND", "not_found", &[]);
    const NO_CREDENTIAL: Answer = ("UNAUTHENTICATED", "unauthenticated", &[]);
    let invalid =
        |fields: &'static [&'static str]| ("INVALID_ARGUMENT", "invalid_argument", fields);
    vec![
        ("Webhooks.CreateWebhook", invalid(&["source_type"])),
        ("Webhooks.ListWebhooks", NO_CREDENTIAL),
        ("Webhooks.GetWebhook", NOT_FOUND),
        ("Webhooks.DeleteWebhook", NOT_FOUND),
        ("Webhooks.RotateWebhookSecret", invalid(&["secret"])),
        ("Webhooks.RenameWebhook", invalid(&["name"])),
        ("Webhooks.ListWebhookEvents", invalid(&["limit"])),
        ("Webhooks.GetWebhookEvent", NOT_FOUND),
        ("Webhooks.ExplainWebhookEvent", NOT_FOUND),
        ("Webhooks.RedriveWebhookEvents", invalid(&["limit"])),
        ("Webhooks.ConfirmWebhookRedrive", invalid(&["plan_token"])),
        ("WebhookRules.ListWebhookRules", NOT_FOUND),
        (
            "WebhookRules.SetWebhookRules",
            (
                "INVALID_ARGUMENT",
                "invalid_configuration",
                &["rules[0].when"],
            ),
        ),
        (
            "WebhookRules.UpdateWebhookRule",
            (
                "INVALID_ARGUMENT",
                "invalid_configuration",
                &["rules[0].when"],
            ),
        ),
        ("WebhookRules.DeleteWebhookRule", NOT_FOUND),
        ("WebhookRules.TestWebhookRules", invalid(&["event_id"])),
        (
            "WebhookRules.TestWebhookRulesStream",
            invalid(&["event_id"]),
        ),
        ("WebhookRules.ListWebhookHistory", invalid(&["limit"])),
        ("WebhookRules.ListWebhookChanges", invalid(&["limit"])),
        (
            "WebhookRules.PlanWebhookRules",
            (
                "INVALID_ARGUMENT",
                "invalid_configuration",
                &["rules[0].when"],
            ),
        ),
        ("Todos.ListTodos", invalid(&["filter"])),
        ("Todos.ClaimTodo", NOT_FOUND),
        ("Todos.ReleaseTodo", NOT_FOUND),
        ("Todos.CompleteTodo", NOT_FOUND),
        ("Identity.WhoAmI", NO_CREDENTIAL),
        ("Operators.CreateHuman", invalid(&["login"])),
        ("Operators.ListHumans", invalid(&["limit"])),
        ("Operators.DeleteHuman", NOT_FOUND),
        ("Operators.CreateSignInLink", NOT_FOUND),
        ("Operators.CreateTeam", invalid(&["slug"])),
        ("Operators.ListTeams", invalid(&["limit"])),
        ("Operators.DeleteTeam", NOT_FOUND),
        ("Operators.SetTeamMember", invalid(&["role"])),
        ("Operators.RemoveTeamMember", NOT_FOUND),
        ("Operators.ProvisionWebhook", invalid(&["owner_scope"])),
        ("Operators.ListScopeWebhooks", invalid(&["owner_scope"])),
        ("Operators.DeprovisionWebhook", NOT_FOUND),
        ("Operators.SetWebhookGrant", invalid(&["grant"])),
        ("Operators.SetWebhookName", invalid(&["name"])),
        ("Operators.SetWebhookConfirmPolicy", invalid(&["policy"])),
        ("Operators.SetWebhookClaimTtl", invalid(&["ttl_secs"])),
        ("Operators.SetWebhookGuardDefault", invalid(&["on_breach"])),
        ("Operators.SetWebhookApprovalRule", NOT_FOUND),
        ("Operators.SetGrantAllowance", invalid(&["owner_scope"])),
        ("Operators.GetGrantAllowance", invalid(&["owner_scope"])),
        ("Operators.ClearGrantAllowance", invalid(&["owner_scope"])),
        ("Operators.ListGrantAllowances", NO_CREDENTIAL),
        ("Operators.VendEndpoint", invalid(&["verbs"])),
        ("Operators.RevokeEndpoint", NOT_FOUND),
        ("Operators.ListEndpoints", invalid(&["owner_scope"])),
        ("Operators.ListAuditEntries", invalid(&["limit"])),
        ("Operators.ListChanges", invalid(&["limit"])),
        ("Operators.VerifyChangeLog", NO_CREDENTIAL),
        ("Operators.CreateOperatorCredential", invalid(&["name"])),
        ("Operators.ListOperatorCredentials", NO_CREDENTIAL),
        ("Operators.RevokeOperatorCredential", NOT_FOUND),
        ("RulePacks.ListRulePacks", NOT_FOUND),
        (
            "RulePacks.InstallRulePack",
            (
                "INVALID_ARGUMENT",
                "invalid_params",
                &["params.keep_ci_success"],
            ),
        ),
        ("RulePacks.RemoveRulePack", invalid(&["name"])),
        ("RulePacks.GetRulePackPlan", NOT_FOUND),
        ("RulePacks.ConfirmRulePackPlan", NOT_FOUND),
        ("RuleTrials.StartRuleTrial", NOT_FOUND),
        ("RuleTrials.StopRuleTrial", NOT_FOUND),
        ("RuleTrials.GetRuleTrial", NOT_FOUND),
        ("RuleTrials.ListRuleTrials", NOT_FOUND),
        ("RuleTrials.PromoteRuleTrial", NOT_FOUND),
        ("RuleTrials.GetRuleGuard", NOT_FOUND),
    ]
}

/// Every RPC of control's public services, as `Service.Method`, from the compiled protos.
fn every_rpc() -> BTreeSet<String> {
    let set = prost_types::FileDescriptorSet::decode(switchboard_proto::FILE_DESCRIPTOR_SET)
        .expect("descriptors");
    set.file
        .iter()
        .filter(|f| f.package() == "switchboard.control.v1")
        .flat_map(|f| f.service.iter())
        .flat_map(|s| {
            s.method
                .iter()
                .map(move |m| format!("{}.{}", s.name(), m.name()))
        })
        .collect()
}

async fn every_rpc_answers_a_bad_argument_with_typed_details(db: TestDb) {
    let Some(python) = crate::support::python() else {
        return;
    };
    let env = Env::start(&db, Options::default()).await;
    let verbs: Vec<&str> = ALL.iter().copied().chain(["rule-trials"]).collect();
    let (scope, cred) = env.owner("alice", &verbs).await;
    let config =
        json!({"rules": [{"id": "everything", "when": "true", "action": {"queue": "forge"}}]});
    let w = env.webhook(&scope, Some(config)).await;
    env.store
        .create_team("infra", "Infra")
        .await
        .expect("a team for SetTeamMember");
    let operator = env
        .store
        .create_operator_credential("errors", None)
        .await
        .expect("operator credential")
        .token;
    let scope_text = scope.to_string();
    let read = crate::support::grpc_script(
        &python,
        "bad_arguments.py",
        &[
            "--addr",
            &env.addr,
            "--token",
            &cred,
            "--operator-token",
            &operator,
            "--webhook",
            &w.id,
            "--scope",
            &scope_text,
        ],
        &[],
    )
    .await;
    let table = expected();
    let covered: BTreeSet<String> = table.iter().map(|(rpc, ..)| rpc.to_string()).collect();
    assert_eq!(
        covered,
        every_rpc(),
        "every RPC has a bad-argument case (add the new one to tests/grpc/bad_arguments.py and here)"
    );
    let mut wrong = Vec::new();
    for (rpc, (code, reason, fields)) in table {
        let got = &read[rpc];
        let seen_fields: Vec<&str> = got["fields"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let flat = got["metadata"].as_object().is_some_and(|m| {
            m.values().all(|v| {
                v.as_str()
                    .is_some_and(|s| !s.starts_with('{') && !s.starts_with('['))
            })
        });
        let ok = got["code"] == code
            && got["reason"] == reason
            && got["domain"] == "switchboard"
            && got["message_starts_with_reason"] == true
            && flat
            && got.get("unknown_details").is_none()
            && fields.iter().all(|f| seen_fields.contains(f))
            && (code != "INVALID_ARGUMENT" || !seen_fields.is_empty())
            && (code != "NOT_FOUND"
                || (seen_fields.is_empty() && got["metadata"]["resource"].is_string()));
        if !ok {
            wrong.push(format!("{rpc}: want {code} {reason} {fields:?}, got {got}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // A configuration's problems and a pack's failed params also travel whole, typed.
    assert_eq!(
        read["WebhookRules.SetWebhookRules"]["refusal"],
        json!(["problems"])
    );
    assert_eq!(
        read["RulePacks.InstallRulePack"]["metadata"]["param"],
        "keep_ci_success"
    );
}

on_every_backend!(every_rpc_answers_a_bad_argument_with_typed_details);
