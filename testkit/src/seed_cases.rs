//! The seed cases of issue 5 (SPEC-0031 REQ-9), and the deliveries they describe.
//!
//! A cases file, `router/tests/data/routing/<seed>/cases.json` (its README says every field),
//! holds the grant and params of the webhook the cases run on and the cases: each a delivery
//! built from a real forge payload in `testkit/data/webhooks/` (edited only where the case
//! needs it) or an inline Cairn hand-off, with the decision it must reach, `want`. The fleet
//! file also names `hand_written`: the 27 rules the team wrote by hand before packs, which the
//! adoption scenario (REQ-6) pastes in.
//!
//! [`Seed::load`] reads a file and checks its form; [`Seed::delivery`] builds a case's
//! delivery as ingest stores it: the source's headers (`testkit/data/webhooks/headers.md`,
//! `docs/routing/cairn-handoffs.md`), the body byte for byte (re-serialized only when edited),
//! the kind `<event>.<action>`, and the case's `verified`. Signature headers carry a fixed
//! digest ([`SIGNATURE_HEX`]): no rule reads them, and a test that delivers through ingest
//! signs the body itself.
//!
//! Nothing here panics: every failure is an [`Error`] naming the file or the case.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;
use serde_json::{Map, Value};
use switchboard_proto::router::v1::{Header, StoredDelivery};

use crate::payloads_dir::webhooks_dir;

/// The repository root.
pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// The folder of the cases files: `router/tests/data/routing`.
pub const CASES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../router/tests/data/routing");
/// The Cairn hand-off delivery shape, with examples (relative to [`ROOT`]).
pub const CAIRN_DOC: &str = "docs/routing/cairn-handoffs.md";

/// When every built delivery was received: 2026-11-29T23:59:10.123Z.
pub const RECEIVED_AT_MS: i64 = 1_795_996_750_123;
/// The digest every built signature header carries: 64 hex digits, the right shape and the
/// wrong value for any secret.
pub const SIGNATURE_HEX: &str = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

/// The sources a case may come from.
pub const SOURCES: [&str; 4] = ["github", "gitea", "forgejo", "cairn"];

/// What went wrong, naming the file or the case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

fn err(message: impl Into<String>) -> Error {
    Error(message.into())
}

/// A cases file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    about: Vec<String>,
    /// The hand-written configuration the cases were written against, beside the file.
    #[serde(default)]
    hand_written: Option<String>,
    grant: Vec<String>,
    params: Map<String, Value>,
    /// Raw, so a missing `rule` can be told from a null one.
    cases: Vec<Value>,
}

/// One case: a delivery and the decision it must reach.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Unique in its file, lower-case words joined by `-`; named in every failure.
    pub name: String,
    /// Why the case decides as it does.
    #[serde(default)]
    pub note: Option<String>,
    /// `github`, `gitea`, `forgejo` or `cairn`.
    pub source: String,
    /// The event header's value (`X-GitHub-Event`, `X-Gitea-Event`, `X-Forgejo-Event`,
    /// `X-Switchboard-Event`).
    pub event: String,
    /// Extra headers, or replacements for the source's usual ones (names case-insensitive).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A payload relative to the shared webhooks folder, e.g. `github/issues.opened.json`.
    #[serde(default)]
    pub body_file: Option<String>,
    /// An inline body (Cairn hand-offs), sent as its JSON text.
    #[serde(default)]
    pub body: Option<Value>,
    /// Changes to the real payload: each path must already exist in it.
    #[serde(default)]
    pub edits: Vec<Edit>,
    /// Whether the signature checked out.
    pub verified: bool,
    /// Params replaced (key by key) for this case only.
    #[serde(default)]
    pub params_override: Option<Map<String, Value>>,
    /// `queue:<name>`, `drop` or `default`.
    pub want: String,
    /// The (local) id of the rule expected to decide, or `None` when the default decides.
    pub rule: Option<String>,
}

/// A value set at a path that already exists in a payload.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    pub path: Vec<Value>,
    pub value: Value,
}

