//! The routing dialect: an allowlist of the jq syntax and builtins routing needs, checked on
//! jaq's parsed syntax tree. Anything not listed is refused, so a new jaq builtin is never
//! available to tenants by accident.
//!
//! Runs only where tenant text may be parsed: inside a sandbox child, or in-process in tests.

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::path::Part;

/// The one global variable an expression may read.
pub const PARAMS_VAR: &str = "$params";

/// Builtins a rule may call, as (name, arity). Every one of them terminates on finite
/// input: no `range`, `repeat`, `recurse`, `while`, `until`, `input`, `env`, `now`, `halt`, …
pub const ALLOWED_CALLS: &[(&str, usize)] = &[
    ("true", 0),
    ("false", 0),
    ("null", 0),
    ("not", 0),
    ("empty", 0),
    ("error", 0),
    ("error", 1),
    ("length", 0),
    ("utf8bytelength", 0),
    ("keys", 0),
    ("keys_unsorted", 0),
    ("values", 0),
    ("type", 0),
    ("tostring", 0),
    ("tojson", 0),
    ("ascii_downcase", 0),
    ("ascii_upcase", 0),
    ("trim", 0),
    ("ltrim", 0),
    ("rtrim", 0),
    ("add", 0),
    ("any", 0),
    ("all", 0),
    ("any", 1),
    ("all", 1),
    ("any", 2),
    ("all", 2),
    ("first", 0),
    ("last", 0),
    ("first", 1),
    ("isempty", 1),
    ("limit", 2),
    ("reverse", 0),
    ("sort", 0),
    ("unique", 0),
    ("min", 0),
    ("max", 0),
    ("floor", 0),
    ("ceil", 0),
    ("round", 0),
    ("abs", 0),
    ("to_entries", 0),
    ("from_entries", 0),
    ("arrays", 0),
    ("objects", 0),
    ("iterables", 0),
    ("booleans", 0),
    ("numbers", 0),
    ("strings", 0),
    ("nulls", 0),
    ("scalars", 0),
    ("has", 1),
    ("in", 1),
    ("inside", 1),
    ("contains", 1),
    ("startswith", 1),
    ("endswith", 1),
    ("ltrimstr", 1),
    ("rtrimstr", 1),
    ("split", 1),
    ("join", 1),
    ("index", 1),
    ("rindex", 1),
    ("indices", 1),
    ("select", 1),
    ("map", 1),
    ("map_values", 1),
    ("with_entries", 1),
    ("getpath", 1),
    ("sort_by", 1),
    ("unique_by", 1),
    ("min_by", 1),
    ("max_by", 1),
    ("group_by", 1),
    ("test", 1),
    ("test", 2),
];

/// Builtins SPEC-0020 names as forbidden, with why; refused with a specific message.
const FORBIDDEN_CALLS: &[(&str, &str)] = &[
    ("input", "reads other inputs"),
    ("inputs", "reads other inputs"),
    ("env", "exposes the router's environment"),
    ("debug", "writes to the router's logs"),
    ("stderr", "writes to the router's logs"),
    ("input_filename", "reads the router's state"),
    ("halt", "stops the process"),
    ("halt_error", "stops the process"),
    ("repeat", "is an unbounded generator"),
    ("recurse", "is an unbounded generator"),
    ("while", "is an unbounded generator"),
    ("until", "is an unbounded loop"),
    ("range", "is an unbounded generator"),
    ("now", "is not deterministic"),
    ("fromjson", "parses text without a depth limit"),
    // jaq defines `tonumber` as `fromjson` plus a type check: `"[" * 100000 | tonumber`
    // overflows the JSON reader's stack and aborts the process (fromjson has no depth limit).
    ("tonumber", "parses text without a depth limit"),
];

/// One thing an expression does that the dialect refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DialectProblem {
    /// forbidden_builtin | forbidden_syntax | unknown_variable
    pub code: &'static str,
    pub message: String,
}

/// Checks a parsed expression against the allowlist; returns every problem found.
pub fn check(term: &Term<&str>) -> Vec<DialectProblem> {
    let mut problems = Vec::new();
    let mut scope: Vec<String> = vec![PARAMS_VAR.to_string()];
    walk(term, &mut scope, &mut problems);
    problems.dedup();
    problems
}

fn syntax(problems: &mut Vec<DialectProblem>, what: &str) {
    problems.push(DialectProblem {
        code: "forbidden_syntax",
        message: format!("{what} is not part of the routing dialect"),
    });
}

