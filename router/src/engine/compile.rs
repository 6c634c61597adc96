//! Parsing and compiling tenant expressions with jaq, and evaluating compiled
//! configurations. Everything here must run only where an abort is survivable: inside a
//! sandbox child, or in tests and benchmarks.

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, ValXs, Vars};
use jaq_json::Val;
use switchboard_proto::router::v1::{Decision, Problem, RoutingContext};

use super::config::{Action, Configuration};
use super::decision::{self, fault};
use super::dialect::{self, PARAMS_VAR};
use super::envelope::envelope_reads;
use super::projection::Projection;
use super::shortcut::Shortcut;

use super::Data;

/// A compiled jq filter.
pub type JqFilter = jaq_core::Filter<Data>;

/// Why an expression did not compile: a problem code and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpressionProblem {
    pub code: &'static str,
    pub message: String,
}

fn parse_problem(message: String) -> Vec<ExpressionProblem> {
    vec![ExpressionProblem {
        code: "parse_error",
        message,
    }]
}

/// Pre-scans `code` (length, depth), parses it, checks it against the routing dialect, and
/// compiles it with `$params` as the only global.
pub fn compile_expression(code: &str) -> Result<JqFilter, Vec<ExpressionProblem>> {
    compile_reading(code, None).map(|c| c.filter)
}

/// What compiling one expression gives: its filter, what it can read of the envelope, and
/// the part of it a plain reading decides ([`Shortcut`]).
struct Compiled {
    filter: JqFilter,
    reads: Projection,
    shortcut: Option<Shortcut>,
}

/// [`compile_expression`], with what the expression reads and, given the configuration's
/// `$params`, its shortcut.
fn compile_reading(code: &str, params: Option<&Val>) -> Result<Compiled, Vec<ExpressionProblem>> {
    if let Some((code, message)) = super::prescan::prescan_expression(code) {
        return Err(vec![ExpressionProblem { code, message }]);
    }
    let Some(term) = jaq_core::load::parse(code, |p| p.term()) else {
        return Err(parse_problem(describe_load_error(code)));
    };
    let problems: Vec<ExpressionProblem> = dialect::check(&term)
        .into_iter()
        .map(|p| ExpressionProblem {
            code: p.code,
            message: p.message,
        })
        .collect();
    if !problems.is_empty() {
        return Err(problems);
    }
    let reads = Projection::of_expression(&term);
    let shortcut = params.and_then(|params| Shortcut::of(&term, params));
    let defs = jaq_core::defs()
        .filter(|def| !super::quantifiers::replaces(def))
        .chain(jaq_std::defs().filter(|def| !super::regex::replaces(def)))
        .chain(jaq_json::defs());
    let funs = jaq_core::funs()
        .chain(super::quantifiers::funs())
        .chain(super::regex::funs())
        .chain(jaq_std::funs())
        .chain(jaq_json::funs());
    let arena = Arena::default();
    let modules = Loader::new(defs)
        .load(&arena, File { code, path: () })
        .map_err(|_| parse_problem(describe_load_error(code)))?;
    Compiler::default()
        .with_funs(funs)
        .with_global_vars([PARAMS_VAR])
        .compile(modules)
        .map(|filter| Compiled {
            filter,
            reads,
            shortcut,
        })
        .map_err(|errs| {
            let names: Vec<String> = errs
                .iter()
                .flat_map(|(_, es)| {
                    es.iter()
                        .map(|(name, undef)| format!("{name} ({})", undef.as_str()))
                })
                .collect();
            vec![ExpressionProblem {
                code: "parse_error",
                message: format!("does not compile: undefined {}", names.join(", ")),
            }]
        })
}