/// A cases file, loaded and checked for form.
#[derive(Clone, Debug)]
pub struct Seed {
    /// `fleet` or `pool-review`: the folder under [`CASES`].
    pub name: String,
    pub about: Vec<String>,
    /// The webhook's grant; its first queue is the default queue.
    pub grant: Vec<String>,
    /// The webhook's params; each pack is installed with the keys it declares.
    pub params: Map<String, Value>,
    /// The file name of the hand-written configuration beside the cases, if there is one.
    pub hand_written: Option<String>,
    pub cases: Vec<Case>,
}

fn read(path: &str) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| err(format!("cannot read {path}: {e}")))
}

fn is_case_name(n: &str) -> bool {
    !n.is_empty()
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl Seed {
    /// Reads `router/tests/data/routing/<name>/cases.json` and checks its form: every field
    /// known, unique well-formed names, one body per case, edits only of real payloads, each
    /// `want` a decision the grant allows, each `rule` given (a string, or null for the
    /// default).
    pub fn load(name: &str) -> Result<Seed, Error> {
        let path = format!("{CASES}/{name}/cases.json");
        let file: CaseFile = serde_json::from_str(&read(&path)?)
            .map_err(|e| err(format!("{path} is not a cases file: {e}")))?;
        if file.about.is_empty() {
            return Err(err(format!("{path}: say what the cases are (about)")));
        }
        if file.grant.is_empty() {
            return Err(err(format!("{path}: the grant is empty")));
        }
        if let Some(h) = &file.hand_written
            && (h.is_empty() || h.contains('/') || h.starts_with('.'))
        {
            return Err(err(format!(
                "{path}: hand_written is a file name beside the cases, not {h:?}"
            )));
        }
        let mut cases = Vec::with_capacity(file.cases.len());
        let mut names = BTreeSet::new();
        for (i, raw) in file.cases.into_iter().enumerate() {
            let label = raw["name"].as_str().unwrap_or("?").to_string();
            if raw.get("rule").is_none() {
                return Err(err(format!(
                    "{name} case {i} ({label}): name the deciding rule, or null for the default"
                )));
            }
            let case: Case = serde_json::from_value(raw)
                .map_err(|e| err(format!("{name} case {i} ({label}) is malformed: {e}")))?;
            check_case(name, &file.grant, &case)?;
            if !names.insert(case.name.clone()) {
                return Err(err(format!("{name}: two cases are named {}", case.name)));
            }
            cases.push(case);
        }
        Ok(Seed {
            name: name.to_string(),
            about: file.about,
            grant: file.grant,
            params: file.params,
            hand_written: file.hand_written,
            cases,
        })
    }

    /// The hand-written configuration beside the cases: its path (relative to the repository
    /// root) and its text.
    pub fn hand_written(&self) -> Result<(String, String), Error> {
        let file = self.hand_written.as_deref().ok_or_else(|| {
            err(format!(
                "{}: the cases name no hand-written configuration",
                self.name
            ))
        })?;
        let relative = format!("router/tests/data/routing/{}/{file}", self.name);
        let text = read(&format!("{ROOT}/{relative}"))?;
        Ok((relative, text))
    }

    /// The index of the case named `name`.
    pub fn position(&self, name: &str) -> Result<usize, Error> {
        self.cases
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| err(format!("{}: no case is named {name}", self.name)))
    }

    /// The stored delivery case `index` describes, as ingest would store it. Its event id is
    /// `evt-<seed>-<index>` and its delivery id `<seed>-<index>`, four digits.
    pub fn delivery(&self, index: usize) -> Result<StoredDelivery, Error> {
        let case = self
            .cases
            .get(index)
            .ok_or_else(|| err(format!("{}: no case {index}", self.name)))?;
        let body = case
            .body()
            .map_err(|e| err(format!("{}/{}: {e}", self.name, case.name)))?;
        let mut d = raw_delivery(
            &case.source,
            &case.event,
            body,
            case.verified,
            &format!("{}-{index:04}", self.name),
        );
        for (name, value) in &case.headers {
            d.headers.retain(|h| !h.name.eq_ignore_ascii_case(name));
            d.headers.push(header(name, value));
        }
        Ok(d)
    }

    /// Every case's delivery, in order.
    pub fn deliveries(&self) -> Result<Vec<StoredDelivery>, Error> {
        (0..self.cases.len()).map(|i| self.delivery(i)).collect()
    }
}