fn walk(term: &Term<&str>, scope: &mut Vec<String>, problems: &mut Vec<DialectProblem>) {
    match term {
        Term::Id | Term::Num(_) => {}
        Term::Recurse => syntax(problems, "`..` (recursive descent)"),
        Term::Str(fmt, parts) => {
            if let Some(f) = fmt {
                syntax(problems, &format!("the format string `{f}`"));
            }
            for part in parts {
                if let StrPart::Term(t) = part {
                    walk(t, scope, problems);
                }
            }
        }
        Term::Arr(inner) => {
            if let Some(t) = inner {
                walk(t, scope, problems);
            }
        }
        Term::Obj(entries) => {
            for (k, v) in entries {
                walk(k, scope, problems);
                if let Some(v) = v {
                    walk(v, scope, problems);
                }
            }
        }
        Term::Neg(t) => walk(t, scope, problems),
        Term::BinOp(l, op, r) => {
            walk(l, scope, problems);
            match op {
                BinaryOp::Pipe(Some(pattern)) => {
                    let before = scope.len();
                    bind_pattern(pattern, scope, problems);
                    walk(r, scope, problems);
                    scope.truncate(before);
                }
                BinaryOp::Assign
                | BinaryOp::Update
                | BinaryOp::UpdateMath(_)
                | BinaryOp::UpdateAlt => {
                    syntax(problems, "assignment (`=`, `|=`, `+=`, `//=`, …)");
                    walk(r, scope, problems);
                }
                _ => walk(r, scope, problems),
            }
        }
        Term::Label(..) | Term::Break(_) => syntax(problems, "`label`/`break`"),
        Term::Fold(..) => syntax(problems, "`reduce`/`foreach`"),
        Term::TryCatch(t, c) => {
            walk(t, scope, problems);
            if let Some(c) = c {
                walk(c, scope, problems);
            }
        }
        Term::IfThenElse(branches, otherwise) => {
            for (cond, then) in branches {
                walk(cond, scope, problems);
                walk(then, scope, problems);
            }
            if let Some(e) = otherwise {
                walk(e, scope, problems);
            }
        }
        Term::Def(..) => syntax(problems, "`def` (user-defined functions)"),
        Term::Call(name, args) => {
            let name: &str = name;
            if let Some((_, why)) = FORBIDDEN_CALLS.iter().find(|(n, _)| *n == name) {
                problems.push(DialectProblem {
                    code: "forbidden_builtin",
                    message: format!("`{name}` is forbidden: it {why}"),
                });
            } else if !ALLOWED_CALLS.contains(&(name, args.len())) {
                problems.push(DialectProblem {
                    code: "forbidden_builtin",
                    message: format!(
                        "`{name}/{}` is not in the routing dialect's allowlist of builtins",
                        args.len()
                    ),
                });
            }
            for a in args {
                walk(a, scope, problems);
            }
        }
        Term::Var(v) => {
            let v: &str = v;
            if !scope.iter().any(|s| s == v) {
                problems.push(DialectProblem {
                    code: "unknown_variable",
                    message: format!(
                        "`{v}` is not available: only `$params` and variables bound with `as` are"
                    ),
                });
            }
        }
        Term::Path(t, path) => {
            walk(t, scope, problems);
            for (part, _opt) in &path.0 {
                match part {
                    Part::Index(i) => walk(i, scope, problems),
                    Part::Range(a, b) => {
                        if let Some(a) = a {
                            walk(a, scope, problems);
                        }
                        if let Some(b) = b {
                            walk(b, scope, problems);
                        }
                    }
                }
            }
        }
    }
}

fn bind_pattern(
    pattern: &Pattern<&str>,
    scope: &mut Vec<String>,
    problems: &mut Vec<DialectProblem>,
) {
    match pattern {
        Pattern::Var(v) => {
            let v: &str = v;
            if v == "$ENV" || v == "$__loc__" || v == PARAMS_VAR {
                syntax(problems, &format!("binding `{v}`"));
            }
            scope.push(v.to_string());
        }
        Pattern::Arr(items) => {
            for p in items {
                bind_pattern(p, scope, problems);
            }
        }
        Pattern::Obj(entries) => {
            for (key, p) in entries {
                walk(key, scope, problems);
                bind_pattern(p, scope, problems);
            }
        }
    }
}
