//! The `Operators` gRPC API (issue 21 item 1) through a real control on both backends: who may
//! call it (operator credentials only), every change audited (and no refusal), vending with
//! consent; and a Python grpcio client through the real binary.

use switchboard_control::store::NewEndpoint;
use switchboard_control::{OwnerScope, Store};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::identity_client::IdentityClient;
use switchboard_proto::control::v1::operators_client::OperatorsClient;
use tonic::transport::Channel;
use tonic::{Code, Request};

use crate::control_harness::{Control, ControlSetup, TestDb, human, on_every_backend, webhook};

on_every_backend! {
    only_operator_credentials_open_the_operators_api,
    each_change_is_audited_and_refusals_write_nothing,
    vending_without_consent_makes_nothing,
    a_python_grpc_client_manages_tenancy_and_reads_the_audit,
    the_change_log_lists_exports_and_verifies_and_names_a_tampered_entry,
    offboarding_a_member_and_a_webhook_takes_effect_at_once_and_is_logged,
    operators_read_every_time_as_a_timestamp,
    every_operator_listing_pages_with_opaque_cursors,
}

fn with<T>(token: &str, message: T) -> Request<T> {
    let mut r = Request::new(message);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("header"),
    );
    r
}

async fn client(control: &Control) -> OperatorsClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", control.grpc))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    OperatorsClient::new(channel)
}

/// A first operator credential, bootstrapped from the database: its token.
async fn root_token(store: &Store) -> String {
    store
        .create_operator_credential("root", None)
        .await
        .expect("bootstrap")
        .token
}

async fn endpoint_credential(store: &Store, login: &str) -> String {
    let scope = human(store, login).await;
    store
        .vend_endpoint(NewEndpoint {
            name: "agent".into(),
            human_login: login.into(),
            owner_scope: scope,
            verbs: vec!["webhooks".into()],
        })
        .await
        .expect("vend")
        .credential
}

async fn audit(api: &mut OperatorsClient<Channel>, token: &str) -> Vec<pb::AuditEntry> {
    api.list_audit_entries(with(
        token,
        pb::ListAuditEntriesRequest {
            limit: 200,
            cursor: String::new(),
        },
    ))
    .await
    .expect("audit")
    .into_inner()
    .entries
}