fn check_case(seed: &str, grant: &[String], case: &Case) -> Result<(), Error> {
    let n = &case.name;
    let fail = |what: String| Err(err(format!("{seed}/{n}: {what}")));
    if !is_case_name(n) {
        return fail("case names are lower-case words joined by dashes".into());
    }
    if !SOURCES.contains(&case.source.as_str()) {
        return fail(format!("no source {:?}; one of {SOURCES:?}", case.source));
    }
    if case.body_file.is_some() == case.body.is_some() {
        return fail("exactly one of body_file and body".into());
    }
    if !case.edits.is_empty() && case.body_file.is_none() {
        return fail("edits apply to a real payload (body_file)".into());
    }
    use switchboard_model::Label;
    let want_ok = match Label::parse(&case.want) {
        Ok(Label::Queue(q)) => grant.iter().any(|g| *g == q),
        Ok(Label::Drop | Label::Default) => true,
        _ => false,
    };
    if !want_ok {
        return fail(format!(
            "want is queue:<a granted queue>, drop or default, not {}",
            case.want
        ));
    }
    if case.note.as_deref() == Some("") {
        return fail("an empty note".into());
    }
    if case.rule.as_deref() == Some("") {
        return fail("an empty rule id".into());
    }
    Ok(())
}

impl Case {
    /// The body as sent: the real payload byte for byte (pretty-printed again only when
    /// edited), or the inline body's JSON text.
    pub fn body(&self) -> Result<Vec<u8>, Error> {
        match (&self.body_file, &self.body) {
            (Some(file), None) => {
                let path = format!("{}/{file}", webhooks_dir().display());
                let raw =
                    std::fs::read(&path).map_err(|e| err(format!("cannot read {path}: {e}")))?;
                if self.edits.is_empty() {
                    return Ok(raw);
                }
                let mut doc: Value = serde_json::from_slice(&raw)
                    .map_err(|e| err(format!("{file} is not JSON: {e}")))?;
                for edit in &self.edits {
                    apply_edit(&mut doc, edit).map_err(|e| err(format!("{file}: {e}")))?;
                }
                serde_json::to_vec_pretty(&doc).map_err(|e| err(e.to_string()))
            }
            (None, Some(inline)) => serde_json::to_vec(inline).map_err(|e| err(e.to_string())),
            _ => Err(err("exactly one of body_file and body")),
        }
    }
}

/// Sets `edit.value` at `edit.path` inside `doc`; the path must already exist.
fn apply_edit(doc: &mut Value, edit: &Edit) -> Result<(), String> {
    let mut at = doc;
    for step in &edit.path {
        at = match (step, at) {
            (Value::String(k), Value::Object(m)) => m
                .get_mut(k)
                .ok_or_else(|| format!("no key {k:?} at {:?}", edit.path))?,
            (Value::Number(n), Value::Array(a)) => {
                let i = n
                    .as_u64()
                    .and_then(|i| usize::try_from(i).ok())
                    .ok_or("an index is a non-negative integer")?;
                a.get_mut(i)
                    .ok_or_else(|| format!("no index {i} at {:?}", edit.path))?
            }
            (step, _) => return Err(format!("cannot step {step} in {:?}", edit.path)),
        };
    }
    *at = edit.value.clone();
    Ok(())
}

fn header(name: &str, value: &str) -> Header {
    Header {
        name: name.to_string(),
        value: value.to_string(),
    }
}

/// A name as ingest keeps it in a kind: letters, digits, `_` and `-`; anything else `_`.
fn clean_name(raw: &str) -> String {
    raw.trim()
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `<event>` or `<event>.<action>`, as ingest computes it: the body's top-level `action`
/// counts when the body is a JSON object and `action` is a string.
pub fn kind_of(event: &str, body: &[u8]) -> String {
    let event = clean_name(event);
    let action = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("action").and_then(Value::as_str).map(clean_name))
        .filter(|a| !a.is_empty());
    match action {
        Some(a) => format!("{event}.{a}"),
        None => event,
    }
}

