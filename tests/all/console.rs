//! Issue 20 through the real binary in a real browser: `switchboard up` (every role in one
//! process), an agent over MCP under `confirm_policy: person`, and a person in headless
//! Chromium (Debian's `chromium` and `chromium-driver`, driven over WebDriver by fantoccini)
//! who signs in with a link, reads the plan and accepts or rejects it. Without Chromium and
//! chromedriver on this machine the test says it skipped (`.ci/run` installs them).

use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::cli::{Process, up_lines};
use crate::control_harness::{
    Control, ControlSetup, HttpResponse, TestDb, eventually, http_raw, on_every_backend, post,
    signed,
};
use crate::mcp_e2e::mcp_post;
use crate::support::{binary, payload};

on_every_backend! {
    the_webhook_page_charts_the_stored_decisions_and_the_events_page_filters_them,
    behind_an_auth_proxy_the_header_names_the_person_only_from_trusted_peers,
    a_sign_in_link_works_once_and_a_session_ends_at_sign_out,
}

/// `switchboard up` on a fresh data folder, one sandbox child, every listener on a free port:
/// the process, what it printed, the console's URL and address, and the dev sign-in link.
struct Up {
    _dir: tempfile::TempDir,
    up: Process,
    lines: crate::cli::UpLines,
    console: String,
    dev_link: String,
    http: SocketAddr,
}

fn start_up() -> Up {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("data");
    let data = data_dir.to_str().expect("utf-8 path");
    let env = [
        ("SWITCHBOARD_DATA_DIR", data),
        ("SWITCHBOARD_HTTP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_MCP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_ROUTER_CHILDREN", "1"),
    ];
    let mut up = Process::spawn(&["up"], &env);
    let lines = up_lines(&mut up);
    let console = up.line("console url: ");
    let dev_link = up
        .line("console sign-in (dev, once, 15 minutes): ")
        .trim()
        .to_string();
    let http: SocketAddr = console
        .trim_start_matches("http://")
        .trim_end_matches("/console")
        .parse()
        .expect("the console's address");
    Up {
        _dir: dir,
        up,
        lines,
        console,
        dev_link,
        http,
    }
}

/// A program on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// Headless Chromium behind chromedriver; both stop when dropped.
pub(crate) struct Browser {
    driver: Child,
    pub client: Client,
}

impl Browser {
    /// `None` (the test then skips, saying so) where Chromium or chromedriver is missing.
    pub(crate) async fn start() -> Option<Browser> {
        let chromium = on_path("chromium").or_else(|| on_path("chromium-browser"))?;
        let chromedriver = on_path("chromedriver")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // A process group of its own, so that Chromium, which chromedriver starts, goes
        // with it (killing chromedriver alone left Chromium running after the test).
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromedriver starts");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1600"],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => return Some(Browser { driver, client }),
                Err(e) if std::time::Instant::now() > deadline => {
                    panic!("chromedriver did not start a session: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    async fn text(&self, css: &str) -> String {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"))
            .text()
            .await
            .expect("text")
    }

    /// The text of `css` once it reads `want` (a form's answer page may still be loading
    /// after the click returns); panics with what it read after 15 s.
    async fn text_becomes(&self, css: &str, want: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut last = String::new();
        while std::time::Instant::now() < deadline {
            if let Ok(element) = self.client.find(Locator::Css(css)).await
                && let Ok(text) = element.text().await
            {
                if text == want {
                    return;
                }
                last = text;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{css} never read {want:?}; last {last:?}");
    }

    async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    async fn has(&self, css: &str) -> bool {
        self.client.find(Locator::Css(css)).await.is_ok()
    }

    /// How many elements `css` finds.
    async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("find {css}: {e}"))
            .len()
    }

    /// With `SWITCHBOARD_CONSOLE_SCREENSHOTS` set (`scripts/console-screenshot`), saves the
    /// page as `console-{name}.png` in that folder, so the docs show what a person sees.
    async fn screenshot(&self, name: &str) {
        if let Some(dir) = std::env::var_os("SWITCHBOARD_CONSOLE_SCREENSHOTS") {
            let png = self.client.screenshot().await.expect("a screenshot");
            std::fs::write(PathBuf::from(dir).join(format!("console-{name}.png")), png)
                .expect("write the screenshot");
        }
    }

    /// Presses the control whose id is `id` with the keyboard alone: Tab from the top of the
    /// page until it has the focus, then Enter. Panics if Tab never reaches it.
    async fn press_with_keyboard(&self, id: &str) {
        const TAB: &str = "\u{E004}";
        const ENTER: &str = "\u{E007}";
        for _ in 0..200 {
            let focused = self
                .client
                .active_element()
                .await
                .expect("the focused element");
            if focused.attr("id").await.ok().flatten().as_deref() == Some(id) {
                focused.send_keys(ENTER).await.expect("press Enter");
                return;
            }
            focused.send_keys(TAB).await.expect("press Tab");
        }
        panic!("Tab never reached #{id}");
    }

    /// The page at a phone's width (390 CSS pixels): nothing wider than the screen but the
    /// tables that scroll inside their own box, and still accessible.
    async fn fits_a_phone(&self, what: &str) {
        let (w, h) = self.client.get_window_size().await.expect("window size");
        self.client
            .set_window_size(390, 844)
            .await
            .expect("resize to a phone");
        let widths = self
            .client
            .execute(
                r##"const wide = [...document.querySelectorAll("body *")]
                    .filter(e => !e.closest("div.scroll") && e.getBoundingClientRect().right > window.innerWidth)
                    .slice(0, 6)
                    .map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : "") + " " + Math.round(e.getBoundingClientRect().right));
                return [document.documentElement.scrollWidth, window.innerWidth, wide];"##,
                vec![],
            )
            .await
            .expect("page widths");
        self.accessible(&format!("{what}, at a phone's width"))
            .await;
        self.client
            .set_window_size(w as u32, h as u32)
            .await
            .expect("resize back");
        let (page, screen) = (widths[0].as_u64(), widths[1].as_u64());
        assert!(
            page.is_some() && page <= screen,
            "{what}: the page is {page:?} px wide on a {screen:?} px screen: {}",
            widths[2]
        );
    }

    /// Runs axe-core on the page as it stands (WCAG 2.0–2.2 A and AA, and axe's best
    /// practices) and panics naming every violation, with `what` the page and state. Where
    /// `scripts/axe` has not installed axe-core, says so and checks nothing.
    pub(crate) async fn accessible(&self, what: &str) {
        let Some(axe) = axe_source() else {
            switchboard_testkit::missing::skip(
                &format!("{what}: accessibility"),
                "axe-core",
                "run scripts/axe",
            );
            return;
        };
        self.client
            .execute(axe, vec![])
            .await
            .unwrap_or_else(|e| panic!("{what}: inject axe-core: {e}"));
        let found = self
            .client
            .execute_async(
                r#"const done = arguments[arguments.length - 1];
                axe.run(document, {
                    runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"] },
                    resultTypes: ["violations"],
                }).then(
                    r => done(r.violations.map(v => ({
                        rule: v.id, impact: v.impact, help: v.help,
                        nodes: v.nodes.map(n => n.target.join(" ") + ": " + n.failureSummary),
                    }))),
                    e => done({ error: String(e) }),
                );"#,
                vec![],
            )
            .await
            .unwrap_or_else(|e| panic!("{what}: run axe-core: {e}"));
        assert!(
            found.as_array().is_some_and(|v| v.is_empty()),
            "{what}: accessibility violations: {}",
            serde_json::to_string_pretty(&found).unwrap_or_default()
        );
    }
}

/// Says a real-browser test checked nothing here (or fails, where every tool is required).
fn no_browser() {
    switchboard_testkit::missing::skip(
        "console in a real browser",
        "chromium with chromedriver",
        "apt-get install chromium chromium-driver",
    );
}

/// axe-core's script, where `scripts/axe` installed it (`SWITCHBOARD_AXE_DIR`, or
/// `target/axe`), read once.
fn axe_source() -> Option<&'static str> {
    static SOURCE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    SOURCE
        .get_or_init(|| {
            let dir = std::env::var_os("SWITCHBOARD_AXE_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/axe"));
            std::fs::read_to_string(dir.join("node_modules/axe-core/axe.min.js")).ok()
        })
        .as_deref()
}