async fn only_operator_credentials_open_the_operators_api(db: TestDb) {
    let control = Control::start(&db.store, &[], ControlSetup::default()).await;
    let mut api = client(&control).await;
    let root = root_token(&db.store).await;
    let endpoint = endpoint_credential(&db.store, "alice").await;

    let teams = |token: Option<&str>| {
        let mut r = Request::new(pb::ListTeamsRequest::default());
        if let Some(t) = token {
            r.metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        r
    };
    let none = api
        .list_teams(teams(None))
        .await
        .expect_err("no credential");
    assert_eq!(none.code(), Code::Unauthenticated);
    let unknown = api
        .list_teams(teams(Some("sbo_0000")))
        .await
        .expect_err("unknown");
    let as_endpoint = api
        .list_teams(teams(Some(&endpoint)))
        .await
        .expect_err("an endpoint credential");
    assert_eq!(as_endpoint.code(), Code::Unauthenticated);
    assert_eq!(
        as_endpoint.message(),
        unknown.message(),
        "an endpoint credential answers as an unknown one"
    );
    api.list_teams(teams(Some(&root)))
        .await
        .expect("an operator");

    // An operator credential opens no endpoint API, answering as an unknown one.
    let mut identity = IdentityClient::new(
        Channel::from_shared(format!("http://{}", control.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    let refused = identity
        .who_am_i(with(&root, pb::WhoAmIRequest { uncharged: false }))
        .await
        .expect_err("an operator is no endpoint");
    let unknown_endpoint = identity
        .who_am_i(with("sbe_0000", pb::WhoAmIRequest { uncharged: false }))
        .await
        .expect_err("unknown");
    assert_eq!(refused.code(), Code::Unauthenticated);
    assert_eq!(refused.message(), unknown_endpoint.message());

    // A second operator credential works until revoked, then stops at once.
    let made = api
        .create_operator_credential(with(
            &root,
            pb::CreateOperatorCredentialRequest { name: "ci".into() },
        ))
        .await
        .expect("create")
        .into_inner();
    assert!(made.token.starts_with("sbo_"));
    let ci = made.credential.expect("credential");
    api.list_teams(teams(Some(&made.token)))
        .await
        .expect("ci works");
    api.revoke_operator_credential(with(
        &root,
        pb::RevokeOperatorCredentialRequest { id: ci.id.clone() },
    ))
    .await
    .expect("revoke");
    let revoked = api
        .list_teams(teams(Some(&made.token)))
        .await
        .expect_err("revoked");
    assert_eq!(revoked.code(), Code::Unauthenticated);
    assert_eq!(revoked.message(), unknown.message());
    let listed = api
        .list_operator_credentials(with(&root, pb::ListOperatorCredentialsRequest::default()))
        .await
        .expect("list")
        .into_inner()
        .credentials;
    assert_eq!(listed.len(), 2);
    assert!(
        listed
            .iter()
            .any(|c| c.id == ci.id && c.revoked_at.is_some())
    );
    let gone = api
        .revoke_operator_credential(with(
            &root,
            pb::RevokeOperatorCredentialRequest {
                id: "op_nope".into(),
            },
        ))
        .await
        .expect_err("unknown id");
    assert_eq!(gone.code(), Code::NotFound);
    control.stop().await;
}

async fn each_change_is_audited_and_refusals_write_nothing(db: TestDb) {
    let control = Control::start(&db.store, &[], ControlSetup::default()).await;
    let mut api = client(&control).await;
    let root = db
        .store
        .create_operator_credential("root", None)
        .await
        .expect("bootstrap");
    let token = root.token.as_str();
    let op_id = root.credential.id.as_str();

    api.create_human(with(
        token,
        pb::CreateHumanRequest {
            login: "bob".into(),
            display_name: None,
        },
    ))
    .await
    .expect("human");
    api.create_team(with(
        token,
        pb::CreateTeamRequest {
            slug: "infra".into(),
            name: Some("Infra".into()),
        },
    ))
    .await
    .expect("team");
    api.set_team_member(with(
        token,
        pb::SetTeamMemberRequest {
            team: "infra".into(),
            login: "bob".into(),
            role: "editor".into(),
        },
    ))
    .await
    .expect("member");
    let made = api
        .provision_webhook(with(
            token,
            pb::ProvisionWebhookRequest {
                owner_scope: "team:infra".into(),
                source_type: pb::SourceType::Github as i32,
                grant: vec!["forge".into(), "review".into()],
                secret: None,
                reject_unverified: true,
                name: "infra (github)".into(),
            },
        ))
        .await
        .expect("webhook")
        .into_inner();
    let wh = made.webhook.expect("webhook");
    assert_eq!(wh.name, "infra (github)");
    assert_eq!(wh.grant, ["forge", "review"]);
    assert_eq!(wh.owner_scope, "team:infra");
    assert!(!made.secret.is_empty());
    api.set_webhook_grant(with(
        token,
        pb::SetWebhookGrantRequest {
            webhook_id: wh.id.clone(),
            grant: vec!["forge".into()],
        },
    ))
    .await
    .expect("grant");
    api.set_webhook_confirm_policy(with(
        token,
        pb::SetWebhookConfirmPolicyRequest {
            webhook_id: wh.id.clone(),
            policy: "person".into(),
        },
    ))
    .await
    .expect("policy");
    let ttl = api
        .set_webhook_claim_ttl(with(
            token,
            pb::SetWebhookClaimTtlRequest {
                webhook_id: wh.id.clone(),
                ttl_secs: Some(600),
            },
        ))
        .await
        .expect("ttl")
        .into_inner();
    assert_eq!(ttl.ttl_secs, Some(600));
    let allowed = api
        .set_grant_allowance(with(
            token,
            pb::SetGrantAllowanceRequest {
                owner_scope: "team:infra".into(),
                queues: vec!["triage".into()],
            },
        ))
        .await
        .expect("allow")
        .into_inner();
    assert_eq!(allowed.webhooks_outside.len(), 1, "the webhook keeps forge");
    let cleared = api
        .clear_grant_allowance(with(
            token,
            pb::ClearGrantAllowanceRequest {
                owner_scope: "team:infra".into(),
            },
        ))
        .await
        .expect("clear")
        .into_inner();
    assert!(cleared.cleared);

    // Refused calls: each its typed error, and no audit row.
    let before = audit(&mut api, token).await.len();
    let dup = api
        .create_team(with(
            token,
            pb::CreateTeamRequest {
                slug: "infra".into(),
                name: None,
            },
        ))
        .await
        .expect_err("duplicate");
    assert_eq!(dup.code(), Code::FailedPrecondition, "{dup:?}");
    assert!(dup.message().starts_with("conflict: "), "{dup:?}");
    let bad_role = api
        .set_team_member(with(
            token,
            pb::SetTeamMemberRequest {
                team: "infra".into(),
                login: "bob".into(),
                role: "owner".into(),
            },
        ))
        .await
        .expect_err("bad role");
    assert_eq!(bad_role.code(), Code::InvalidArgument);
    let unknown = api
        .set_webhook_grant(with(
            token,
            pb::SetWebhookGrantRequest {
                webhook_id: "wh_nope".into(),
                grant: vec!["forge".into()],
            },
        ))
        .await
        .expect_err("unknown webhook");
    assert_eq!(unknown.code(), Code::NotFound);
    let bad_scope = api
        .provision_webhook(with(
            token,
            pb::ProvisionWebhookRequest {
                owner_scope: "nobody".into(),
                source_type: pb::SourceType::Github as i32,
                grant: vec!["forge".into()],
                secret: None,
                reject_unverified: false,
                name: String::new(),
            },
        ))
        .await
        .expect_err("bad scope");
    assert_eq!(bad_scope.code(), Code::InvalidArgument);
    let endpoint = endpoint_credential(&db.store, "carol").await;
    api.create_team(with(
        &endpoint,
        pb::CreateTeamRequest {
            slug: "sneaky".into(),
            name: None,
        },
    ))
    .await
    .expect_err("an endpoint is refused");
    assert_eq!(audit(&mut api, token).await.len(), before);

    let entries = audit(&mut api, token).await;
    let got: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e.action.as_str(), e.target.as_str()))
        .collect();
    let wh_id = wh.id.as_str();
    assert_eq!(
        got,
        [
            ("clear_grant_allowance", "team:infra"),
            ("set_grant_allowance", "team:infra"),
            ("set_webhook_claim_ttl", wh_id),
            ("set_webhook_confirm_policy", wh_id),
            ("set_webhook_grant", wh_id),
            ("create_webhook", wh_id),
            ("set_team_member", "team:infra"),
            ("create_team", "team:infra"),
            ("create_human", "human:bob"),
            (
                "bootstrap_operator_credential",
                root_target(&root.credential.id).as_str()
            ),
        ]
    );
    assert!(entries[..9].iter().all(|e| e.operator_id == op_id));
    assert_eq!(entries[9].operator_id, "", "a bootstrap has no operator");
    assert_eq!(entries[6].detail["role"], "editor");
    assert_eq!(entries[4].detail["grant"], "forge");
    assert!(
        !entries
            .iter()
            .any(|e| e.detail.values().any(|v| v.contains(&made.secret))),
        "no secret in the audit"
    );
    // Pages, newest first.
    let first = api
        .list_audit_entries(with(
            token,
            pb::ListAuditEntriesRequest {
                limit: 4,
                cursor: String::new(),
            },
        ))
        .await
        .expect("page")
        .into_inner();
    assert_eq!(first.entries, entries[..4]);
    let next = api
        .list_audit_entries(with(
            token,
            pb::ListAuditEntriesRequest {
                limit: 4,
                cursor: first.next_cursor,
            },
        ))
        .await
        .expect("page")
        .into_inner();
    assert_eq!(next.entries, entries[4..8]);
    control.stop().await;
}

fn root_target(id: &str) -> String {
    format!("operator:{id}")
}

async fn vending_without_consent_makes_nothing(db: TestDb) {
    let control = Control::start(&db.store, &[], ControlSetup::default()).await;
    let mut api = client(&control).await;
    let token = root_token(&db.store).await;
    let scope = human(&db.store, "alice").await;
    let ask = |consent: bool| pb::VendEndpointRequest {
        human: "alice".into(),
        owner_scope: scope.to_string(),
        verbs: vec!["todos".into(), "get_webhook".into()],
        name: None,
        consent,
    };
    let shown = api
        .vend_endpoint(with(&token, ask(false)))
        .await
        .expect("shown")
        .into_inner();
    assert!(!shown.vended && shown.credential.is_empty() && shown.endpoint.is_none());
    assert_eq!(shown.role, "admin");
    let families: Vec<(&str, bool, usize)> = shown
        .families
        .iter()
        .map(|f| (f.family.as_str(), f.whole_family, f.verbs.len()))
        .collect();
    assert_eq!(families, [("webhooks", false, 1), ("todos", true, 4)]);
    assert!(db.store.list_endpoints(None).await.unwrap().is_empty());
    assert!(
        audit(&mut api, &token).await.len() == 1,
        "only the bootstrap"
    );

    let vended = api
        .vend_endpoint(with(&token, ask(true)))
        .await
        .expect("vended")
        .into_inner();
    assert!(vended.vended);
    let e = vended.endpoint.expect("endpoint");
    assert_eq!(e.name, "alice-agent");
    let stored = db
        .store
        .authenticate(&vended.credential)
        .await
        .unwrap()
        .expect("the credential works on the endpoint API's store");
    assert_eq!(stored.id, e.id);
    let entries = audit(&mut api, &token).await;
    assert_eq!(entries[0].action, "vend_endpoint");
    assert_eq!(entries[0].target, e.id);
    assert_eq!(entries[0].detail["human"], "alice");
    assert!(!entries[0].detail.values().any(|v| v.contains("sbe_")));

    // A human without a role in the scope is refused before any consent, and so are bad verbs.
    let other = OwnerScope::team("nobody");
    let refused = api
        .vend_endpoint(with(
            &token,
            pb::VendEndpointRequest {
                owner_scope: other.to_string(),
                ..ask(false)
            },
        ))
        .await
        .expect_err("no role");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("holds no role"), "{refused:?}");
    let bad = api
        .vend_endpoint(with(
            &token,
            pb::VendEndpointRequest {
                verbs: vec!["drop_tables".into()],
                ..ask(true)
            },
        ))
        .await
        .expect_err("bad verbs");
    assert_eq!(bad.code(), Code::InvalidArgument);

    let revoked = api
        .revoke_endpoint(with(
            &token,
            pb::RevokeEndpointRequest {
                endpoint_id: e.id.clone(),
            },
        ))
        .await
        .expect("revoke")
        .into_inner()
        .endpoint
        .expect("endpoint");
    assert!(revoked.revoked_at.is_some());
    assert!(
        db.store
            .authenticate(&vended.credential)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(db.store.list_endpoints(None).await.unwrap().len(), 1);
    control.stop().await;
}

/// Through the real binary: `switchboard control` on the test's database, the first operator
/// credential from `switchboard admin operator bootstrap`, and a Python grpcio client (protos
/// compiled by grpcio-tools) that creates a team, vends an endpoint with consent, reads the
/// audit, and is refused with the endpoint credential it just got.
async fn a_python_grpc_client_manages_tenancy_and_reads_the_audit(db: TestDb) {
    let Some(python) = crate::support::python() else {
        return;
    };
    human(&db.store, "alice").await;
    let token = crate::cli::bootstrap_operator(&db.url);
    let (_router, _control, grpc) = crate::cli::control_for_admin(&db.url);
    let read = crate::support::grpc_script(
        &python,
        "operators.py",
        &["--addr", &grpc],
        &[("SWITCHBOARD_OPERATOR_TOKEN", &token)],
    )
    .await;
    assert_eq!(read["endpoint_refused"], "UNAUTHENTICATED", "{read}");
    assert_eq!(
        read["shown_families"],
        serde_json::json!(["todos"]),
        "{read}"
    );
    let actions = read["audit"].as_array().expect("audit");
    assert_eq!(
        actions[..3],
        [
            serde_json::json!(["vend_endpoint", read["endpoint_id"].clone()]),
            serde_json::json!(["set_team_member", "team:infra"]),
            serde_json::json!(["create_team", "team:infra"]),
        ]
    );
    // Times read as google.protobuf.Timestamp by protoc's Python code: the deprecated
    // milliseconds' time.
    let ats = read["audit_at"].as_array().expect("audit times");
    assert_eq!(ats.len(), actions.len());
    for at in ats {
        assert!(at[0].as_i64() > Some(0) && at[0] == at[1], "{read}");
    }
    let stored = db
        .store
        .list_endpoints(Some(&OwnerScope::team("infra")))
        .await
        .expect("list");
    assert_eq!(stored.len(), 1, "one endpoint: the one consented to");
    assert_eq!(serde_json::json!(stored[0].id), read["endpoint_id"]);
}

/// Issue 47: operators read the change log (`ListChanges`), verify it from the database
/// (`VerifyChangeLog`) and export it (`switchboard admin changes export`), and the export
/// verifies on its own (`changes verify --file`, no control). An entry changed in the
/// database, or in an export, is named.
async fn the_change_log_lists_exports_and_verifies_and_names_a_tampered_entry(db: TestDb) {
    use switchboard_control::store::{Actor, SaveConfiguration};
    use switchboard_model::ConfigurationChange;
    let control = Control::start(&db.store, &[], ControlSetup::default()).await;
    let mut api = client(&control).await;
    let root = db
        .store
        .create_operator_credential("root", None)
        .await
        .expect("bootstrap");
    let token = root.token.as_str();
    let scope = human(&db.store, "alice").await;
    let hook = crate::control_harness::webhook(
        &db.store,
        &scope,
        switchboard_control::store::SourceType::Github,
        None,
    )
    .await;
    api.set_webhook_confirm_policy(with(
        token,
        pb::SetWebhookConfirmPolicyRequest {
            webhook_id: hook.id.clone(),
            policy: "person".into(),
        },
    ))
    .await
    .expect("policy");
    db.store
        .save_configuration(
            &scope,
            &hook.id,
            SaveConfiguration {
                configuration: crate::support::typed(serde_json::json!({"rules": [
                    {"id": "r-1", "when": "true", "action": {"drop": true}}
                ], "params": {}})),
                actor: Actor {
                    endpoint_id: None,
                    human_login: Some("alice".into()),
                },
                change: ConfigurationChange::op("set_webhook_rules"),
                ..Default::default()
            },
        )
        .await
        .expect("saved");

    let entries = api
        .list_changes(with(token, pb::ListChangesRequest::default()))
        .await
        .expect("list")
        .into_inner()
        .entries;
    let kinds: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
    assert!(kinds.contains(&"operator_credential"), "{kinds:?}");
    assert!(kinds.contains(&"confirm_policy"), "{kinds:?}");
    let saved = entries
        .iter()
        .find(|e| e.kind == "configuration" && e.version == Some(2))
        .expect("the saved version (version 1 is the webhook's creation)");
    assert_eq!(
        (saved.webhook_id.as_str(), saved.actor_human.as_str()),
        (hook.id.as_str(), "alice")
    );
    let mine = api
        .list_changes(with(
            token,
            pb::ListChangesRequest {
                owner_scope: scope.to_string(),
                ..Default::default()
            },
        ))
        .await
        .expect("list")
        .into_inner()
        .entries;
    assert!(mine.iter().all(|e| e.owner_scope == scope.to_string()) && !mine.is_empty());
    // Narrowed by actor and by webhook, and paged by `next_after_seq`.
    let list = |req: pb::ListChangesRequest| {
        let mut api = api.clone();
        async move {
            api.list_changes(with(token, req))
                .await
                .expect("list")
                .into_inner()
        }
    };
    let by_root = list(pb::ListChangesRequest {
        actor: root.credential.id.clone(),
        ..Default::default()
    })
    .await
    .entries;
    assert!(
        by_root.iter().any(|e| e.kind == "confirm_policy")
            && by_root
                .iter()
                .all(|e| e.actor_operator == root.credential.id),
        "{by_root:?}"
    );
    let of_hook = list(pb::ListChangesRequest {
        webhook_id: hook.id.clone(),
        ..Default::default()
    })
    .await
    .entries;
    assert!(
        of_hook.len() >= 3 && of_hook.iter().all(|e| e.webhook_id == hook.id),
        "creation, policy and save: {of_hook:?}"
    );
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let page = list(pb::ListChangesRequest {
            after_seq: after,
            limit: 1,
            ..Default::default()
        })
        .await;
        paged.extend(page.entries);
        if page.next_after_seq == 0 {
            break;
        }
        after = page.next_after_seq;
    }
    assert_eq!(paged, entries, "one at a time, the whole log");
    let verified = api
        .verify_change_log(with(token, pb::VerifyChangeLogRequest {}))
        .await
        .expect("verify")
        .into_inner();
    assert!(verified.intact, "{verified:?}");
    let last = entries.last().expect("entries");
    assert_eq!(
        (verified.head_seq, verified.head_hash.as_str()),
        (last.seq, last.hash.as_str())
    );

    // Exported, the log verifies on its own; a byte changed in the export is named.
    let dir = tempfile::tempdir().expect("temp dir");
    let export = dir.path().join("changes.jsonl");
    // Awaited, not blocking: control serves this test's runtime, and a worker blocked on the
    // child could hold the very task that answers it.
    let admin = |args: &[&str]| {
        tokio::process::Command::new(crate::support::binary())
            .args(["admin", "--control", &control.grpc.to_string()])
            .args(args)
            .env("SWITCHBOARD_LOG", "warn")
            .env("SWITCHBOARD_OPERATOR_TOKEN", token)
            .env_remove(crate::support::SECRET_KEY_ENV)
            .stdin(std::process::Stdio::null())
            .output()
    };
    let path = export.to_str().expect("utf-8 path");
    let out = admin(&["changes", "export", "--out", path])
        .await
        .expect("admin runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&export).expect("the export");
    assert_eq!(text.lines().count(), entries.len());
    let out = admin(&["changes", "verify", "--file", path])
        .await
        .expect("admin runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("head {} {}", last.seq, last.hash)),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    std::fs::write(
        &export,
        text.replacen("set_webhook_rules", "set_webhook_rulez", 1),
    )
    .expect("tamper");
    let out = admin(&["changes", "verify", "--file", path])
        .await
        .expect("admin runs");
    // A log that does not verify exits 4, as `switchboard changes verify` does.
    assert_eq!(out.status.code(), Some(4));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("entry {} was changed", saved.seq)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = admin(&["changes", "verify"]).await.expect("admin runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Changed in the database: named by the verify.
    sqlx::query("UPDATE change_log SET entry = REPLACE(entry, 'alice', 'alicf') WHERE seq = $1")
        .bind(saved.seq as i64)
        .execute(db.store.pool())
        .await
        .expect("tamper");
    let verified = api
        .verify_change_log(with(token, pb::VerifyChangeLogRequest {}))
        .await
        .expect("verify")
        .into_inner();
    assert!(!verified.intact);
    assert_eq!(verified.broken_seq, saved.seq, "{verified:?}");
    let out = admin(&["changes", "verify"]).await.expect("admin runs");
    assert_eq!(out.status.code(), Some(4));
}

/// Issue 49 (offboarding): a member taken out of a team loses the team's verbs at once — their
/// endpoint in its scope is refused on the next call — and a deprovisioned webhook is gone
/// (`not_found` to its scope's agent and to the operator the second time); both acts are in
/// the change log, listed by the audit, and the log keeps the webhook's earlier entries.
async fn offboarding_a_member_and_a_webhook_takes_effect_at_once_and_is_logged(db: TestDb) {
    use switchboard_proto::control::v1::webhooks_client::WebhooksClient;
    let control = Control::start(&db.store, &[], ControlSetup::default()).await;
    let mut api = client(&control).await;
    let root = db
        .store
        .create_operator_credential("root", None)
        .await
        .expect("bootstrap");
    let token = root.token.as_str();
    human(&db.store, "bob").await;
    db.store.create_team("infra", "Infra").await.expect("team");
    api.set_team_member(with(
        token,
        pb::SetTeamMemberRequest {
            team: "infra".into(),
            login: "bob".into(),
            role: "editor".into(),
        },
    ))
    .await
    .expect("member");
    let wh = api
        .provision_webhook(with(
            token,
            pb::ProvisionWebhookRequest {
                owner_scope: "team:infra".into(),
                source_type: pb::SourceType::Github as i32,
                grant: vec!["forge".into()],
                secret: None,
                reject_unverified: false,
                name: String::new(),
            },
        ))
        .await
        .expect("webhook")
        .into_inner()
        .webhook
        .expect("webhook");
    let agent = db
        .store
        .vend_endpoint(NewEndpoint {
            name: "bob-agent".into(),
            human_login: "bob".into(),
            owner_scope: OwnerScope::team("infra"),
            verbs: vec!["webhooks".into()],
        })
        .await
        .expect("vend")
        .credential;
    let channel = Channel::from_shared(format!("http://{}", control.grpc))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut webhooks = WebhooksClient::new(channel);
    let listed = webhooks
        .list_webhooks(with(&agent, pb::ListWebhooksRequest::default()))
        .await
        .expect("bob's agent lists the team's webhooks")
        .into_inner()
        .webhooks;
    assert_eq!(listed.len(), 1);

    // Out of the team: the next call of bob's agent is refused.
    api.remove_team_member(with(
        token,
        pb::RemoveTeamMemberRequest {
            team: "infra".into(),
            login: "bob".into(),
        },
    ))
    .await
    .expect("removed");
    let refused = webhooks
        .list_webhooks(with(&agent, pb::ListWebhooksRequest::default()))
        .await
        .expect_err("no role in the scope any more");
    assert!(
        matches!(
            refused.code(),
            Code::PermissionDenied | Code::Unauthenticated
        ),
        "{refused:?}"
    );
    let again = api
        .remove_team_member(with(
            token,
            pb::RemoveTeamMemberRequest {
                team: "infra".into(),
                login: "bob".into(),
            },
        ))
        .await
        .expect_err("not a member");
    assert_eq!(again.code(), Code::NotFound);

    // Deprovisioned: gone, and gone again is not_found.
    api.deprovision_webhook(with(
        token,
        pb::DeprovisionWebhookRequest {
            webhook_id: wh.id.clone(),
        },
    ))
    .await
    .expect("deleted");
    assert!(
        db.store
            .get_webhook(&OwnerScope::team("infra"), &wh.id)
            .await
            .is_err()
    );
    let gone = api
        .deprovision_webhook(with(
            token,
            pb::DeprovisionWebhookRequest {
                webhook_id: wh.id.clone(),
            },
        ))
        .await
        .expect_err("gone");
    assert_eq!(gone.code(), Code::NotFound);

    let actions: Vec<String> = audit(&mut api, token)
        .await
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(
        actions[..2],
        [
            "delete_webhook".to_string(),
            "remove_team_member".to_string()
        ],
        "newest first, each once: {actions:?}"
    );
    let of_hook = api
        .list_changes(with(
            token,
            pb::ListChangesRequest {
                webhook_id: wh.id.clone(),
                ..Default::default()
            },
        ))
        .await
        .expect("list")
        .into_inner()
        .entries;
    let kinds: Vec<&str> = of_hook.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds.last(), Some(&"webhook_delete"), "{kinds:?}");
    assert!(
        kinds.contains(&"configuration"),
        "its creation stays: {kinds:?}"
    );
    assert_eq!(
        of_hook.last().map(|e| e.actor_operator.as_str()),
        Some(root.credential.id.as_str())
    );
    // Issue 49 item 2: a human is offboarded, and a team deleted. Refused while their scope
    // owns webhooks (nothing changed); then bob's own agent and console session stop at once.
    let own_hook = api
        .provision_webhook(with(
            token,
            pb::ProvisionWebhookRequest {
                owner_scope: "human:bob".into(),
                source_type: pb::SourceType::Github as i32,
                grant: vec!["forge".into()],
                name: "bob's".into(),
                ..Default::default()
            },
        ))
        .await
        .expect("bob's webhook")
        .into_inner()
        .webhook
        .expect("webhook");
    let own_agent = db
        .store
        .vend_endpoint(NewEndpoint {
            name: "bob-own".into(),
            human_login: "bob".into(),
            owner_scope: OwnerScope::human("bob"),
            verbs: vec!["webhooks".into()],
        })
        .await
        .expect("vend")
        .credential;
    let link = db
        .store
        .create_sign_in_link("bob", 60_000)
        .await
        .expect("a link");
    let (session, _) = db
        .store
        .redeem_sign_in_link(&link, 60_000)
        .await
        .expect("a session");
    let refused = api
        .delete_human(with(
            token,
            pb::DeleteHumanRequest {
                login: "bob".into(),
            },
        ))
        .await
        .expect_err("bob's scope owns a webhook");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains("human:bob still owns 1 webhook"),
        "{refused:?}"
    );
    assert!(
        db.store
            .authenticate(&own_agent)
            .await
            .expect("read")
            .is_some(),
        "a refusal changes nothing"
    );
    let refused = api
        .delete_team(with(
            token,
            pb::DeleteTeamRequest {
                slug: "nobody".into(),
            },
        ))
        .await
        .expect_err("no such team");
    assert_eq!(refused.code(), Code::NotFound);
    api.deprovision_webhook(with(
        token,
        pb::DeprovisionWebhookRequest {
            webhook_id: own_hook.id.clone(),
        },
    ))
    .await
    .expect("deleted");
    let gone = api
        .delete_human(with(
            token,
            pb::DeleteHumanRequest {
                login: "bob".into(),
            },
        ))
        .await
        .expect("bob offboarded")
        .into_inner();
    assert_eq!(
        (gone.endpoints_deleted, gone.memberships_removed),
        (2, 0),
        "his own agent and the team's; his membership was removed before"
    );
    let stopped = webhooks
        .list_webhooks(with(&own_agent, pb::ListWebhooksRequest::default()))
        .await
        .expect_err("a deleted human's agent");
    assert_eq!(stopped.code(), Code::Unauthenticated, "{stopped:?}");
    assert_eq!(
        db.store.console_session(&session).await.expect("read"),
        None,
        "his console session ended"
    );
    let again = api
        .delete_human(with(
            token,
            pb::DeleteHumanRequest {
                login: "bob".into(),
            },
        ))
        .await
        .expect_err("gone");
    assert_eq!(again.code(), Code::NotFound);
    // The team's own agent (another member's) goes with it.
    human(&db.store, "tina").await;
    db.store
        .set_membership("infra", "tina", switchboard_control::Role::Editor)
        .await
        .expect("member");
    let teams_agent = db
        .store
        .vend_endpoint(NewEndpoint {
            name: "tina-agent".into(),
            human_login: "tina".into(),
            owner_scope: OwnerScope::team("infra"),
            verbs: vec!["webhooks".into()],
        })
        .await
        .expect("vend")
        .credential;
    let team = api
        .delete_team(with(
            token,
            pb::DeleteTeamRequest {
                slug: "infra".into(),
            },
        ))
        .await
        .expect("the team, its webhook deleted before")
        .into_inner();
    assert_eq!(
        (
            team.slug.as_str(),
            team.endpoints_deleted,
            team.memberships_removed
        ),
        ("infra", 1, 1)
    );
    assert!(
        db.store
            .authenticate(&teams_agent)
            .await
            .expect("read")
            .is_none(),
        "the team's agent stops at once"
    );

    // Humans and teams are listed a page at a time.
    for login in ["carol", "dave", "erin"] {
        human(&db.store, login).await;
    }
    let mut logins = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let page = api
            .list_humans(with(
                token,
                pb::ListHumansRequest {
                    cursor: cursor.clone(),
                    limit: 2,
                },
            ))
            .await
            .expect("a page")
            .into_inner();
        pages += 1;
        logins.extend(page.humans.into_iter().map(|h| h.login));
        if page.next_cursor.is_empty() {
            break;
        }
        cursor = page.next_cursor;
    }
    assert_eq!(
        (logins, pages),
        (
            vec![
                "carol".to_string(),
                "dave".into(),
                "erin".into(),
                "tina".into()
            ],
            2
        )
    );
    let bad = api
        .list_teams(with(
            token,
            pb::ListTeamsRequest {
                cursor: cursor.clone(),
                limit: 2,
            },
        ))
        .await
        .expect_err("a humans cursor is no teams cursor");
    assert_eq!(bad.code(), Code::InvalidArgument);

    let actions: Vec<String> = audit(&mut api, token)
        .await
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(
        actions[..3],
        [
            "delete_team".to_string(),
            "delete_human".to_string(),
            "delete_webhook".to_string()
        ],
        "{actions:?}"
    );
    let verified = api
        .verify_change_log(with(token, pb::VerifyChangeLogRequest {}))
        .await
        .expect("verify")
        .into_inner();
    assert!(verified.intact, "{verified:?}");
}