/// A readable lex/parse error for `code`.
fn describe_load_error(code: &str) -> String {
    let arena = Arena::default();
    match Loader::new([]).load(&arena, File { code, path: () }) {
        Ok(_) => "does not parse as a single jq expression".to_string(),
        Err(errs) => {
            let mut parts = Vec::new();
            for (_, e) in errs {
                match e {
                    jaq_core::load::Error::Io(items) => parts.extend(
                        items
                            .into_iter()
                            .map(|(p, m)| format!("cannot load {p}: {m}")),
                    ),
                    jaq_core::load::Error::Lex(items) => {
                        parts.extend(items.into_iter().map(|(exp, found)| {
                            format!("expected {} at `{}`", exp.as_str(), clip(found))
                        }))
                    }
                    jaq_core::load::Error::Parse(items) => {
                        parts.extend(items.into_iter().map(|(exp, found)| {
                            format!("expected {} at `{}`", exp.as_str(), clip(found))
                        }))
                    }
                }
            }
            format!("does not parse: {}", parts.join("; "))
        }
    }
}

fn clip(s: &str) -> String {
    let s: String = s.chars().take(24).collect();
    if s.is_empty() {
        "end of expression".into()
    } else {
        s
    }
}

/// The id a rule's decisions and faults carry: its own, or `#<index>` when it has none.
pub fn rule_id(rule: &super::config::Rule, index: usize) -> String {
    rule.id.clone().unwrap_or_else(|| format!("#{index}"))
}

/// A rule ready to evaluate.
pub struct CompiledRule {
    pub id: String,
    pub action: Action,
    filter: JqFilter,
    /// Decides the rule's output without jaq when a plain reading of the envelope can.
    shortcut: Option<Shortcut>,
}

/// A configuration whose every rule compiled; cached by digest in sandbox children.
pub struct CompiledConfiguration {
    pub digest: String,
    pub rules: Vec<CompiledRule>,
    pub default_action: Option<Action>,
    params: Val,
    /// What its rules, and building the envelope, read of the envelope.
    reads: Projection,
}

impl CompiledConfiguration {
    /// Compiles a configuration that has passed validation. Errors name the first rule
    /// that does not compile.
    pub fn compile(config: &Configuration) -> Result<Self, String> {
        let params_text = serde_json::to_string(&config.params).map_err(|e| e.to_string())?;
        let params =
            jaq_json::read::parse_single(params_text.as_bytes()).map_err(|e| e.to_string())?;
        let mut rules = Vec::with_capacity(config.rules.len());
        let mut reads = envelope_reads();
        for (i, rule) in config.rules.iter().enumerate() {
            let id = rule_id(rule, i);
            let compiled = compile_reading(&rule.when, Some(&params)).map_err(|ps| {
                format!(
                    "rule {id}: {}",
                    ps.iter()
                        .map(|p| p.message.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            })?;
            reads.merge(&compiled.reads);
            rules.push(CompiledRule {
                id,
                action: rule.action.clone(),
                filter: compiled.filter,
                shortcut: compiled.shortcut,
            });
        }
        Ok(Self {
            digest: config.digest(),
            rules,
            default_action: config.default_action.clone(),
            params,
            reads,
        })
    }

    /// What evaluating this configuration reads of an envelope: build it with
    /// [`build_envelope_reading`](super::build_envelope_reading) and these reads (merged
    /// with every other configuration the same envelope is evaluated under).
    pub fn reads(&self) -> &Projection {
        &self.reads
    }

    /// Up to `limit` outputs of rule `index` over `envelope`, `None` for an error: what the
    /// rule yields, for tests that compare envelopes (evaluation takes only the first).
    pub fn outputs(&self, index: usize, envelope: &Val, limit: usize) -> Vec<Option<Val>> {
        let Some(rule) = self.rules.get(index) else {
            return Vec::new();
        };
        self.run(rule, envelope)
            .take(limit)
            .map(Result::ok)
            .collect()
    }

    /// `rule`'s outputs over `envelope`, with `$params` bound.
    fn run<'a>(&self, rule: &'a CompiledRule, envelope: &Val) -> ValXs<'a, Val> {
        let run_ctx = Ctx::<Data>::new(&rule.filter.lut, Vars::new([self.params.clone()]));
        rule.filter.id.run((run_ctx, envelope.clone()))
    }