impl Drop for Browser {
    /// Kills chromedriver's whole process group: chromedriver and every Chromium process.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `switchboard admin` against `up`'s control with `up`'s operator token: stdout, or a panic
/// with stderr.
fn admin(grpc: &str, operator_token: &str, args: &[&str]) -> String {
    let out = Command::new(binary())
        .args(["admin", "--control", grpc])
        .args(args)
        .env("SWITCHBOARD_LOG", "warn")
        .env_remove(crate::support::SECRET_KEY_ENV)
        .env("SWITCHBOARD_OPERATOR_TOKEN", operator_token)
        .env_remove("SWITCHBOARD_CONSOLE_URL")
        .stdin(Stdio::null())
        .output()
        .expect("admin runs");
    assert!(
        out.status.success(),
        "admin {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Vends an endpoint for the dev human in `scope` with the operator's CLI: its credential.
fn vend_dev(grpc: &str, operator_token: &str, scope: &str, verbs: &str) -> String {
    let out = admin(
        grpc,
        operator_token,
        &[
            "endpoint", "vend", "--human", "dev", "--scope", scope, "--verbs", verbs, "--yes",
        ],
    );
    out.lines()
        .find_map(|l| l.strip_prefix("credential (shown once; it is stored only as a hash):"))
        .expect("a credential")
        .trim()
        .to_string()
}

/// One MCP tool call; its structured result, or its error object.
pub(crate) async fn tool(mcp_url: &str, bearer: &str, name: &str, arguments: Value) -> Value {
    let answer = mcp_post(
        mcp_url,
        bearer,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": name, "arguments": arguments}}),
    )
    .await;
    let result = &answer["result"];
    if result["isError"] == true {
        let text = result["content"][0]["text"].as_str().unwrap_or("{}");
        return serde_json::from_str::<Value>(text).unwrap_or(Value::Null)["error"].clone();
    }
    result["structuredContent"].clone()
}

/// An agent plans `name` (or its removal) and confirms by token: the pending answer.
async fn propose(mcp_url: &str, bearer: &str, webhook: &str, removal: bool) -> Value {
    let call = if removal {
        "remove_rule_pack"
    } else {
        "install_rule_pack"
    };
    let plan = tool(
        mcp_url,
        bearer,
        call,
        json!({"webhook_id": webhook, "name": "drop-ci-noise"}),
    )
    .await;
    let token = plan["plan_token"]
        .as_str()
        .unwrap_or_else(|| panic!("a plan: {plan}"));
    tool(
        mcp_url,
        bearer,
        "confirm_rule_pack_plan",
        json!({"webhook_id": webhook, "plan_token": token, "allow_unproven": true}),
    )
    .await
}

async fn http_get(addr: SocketAddr, path: &str, cookie: &str) -> HttpResponse {
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nCookie: {cookie}\r\n\r\n"
    );
    http_raw(addr, head.into_bytes(), Vec::new()).await
}

async fn http_form(addr: SocketAddr, path: &str, cookie: &str, form: &str) -> HttpResponse {
    let headers = [
        ("Cookie".to_string(), cookie.to_string()),
        (
            "Content-Type".to_string(),
            "application/x-www-form-urlencoded".to_string(),
        ),
    ];
    post(addr, path, &headers, form.as_bytes()).await
}

/// Follows a sign-in link over plain HTTP: the session cookie (`name=value`) it sets.
async fn sign_in_over_http(addr: SocketAddr, link: &str) -> String {
    let path = &link[link.find("/console/").expect("a console link")..];
    let r = http_get(addr, path, "").await;
    assert_eq!(r.status, 200, "{r:?}");
    let cookie = r.header("set-cookie").expect("a session cookie");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    cookie.split(';').next().unwrap_or_default().to_string()
}

/// The CSRF token a page's forms carry.
fn csrf_of(html: &str) -> String {
    let at = html.find(r#"name="csrf" value=""#).expect("a form") + r#"name="csrf" value=""#.len();
    html[at..].split('"').next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_accepts_an_agents_plan_in_a_real_browser() {
    let Some(browser) = Browser::start().await else {
        no_browser();
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("data");
    let data = data_dir.to_str().expect("utf-8 path");
    let env = [
        ("SWITCHBOARD_DATA_DIR", data),
        ("SWITCHBOARD_HTTP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_MCP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_ROUTER_CHILDREN", "1"),
    ];
    let mut up = Process::spawn(&["up"], &env);
    let lines = up_lines(&mut up);
    let console = up.line("console url: ");
    let dev_link = up
        .line("console sign-in (dev, once, 15 minutes): ")
        .trim()
        .to_string();
    assert!(console.ends_with("/console"), "{console}");
    assert!(
        dev_link.starts_with(&format!("{console}/sign-in?token=sbl_")),
        "{dev_link}"
    );
    let http: SocketAddr = console
        .trim_start_matches("http://")
        .trim_end_matches("/console")
        .parse()
        .expect("the console's address");
    let out = admin(
        &lines.grpc,
        &lines.operator_token,
        &["webhook", "confirm-policy", &lines.webhook, "person"],
    );
    assert!(out.contains("confirm policy person"), "{out}");

    // Deliveries to replay, so the plan is proven.
    for (i, (file, event)) in [
        ("pull_request.opened.json", "pull_request"),
        ("issue_comment.created.json", "issue_comment"),
        ("check_run.completed.json", "check_run"),
    ]
    .iter()
    .enumerate()
    {
        let p = payload("github", file);
        let headers = signed(
            "github",
            event,
            &format!("console-{i}"),
            &lines.secret,
            &p.body,
        );
        let path = format!("/hooks/{}", lines.webhook);
        assert_eq!(post(http, &path, &headers, &p.body).await.status, 202);
    }

    // The agent proposes; its confirm puts nothing live.
    let (mcp, bearer, webhook) = (&lines.mcp_url, &lines.token, &lines.webhook);
    let before = tool(
        mcp,
        bearer,
        "list_webhook_rules",
        json!({"webhook_id": webhook}),
    )
    .await;
    let pending = propose(mcp, bearer, webhook, false).await;
    assert_eq!(pending["state"], "pending_approval", "{pending}");
    assert_eq!(pending["saved"], false);
    let plan_id = pending["plan_id"].as_str().expect("plan id").to_string();
    let plan_url = format!("{console}/plans/{plan_id}");
    assert_eq!(
        pending["console_url"], plan_url,
        "the link points at this console"
    );
    let after = tool(
        mcp,
        bearer,
        "list_webhook_rules",
        json!({"webhook_id": webhook}),
    )
    .await;
    assert_eq!(
        after["version"], before["version"],
        "nothing saved by the agent"
    );

    // Signed out, the plan's link answers a page saying how to get a sign-in link; the link
    // `up` printed signs the person in and leads back to the plan.
    let c = &browser.client;
    c.goto(&plan_url).await.expect("open the plan signed out");
    browser.text_becomes("h1", "Sign in").await;
    assert_eq!(
        browser.text("#next").await,
        format!("/console/plans/{plan_id}")
    );
    assert!(
        browser
            .text("main")
            .await
            .contains("switchboard admin human sign-in-link")
    );
    browser.accessible("signed out, a plan asked for").await;
    c.goto(&dev_link).await.expect("open the sign-in link");
    assert!(browser.text("main").await.contains("signed in as dev"));
    browser.accessible("signed in").await;
    browser.click("#continue").await;
    browser
        .text_becomes("#plan-state", "waiting for approval")
        .await;
    // The inbox lists it.
    c.goto(&console).await.expect("the inbox");
    browser
        .text_becomes("h1", "Plans awaiting your decision")
        .await;
    browser.accessible("the inbox, one plan").await;
    // The dev webhook by its name (issue 48), the id beside it.
    assert!(
        browser.text("#inbox").await.contains("dev (GitHub)"),
        "{}",
        browser.text("#inbox").await
    );
    browser.screenshot("inbox").await;
    assert!(
        browser
            .has(&format!("a[href='/console/plans/{plan_id}']"))
            .await,
        "in the inbox"
    );
    browser
        .click(&format!("a[href='/console/plans/{plan_id}']"))
        .await;
    browser
        .text_becomes("#plan-state", "waiting for approval")
        .await;
    assert!(
        browser
            .text("#evidence")
            .await
            .contains("3 stored deliveries replayed")
    );
    assert!(browser.has("#totals").await && browser.has("#rules").await);
    assert!(
        browser.has("#todos-chart").await,
        "todos per day as inline SVG"
    );
    let page = c.source().await.expect("page source");
    assert!(!page.contains("<script"), "no JavaScript");
    browser.accessible("a pending plan").await;
    let proposer = browser.text("#proposed-by").await;
    assert!(
        proposer.starts_with("dev via dev (switchboard up) (ep_"),
        "the endpoint by its name: {proposer}"
    );
    // scripts/console-screenshot regenerates docs/console-*.png from these very pages.
    browser.screenshot("plan").await;
    // Accepted with the keyboard alone.
    browser.press_with_keyboard("accept").await;
    browser.text_becomes("#plan-state", "applied").await;
    assert!(
        browser.text("#notice").await.starts_with("Accepted"),
        "{}",
        browser.text("main").await
    );
    assert_eq!(browser.text("#plan-state").await, "applied");
    browser.accessible("an accepted plan").await;
    let state = tool(
        mcp,
        bearer,
        "get_rule_pack_plan",
        json!({"plan_token": "x"}),
    )
    .await;
    assert_eq!(state["code"], "not_found", "an unknown token: {state}");
    let history = tool(
        mcp,
        bearer,
        "list_webhook_history",
        json!({"webhook_id": webhook}),
    )
    .await;
    let newest = &history["records"][0];
    assert_eq!(newest["provenance"]["approved_by"], "dev", "{newest}");
    assert_eq!(
        newest["provenance"]["proposed_by"]["human"], "dev",
        "{newest}"
    );
    let saved = tool(
        mcp,
        bearer,
        "list_webhook_rules",
        json!({"webhook_id": webhook}),
    )
    .await;
    assert_eq!(
        saved["version"].as_i64(),
        before["version"].as_i64().map(|v| v + 1)
    );
    // The webhook page: the pack's rules in order, the pack installed, the history naming the
    // proposer and the approver, the replayed deliveries with their decisions.
    c.goto(&format!("{console}/webhooks/{webhook}"))
        .await
        .expect("the webhook page");
    assert!(
        browser
            .text("#webhook-rules")
            .await
            .contains("drop-ci-noise--ci-noise")
    );
    assert!(browser.text("#installed").await.contains("drop-ci-noise"));
    let history = browser.text("#history").await;
    assert!(
        history.contains("install_rule_pack drop-ci-noise@"),
        "{history}"
    );
    assert!(history.contains("dev via ep_"), "{history}");
    assert_eq!(browser.count("#events tbody tr").await, 3);
    browser.accessible("the webhook page").await;
    assert!(
        browser.has("svg.activity-chart").await,
        "decisions over time"
    );
    browser.screenshot("webhook").await;
    // Its events page: every delivery with what decided it; a filter narrows it.
    browser.click("a[href$='/events']").await;
    browser
        .text_becomes("#f-decision option[selected]", "any decision")
        .await;
    assert_eq!(browser.count("#event-list tbody tr").await, 3);
    browser.accessible("the events page").await;
    browser.screenshot("events").await;
    c.find(Locator::Css("#f-kind"))
        .await
        .expect("the kind filter")
        .send_keys("check_run.completed")
        .await
        .expect("type");
    browser.click("#apply-filters").await;
    browser
        .text_becomes(
            "#event-list tbody tr td:nth-child(3)",
            "check_run.completed",
        )
        .await;
    assert_eq!(browser.count("#event-list tbody tr").await, 1);
    browser.accessible("the events page, filtered").await;

    // Reject: the removal an agent proposes never applies.
    let pending = propose(mcp, bearer, webhook, true).await;
    let removal = pending["plan_id"].as_str().expect("plan id").to_string();
    c.goto(&format!("{console}/plans/{removal}"))
        .await
        .expect("open");
    c.find(Locator::Css("#reason"))
        .await
        .expect("a reason box")
        .send_keys("not this week")
        .await
        .expect("type");
    browser.click("#reject").await;
    browser.text_becomes("#plan-state", "rejected").await;
    assert!(browser.text("#decision").await.contains("not this week"));
    browser.accessible("a rejected plan").await;

    // Stale: the configuration moves while the page is open; Accept is refused in the page.
    let pending = propose(mcp, bearer, webhook, true).await;
    let stale = pending["plan_id"].as_str().expect("plan id").to_string();
    c.goto(&format!("{console}/plans/{stale}"))
        .await
        .expect("open");
    assert!(browser.has("#accept").await);
    // Under `person` the agent cannot edit the rules directly either: refused, nothing saved.
    let delete = json!({"webhook_id": webhook, "rule_id": "drop-ci-noise--deleted"});
    let refused = tool(mcp, bearer, "delete_webhook_rule", delete.clone()).await;
    assert_eq!(refused["code"], "approval_required", "{refused}");
    assert!(
        refused["details"]["next"]
            .as_str()
            .is_some_and(|n| n.contains("install_rule_pack")),
        "{refused}"
    );
    let unchanged = tool(
        mcp,
        bearer,
        "list_webhook_rules",
        json!({"webhook_id": webhook}),
    )
    .await;
    assert!(
        unchanged.to_string().contains("drop-ci-noise--deleted"),
        "{unchanged}"
    );
    // The operator lifts the policy, the agent edits, the policy is back: the plan is stale.
    admin(
        &lines.grpc,
        &lines.operator_token,
        &["webhook", "confirm-policy", webhook, "self"],
    );
    let edit = tool(mcp, bearer, "delete_webhook_rule", delete).await;
    assert!(edit["version"].is_i64(), "{edit}");
    admin(
        &lines.grpc,
        &lines.operator_token,
        &["webhook", "confirm-policy", webhook, "person"],
    );
    browser.click("#accept").await;
    browser.text_becomes("#plan-state", "stale").await;
    assert!(
        browser
            .text("#notice")
            .await
            .starts_with("Nothing was done")
    );
    browser.accessible("a stale plan").await;
    // The inbox lists it apart, and the person dismisses it.
    c.goto(&console).await.expect("the inbox");
    browser
        .text_becomes("#stale-heading", "No longer current")
        .await;
    assert!(
        browser
            .has(&format!("#inbox-stale tr[data-plan='{stale}']"))
            .await
    );
    browser.accessible("the inbox with a stale plan").await;
    browser
        .click(&format!("tr[data-plan='{stale}'] button.dismiss"))
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !browser.has("#notice").await && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        browser.text("#notice").await.starts_with("Dismissed"),
        "{}",
        browser.text("main").await
    );
    assert!(!browser.has(&format!("tr[data-plan='{stale}']")).await);
    browser.accessible("the inbox after a dismissal").await;

    // A form without its CSRF token (or with another's) does nothing.
    let session = c
        .get_named_cookie("sb_console")
        .await
        .expect("the session cookie");
    assert!(session.http_only().unwrap_or(false));
    let cookie = format!("sb_console={}", session.value());
    let pending = propose(mcp, bearer, webhook, true).await;
    let target = pending["plan_id"].as_str().expect("plan id").to_string();
    let accept = format!("/console/plans/{target}/accept");
    assert_eq!(http_form(http, &accept, &cookie, "").await.status, 403);
    assert_eq!(
        http_form(http, &accept, &cookie, "csrf=0000").await.status,
        403
    );
    let page = http_get(http, &format!("/console/plans/{target}"), &cookie).await;
    assert!(
        String::from_utf8_lossy(&page.body).contains("pending_approval"),
        "untouched"
    );
    let csp = page.header("content-security-policy").expect("a CSP");
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));

    // Another person sees another scope's plan exactly as an unknown one; a viewer of a team
    // reads a team plan but cannot accept it.
    admin(
        &lines.grpc,
        &lines.operator_token,
        &["human", "create", "eve"],
    );
    admin(
        &lines.grpc,
        &lines.operator_token,
        &["team", "create", "ops"],
    );
    admin(
        &lines.grpc,
        &lines.operator_token,
        &["team", "add-member", "ops", "eve", "--role", "viewer"],
    );
    admin(
        &lines.grpc,
        &lines.operator_token,
        &["team", "add-member", "ops", "dev", "--role", "editor"],
    );
    let eve_link = admin(
        &lines.grpc,
        &lines.operator_token,
        &["human", "sign-in-link", "eve"],
    );
    let eve = sign_in_over_http(http, eve_link.trim()).await;
    let theirs = http_get(http, &format!("/console/plans/{target}"), &eve).await;
    let unknown = http_get(
        http,
        "/console/plans/pl_00000000000000000000000000000000",
        &eve,
    )
    .await;
    assert_eq!((theirs.status, unknown.status), (404, 404));
    assert_eq!(
        theirs.body, unknown.body,
        "another scope's plan is not found, indistinguishably"
    );
    let used = http_get(
        http,
        &eve_link.trim()[eve_link.find("/console/").unwrap_or(0)..],
        "",
    )
    .await;
    assert_eq!(used.status, 404, "a sign-in link works once");

    let out = admin(
        &lines.grpc,
        &lines.operator_token,
        &[
            "webhook", "create", "--scope", "team:ops", "--source", "github", "--grant", "forge",
        ],
    );
    let team_hook = out
        .lines()
        .find_map(|l| l.strip_prefix("webhook ")?.strip_suffix(" created"))
        .expect("a team webhook")
        .to_string();
    admin(
        &lines.grpc,
        &lines.operator_token,
        &["webhook", "confirm-policy", &team_hook, "person"],
    );
    let team_agent = vend_dev(
        &lines.grpc,
        &lines.operator_token,
        "team:ops",
        "webhook-rules,rule-pack-confirm",
    );
    let pending = propose(mcp, &team_agent, &team_hook, false).await;
    assert_eq!(pending["state"], "pending_approval", "{pending}");
    // An endpoint vended without `rule-pack-confirm` plans, but its confirm is refused
    // (whatever the webhook's policy) and nothing is saved or put before a person.
    let proposer = vend_dev(
        &lines.grpc,
        &lines.operator_token,
        "team:ops",
        "webhook-rules",
    );
    let refused = propose(mcp, &proposer, &team_hook, false).await;
    assert_eq!(refused["code"], "permission_denied", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("confirm_rule_pack_plan")),
        "the refusal names the verb: {refused}"
    );
    let team_plan = pending["plan_id"].as_str().expect("plan id").to_string();
    let page = http_get(http, &format!("/console/plans/{team_plan}"), &eve).await;
    let html = String::from_utf8_lossy(&page.body).to_string();
    assert_eq!(page.status, 200);
    assert!(
        html.contains("needs the editor role") && !html.contains("/accept"),
        "{html}"
    );
    let form = format!("csrf={}", csrf_of(&html));
    let refused = http_form(
        http,
        &format!("/console/plans/{team_plan}/accept"),
        &eve,
        &form,
    )
    .await;
    assert_eq!(refused.status, 403, "a viewer cannot accept");
    // The editor sees it in the inbox.
    c.goto(&console).await.expect("inbox");
    assert!(
        browser
            .has(&format!("a[href='/console/plans/{team_plan}']"))
            .await
    );

    // Who confirms is a person's choice, an editor's only: a viewer's form changes nothing; the
    // editor puts their own webhook back to `self` in the page, and the agent's next confirm
    // applies at once.
    let page = http_get(http, &format!("/console/webhooks/{team_hook}"), &eve).await;
    let html = String::from_utf8_lossy(&page.body).to_string();
    assert!(
        !html.contains("confirm-policy-form"),
        "no form for a viewer"
    );
    let form = format!("csrf={}&policy=self", csrf_of(&html));
    let refused = http_form(
        http,
        &format!("/console/webhooks/{team_hook}/confirm-policy"),
        &eve,
        &form,
    )
    .await;
    assert_eq!(refused.status, 403, "a viewer cannot change the policy");
    let page = http_get(http, &format!("/console/webhooks/{team_hook}"), &eve).await;
    assert!(
        String::from_utf8_lossy(&page.body).contains("<span id=\"confirm-policy\">person</span>")
    );
    c.goto(&format!("{console}/webhooks/{webhook}"))
        .await
        .expect("the webhook page");
    assert_eq!(browser.text("#confirm-policy").await, "person");
    c.find(Locator::Css("#policy"))
        .await
        .expect("the policy select")
        .select_by_value("self")
        .await
        .expect("choose self");
    browser.click("#save-policy").await;
    browser.text_becomes("#confirm-policy", "self").await;
    assert!(browser.text("#notice").await.starts_with("Saved"));
    browser.accessible("the webhook page, policy saved").await;
    // An editor renames the webhook (issue 48); a viewer cannot.
    assert_eq!(browser.text("#webhook-name").await, "dev (GitHub)");
    let field = c.find(Locator::Css("#name")).await.expect("the name field");
    field.clear().await.expect("cleared");
    field.send_keys("dev site (renamed)").await.expect("typed");
    browser.click("#save-name").await;
    browser
        .text_becomes("#webhook-name", "dev site (renamed)")
        .await;
    assert!(browser.text("h1").await.contains("dev site (renamed)"));
    assert_eq!(
        browser.text("#notice").await,
        "Saved: the webhook is now called dev site (renamed)."
    );
    browser.accessible("the webhook page, renamed").await;
    let field = c.find(Locator::Css("#name")).await.expect("the name field");
    field.clear().await.expect("cleared");
    field.send_keys(&"x".repeat(90)).await.expect("typed");
    // The field stops at 80 characters, so the browser sends no more than a name may hold.
    browser.click("#save-name").await;
    browser.text_becomes("#webhook-name", &"x".repeat(80)).await;
    let refused = http_form(
        http,
        &format!("/console/webhooks/{team_hook}/name"),
        &eve,
        &format!("csrf={}&name=mine", csrf_of(&html)),
    )
    .await;
    assert_eq!(refused.status, 403, "a viewer cannot rename");
    browser.fits_a_phone("the webhook page").await;
    c.goto(&console).await.expect("the inbox");
    browser.fits_a_phone("the inbox").await;
    c.goto(&plan_url).await.expect("the accepted plan");
    browser.fits_a_phone("a plan page").await;
    c.goto(&format!("{console}/webhooks/{webhook}/events"))
        .await
        .expect("the events page");
    browser.fits_a_phone("the events page").await;
    let applied = propose(mcp, bearer, webhook, true).await;
    assert_eq!(applied["saved"], true, "{applied}");

    // Signing out closes the session.
    browser.click("header button").await;
    browser.text_becomes("h1", "Signed out").await;
    browser.accessible("signed out").await;
    let after = http_get(http, "/console", &cookie).await;
    assert_eq!(after.status, 401);

    up.terminate();
    assert!(up.wait_exit(Duration::from_secs(30)).success());
}

/// Posts each `(file, event)` GitHub payload to `up`'s dev webhook, signed, as delivery
/// `{tag}-{i}`.
async fn deliver(http: SocketAddr, lines: &crate::cli::UpLines, tag: &str, files: &[(&str, &str)]) {
    for (i, (file, event)) in files.iter().enumerate() {
        let p = payload("github", file);
        let headers = signed(
            "github",
            event,
            &format!("{tag}-{i}"),
            &lines.secret,
            &p.body,
        );
        let path = format!("/hooks/{}", lines.webhook);
        let answer = post(http, &path, &headers, &p.body).await;
        assert_eq!(answer.status, 202, "{file}: {answer:?}");
    }
}

/// Issue 45 in the console, through the real binary and a real browser: an agent plans
/// drop-ci-noise on a webhook whose past holds no CI delivery and starts a trial of it; live
/// deliveries arrive through ingest, CI among them; a person reads the trial from the
/// webhook page (the chart flags the CI drops as unforeseen); the agent promotes the trial
/// and confirms as the plan says, which under `confirm_policy: person` puts it before the
/// person; the person reads the plan's trial section (insufficient: a warning) and accepts
/// in the browser; the saved configuration is exactly the candidate tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_reads_a_trial_and_accepts_its_promotion_in_a_real_browser() {
    let Some(browser) = Browser::start().await else {
        no_browser();
        return;
    };
    let Up {
        _dir,
        mut up,
        lines,
        console,
        dev_link,
        http,
    } = start_up();
    admin(
        &lines.grpc,
        &lines.operator_token,
        &["webhook", "confirm-policy", &lines.webhook, "person"],
    );
    let (mcp, bearer, webhook) = (&lines.mcp_url, &lines.token, &lines.webhook);