/// Gitea's and Forgejo's fine-grained event type for a kind (headers.md, "Event header
/// mapping").
fn gitea_event_type(kind: &str, payload: &Value) -> String {
    let (event, action) = kind.split_once('.').unwrap_or((kind, ""));
    let fine = match (event, action) {
        ("issues", "assigned" | "unassigned") => "issue_assign",
        ("issues", "label_updated" | "label_cleared") => "issue_label",
        ("issues", "milestoned" | "demilestoned") => "issue_milestone",
        ("pull_request", "assigned" | "unassigned") => "pull_request_assign",
        ("pull_request", "label_updated" | "label_cleared") => "pull_request_label",
        ("pull_request", "milestoned" | "demilestoned") => "pull_request_milestone",
        ("pull_request", "synchronized") => "pull_request_sync",
        ("pull_request", "review_requested" | "review_request_removed") => {
            "pull_request_review_request"
        }
        ("issue_comment", _) if payload["is_pull"] == true => "pull_request_comment",
        ("pull_request_approved", _) => "pull_request_review_approved",
        ("pull_request_rejected", _) => "pull_request_review_rejected",
        ("pull_request_comment", _) => "pull_request_review_comment",
        _ => event,
    };
    fine.to_string()
}

/// The headers each source sends (testkit/data/webhooks/headers.md,
/// docs/routing/cairn-handoffs.md); `cairn`, `generic` and anything else send Switchboard's.
fn source_headers(source: &str, event: &str, kind: &str, payload: &Value, id: &str) -> Vec<Header> {
    let sha256 = format!("sha256={SIGNATURE_HEX}");
    let mut h = vec![header("Content-Type", "application/json")];
    match source {
        "github" => h.extend([
            header("User-Agent", "GitHub-Hookshot/044aadd"),
            header("X-GitHub-Event", event),
            header("X-GitHub-Delivery", id),
            header("X-GitHub-Hook-ID", "292430182"),
            header("X-Hub-Signature-256", &sha256),
        ]),
        "gitea" | "forgejo" => {
            let fine = gitea_event_type(kind, payload);
            h.extend([
                header("X-Gitea-Delivery", id),
                header("X-GitHub-Delivery", id),
                header("X-Gitea-Event", event),
                header("X-GitHub-Event", event),
                header("X-Gitea-Event-Type", &fine),
                header("X-GitHub-Event-Type", &fine),
                header("X-Gitea-Signature", SIGNATURE_HEX),
                header("X-Hub-Signature-256", &sha256),
            ]);
            if source == "forgejo" {
                h.extend([
                    header("X-Forgejo-Delivery", id),
                    header("X-Forgejo-Event", event),
                    header("X-Forgejo-Event-Type", &fine),
                    header("X-Forgejo-Signature", SIGNATURE_HEX),
                ]);
            }
        }
        _ => h.extend([
            header("User-Agent", "Cairn-Handoff/2.3"),
            header("X-Switchboard-Event", event),
            header("X-Switchboard-Delivery", id),
            header("X-Hub-Signature-256", &sha256),
        ]),
    }
    h
}

/// Any body as a stored delivery of `source` with `event`'s header: event id `evt-<id>`,
/// delivery id `<id>`.
pub fn raw_delivery(
    source: &str,
    event: &str,
    body: Vec<u8>,
    verified: bool,
    id: &str,
) -> StoredDelivery {
    let payload: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let kind = kind_of(event, &body);
    StoredDelivery {
        event_id: format!("evt-{id}"),
        source: source.to_string(),
        headers: source_headers(source, event, &kind, &payload, id),
        kind,
        body: body.into(),
        verified,
        delivery_id: id.to_string(),
        received_at_ms: RECEIVED_AT_MS,
    }
}

