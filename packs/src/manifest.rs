//! The pack format (SPEC-0031 REQ-1): a manifest `pack.json` and fixtures in
//! `packs/catalog/<name>/<version>/fixtures/*.json`. Structural checks live here so the build script
//! can run them too; jq validity and fixture routing need a router and are checked by the
//! repository test and at external-pack load.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use switchboard_model::{
    Action, Configuration, MAX_EXPRESSION_BYTES, MAX_RULES, Rule, is_pack_rule_id, is_valid_rule_id,
};

use crate::types::ParamType;

/// The manifest's vocabulary that provenance and listings repeat lives in the model.
pub use switchboard_model::manifest::{Placement, Requires};

/// Source types a pack may require (BASE.md).
pub const SOURCE_TYPES: &[&str] = &["forgejo", "gitea", "github", "cairn", "generic"];
/// Capabilities a pack may require.
pub const CAPABILITIES: &[&str] = &["trusted_actors"];

/// One version of one pack.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pack {
    pub name: String,
    /// A semantic version, e.g. `1.0.0`.
    pub version: String,
    pub title: String,
    pub summary: String,
    #[serde(default)]
    pub params_schema: BTreeMap<String, ParamSpec>,
    #[serde(default)]
    pub param_checks: Vec<ParamCheck>,
    /// Rules with pack-local ids; installed as `<name>--<local-id>`.
    pub rules: Vec<Rule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_action: Option<Action>,
    pub placement: Placement,
    #[serde(default)]
    pub requires: Requires,
    /// Major versions of this pack that this version supersedes where it is available.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supersedes: Vec<u64>,
    /// What an owner of a superseded version should do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_note: Option<String>,
    /// Installing sets the webhook's first-class `trusted_actors` from these params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sets_trusted_actors: Option<TrustedActorsParams>,
    /// Loaded from `fixtures/*.json`, not from the manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fixtures: Vec<Fixture>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamSpec {
    #[serde(rename = "type")]
    pub ty: ParamType,
    #[serde(default)]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    pub description: String,
}

/// A jq predicate over `$params` that must be `true` for an install to plan. With `each`,
/// it runs once per element of that list param, the element as `.`, so a refusal names the
/// element.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamCheck {
    pub id: String,
    pub expr: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub each: Option<String>,
}

/// Which params fill the webhook's first-class trusted actors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedActorsParams {
    #[serde(default)]
    pub humans: Option<String>,
    #[serde(default)]
    pub agents: Option<String>,
    #[serde(default)]
    pub bots: Option<String>,
}

impl TrustedActorsParams {
    /// The trusted actors these params hold in `params` (an install's, or a fixture's).
    pub fn resolve(&self, params: &Map<String, Value>) -> switchboard_model::TrustedActors {
        switchboard_model::TrustedActors::from_params(
            params,
            self.humans.as_deref(),
            self.agents.as_deref(),
            self.bots.as_deref(),
        )
    }
}

/// A real-shaped delivery and the decision the pack must give it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    pub name: String,
    pub delivery: FixtureDelivery,
    /// Params for this fixture, over the schema defaults.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub params: Map<String, Value>,
    /// `queue:<name>`, `drop`, `quarantine`, `default`.
    pub want: String,
    /// The pack-local id of the rule expected to decide; absent when none should.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureDelivery {
    pub source: String,
    /// The forge's event header value; the kind adds the body's `action`.
    pub event: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub body: Value,
    pub verified: bool,
}

impl FixtureDelivery {
    /// `<event>` or `<event>.<action>`, as ingest computes it from the same headers and body
    /// ([`switchboard_model::kind`]).
    pub fn kind(&self) -> String {
        let content_type = self
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
            .map(|(_, value)| value.as_str());
        let body = self.body_bytes();
        switchboard_model::kind::kind(
            &self.event,
            &switchboard_model::payload_json(content_type, &body),
        )
    }