    /// What rule `index`'s shortcut decides over `envelope` without jaq (`None`: jaq must
    /// run): for tests that hold it to jaq's first output.
    pub fn shortcut(&self, index: usize, envelope: &Val) -> Option<bool> {
        self.rules
            .get(index)?
            .shortcut
            .as_ref()
            .and_then(|s| s.decide(envelope))
    }

    pub fn rule_ids(&self) -> Vec<String> {
        self.rules.iter().map(|r| r.id.clone()).collect()
    }

    /// Evaluates the rules in order over one envelope (SPEC-0020): the first rule whose first
    /// output is `true` decides; `false`, `null` or no output do not match; any other output
    /// or an error faults and stops evaluation. No match: `default_action`, else the default
    /// queue. The grant and capabilities are re-enforced on whatever action decides.
    pub fn evaluate(&self, ctx: &RoutingContext, envelope: &Val) -> Decision {
        self.evaluate_marked(ctx, envelope, |_| {})
    }

    /// [`Self::evaluate`], calling `starting(i)` before rule `i` runs: a sandbox child marks
    /// it on its progress board, so a budget fault or a crash names the rule.
    pub fn evaluate_marked(
        &self,
        ctx: &RoutingContext,
        envelope: &Val,
        mut starting: impl FnMut(usize),
    ) -> Decision {
        for (i, rule) in self.rules.iter().enumerate() {
            starting(i);
            let first = match rule.shortcut.as_ref().and_then(|s| s.decide(envelope)) {
                Some(decided) => Some(Ok(Val::Bool(decided))),
                None => self.run(rule, envelope).next(),
            };
            match first {
                None | Some(Ok(Val::Bool(false))) | Some(Ok(Val::Null)) => continue,
                Some(Ok(Val::Bool(true))) => return enforce(ctx, &rule.action, &rule.id, false),
                Some(Ok(other)) => {
                    return decision::fault(
                        &rule.id,
                        fault::RULE_FAULT,
                        format!(
                            "the expression's first output is {}, not a boolean",
                            type_name(&other)
                        ),
                    );
                }
                Some(Err(_)) => {
                    return decision::fault(
                        &rule.id,
                        fault::RULE_FAULT,
                        "the expression raised an error",
                    );
                }
            }
        }
        match &self.default_action {
            Some(action) => enforce(ctx, action, "", true),
            None => decision::default_queue(ctx.grant.first().map(String::as_str).unwrap_or("")),
        }
    }
}

/// No widening: an action outside the grant, or needing a missing capability, faults.
fn enforce(ctx: &RoutingContext, action: &Action, rule_id: &str, by_default: bool) -> Decision {
    match action {
        Action::Queue(q) if !ctx.grant.iter().any(|g| g == q) => decision::fault(
            rule_id,
            fault::NOT_GRANTED,
            format!("queue {q} is not in the webhook's grant"),
        ),
        Action::Quarantine if !ctx.trusted_actors_capability => decision::fault(
            rule_id,
            fault::CAPABILITY_MISSING,
            "quarantine needs the trusted_actors capability",
        ),
        _ => decision::from_action(action, rule_id, by_default),
    }
}

fn type_name(v: &Val) -> &'static str {
    match v {
        Val::Null => "null",
        Val::Bool(_) => "a boolean",
        Val::Num(_) => "a number",
        Val::TStr(_) | Val::BStr(_) => "a string",
        Val::Arr(_) => "an array",
        Val::Obj(_) => "an object",
    }
}

/// Turns expression problems of rule `index` into wire problems.
pub fn to_problems(index: usize, rule_id: &str, problems: Vec<ExpressionProblem>) -> Vec<Problem> {
    problems
        .into_iter()
        .map(|p| Problem {
            rule_id: rule_id.to_string(),
            rule_index: index as i32,
            code: p.code.to_string(),
            message: p.message,
            field: format!("rules[{index}].when"),
        })
        .collect()
}
