//! Configuration layering through the real binary: defaults < config file < `SWITCHBOARD_*`
//! environment < flags, and `--print-config` (secrets redacted, each value's source, in the
//! config file's own format).

use std::process::Command;

use crate::support::binary;

/// `switchboard <args>` with only `env` set among `SWITCHBOARD_*` variables: (success,
/// stdout, stderr).
fn switchboard(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut command = Command::new(binary());
    command.args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("SWITCHBOARD_") || key.starts_with("OTEL_") {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied());
    let out = command.output().expect("run switchboard");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `[role]` table `--print-config` printed.
fn printed(stdout: &str, role: &str) -> toml::Table {
    let table: toml::Table = toml::from_str(stdout).expect("--print-config prints TOML");
    table
        .get(role)
        .and_then(|t| t.as_table())
        .cloned()
        .unwrap_or_else(|| panic!("no [{role}] in:\n{stdout}"))
}

/// The source comment `--print-config` wrote after `key`.
fn source_of(stdout: &str, key: &str) -> String {
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .and_then(|l| l.rsplit_once("  # "))
        .map(|(_, source)| source.to_string())
        .unwrap_or_else(|| panic!("no `{key}` line in:\n{stdout}"))
}

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp file");
    std::fs::write(file.path(), text).expect("write config");
    file
}

#[test]
fn flags_beat_the_environment_which_beats_the_file_which_beats_the_defaults() {
    let file = config_file(
        r#"
[router]
listen = "127.0.0.1:7801"
children = 3
budget_ms = 70
child_cpu_seconds = 99

[control]
database_url = "sqlite://ignored-for-a-router"
"#,
    );
    let path = file.path().to_str().expect("utf-8 path");
    let (ok, out, err) = switchboard(
        &[
            "router",
            "--config",
            path,
            "--print-config",
            "--budget-ms",
            "90",
        ],
        &[
            ("SWITCHBOARD_ROUTER_BUDGET_MS", "80"),
            ("SWITCHBOARD_ROUTER_CHILDREN", "4"),
        ],
    );
    assert!(ok, "{err}");
    let router = printed(&out, "router");
    assert_eq!(router["listen"].as_str(), Some("127.0.0.1:7801"));
    assert_eq!(source_of(&out, "listen"), "file");
    assert_eq!(router["children"].as_integer(), Some(4));
    assert_eq!(
        source_of(&out, "children"),
        "env SWITCHBOARD_ROUTER_CHILDREN"
    );
    assert_eq!(router["budget_ms"].as_integer(), Some(90));
    assert_eq!(source_of(&out, "budget_ms"), "flag");
    assert_eq!(router["child_cpu_seconds"].as_integer(), Some(99));
    assert_eq!(router["child_address_space_mb"].as_integer(), Some(1024));
    assert_eq!(source_of(&out, "child_address_space_mb"), "default");
}

#[test]
fn the_config_file_can_be_named_by_the_environment() {
    let file =
        config_file("[gateway]\nread_only = true\nallowed_host = [\"mcp.example.com\", \"mcp\"]\n");
    let path = file.path().to_str().expect("utf-8 path");
    let (ok, out, err) = switchboard(
        &["gateway", "--print-config"],
        &[("SWITCHBOARD_CONFIG", path)],
    );
    assert!(ok, "{err}");
    let gateway = printed(&out, "gateway");
    assert_eq!(gateway["read_only"].as_bool(), Some(true));
    let hosts: Vec<&str> = gateway["allowed_host"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(hosts, ["mcp.example.com", "mcp"]);
}

#[test]
fn print_config_redacts_secrets_and_reads_back_as_a_config_file() {
    let (ok, first, err) = switchboard(
        &[
            "control",
            "--print-config",
            "--database-url",
            "postgres://switchboard:hunter2@db:5432/switchboard?sslmode=disable",
            "--grpc-listen",
            "0.0.0.0:7700",
            "--routers",
            "dns:///switchboard-router:7701",
        ],
        &[],
    );
    assert!(ok, "{err}");
    assert!(!first.contains("hunter2"), "the password leaked:\n{first}");
    let control = printed(&first, "control");
    assert_eq!(
        control["database_url"].as_str(),
        Some("postgres://switchboard:<redacted>@db:5432/switchboard?sslmode=disable")
    );

    // What it printed is a config file that gives the same configuration.
    let file = config_file(&first);
    let path = file.path().to_str().expect("utf-8 path");
    let (ok, second, err) = switchboard(&["control", "--config", path, "--print-config"], &[]);
    assert!(ok, "{err}");
    assert_eq!(printed(&second, "control"), control);
    assert_eq!(source_of(&second, "routers"), "file");
}

#[test]
fn a_bad_config_file_is_a_clear_error_and_nothing_starts() {
    let cases = [
        (
            "[router]\nchildren_count = 2\n",
            "has no setting `children_count`",
        ),
        (
            "[router]\nlisten = [1, 2]\n",
            "`listen` must be a string, number or boolean",
        ),
        ("[router\n", "config file"),
        ("router = 3\n", "[router] is not a table"),
    ];
    for (text, expected) in cases {
        let file = config_file(text);
        let path = file.path().to_str().expect("utf-8 path");
        let (ok, out, err) = switchboard(&["router", "--config", path], &[]);
        assert!(!ok, "{text:?} was accepted: {out}");
        assert!(err.contains(expected), "{text:?}: {err}");
        assert!(
            !out.contains("router listening"),
            "{text:?} started a router"
        );
    }
    let (ok, _, err) = switchboard(
        &["router", "--config", "/nonexistent/switchboard.toml"],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("/nonexistent/switchboard.toml"), "{err}");
}

/// `--claim-ttl-secs`: 30 minutes unless set, and no lease of 0 or past 30 days.
#[test]
fn the_claim_lease_defaults_to_30_minutes_and_is_bounded() {
    let control = [
        "control",
        "--print-config",
        "--database-url",
        "sqlite://unused",
    ];
    let (ok, out, err) = switchboard(&control, &[]);
    assert!(ok, "{err}");
    assert_eq!(
        printed(&out, "control")["claim_ttl_secs"].as_integer(),
        Some(1800)
    );
    assert_eq!(source_of(&out, "claim_ttl_secs"), "default");
    let (ok, out, err) = switchboard(&control, &[("SWITCHBOARD_CLAIM_TTL_SECS", "600")]);
    assert!(ok, "{err}");
    assert_eq!(
        printed(&out, "control")["claim_ttl_secs"].as_integer(),
        Some(600)
    );
    for bad in ["0", "2592001"] {
        let mut args = control.to_vec();
        args.extend(["--claim-ttl-secs", bad]);
        let (ok, _, err) = switchboard(&args, &[]);
        assert!(!ok && err.contains("claim-ttl-secs"), "{err}");
    }
}