    /// The body as ingest would have received it: a JSON string is the raw text it holds
    /// (a form, a plain-text body), any other JSON value its serialization.
    pub fn body_bytes(&self) -> Vec<u8> {
        match &self.body {
            Value::String(s) => s.clone().into_bytes(),
            other => serde_json::to_vec(other).unwrap_or_default(),
        }
    }
}

impl Pack {
    /// `<name>--<local-id>`.
    pub fn installed_rule_id(&self, local: &str) -> String {
        format!("{}--{local}", self.name)
    }

    pub fn semver(&self) -> Option<semver::Version> {
        semver::Version::parse(&self.version).ok()
    }

    pub fn major(&self) -> u64 {
        self.semver().map(|v| v.major).unwrap_or(0)
    }

    /// `name@version`, as people write it.
    pub fn label(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }

    /// The pack's rules with their installed ids.
    pub fn installed_rules(&self) -> Vec<Rule> {
        self.rules
            .iter()
            .map(|r| Rule {
                id: Some(self.installed_rule_id(r.id.as_deref().unwrap_or(""))),
                ..r.clone()
            })
            .collect()
    }

    /// Schema defaults for every param that has one.
    pub fn default_params(&self) -> Map<String, Value> {
        self.params_schema
            .iter()
            .filter_map(|(k, s)| s.default.clone().map(|d| (k.clone(), d)))
            .collect()
    }

    /// The pack alone, with defaults and `params` over them: what fixtures are routed through.
    pub fn fixture_configuration(&self, params: &Map<String, Value>) -> Configuration {
        let mut all = self.default_params();
        for (k, v) in params {
            all.insert(k.clone(), v.clone());
        }
        Configuration {
            rules: self.installed_rules(),
            default_action: self.default_action.clone(),
            params: all,
        }
    }
}

fn is_param_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && name.len() <= 64
}

/// Is `name` a valid pack name: lower-case `[a-z0-9-]`, 3–24 characters.
pub fn is_pack_name(name: &str) -> bool {
    (3..=24).contains(&name.len())
        && name
            .chars()
            .all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-'))
}

/// Is `want` a decision label a fixture may expect?
pub fn is_decision_label(want: &str) -> bool {
    // Any label but `fault`: a fixture never expects its pack to fault.
    switchboard_model::Label::parse(want).is_ok_and(|l| l != switchboard_model::Label::Fault)
}

