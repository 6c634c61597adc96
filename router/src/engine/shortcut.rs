//! A rule's first output, when a plain reading of the envelope decides it without jaq.
//!
//! Most rules open with a test like `.event == "push" and (…)`, and on most deliveries that
//! test is false: jq's `and` then answers `false` without running the rest. Running jaq for
//! that costs 0.6–1 µs per rule (its context, its iterator, its variables); reading two static
//! keys and comparing bytes costs a few nanoseconds. So each rule keeps, next to its compiled
//! filter, the part of its expression this module can read: static paths (`.a.b`, `.["k"]`)
//! compared with `==`/`!=` to a string, `true`, `false` or `null`, joined by `and`, `or` and
//! `| not`. Every other term is *opaque*. A comparison of `$params.a.b` with a literal is
//! settled when the configuration compiles (its params are part of it): `$params.flag == true
//! and …` reads as `true and …` or `false`.
//!
//! Evaluation is three-valued: a reading is `Some(bool)` only when jq's own evaluation would
//! give exactly that one output and no error; anything else (an opaque term it depends on, a
//! path through a value that is not an object or null, a byte string) is `None`, and jaq runs
//! the whole rule as before. `and` and `or` look at their right side only when jq would —
//! `false and X` is `false` and `true or X` is `true` whatever `X` does, which is jq's own
//! short-circuit. A rule whose reading is `None` costs one failed reading more than before.
//!
//! `true`, `false`, `null` and `not` are calls, but the dialect refuses `def`, so a rule
//! cannot rebind them; and only `and`, `or`, `not` and comparisons are looked into, none of
//! which binds a variable, so every `$params` this module reads is the configuration's.

use jaq_core::load::parse::{BinaryOp, Term};
use jaq_core::ops::Cmp;
use jaq_json::Val;

use super::dialect::PARAMS_VAR;
use super::projection::static_key;

/// The readable part of one rule's expression.
#[derive(Clone, Debug)]
pub struct Shortcut(Node);

#[derive(Clone, Debug)]
enum Node {
    /// `path == literal` (`equal`) or `path != literal`, either way round.
    Compare {
        path: Vec<Val>,
        literal: Val,
        equal: bool,
    },
    /// Known when the configuration compiled (a comparison of `$params`).
    Known(bool),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    /// A term only jaq evaluates.
    Opaque,
}

impl Shortcut {
    /// The readable part of `term`; `None` when nothing of it can be read (the rule always
    /// runs in jaq then, with no reading tried first).
    pub fn of(term: &Term<&str>, params: &Val) -> Option<Shortcut> {
        let node = node(term, params);
        node.reads().then_some(Shortcut(node))
    }

    /// The rule's one output as jq gives it, when this reading decides it.
    pub fn decide(&self, envelope: &Val) -> Option<bool> {
        self.0.eval(envelope)
    }
}

fn node(term: &Term<&str>, params: &Val) -> Node {
    let node = |t| Box::new(node(t, params));
    match term {
        Term::BinOp(l, BinaryOp::And, r) => Node::And(node(l), node(r)),
        Term::BinOp(l, BinaryOp::Or, r) => Node::Or(node(l), node(r)),
        Term::BinOp(l, BinaryOp::Pipe(None), r) if is_call(r, "not") => Node::Not(node(l)),
        Term::BinOp(l, BinaryOp::Cmp(op @ (Cmp::Eq | Cmp::Ne)), r) => {
            let equal = matches!(op, Cmp::Eq);
            let (path, literal) = match (literal(r), literal(l)) {
                (Some(literal), _) => (l, literal),
                (None, Some(literal)) => (r, literal),
                (None, None) => return Node::Opaque,
            };
            if let Some(path) = static_path(path, Term::Id) {
                return Node::Compare {
                    path,
                    literal,
                    equal,
                };
            }
            let Some(path) = static_path(path, Term::Var(PARAMS_VAR)) else {
                return Node::Opaque;
            };
            match walk(params, &path).and_then(|v| same(v, &literal)) {
                Some(same) => Node::Known(same == equal),
                None => Node::Opaque,
            }
        }
        _ => Node::Opaque,
    }
}

/// A text string of these bytes, as the envelope's keys and strings are.
fn text(bytes: Box<[u8]>) -> Val {
    Val::TStr(Box::new(bytes.into()))
}

fn is_call(term: &Term<&str>, name: &str) -> bool {
    matches!(term, Term::Call(n, args) if *n == name && args.is_empty())
}

/// `.a.b`, `."a"`, `.["a"]` from `from` (the input, or `$params`): the keys, as object
/// keys are. Optional parts (`.a?`) and anything computed are not static.
fn static_path(term: &Term<&str>, from: Term<&str>) -> Option<Vec<Val>> {
    let Term::Path(base, path) = term else {
        return None;
    };
    let from_here = match (&**base, &from) {
        (Term::Id, Term::Id) => true,
        (Term::Var(a), Term::Var(b)) => a == b,
        _ => false,
    };
    if !from_here {
        return None;
    }
    path.0
        .iter()
        .map(|(part, opt)| match (part, opt) {
            (jaq_core::path::Part::Index(key), jaq_core::path::Opt::Essential) => {
                static_key(key).map(text)
            }
            _ => None,
        })
        .collect()
}