/// Issue 49 item 5 for operators: every time is a google.protobuf.Timestamp naming the same
/// millisecond as the deprecated `*_ms` field beside it (a human's and a team's creation, an
/// endpoint's and an operator credential's creation and revocation, each audit entry and
/// change-log entry), and the change log's `since`/`until` are read as Timestamps or as the
/// deprecated milliseconds, refused when the two disagree.
#[allow(deprecated)]
async fn operators_read_every_time_as_a_timestamp(db: TestDb) {
    use crate::support::ms;
    use switchboard_proto::convert::time::from_millis;
    let control = Control::start(&db.store, &[], ControlSetup::default()).await;
    let mut api = client(&control).await;
    let token = root_token(&db.store).await;
    let alice = api
        .create_human(with(
            &token,
            pb::CreateHumanRequest {
                login: "alice".into(),
                display_name: None,
            },
        ))
        .await
        .expect("human")
        .into_inner()
        .human
        .expect("human");
    assert_eq!(ms(&alice.created_at), Some(alice.created_at_ms));
    assert!(alice.created_at_ms > 0);
    let team = api
        .create_team(with(
            &token,
            pb::CreateTeamRequest {
                slug: "infra".into(),
                name: None,
            },
        ))
        .await
        .expect("team")
        .into_inner()
        .team
        .expect("team");
    assert_eq!(ms(&team.created_at), Some(team.created_at_ms));
    let vended = api
        .vend_endpoint(with(
            &token,
            pb::VendEndpointRequest {
                human: "alice".into(),
                owner_scope: "human:alice".into(),
                verbs: vec!["todos".into()],
                name: None,
                consent: true,
            },
        ))
        .await
        .expect("vend")
        .into_inner()
        .endpoint
        .expect("endpoint");
    assert_eq!(ms(&vended.created_at), Some(vended.created_at_ms));
    assert_eq!((&vended.revoked_at, vended.revoked_at_ms), (&None, None));
    let revoked = api
        .revoke_endpoint(with(
            &token,
            pb::RevokeEndpointRequest {
                endpoint_id: vended.id.clone(),
            },
        ))
        .await
        .expect("revoke")
        .into_inner()
        .endpoint
        .expect("endpoint");
    assert_eq!(ms(&revoked.revoked_at), revoked.revoked_at_ms);
    assert!(revoked.revoked_at.is_some());
    let credentials = api
        .list_operator_credentials(with(&token, pb::ListOperatorCredentialsRequest::default()))
        .await
        .expect("credentials")
        .into_inner()
        .credentials;
    for c in &credentials {
        assert_eq!(ms(&c.created_at), Some(c.created_at_ms));
        assert_eq!(ms(&c.revoked_at), c.revoked_at_ms);
    }
    let entries = audit(&mut api, &token).await;
    assert!(entries.len() >= 4, "{entries:?}");
    for e in &entries {
        assert_eq!(ms(&e.at), Some(e.at_ms), "{e:?}");
    }

    // The change log: one bound, given either way, lists the same entries.
    let changes = |since_ms: i64, since: Option<i64>| {
        let mut api = api.clone();
        let token = token.clone();
        async move {
            api.list_changes(with(
                &token,
                pb::ListChangesRequest {
                    since_ms,
                    since: since.map(from_millis),
                    ..Default::default()
                },
            ))
            .await
        }
    };
    let all = changes(0, None).await.expect("all").into_inner().entries;
    assert!(all.len() >= 4, "{all:?}");
    for e in &all {
        assert_eq!(ms(&e.at), Some(e.at_ms), "{e:?}");
    }
    let from = all[all.len() - 2].at_ms;
    let seqs = |r: tonic::Response<pb::ListChangesResponse>| -> Vec<u64> {
        r.into_inner().entries.iter().map(|e| e.seq).collect()
    };
    let by_millis = seqs(changes(from, None).await.expect("by millis"));
    assert!(!by_millis.is_empty() && by_millis.len() < all.len());
    assert_eq!(
        seqs(changes(0, Some(from)).await.expect("by timestamp")),
        by_millis
    );
    assert_eq!(
        seqs(changes(from, Some(from)).await.expect("both")),
        by_millis
    );
    let refused = changes(from, Some(from + 1))
        .await
        .expect_err("two different times");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    let details = tonic_types::StatusExt::get_error_details(&refused);
    assert_eq!(
        details.error_info().map(|i| i.metadata["field"].as_str()),
        Some("since"),
        "{}",
        refused.message()
    );
}