/// One real payload of the shared data set.
#[derive(Clone, Debug)]
pub struct Payload {
    pub forge: &'static str,
    /// The file name, e.g. `issues.opened.json`.
    pub file: String,
    /// The forge's event header value: the file name's first part.
    pub event: String,
    pub body: Vec<u8>,
}

/// Every JSON payload of the shared data set, forge by forge, files in name order.
pub fn real_payloads() -> Result<Vec<Payload>, Error> {
    let mut out = Vec::new();
    for forge in ["github", "gitea", "forgejo"] {
        let dir = format!("{}/{forge}", webhooks_dir().display());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .map_err(|e| err(format!("cannot list {dir}: {e}")))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        for file in names {
            let path = format!("{dir}/{file}");
            let body = std::fs::read(&path).map_err(|e| err(format!("cannot read {path}: {e}")))?;
            let event = file.split('.').next().unwrap_or_default().to_string();
            out.push(Payload {
                forge,
                file,
                event,
                body,
            });
        }
    }
    Ok(out)
}

/// The JSON examples of the Cairn hand-off page (its fenced ```json blocks), parsed.
pub fn cairn_doc_examples() -> Result<Vec<Value>, Error> {
    let text = read(&format!("{ROOT}/{CAIRN_DOC}"))?;
    let mut examples = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match (&mut block, line.trim_end()) {
            (None, "```json") => block = Some(String::new()),
            (Some(b), "```") => {
                let v: Value = serde_json::from_str(b)
                    .map_err(|e| err(format!("{CAIRN_DOC}: a json block does not parse: {e}")))?;
                examples.push(v);
                block = None;
            }
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    Ok(examples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_seeds_load_and_every_case_builds() {
        for name in ["fleet", "pool-review"] {
            let seed = Seed::load(name).unwrap_or_else(|e| panic!("{e}"));
            assert!(!seed.cases.is_empty() && !seed.params.is_empty(), "{name}");
            let deliveries = seed.deliveries().unwrap_or_else(|e| panic!("{e}"));
            let ids: BTreeSet<&str> = deliveries.iter().map(|d| d.event_id.as_str()).collect();
            assert_eq!(ids.len(), seed.cases.len(), "{name}: event ids are unique");
        }
    }

    #[test]
    fn a_delivery_is_what_ingest_stores() {
        let seed = Seed::load("fleet").unwrap_or_else(|e| panic!("{e}"));
        let case = &seed.cases[0];
        let d = seed.delivery(0).unwrap_or_else(|e| panic!("{e}"));
        let file = case.body_file.as_deref().unwrap_or_default();
        let raw = std::fs::read(format!("{}/{file}", webhooks_dir().display())).unwrap_or_default();
        assert!(
            case.edits.is_empty(),
            "the first fleet case is an unedited payload"
        );
        assert_eq!(&d.body[..], &raw[..], "byte for byte");
        assert_eq!(d.kind, kind_of(&case.event, &raw));
        assert_eq!(d.verified, case.verified);
        assert_eq!(d.event_id, "evt-fleet-0000");
        let event = d
            .headers
            .iter()
            .find(|h| h.name == "X-GitHub-Event")
            .map(|h| h.value.as_str());
        assert_eq!(event, Some(case.event.as_str()));
    }

    #[test]
    fn edits_need_an_existing_path() {
        let mut doc = serde_json::json!({"issue": {"labels": [{"name": "a"}]}});
        let edit = |path: Value, value: Value| Edit {
            path: serde_json::from_value(path).unwrap_or_default(),
            value,
        };
        let ok = edit(
            serde_json::json!(["issue", "labels", 0, "name"]),
            "b".into(),
        );
        assert_eq!(apply_edit(&mut doc, &ok), Ok(()));
        assert_eq!(doc["issue"]["labels"][0]["name"], "b");
        for bad in [
            serde_json::json!(["issue", "title"]),
            serde_json::json!(["issue", "labels", 1]),
            serde_json::json!(["issue", "labels", -1]),
            serde_json::json!(["issue", 0]),
        ] {
            assert!(
                apply_edit(&mut doc, &edit(bad.clone(), Value::Null)).is_err(),
                "{bad}"
            );
        }
    }
}