    // The past holds no CI delivery, so the plan's replay forecasts no CI transition.
    let past = [
        ("pull_request.opened.json", "pull_request"),
        ("issues.opened.json", "issues"),
        ("issue_comment.created.json", "issue_comment"),
    ];
    deliver(http, &lines, "past", &past).await;
    let plan = tool(
        mcp,
        bearer,
        "install_rule_pack",
        json!({"webhook_id": webhook, "name": "drop-ci-noise"}),
    )
    .await;
    let token = plan["plan_token"]
        .as_str()
        .unwrap_or_else(|| panic!("a plan: {plan}"));
    let started = tool(
        mcp,
        bearer,
        "start_rule_trial",
        json!({"webhook_id": webhook, "plan_token": token}),
    )
    .await;
    assert_eq!(started["state"], "running", "{started}");
    let trial_id = started["trial_id"]
        .as_str()
        .expect("a trial id")
        .to_string();

    // Live deliveries: the past's kinds again, and CI events the candidate drops.
    let mut live = past.to_vec();
    live.extend([
        ("check_run.created.json", "check_run"),
        ("check_suite.requested.json", "check_suite"),
        ("workflow_job.queued.json", "workflow_job"),
    ]);
    deliver(http, &lines, "live", &live).await;
    let trial = || tool(mcp, bearer, "get_rule_trial", json!({"trial_id": trial_id}));
    eventually(
        Duration::from_secs(30),
        "the trial counted every live delivery",
        || async { trial().await["deliveries"]["seen"] == live.len() },
    )
    .await;
    let report = trial().await;
    let unforeseen = report["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .filter(|e| e["unforeseen"] == true && e["to"] == "drop")
        .count();
    assert_eq!(unforeseen, 1, "the CI drops, unforeseen: {report}");
    assert_eq!(report["sufficient"], false, "seven deliveries are too few");

    // The person finds the trial on the webhook page and opens it.
    let c = &browser.client;
    c.goto(&dev_link).await.expect("open the sign-in link");
    browser.click("#continue").await;
    browser
        .text_becomes("h1", "Plans awaiting your decision")
        .await;
    c.goto(&format!("{console}/webhooks/{webhook}"))
        .await
        .expect("the webhook page");
    let row = browser.text("#trials tbody tr").await;
    assert!(row.contains(&trial_id) && row.contains("running"), "{row}");
    assert!(row.contains("insufficient"), "{row}");
    browser
        .click(&format!("#trials a[href='/console/trials/{trial_id}']"))
        .await;
    browser.text_becomes("#trial-state", "running").await;
    browser.accessible("a running trial").await;
    assert!(
        browser
            .text("#trial-deliveries")
            .await
            .starts_with(&format!(
                "{} live deliveries seen, {} evaluated",
                live.len(),
                live.len()
            )),
        "{}",
        browser.text("#trial-deliveries").await
    );
    assert!(
        browser.has("svg#evidence-chart[role='img']").await,
        "the chart, as inline SVG"
    );
    let flagged = c
        .find_all(Locator::Css("#evidence-chart g.flagged.unforeseen"))
        .await
        .expect("rows");
    assert_eq!(flagged.len(), 1, "the CI drops are flagged");
    assert!(
        flagged[0]
            .text()
            .await
            .expect("text")
            .contains("unforeseen"),
        "the flag reads without colour"
    );
    assert!(
        browser
            .text("#sufficiency")
            .await
            .contains("too few deliveries")
    );
    assert!(browser.has("#transitions").await && browser.has("#rules").await);
    let page = c.source().await.expect("page source");
    assert!(
        !page.contains("<script") && !page.contains(" style="),
        "CSP-clean"
    );

    // Another person sees the trial exactly as an unknown one.
    admin(
        &lines.grpc,
        &lines.operator_token,
        &["human", "create", "eve"],
    );
    let eve_link = admin(
        &lines.grpc,
        &lines.operator_token,
        &["human", "sign-in-link", "eve"],
    );
    let eve = sign_in_over_http(http, eve_link.trim()).await;
    let theirs = http_get(http, &format!("/console/trials/{trial_id}"), &eve).await;
    let unknown = http_get(
        http,
        "/console/trials/tr_00000000000000000000000000000000",
        &eve,
    )
    .await;
    assert_eq!((theirs.status, unknown.status), (404, 404));
    assert_eq!(theirs.body, unknown.body, "indistinguishable");

    // The agent promotes the trial and confirms as the plan says: before a person.
    let promotion = tool(
        mcp,
        bearer,
        "promote_rule_trial",
        json!({"trial_id": trial_id}),
    )
    .await;
    assert_eq!(promotion["trial_sufficient"], false, "{promotion}");
    // The plan's own confirm arguments (the flags it needs set, the rest null).
    let mut confirm: serde_json::Map<String, Value> = promotion["confirm_with"]["arguments"]
        .as_object()
        .expect("confirm arguments")
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    confirm.insert("webhook_id".into(), json!(webhook));
    confirm.insert("plan_token".into(), promotion["plan_token"].clone());
    assert_eq!(confirm["allow_insufficient_trial"], true, "{confirm:?}");
    let pending = tool(
        mcp,
        bearer,
        "confirm_rule_pack_plan",
        Value::Object(confirm),
    )
    .await;
    assert_eq!(pending["state"], "pending_approval", "{pending}");
    let plan_id = pending["plan_id"].as_str().expect("plan id").to_string();
    let candidate = trial().await["candidate_digest"]
        .as_str()
        .expect("the tried candidate")
        .to_string();

    // The person reads the plan's trial section, warned it is insufficient, and accepts.
    c.goto(&format!("{console}/plans/{plan_id}"))
        .await
        .expect("the plan page");
    browser
        .text_becomes("#plan-state", "waiting for approval")
        .await;
    browser.accessible("a promotion's plan").await;
    assert_eq!(
        browser.text("#trial-heading").await,
        "Trial on live deliveries"
    );
    assert!(browser.has("#trial svg#evidence-chart").await);
    assert!(
        browser
            .has(&format!("#trial a[href='/console/trials/{trial_id}']"))
            .await
    );
    assert!(
        browser
            .text("#accept-insufficient")
            .await
            .contains("accepting applies it anyway")
    );
    assert!(
        browser
            .text("#trial #sufficiency")
            .await
            .contains("Accepting applies this plan anyway")
    );
    browser.click("#accept").await;
    browser.text_becomes("#plan-state", "applied").await;

    // Saved: exactly the candidate tried, and the history names the trial.
    let saved = tool(mcp, bearer, "get_webhook", json!({"webhook_id": webhook})).await;
    assert_eq!(
        saved["webhook"]["config_digest"],
        candidate.as_str(),
        "{saved}"
    );
    let history = tool(
        mcp,
        bearer,
        "list_webhook_history",
        json!({"webhook_id": webhook}),
    )
    .await;
    let newest = &history["records"][0];
    assert_eq!(newest["digest_after"], candidate.as_str(), "{newest}");
    assert_eq!(newest["provenance"]["approved_by"], "dev", "{newest}");
    // The webhook page's history names the trial whose candidate went live; the trial
    // reads as promoted.
    c.goto(&format!("{console}/webhooks/{webhook}"))
        .await
        .expect("the webhook page");
    assert!(
        browser
            .has(&format!("#history a[href='/console/trials/{trial_id}']"))
            .await,
        "{}",
        browser.text("#history").await
    );
    assert!(
        browser
            .text("#trials tbody tr")
            .await
            .contains("ended: promoted")
    );

    up.terminate();
    assert!(up.wait_exit(Duration::from_secs(30)).success());
}

/// Control in-process with `console` settings, its HTTP address.
async fn control_with(
    db: &TestDb,
    console: switchboard_control::console::ConsoleSettings,
) -> (Control, crate::support::RouterProcess) {
    let router = tokio::task::spawn_blocking(crate::ingest::router)
        .await
        .expect("router");
    let control = Control::start(
        &db.store,
        &[&router.addr],
        ControlSetup {
            console,
            ..ControlSetup::default()
        },
    )
    .await;
    (control, router)
}

fn proxy(trusted: &str) -> switchboard_control::console::ConsoleSettings {
    switchboard_control::console::ConsoleSettings {
        auth_proxy: Some(switchboard_control::console::AuthProxy {
            header: axum::http::HeaderName::from_static("x-forwarded-user"),
            trusted: vec![trusted.parse().expect("a CIDR")],
        }),
        ..Default::default()
    }
}

async fn get_as(addr: SocketAddr, path: &str, extra: &str) -> HttpResponse {
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\r\n");
    http_raw(addr, head.into_bytes(), Vec::new()).await
}

/// Issue 20 item 4, a deployment: the auth proxy's header names the person, but only on
/// connections from the proxy's networks; from anywhere else it is ignored, as if absent. A
/// name Switchboard does not know is refused. Forms double-submit a cookie for CSRF.
pub async fn behind_an_auth_proxy_the_header_names_the_person_only_from_trusted_peers(db: TestDb) {
    db.store.create_human("alice", None).await.expect("alice");
    let (trusted, _router) = control_with(&db, proxy("127.0.0.0/8")).await;
    let r = get_as(trusted.http, "/console", "X-Forwarded-User: alice\r\n").await;
    assert_eq!(r.status, 200, "{r:?}");
    let body = String::from_utf8_lossy(&r.body).to_string();
    assert!(
        body.contains("Signed in as <strong>alice</strong>"),
        "{body}"
    );
    let csrf_cookie = r
        .header("set-cookie")
        .expect("a CSRF cookie for the proxy's person");
    assert!(csrf_cookie.contains("HttpOnly") && csrf_cookie.contains("SameSite=Strict"));
    let cookie = csrf_cookie
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();
    // Signing out needs the form's token: without it, nothing; with it, done.
    let form = |csrf: &str| format!("csrf={csrf}");
    let headers = |cookie: &str| {
        [
            ("X-Forwarded-User".to_string(), "alice".to_string()),
            ("Cookie".to_string(), cookie.to_string()),
            (
                "Content-Type".to_string(),
                "application/x-www-form-urlencoded".to_string(),
            ),
        ]
    };
    let refused = post(
        trusted.http,
        "/console/sign-out",
        &headers(&cookie),
        form("nope").as_bytes(),
    )
    .await;
    assert_eq!(refused.status, 403);
    let page = get_as(
        trusted.http,
        "/console",
        &format!("X-Forwarded-User: alice\r\nCookie: {cookie}\r\n"),
    )
    .await;
    let token = csrf_of(&String::from_utf8_lossy(&page.body));
    let done = post(
        trusted.http,
        "/console/sign-out",
        &headers(&cookie),
        form(&token).as_bytes(),
    )
    .await;
    assert_eq!(done.status, 200, "{done:?}");

    let unknown = get_as(trusted.http, "/console", "X-Forwarded-User: mallory\r\n").await;
    assert_eq!(unknown.status, 403);
    let none = get_as(trusted.http, "/console", "").await;
    assert_eq!(none.status, 401);

    // The same header from a peer outside the proxy's networks is ignored.
    let (untrusted, _router2) = control_with(&db, proxy("10.0.0.0/8")).await;
    let r = get_as(untrusted.http, "/console", "X-Forwarded-User: alice\r\n").await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(!String::from_utf8_lossy(&r.body).contains("alice"));
}

/// Issue 20 item 4, one machine: an operator's link signs a person in once; an expired or
/// unknown link answers the same page; the session's cookie opens the console until sign-out.
pub async fn a_sign_in_link_works_once_and_a_session_ends_at_sign_out(db: TestDb) {
    db.store.create_human("alice", None).await.expect("alice");
    let (control, _router) = control_with(&db, Default::default()).await;
    let http = control.http;
    let token = db
        .store
        .create_sign_in_link("alice", 60_000)
        .await
        .expect("a link");
    let link = switchboard_control::console::sign_in_url(None, &token);
    let cookie = sign_in_over_http(http, &link).await;
    let again = get_as(http, &link, "").await;
    let unknown = get_as(http, "/console/sign-in?token=sbl_0000", "").await;
    let expired_token = db
        .store
        .create_sign_in_link("alice", -1)
        .await
        .expect("a link");
    let expired = get_as(
        http,
        &switchboard_control::console::sign_in_url(None, &expired_token),
        "",
    )
    .await;
    assert_eq!(
        (again.status, unknown.status, expired.status),
        (404, 404, 404)
    );
    assert_eq!(again.body, unknown.body);
    assert_eq!(expired.body, unknown.body);
    assert!(
        db.store
            .create_sign_in_link("nobody", 60_000)
            .await
            .is_err()
    );

    let inbox = http_get(http, "/console", &cookie).await;
    assert_eq!(inbox.status, 200);
    let body = String::from_utf8_lossy(&inbox.body).to_string();
    assert!(body.contains("Nothing is waiting for you."), "{body}");
    for header in [
        "content-security-policy",
        "x-frame-options",
        "cache-control",
    ] {
        assert!(inbox.header(header).is_some(), "{header}");
    }
    let css = get_as(http, "/console/style.css", "").await;
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
    let token = csrf_of(&body);
    let out = http_form(http, "/console/sign-out", &cookie, &format!("csrf={token}")).await;
    assert_eq!(out.status, 200);
    assert_eq!(http_get(http, "/console", &cookie).await.status, 401);
}

/// Issue 46 in the console, through the real binary and a real browser: on a webhook whose
/// `confirm_policy` is `person`, a person accepts an agent's drop-ci-noise plan (its guard is
/// on the plan page); CI deliveries the plan's replay never held then arrive, which the new
/// rules drop. The guard reverts the change at once, without waiting for anyone (that protects
/// work); the recovery of what it dropped waits for the person, who applies it from the plan
/// page: every dropped CI delivery is re-routed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_reverts_a_persons_change_at_once_and_the_recovery_waits_for_them_in_a_real_browser()
 {
    let Some(browser) = Browser::start().await else {
        no_browser();
        return;
    };
    let Up {
        _dir,
        mut up,
        lines,
        console,
        dev_link,
        http,
    } = start_up();
    admin(
        &lines.grpc,
        &lines.operator_token,
        &["webhook", "confirm-policy", &lines.webhook, "person"],
    );
    let (mcp, bearer, webhook) = (&lines.mcp_url, &lines.token, &lines.webhook);
    let past = [
        ("pull_request.opened.json", "pull_request"),
        ("issues.opened.json", "issues"),
        ("issue_comment.created.json", "issue_comment"),
    ];
    deliver(http, &lines, "past", &past).await;
    let replaced = tool(mcp, bearer, "get_webhook", json!({"webhook_id": webhook})).await;
    let plan = tool(
        mcp,
        bearer,
        "install_rule_pack",
        json!({"webhook_id": webhook, "name": "drop-ci-noise"}),
    )
    .await;
    assert_eq!(plan["guard"]["on_breach"], "revert", "{plan}");
    let mut confirm: serde_json::Map<String, Value> = plan["confirm_with"]["arguments"]
        .as_object()
        .expect("confirm arguments")
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    confirm.insert("plan_token".into(), plan["plan_token"].clone());
    let pending = tool(
        mcp,
        bearer,
        "confirm_rule_pack_plan",
        Value::Object(confirm),
    )
    .await;
    assert_eq!(pending["state"], "pending_approval", "{pending}");
    let plan_id = pending["plan_id"].as_str().expect("plan id").to_string();

    // The person reads the guard on the plan page and accepts.
    let c = &browser.client;
    c.goto(&dev_link).await.expect("open the sign-in link");
    browser.click("#continue").await;
    c.goto(&format!("{console}/plans/{plan_id}"))
        .await
        .expect("the plan page");
    browser
        .text_becomes("#plan-state", "waiting for approval")
        .await;
    let guard_text = browser.text("#guard").await;
    assert!(
        guard_text.contains("1000 live deliveries or 7 days") && guard_text.contains("reverted"),
        "{guard_text}"
    );
    browser.click("#accept").await;
    browser.text_becomes("#plan-state", "applied").await;

    // CI deliveries the replay never held: the new rules drop them.
    let ci = [
        ("check_run.created.json", "check_run"),
        ("check_suite.requested.json", "check_suite"),
        ("workflow_job.queued.json", "workflow_job"),
    ];
    deliver(http, &lines, "ci-a", &ci).await;
    deliver(http, &lines, "ci-b", &ci).await;
    let guard = || {
        tool(
            mcp,
            bearer,
            "get_rule_guard",
            json!({"webhook_id": webhook}),
        )
    };
    eventually(
        Duration::from_secs(30),
        "the guard reverted and its recovery waits for a person",
        || async { guard().await["recovery"]["state"] == "awaiting_person" },
    )
    .await;
    let read = guard().await;
    // Lost work either way: above the forecast's rate (when one batch holds every CI
    // delivery) or unforeseen (when the guard judges after the third).
    assert!(
        ["lost_work", "unforeseen_lost_work"]
            .contains(&read["breach"]["reason"].as_str().unwrap_or("")),
        "{read}"
    );
    let now = tool(mcp, bearer, "get_webhook", json!({"webhook_id": webhook})).await;
    assert_eq!(
        now["webhook"]["config_digest"], replaced["webhook"]["config_digest"],
        "reverted at once, to exactly the replaced configuration"
    );
    assert_eq!(read["reverted_version"], now["webhook"]["config_version"]);
    let waiting = read["recovery"]["changes"].as_u64().expect("changes");
    assert!(waiting >= 3, "{read}");

    // The person sees the breach and recovers the dropped deliveries from the plan page.
    c.goto(&format!("{console}/webhooks/{webhook}"))
        .await
        .expect("the webhook page");
    assert!(
        browser
            .text("#breach-banner")
            .await
            .contains("breached its guard"),
        "{}",
        browser.text("main").await
    );
    browser.accessible("a webhook whose guard breached").await;
    c.goto(&format!("{console}/plans/{plan_id}"))
        .await
        .expect("the plan page");
    browser
        .text_becomes("#plan-state", "reverted by its guard")
        .await;
    browser
        .accessible("a reverted plan, its recovery waiting")
        .await;
    assert!(browser.text("#guard-breach").await.contains("Reverted"));
    assert!(
        browser
            .text("#recover")
            .await
            .contains(&format!("Recover {waiting} deliveries"))
    );
    browser.click("#recover").await;
    eventually(Duration::from_secs(10), "the recovery applied", || async {
        browser.has("#recovery.notice").await
    })
    .await;
    assert!(browser.text("#recovery").await.starts_with("Recovered"));
    assert!(!browser.has("#recover").await, "applied once: no button");
    let read = guard().await;
    assert_eq!(read["recovery"]["state"], "applied", "{read}");
    assert_eq!(read["recovery"]["applied"], waiting, "{read}");
    // Each dropped CI delivery made its todo under the restored rules, once.
    assert_eq!(read["recovery"]["todos_created"], waiting, "{read}");

    up.terminate();
    assert!(up.wait_exit(Duration::from_secs(30)).success());
}

/// Issue 47 through the real binary and a real browser, with several people: a team's webhook
/// under `person`; alice's agent proposes a plan that loses work, which needs two approvals.
/// alice's own approval is recorded but does not count; vic, a viewer, cannot approve; bob's
/// counts, and bob again counts once; a re-plan starts at zero; carol's approval applies it,
/// once; a reject by dan ends the next plan; the webhook page's change log names who proposed
/// and who approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_people_approve_a_plan_that_loses_work_in_a_real_browser() {
    let Some(browser) = Browser::start().await else {
        no_browser();
        return;
    };
    let Up {
        _dir,
        mut up,
        lines,
        console,
        dev_link: _,
        http,
    } = start_up();
    let op = |args: &[&str]| admin(&lines.grpc, &lines.operator_token, args);
    op(&["team", "create", "ops"]);
    for (login, role) in [
        ("alice", "editor"),
        ("bob", "editor"),
        ("carol", "editor"),
        ("dan", "editor"),
        ("vic", "viewer"),
    ] {
        op(&["human", "create", login]);
        op(&["team", "add-member", "ops", login, "--role", role]);
    }
    let secret = "team-webhook-secret-0123456789abcdef";
    let made = op(&[
        "webhook",
        "create",
        "--scope",
        "team:ops",
        "--source",
        "github",
        "--grant",
        "forge,review",
        "--secret",
        secret,
    ]);
    let webhook = made
        .lines()
        .find_map(|l| l.strip_prefix("webhook ")?.strip_suffix(" created"))
        .expect("a webhook id")
        .to_string();
    op(&["webhook", "confirm-policy", &webhook, "person"]);
    let rule = op(&["webhook", "approvals", &webhook, "--lost-work", "2"]);
    assert!(
        rule.contains("approvals: 1 person; 2 when a plan loses work (set by an operator)"),
        "{rule}"
    );
    let vended = op(&[
        "endpoint",
        "vend",
        "--human",
        "alice",
        "--scope",
        "team:ops",
        "--verbs",
        "webhooks,webhook-rules,rule-pack-confirm",
        "--yes",
    ]);
    let bearer = vended
        .lines()
        .find_map(|l| l.strip_prefix("credential (shown once; it is stored only as a hash):"))
        .expect("a credential")
        .trim()
        .to_string();
    let team_lines = crate::cli::UpLines {
        webhook: webhook.clone(),
        secret: secret.to_string(),
        ..lines.clone()
    };
    let past = [
        ("pull_request.opened.json", "pull_request"),
        ("check_run.completed.json", "check_run"),
        ("workflow_job.queued.json", "workflow_job"),
    ];
    deliver(http, &team_lines, "team", &past).await;
    let mcp = &lines.mcp_url;
    let version = || async {
        tool(mcp, &bearer, "get_webhook", json!({"webhook_id": webhook})).await["webhook"]
            ["config_version"]
            .as_i64()
            .expect("a version")
    };
    let before = version().await;
    let pending = propose(mcp, &bearer, &webhook, false).await;
    assert_eq!(pending["approvals"]["required"], 2, "{pending}");
    let plan_id = pending["plan_id"].as_str().expect("plan id").to_string();