/// Walks a listing page by page (`page(cursor)` answers one page's ids and its next cursor):
/// every id, and the number of pages.
async fn walk<F, Fut>(mut page: F) -> (Vec<String>, usize)
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<String>, String), tonic::Status>>,
{
    let (mut all, mut pages, mut cursor) = (Vec::new(), 0, String::new());
    loop {
        let (ids, next) = page(cursor).await.expect("a page");
        assert!(ids.len() <= 2, "a page holds at most its limit");
        all.extend(ids);
        pages += 1;
        if next.is_empty() {
            return (all, pages);
        }
        cursor = next;
    }
}

/// [`walk`]s the Operators listing `$method` with `$request` (built from `cursor`) as the
/// operator `$token`: the `$id` of each of a page's `$items`.
macro_rules! pages {
    ($api:expr, $token:expr, $method:ident, $items:ident, $id:ident, |$cursor:ident| $request:expr) => {
        walk(|$cursor| {
            let (mut api, request) = ($api.clone(), with(&$token, $request));
            async move {
                let page = api.$method(request).await?.into_inner();
                let ids = page.$items.into_iter().map(|item| item.$id).collect();
                Ok((ids, page.next_cursor))
            }
        })
        .await
    };
}

/// Issue 49: endpoints, operator credentials, grant allowances and a scope's webhooks are
/// listed a page at a time, each item once, in the order the whole listing has; a cursor of
/// another listing, or a limit over 200, is refused as invalid.
async fn every_operator_listing_pages_with_opaque_cursors(db: TestDb) {
    let control = Control::start(&db.store, &[], ControlSetup::default()).await;
    let api = client(&control).await;
    let token = root_token(&db.store).await;
    for name in ["second", "third", "fourth", "fifth"] {
        db.store
            .create_operator_credential(name, None)
            .await
            .expect("credential");
    }
    let logins = ["carol", "alice", "erin", "bob", "dave"];
    let mut scopes = Vec::new();
    for login in logins {
        let scope = human(&db.store, login).await;
        db.store
            .set_grant_allowance(&scope, &["forge".to_string()])
            .await
            .expect("allowance");
        scopes.push(scope);
    }
    // One endpoint each, and two more of alice's: seven in all, three of hers.
    for login in logins.into_iter().chain(["alice", "alice"]) {
        endpoint_in(&db.store, login).await;
    }
    let mut alices_webhooks = Vec::new();
    for _ in 0..5 {
        let w = webhook(
            &db.store,
            &scopes[1],
            switchboard_control::store::SourceType::Gitea,
            None,
        )
        .await;
        alices_webhooks.push(w.id);
    }

    let (credentials, pages) = pages!(
        api,
        token,
        list_operator_credentials,
        credentials,
        id,
        |cursor| pb::ListOperatorCredentialsRequest { cursor, limit: 2 }
    );
    let whole: Vec<String> = db
        .store
        .list_operator_credentials()
        .await
        .expect("all")
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(
        (credentials, pages),
        (whole, 3),
        "five credentials, oldest first"
    );

    let (allowances, pages) = pages!(
        api,
        token,
        list_grant_allowances,
        allowances,
        owner_scope,
        |cursor| pb::ListGrantAllowancesRequest { cursor, limit: 2 }
    );
    assert_eq!(
        (allowances, pages),
        (
            ["alice", "bob", "carol", "dave", "erin"]
                .map(|l| format!("human:{l}"))
                .to_vec(),
            3
        ),
        "by owner scope"
    );

    for filter in [None, Some(scopes[1].to_string())] {
        let (endpoints, pages) = pages!(api, token, list_endpoints, endpoints, id, |cursor| {
            pb::ListEndpointsRequest {
                owner_scope: filter.clone(),
                cursor,
                limit: 2,
            }
        });
        let scope = filter
            .as_deref()
            .map(|s| s.parse::<OwnerScope>().expect("scope"));
        let whole: Vec<String> = db
            .store
            .list_endpoints(scope.as_ref())
            .await
            .expect("all")
            .into_iter()
            .map(|e| e.id)
            .collect();
        let expected_pages = whole.len().div_ceil(2);
        assert_eq!(whole.len(), if filter.is_some() { 3 } else { 7 });
        assert_eq!(
            (endpoints, pages),
            (whole, expected_pages),
            "endpoints of {filter:?}"
        );
    }

    let (webhooks, pages) = pages!(api, token, list_scope_webhooks, webhooks, id, |cursor| {
        pb::ListScopeWebhooksRequest {
            owner_scope: scopes[1].to_string(),
            cursor,
            limit: 2,
        }
    });
    let mut sorted_webhooks = webhooks.clone();
    sorted_webhooks.sort();
    alices_webhooks.sort();
    assert_eq!(
        (sorted_webhooks, pages),
        (alices_webhooks, 3),
        "each of alice's webhooks once"
    );

    // One listing's cursor is not another's; a limit over 200 is refused.
    let mut api = api.clone();
    let first = api
        .list_grant_allowances(with(
            &token,
            pb::ListGrantAllowancesRequest {
                cursor: String::new(),
                limit: 2,
            },
        ))
        .await
        .expect("a page")
        .into_inner();
    assert_eq!(first.allowances.len(), 2);
    let foreign = api
        .list_endpoints(with(
            &token,
            pb::ListEndpointsRequest {
                owner_scope: None,
                cursor: first.next_cursor.clone(),
                limit: 2,
            },
        ))
        .await
        .expect_err("another listing's cursor");
    assert_eq!(foreign.code(), Code::InvalidArgument, "{foreign:?}");
    let too_many = api
        .list_operator_credentials(with(
            &token,
            pb::ListOperatorCredentialsRequest {
                cursor: String::new(),
                limit: 201,
            },
        ))
        .await
        .expect_err("201 per page");
    assert_eq!(too_many.code(), Code::InvalidArgument, "{too_many:?}");
    // No limit: a page of 50, here every one.
    let every = api
        .list_endpoints(with(&token, pb::ListEndpointsRequest::default()))
        .await
        .expect("a page")
        .into_inner();
    assert_eq!((every.endpoints.len(), every.next_cursor.as_str()), (7, ""));
    control.stop().await;
}

/// An endpoint of `login`'s in their own scope.
async fn endpoint_in(store: &Store, login: &str) {
    store
        .vend_endpoint(NewEndpoint {
            name: "agent".into(),
            human_login: login.into(),
            owner_scope: OwnerScope::human(login),
            verbs: vec!["webhooks".into()],
        })
        .await
        .expect("vend");
}