/// Every structural problem of one pack; `dir` is `(name, version)` from its directory.
pub fn check_pack(pack: &Pack, dir: Option<(&str, &str)>) -> Vec<String> {
    let mut out = Vec::new();
    let mut say = |m: String| out.push(format!("{}: {m}", pack.label()));
    if !is_pack_name(&pack.name) {
        say("name must be lower-case [a-z0-9-], 3–24 characters".into());
    }
    if pack.semver().is_none() {
        say(format!(
            "version {:?} is not a semantic version",
            pack.version
        ));
    }
    if let Some((name, version)) = dir
        && (name != pack.name || version != pack.version)
    {
        say(format!(
            "lives in {name}/{version}, which does not match its manifest"
        ));
    }
    if pack.title.trim().is_empty() || pack.summary.trim().is_empty() {
        say("title and summary are required".into());
    }
    for (name, spec) in &pack.params_schema {
        if !is_param_name(name) {
            say(format!(
                "param {name:?} is not a valid name ([a-z][a-z0-9_]*)"
            ));
        }
        if let Some(d) = &spec.default
            && let Err(e) = spec.ty.check(d)
        {
            say(format!("param {name}: default: {e}"));
        }
        if spec.description.trim().is_empty() {
            say(format!("param {name}: a description is required"));
        }
    }
    let mut check_ids = std::collections::HashSet::new();
    for c in &pack.param_checks {
        if !is_valid_rule_id(&c.id) || !check_ids.insert(c.id.clone()) {
            say(format!(
                "param_check {:?}: ids are unique and look like rule ids",
                c.id
            ));
        }
        if c.expr.trim().is_empty()
            || c.expr.len() > MAX_EXPRESSION_BYTES
            || c.message.trim().is_empty()
        {
            say(format!(
                "param_check {}: needs an expression (≤ 4 KiB) and a message",
                c.id
            ));
        }
        if let Some(each) = &c.each
            && !matches!(
                pack.params_schema.get(each).map(|s| &s.ty),
                Some(ParamType::StringList | ParamType::LoginPairs)
            )
        {
            say(format!(
                "param_check {}: each names {each}, which is not a list param",
                c.id
            ));
        }
    }
    if pack.rules.is_empty() || pack.rules.len() > MAX_RULES {
        say(format!(
            "has {} rules; a pack has 1 to {MAX_RULES}",
            pack.rules.len()
        ));
    }
    let mut rule_ids = std::collections::HashSet::new();
    for r in &pack.rules {
        match r.id.as_deref() {
            Some(id)
                if is_valid_rule_id(id)
                    && !is_pack_rule_id(id)
                    && is_valid_rule_id(&pack.installed_rule_id(id)) =>
            {
                if !rule_ids.insert(id.to_string()) {
                    say(format!("rule {id} appears twice"));
                }
            }
            other => say(format!(
                "rule id {other:?} must be a pack-local id (no `--`) whose installed id {}--<id> fits the rule id rules",
                pack.name
            )),
        }
        if r.when.len() > MAX_EXPRESSION_BYTES {
            say(format!("rule {:?}: expression over 4 KiB", r.id));
        }
    }
    for s in &pack.requires.source_types {
        if !SOURCE_TYPES.contains(&s.as_str()) {
            say(format!("requires unknown source type {s}"));
        }
    }
    for c in &pack.requires.capabilities {
        if !CAPABILITIES.contains(&c.as_str()) {
            say(format!("requires unknown capability {c}"));
        }
    }
    for p in &pack.requires.packs {
        if !is_pack_name(p) || *p == pack.name {
            say(format!(
                "requires pack {p:?}, which is not a valid other pack"
            ));
        }
    }
    if let Some(t) = &pack.sets_trusted_actors {
        for p in [&t.humans, &t.agents, &t.bots].into_iter().flatten() {
            if pack.params_schema.get(p).map(|s| &s.ty) != Some(&ParamType::StringList) {
                say(format!(
                    "sets_trusted_actors names {p}, which is not a string_list param"
                ));
            }
        }
    }
    let mut fixture_names = std::collections::HashSet::new();
    for f in &pack.fixtures {
        if !fixture_names.insert(f.name.clone()) {
            say(format!("fixture {} appears twice", f.name));
        }
        if !is_decision_label(&f.want) {
            say(format!(
                "fixture {}: want {:?} is not queue:<name>, drop, quarantine or default",
                f.name, f.want
            ));
        }
        if !SOURCE_TYPES.contains(&f.delivery.source.as_str()) {
            say(format!(
                "fixture {}: unknown source {}",
                f.name, f.delivery.source
            ));
        }
        if let Some(rule) = &f.rule
            && !rule_ids.contains(rule)
        {
            say(format!(
                "fixture {}: rule {rule} is not a rule of this pack",
                f.name
            ));
        }
    }
    out
}

/// A param name declared by several packs must have one type in all of them (REQ-1).
pub fn check_shared_param_types(packs: &[Pack]) -> Vec<String> {
    let mut seen: BTreeMap<&str, (&ParamType, String)> = BTreeMap::new();
    let mut out = Vec::new();
    for p in packs {
        for (name, spec) in &p.params_schema {
            match seen.get(name.as_str()) {
                Some((ty, first)) if *ty != &spec.ty => out.push(format!(
                    "param {name} is {} in {first} but {} in {}",
                    ty.name(),
                    spec.ty.name(),
                    p.label()
                )),
                Some(_) => {}
                None => {
                    seen.insert(name, (&spec.ty, p.label()));
                }
            }
        }
    }
    out
}