    let c = &browser.client;
    let b = &browser;
    let sign_in = |login: &'static str| {
        let console = console.clone();
        let base = console.trim_end_matches("/console").to_string();
        let link = op(&["human", "sign-in-link", login, "--console-url", &base])
            .trim()
            .to_string();
        async move {
            c.delete_all_cookies().await.expect("sign out");
            c.goto(&link).await.expect("open the sign-in link");
            assert!(
                b.text("main")
                    .await
                    .contains(&format!("signed in as {login}"))
            );
            b.click("#continue").await;
        }
    };
    let open_plan = |id: String| {
        let url = format!("{console}/plans/{id}");
        async move {
            c.goto(&url).await.expect("the plan page");
        }
    };
    let approvals_read = || async {
        let section = c
            .find(Locator::Css("#approvals"))
            .await
            .expect("the approvals section");
        let attr = |name: &'static str| {
            let section = section.clone();
            async move {
                section
                    .attr(name)
                    .await
                    .expect("attr")
                    .unwrap_or_default()
                    .parse::<u32>()
                    .expect("a count")
            }
        };
        (
            attr("data-counted").await,
            attr("data-required").await,
            attr("data-still-needed").await,
        )
    };

    // alice, whose agent proposed it: recorded, does not count.
    sign_in("alice").await;
    browser
        .text_becomes("h1", "Plans awaiting your decision")
        .await;
    assert!(
        browser.text("td.approvals").await.contains("0 of 2"),
        "{}",
        browser.text("main").await
    );
    open_plan(plan_id.clone()).await;
    browser
        .text_becomes("#plan-state", "waiting for approval")
        .await;
    browser.accessible("a plan needing two approvals").await;
    assert!(
        browser
            .text("#approvals-summary")
            .await
            .contains("loses work")
    );
    browser.click("#accept").await;
    eventually(
        Duration::from_secs(15),
        "alice's approval recorded",
        || async { browser.has("#notice").await },
    )
    .await;
    assert!(
        browser.text("#notice").await.contains("does not count"),
        "{}",
        browser.text("#notice").await
    );
    assert_eq!(approvals_read().await, (0, 2, 2));
    assert!(
        browser
            .has("li.approval[data-person='alice'][data-counts='false']")
            .await
    );

    // vic, a viewer, reads the plan but cannot approve.
    sign_in("vic").await;
    open_plan(plan_id.clone()).await;
    browser
        .text_becomes("#plan-state", "waiting for approval")
        .await;
    assert!(!browser.has("#accept").await, "no Accept for a viewer");
    assert!(browser.has("#no-decision").await);

    // bob counts; bob again counts once.
    sign_in("bob").await;
    for _ in 0..2 {
        open_plan(plan_id.clone()).await;
        browser.click("#accept").await;
        eventually(
            Duration::from_secs(15),
            "bob's approval recorded",
            || async { browser.has("#notice").await },
        )
        .await;
        assert_eq!(approvals_read().await, (1, 2, 1));
    }
    assert!(
        browser
            .text("#approvals-not-from")
            .await
            .contains("alice, bob")
    );
    assert_eq!(version().await, before, "nothing applied with one approval");

    // A re-plan starts at zero: bob's approval of the first plan does not carry over.
    let again = propose(mcp, &bearer, &webhook, false).await;
    let second = again["plan_id"].as_str().expect("plan id").to_string();
    assert_eq!(again["approvals"]["counted"], 0, "{again}");
    open_plan(second.clone()).await;
    assert_eq!(approvals_read().await, (0, 2, 2));

    // carol's approval of the first plan meets the rule: applied, once.
    sign_in("carol").await;
    open_plan(plan_id.clone()).await;
    browser.click("#accept").await;
    browser.text_becomes("#plan-state", "applied").await;
    assert!(browser.text("#notice").await.starts_with("Accepted"));
    assert_eq!(version().await, before + 1);

    // The second plan went stale with the change; dan rejects the next one: it never applies.
    let third = propose(mcp, &bearer, &webhook, true).await;
    let third = third["plan_id"].as_str().expect("plan id").to_string();
    sign_in("dan").await;
    open_plan(third.clone()).await;
    c.find(Locator::Css("#reason"))
        .await
        .expect("a reason box")
        .send_keys("not this week")
        .await
        .expect("type");
    browser.click("#reject").await;
    browser.text_becomes("#plan-state", "rejected").await;
    sign_in("bob").await;
    open_plan(third).await;
    assert!(
        !browser.has("#accept").await,
        "a rejected plan offers no Accept"
    );

    // The webhook page: the rule, and the change log naming who proposed and who approved.
    c.goto(&format!("{console}/webhooks/{webhook}"))
        .await
        .expect("the webhook page");
    assert!(
        browser
            .text("#approval-rule")
            .await
            .contains("2 when it loses work")
    );
    browser
        .accessible("the webhook page with its change log")
        .await;
    let log = browser.text("#change-log").await;
    assert!(log.contains("alice via ep_"), "{log}");
    assert!(log.contains("bob, carol"), "{log}");
    assert!(log.contains("approval_rules"), "{log}");
    assert_eq!(version().await, before + 1);

    // The agent reads the same log over MCP (list_webhook_changes), and a person exports it
    // with the CLI and verifies the export.
    let read = tool(
        mcp,
        &bearer,
        "list_webhook_changes",
        json!({"webhook_id": webhook, "actor": "carol"}),
    )
    .await;
    let changes = read["changes"].as_array().expect("changes");
    assert_eq!(changes.len(), 1, "{read}");
    assert_eq!(changes[0]["approvers"], json!(["bob", "carol"]), "{read}");
    assert_eq!(changes[0]["version"], before + 1, "{read}");
    assert_eq!(
        changes[0]["hash"].as_str().map(str::len),
        Some(64),
        "{read}"
    );
    let export = _dir.path().join("changes.jsonl");
    let people = |args: &[&str]| {
        Command::new(binary())
            .args(args)
            .args(["--control", &lines.grpc])
            .env("SWITCHBOARD_TOKEN", &bearer)
            .env("SWITCHBOARD_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .expect("the CLI runs")
    };
    let out = people(&[
        "changes",
        "export",
        "--webhook",
        &webhook,
        "--file",
        export.to_str().expect("utf-8"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = people(&[
        "changes",
        "verify",
        "--file",
        export.to_str().expect("utf-8"),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("the export verifies"),
        "{out:?}"
    );
    let text = std::fs::read_to_string(&export).expect("the export");
    std::fs::write(&export, text.replacen("carol", "mallory", 1)).expect("tamper");
    let out = people(&[
        "changes",
        "verify",
        "--file",
        export.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("was changed after it was written"),
        "{out:?}"
    );

    up.terminate();
    assert!(up.wait_exit(Duration::from_secs(30)).success());
}

/// Issue 48 item 5: the webhook page's chart counts what the store recorded, per day and
/// decision, over deliveries seeded across several days (a manual clock), marks the
/// configuration saved in the window, and leaves out what is older; the events page filters
/// them by decision, kind and day and says what decided each.
pub async fn the_webhook_page_charts_the_stored_decisions_and_the_events_page_filters_them(
    db: TestDb,
) {
    use switchboard_control::store::{
        Actor, Clock, NewEvent, NewWebhook, OwnerScope, RecordDecision, SourceType,
    };
    use switchboard_model::{Label, RecordedDecision};
    const HOUR: i64 = 3_600_000;
    // 2026-12-01T00:00Z; "now" ends up 2026-12-05T10:00Z, so the chart shows 11-29 … 12-05.
    let start = 1_796_083_200_000;
    let clock = Clock::manual(start - 10 * 24 * HOUR);
    let store = db.store.clone().with_clock(clock.clone());
    store.create_human("alice", None).await.expect("alice");
    let alice = OwnerScope::Human("alice".into());
    let w = store
        .create_webhook(NewWebhook {
            owner_scope: alice.clone(),
            source_type: SourceType::Github,
            secret: None,
            grant: vec!["forge".into()],
            reject_unverified: false,
            name: None,
            configuration: None,
            actor: Actor::operator(),
        })
        .await
        .expect("webhook");
    let move_to = |at: i64| {
        clock.advance(Duration::from_millis((at - clock.now_ms()) as u64));
    };
    // (when, kind, decision): one too old for the chart, then three days with deliveries.
    let seeded: [(i64, &str, Option<Label<'static>>); 8] = [
        (start - 8 * 24 * HOUR, "push", Some(Label::Drop)),
        (start + 3 * HOUR, "push", Some(Label::Drop)),
        (
            start + 5 * HOUR,
            "pull_request.opened",
            Some(Label::queue("forge").into_owned()),
        ),
        (
            start + 2 * 24 * HOUR,
            "check_run.completed",
            Some(Label::Drop),
        ),
        (
            start + 2 * 24 * HOUR + 1,
            "check_run.completed",
            Some(Label::Quarantine),
        ),
        (
            start + 4 * 24 * HOUR + HOUR,
            "pull_request.opened",
            Some(Label::queue("forge").into_owned()),
        ),
        (start + 4 * 24 * HOUR + 2 * HOUR, "push", Some(Label::Fault)),
        (start + 4 * 24 * HOUR + 3 * HOUR, "push", None),
    ];
    for (i, (at, kind, label)) in seeded.iter().enumerate() {
        move_to(*at);
        let e = store
            .insert_event(NewEvent {
                webhook_id: w.id.clone(),
                delivery_id: format!("d-{i}"),
                kind: kind.to_string(),
                headers: vec![],
                body: b"{}".to_vec().into(),
                verified: true,
            })
            .await
            .expect("event");
        if let Some(label) = label {
            store
                .record_decision(
                    &e.id,
                    RecordDecision {
                        decision: RecordedDecision::new(label.clone()).by_rule("r-1"),
                        fault: None,
                        todo: None,
                        decided_by: None,
                    },
                )
                .await
                .expect("decision");
        }
    }
    move_to(start + 4 * 24 * HOUR + 4 * HOUR);
    store
        .save_configuration(
            &alice,
            &w.id,
            switchboard_control::store::SaveConfiguration {
                configuration: crate::support::typed(json!({"rules": [
                    {"id": "pushes", "when": ".event == \"push\"", "action": {"drop": true}}
                ]})),
                actor: Actor::operator(),
                change: switchboard_model::ConfigurationChange::op("set_webhook_rules"),
                ..Default::default()
            },
        )
        .await
        .expect("a configuration saved in the window");
    move_to(start + 4 * 24 * HOUR + 10 * HOUR);

    let router = tokio::task::spawn_blocking(crate::ingest::router)
        .await
        .expect("router");
    let control = Control::start(
        &store,
        &[&router.addr],
        ControlSetup {
            console: proxy("127.0.0.0/8"),
            ..ControlSetup::default()
        },
    )
    .await;
    let as_alice = "X-Forwarded-User: alice\r\n";
    let page = get_as(
        control.http,
        &format!("/console/webhooks/{}", w.id),
        as_alice,
    )
    .await;
    assert_eq!(page.status, 200);
    let html = String::from_utf8_lossy(&page.body).to_string();
    // Day → [todos, drops, quarantines, faults, other, all], read from the page's table.
    let day = |d: &str| -> Vec<u64> {
        let at = html
            .find(&format!("<tr data-day=\"{d}\">"))
            .unwrap_or_else(|| panic!("no row for {d}: {html}"));
        let row = &html[at..at + html[at..].find("</tr>").expect("row end")];
        row.split("<td class=\"num\">")
            .skip(1)
            .map(|c| c.split('<').next().unwrap_or("").parse().expect("a count"))
            .collect()
    };
    assert_eq!(day("2026-11-29"), [0, 0, 0, 0, 0, 0]);
    assert_eq!(day("2026-12-01"), [1, 1, 0, 0, 0, 2]);
    assert_eq!(day("2026-12-02"), [0, 0, 0, 0, 0, 0]);
    assert_eq!(day("2026-12-03"), [0, 1, 1, 0, 0, 2]);
    assert_eq!(day("2026-12-05"), [1, 0, 0, 1, 1, 3]);
    assert!(
        !html.contains("data-day=\"2026-11-23\""),
        "eight days ago is outside"
    );
    assert!(html.contains("7 deliveries over the last 7 days"), "{html}");
    assert!(
        html.contains("data-version=\"2\""),
        "the change is marked: {html}"
    );

    let events = |query: &str| {
        let path = format!("/console/webhooks/{}/events{query}", w.id);
        async move {
            let page = get_as(control.http, &path, as_alice).await;
            (page.status, String::from_utf8_lossy(&page.body).to_string())
        }
    };
    let (status, all) = events("").await;
    assert_eq!(status, 200);
    assert_eq!(all.matches("class=\"event-row\"").count(), 8, "{all}");
    let (_, drops) = events("?decision=drop").await;
    assert_eq!(
        drops.matches("data-decision=\"drop\"").count(),
        3,
        "{drops}"
    );
    assert_eq!(drops.matches("class=\"event-row\"").count(), 3, "{drops}");
    assert!(
        drops.contains("rule <code>r-1</code>"),
        "what decided each: {drops}"
    );
    let (_, pending) = events("?decision=pending").await;
    assert!(pending.contains("not routed yet"), "{pending}");
    let (_, kind) = events("?kind=check_run.completed&since=2026-12-03&until=2026-12-03").await;
    assert_eq!(kind.matches("class=\"event-row\"").count(), 2, "{kind}");
    let (_, none) = events("?since=2026-12-04&until=2026-12-04").await;
    assert!(none.contains("No event matches."), "{none}");
    let (status, bad) = events("?since=yesterday").await;
    assert_eq!(status, 422);
    assert!(bad.contains("is not a date"), "{bad}");
    // Another person's webhook, and an unknown one, answer the same not-found page.
    store.create_human("bob", None).await.expect("bob");
    let theirs = get_as(
        control.http,
        &format!("/console/webhooks/{}/events", w.id),
        "X-Forwarded-User: bob\r\n",
    )
    .await;
    let unknown = get_as(
        control.http,
        "/console/webhooks/wh_0/events",
        "X-Forwarded-User: bob\r\n",
    )
    .await;
    assert_eq!((theirs.status, unknown.status), (404, 404));
    // Behind the proxy each answer carries a fresh CSRF token: the pages are equal but for it.
    let page = |r: &HttpResponse| {
        let html = String::from_utf8_lossy(&r.body).to_string();
        html.replace(&csrf_of(&html), "")
    };
    assert_eq!(page(&theirs), page(&unknown));
    drop(router);
}
