//! Golden files of every tool's listing (name, title, description, input and output schemas,
//! annotations), as an MCP client sees them over an in-process rmcp connection. A change to a
//! schema or an annotation shows up as a diff here; accept it with `UPDATE_SNAPSHOTS=1`.

use std::path::PathBuf;

use rmcp::ServiceExt;
use serde_json::Value;
use switchboard_control_client::{Bearer, ControlClient};
use switchboard_mcp_gateway::Caller;
use switchboard_mcp_gateway::handler::{Gateway, ToolPolicy};
use switchboard_model::Verb;

mod support;

fn snapshots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots")
}

fn caller(verbs: &[&str]) -> Caller {
    Caller {
        bearer: Bearer::new("sbe_listing"),
        endpoint_id: "ep_listing".into(),
        endpoint_name: "listing".into(),
        human: "alice".into(),
        owner_scope: "human:alice".into(),
        role: "admin".into(),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        usable_verbs: verbs.iter().map(|v| v.to_string()).collect(),
        uncharged: false,
    }
}

/// `tools/list` over an in-process connection, for an endpoint allowed `verbs`.
async fn listed(verbs: &[&str], policy: ToolPolicy) -> Vec<rmcp::model::Tool> {
    // Listing never calls control: no control needs to run.
    let control = ControlClient::connect_lazy("127.0.0.1:9").expect("address");
    let gateway = Gateway::for_caller(control, policy, caller(verbs));
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let server = tokio::spawn(async move {
        let running = gateway.serve(server_io).await.expect("server starts");
        let _ = running.waiting().await;
    });
    let client = ().serve(client_io).await.expect("client connects");
    let tools = client.list_all_tools().await.expect("tools/list");
    let _ = client.cancel().await;
    server.abort();
    tools
}

#[tokio::test]
async fn every_tool_listing_matches_its_golden_file() {
    let tools = listed(support::ALL_VERBS, ToolPolicy::default()).await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "tools are listed sorted by name");
    let mut expected: Vec<&str> = support::ALL_VERBS.to_vec();
    expected.sort();
    assert_eq!(names, expected, "one tool per verb");

    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some();
    let dir = snapshots();
    std::fs::create_dir_all(&dir).expect("snapshot dir");
    let mut stale = Vec::new();
    for tool in &tools {
        let value = serde_json::to_value(tool).expect("tool as JSON");
        let text = format!(
            "{}\n",
            serde_json::to_string_pretty(&value).expect("pretty")
        );
        let path = dir.join(format!("{}.json", tool.name));
        if update {
            std::fs::write(&path, &text).expect("write snapshot");
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(golden) if golden == text => {}
            Ok(_) => stale.push(format!("{} differs", path.display())),
            Err(_) => stale.push(format!("{} is missing", path.display())),
        }
        // Every annotation is set deliberately, none left to a client's default.
        let annotations = &value["annotations"];
        for hint in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            assert!(annotations[hint].is_boolean(), "{} {hint}", tool.name);
        }
        assert_eq!(annotations["openWorldHint"], false, "{}", tool.name);
        assert_eq!(value["outputSchema"]["type"], "object", "{}", tool.name);
        assert_eq!(value["inputSchema"]["type"], "object", "{}", tool.name);
    }
    assert!(
        stale.is_empty(),
        "tool listings changed (rerun with UPDATE_SNAPSHOTS=1 to accept):\n{}",
        stale.join("\n")
    );
}

/// The listing is the model's verb table: every `Verb` once, by its name, with its flags.
#[tokio::test]
async fn the_listing_is_exactly_the_verbs_with_their_flags() {
    let all: Vec<&str> = Verb::ALL.iter().map(|v| v.as_str()).collect();
    let tools = listed(&all, ToolPolicy::default()).await;
    let mut expected = all.clone();
    expected.sort();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, expected);
    for tool in &tools {
        let verb = Verb::parse(&tool.name).expect("a tool named as a verb");
        let annotations = tool.annotations.as_ref().expect("annotations");
        assert_eq!(annotations.read_only_hint, Some(verb.read_only()), "{verb}");
        assert_eq!(
            annotations.destructive_hint,
            Some(verb.destructive()),
            "{verb}"
        );
        assert_eq!(
            annotations.idempotent_hint,
            Some(verb.idempotent()),
            "{verb}"
        );
    }
}

#[test]
fn the_tools_are_control_s_verbs() {
    let control: Vec<&str> = switchboard_control::verbs::FAMILIES
        .iter()
        .flat_map(|f| f.verbs().iter().map(|v| v.as_str()))
        .collect();
    let mut control_sorted = control.clone();
    control_sorted.sort();
    let mut ours: Vec<&str> = switchboard_mcp_gateway::tools::CATALOG
        .iter()
        .map(|s| s.name())
        .collect();
    ours.sort();
    assert_eq!(ours, control_sorted);
    let mut all = support::ALL_VERBS.to_vec();
    all.sort();
    assert_eq!(all, control_sorted);
}

#[tokio::test]
async fn an_endpoint_sees_only_its_allowlist() {
    let tools = listed(
        &["list_todos", "claim_todo", "list_rule_packs"],
        ToolPolicy::default(),
    )
    .await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["claim_todo", "list_rule_packs", "list_todos"]);
}

#[tokio::test]
async fn a_read_only_gateway_offers_only_read_only_tools() {
    let policy = ToolPolicy {
        read_only: true,
        ..ToolPolicy::default()
    };
    let tools = listed(support::ALL_VERBS, policy).await;
    assert!(!tools.is_empty());
    for tool in &tools {
        let value: Value = serde_json::to_value(tool).expect("json");
        assert_eq!(value["annotations"]["readOnlyHint"], true, "{}", tool.name);
    }
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(!names.contains(&"install_rule_pack"));
    assert!(names.contains(&"list_rule_packs"));
}