/// A literal this module compares: a string, `true`, `false` or `null`. Numbers are left to
/// jaq (its equality of integers, floats and long decimals is its own).
fn literal(term: &Term<&str>) -> Option<Val> {
    if let Some(key) = static_key(term) {
        return Some(text(key));
    }
    match term {
        t if is_call(t, "true") => Some(Val::Bool(true)),
        t if is_call(t, "false") => Some(Val::Bool(false)),
        t if is_call(t, "null") => Some(Val::Null),
        _ => None,
    }
}

impl Node {
    /// Whether a reading can ever decide anything: some comparison is reachable without an
    /// opaque term before it.
    fn reads(&self) -> bool {
        match self {
            Node::Compare { .. } | Node::Known(_) => true,
            Node::And(l, _) | Node::Or(l, _) => l.reads(),
            Node::Not(x) => x.reads(),
            Node::Opaque => false,
        }
    }

    fn eval(&self, envelope: &Val) -> Option<bool> {
        match self {
            Node::Compare {
                path,
                literal,
                equal,
            } => same(walk(envelope, path)?, literal).map(|same| same == *equal),
            Node::And(l, r) => match l.eval(envelope)? {
                false => Some(false),
                true => r.eval(envelope),
            },
            Node::Or(l, r) => match l.eval(envelope)? {
                true => Some(true),
                false => r.eval(envelope),
            },
            Node::Known(b) => Some(*b),
            Node::Not(x) => x.eval(envelope).map(|b| !b),
            Node::Opaque => None,
        }
    }
}

static NULL: Val = Val::Null;

/// The value at `path`, as jq's `.a.b` gives it: a missing key or a step from `null` is
/// `null`; a step from anything else is an error in jq, so `None`.
fn walk<'v>(envelope: &'v Val, path: &[Val]) -> Option<&'v Val> {
    let mut at = envelope;
    for key in path {
        match at {
            Val::Obj(members) => match members.get(key) {
                Some(v) => at = v,
                None => return Some(&NULL),
            },
            Val::Null => return Some(&NULL),
            _ => return None,
        }
    }
    Some(at)
}

/// jq's `==` of a value and a literal (a text string, a boolean or null): values of different
/// types are never equal. A byte string is left to jaq.
fn same(value: &Val, literal: &Val) -> Option<bool> {
    Some(match (value, literal) {
        (Val::BStr(_), _) => return None,
        (Val::TStr(a), Val::TStr(b)) => a == b,
        (Val::Bool(a), Val::Bool(b)) => a == b,
        (Val::Null, Val::Null) => true,
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shortcut(code: &str) -> Option<Shortcut> {
        let term = jaq_core::load::parse(code, |p| p.term()).expect("parses");
        let params = envelope(r#"{"flag": true, "name": "octocat", "n": 1}"#);
        Shortcut::of(&term, &params)
    }

    fn envelope(json: &str) -> Val {
        jaq_json::read::parse_single(json.as_bytes()).expect("json")
    }

    #[test]
    fn what_is_read_and_what_is_left_to_jaq() {
        let env = envelope(
            r#"{"event": "push", "n": 1, "s": "x", "payload": {"sender": {"type": "Bot"}, "draft": true}}"#,
        );
        let cases: &[(&str, Option<bool>)] = &[
            (r#".event == "push""#, Some(true)),
            (r#".event != "push""#, Some(false)),
            (r#""push" == .event"#, Some(true)),
            (r#".payload.sender.type == "Bot""#, Some(true)),
            (r#".payload["sender"]."type" == "User""#, Some(false)),
            (r#".payload.draft == true"#, Some(true)),
            (r#".payload.missing.deeper == null"#, Some(true)),
            (r#".missing == false"#, Some(false)),
            (r#".n == "1""#, Some(false)),
            // A step through a number or a string is jq's error: jaq decides.
            (r#".n.x == "1""#, None),
            (r#".s.x == null"#, None),
            (r#".event == "issues" and (.x | test("y"))"#, Some(false)),
            (r#".event == "push" and (.x | test("y"))"#, None),
            (r#".event == "push" or error("z")"#, Some(true)),
            (r#"(.x | length) > 0 and .event == "issues""#, None),
            (r#".event == "push" | not"#, Some(false)),
            (
                r#"(.event == "a" or .event == "push") and .payload.draft == true"#,
                Some(true),
            ),
            (r#".n == 1"#, None),
            (r#"$params.flag == true and .event == "push""#, Some(true)),
            (r#"$params.flag != true and error("x")"#, Some(false)),
            (r#"$params.name == "octocat" or error("x")"#, Some(true)),
            (
                r#"$params.missing == null and .event == "issues""#,
                Some(false),
            ),
            // A step through a string is jq's error, whoever reads it.
            (r#"$params.name.x == null or .event == "push""#, None),
            (r#"$params.n == 1 or .event == "push""#, None),
        ];
        for (code, want) in cases {
            let got = shortcut(code).and_then(|s| s.decide(&env));
            assert_eq!(got, *want, "{code}");
        }
        assert!(shortcut(r#"(.x | length) > 0 and .event == "issues""#).is_none());
        assert!(shortcut(r#".event? == "push""#).is_none());
        assert!(shortcut(r#".event == "\(.x)""#).is_none());
    }
}
