//! What rules can read of the envelope: a **projection**, worked out once per configuration
//! from the rules' syntax, so a sandbox child builds only the parts of `.payload` some rule
//! can reach and merely checks the rest of the body as it passes (issue 17 item 5: parsing
//! the whole body was about half of a delivery's evaluation).
//!
//! The analysis follows values from the input through each expression. A value taken from
//! the input by static keys (`.payload.pull_request.title`) or by iteration (`.labels[]`) is
//! a *flow*: a path into the envelope. Most operations **consume** the values they are given
//! (compare them, measure them, print them, list their keys) and need the whole value under
//! that path. A few pass values on untouched: `|`, `,`, `//`, `if`, `select`, `first`, `as`
//! bindings, and the type filters (`strings`, `values`, …). A value that is only passed on and
//! tested for truth needs only its type kept.
//!
//! What a projected envelope guarantees, and why a rule cannot tell it from the whole one:
//! every value a flow reaches keeps its type; scalars are kept as they are; an array is kept
//! whole (every item, each projected alike) when anything iterates it, else emptied; an object
//! keeps, in their places, exactly the members some static key or iteration reaches. Every
//! operation that could observe more (a key list, a length, `==`, `tojson`, a dynamic index,
//! an error message through `catch`) consumes the whole value, and anything the analysis does
//! not know consumes its input whole. `router/tests/projection.rs` checks the guarantee
//! against the full envelope for every rule we ship, every forge payload and random
//! expressions.

use std::collections::BTreeMap;

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::path::Part;

/// What is read of one value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Projection {
    /// All of it.
    Whole,
    /// Its type, scalar value and the members listed.
    Part(Members),
}

/// The members of an object or array that are read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members {
    /// An object's members by key. When `each` is set, every field's projection already
    /// includes it ([`Projection::settled`]).
    fields: BTreeMap<Box<[u8]>, Projection>,
    /// What is read of every item of an array, or every member of an object, when something
    /// iterates over it: all of them are then kept.
    each: Option<Box<Projection>>,
}

impl Default for Projection {
    /// Nothing read but the value's type.
    fn default() -> Self {
        Projection::TYPE
    }
}

/// One step of a flow's path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Key(Box<[u8]>),
    Each,
}

/// A path from the envelope's root to a value an expression holds.
type Flow = Vec<Step>;

/// More flows than this in one place and the analysis stops tracking them: they are consumed
/// whole (always safe), and the analysis stays linear in the expression's size.
const MAX_FLOWS: usize = 64;

impl Projection {
    /// Nothing read but the value's type.
    pub const TYPE: Projection = Projection::Part(Members {
        fields: BTreeMap::new(),
        each: None,
    });

    /// The values at these paths of static keys, whole.
    pub fn reading(paths: &[&[&str]]) -> Projection {
        let mut p = Projection::TYPE;
        for path in paths {
            let steps: Flow = path
                .iter()
                .map(|k| Step::Key(k.as_bytes().into()))
                .collect();
            p.demand(&steps, true);
        }
        p.settled()
    }

    /// What one routing expression can read of the envelope it is given. Expressions the
    /// dialect refuses never get here; anything unexpected reads the whole envelope.
    pub fn of_expression(term: &Term<&str>) -> Projection {
        let mut analysis = Analysis {
            root: Projection::default(),
            env: Vec::new(),
        };
        let out = analysis.flows(term, &[Vec::new()]);
        // A rule's first output is tested for `true`, `false` or `null`: its type and value.
        analysis.touch_all(&out);
        analysis.root.settled()
    }

    /// What any of `all` reads (nothing but the type when `all` is empty).
    pub fn union<'p>(all: impl IntoIterator<Item = &'p Projection>) -> Projection {
        let mut union = Projection::TYPE;
        for p in all {
            union.merge(p);
        }
        union
    }

    /// The union: what `self` or `other` reads.
    pub fn merge(&mut self, other: &Projection) {
        *self = std::mem::replace(self, Projection::Whole)
            .merged(other)
            .settled();
    }

    /// Whether the whole value is read.
    pub fn is_whole(&self) -> bool {
        matches!(self, Projection::Whole)
    }

    /// What is read of an object's member `key`; `None`: nothing, the member can be left out.
    pub fn member(&self, key: &[u8]) -> Option<&Projection> {
        match self {
            Projection::Whole => Some(self),
            Projection::Part(m) => m.fields.get(key).or(m.each.as_deref()),
        }
    }

    /// What is read of each item of an array; `None`: no item is reached.
    pub fn item(&self) -> Option<&Projection> {
        match self {
            Projection::Whole => Some(self),
            Projection::Part(m) => m.each.as_deref(),
        }
    }

    /// Marks what `path` (from this value) reaches: its type, or all of it.
    fn demand(&mut self, path: &[Step], whole: bool) {
        let Projection::Part(members) = self else {
            return;
        };
        match path.split_first() {
            None if whole => *self = Projection::Whole,
            None => {}
            Some((Step::Key(k), rest)) => members
                .fields
                .entry(k.clone())
                .or_default()
                .demand(rest, whole),
            Some((Step::Each, rest)) => members
                .each
                .get_or_insert_with(Default::default)
                .demand(rest, whole),
        }
    }

    fn merged(self, other: &Projection) -> Projection {
        match (self, other) {
            (Projection::Whole, _) | (_, Projection::Whole) => Projection::Whole,
            (Projection::Part(mut a), Projection::Part(b)) => {
                for (k, p) in &b.fields {
                    let mine = a.fields.remove(k).unwrap_or_default();
                    a.fields.insert(k.clone(), mine.merged(p));
                }
                a.each = match (a.each, &b.each) {
                    (Some(x), Some(y)) => Some(Box::new(x.merged(y))),
                    (Some(x), None) => Some(x),
                    (None, Some(y)) => Some(y.clone()),
                    (None, None) => None,
                };
                Projection::Part(a)
            }
        }
    }

    /// Folds `each` into every named field (a member reached both by key and by iteration is
    /// read as both want), all the way down.
    fn settled(self) -> Projection {
        match self {
            Projection::Whole => Projection::Whole,
            Projection::Part(Members { fields, each }) => {
                let each = each.map(|e| Box::new(e.settled()));
                let fields = fields
                    .into_iter()
                    .map(|(k, p)| {
                        let p = match &each {
                            Some(e) => p.merged(e),
                            None => p,
                        };
                        (k, p.settled())
                    })
                    .collect();
                Projection::Part(Members { fields, each })
            }
        }
    }
}

struct Analysis<'t> {
    /// What is read of the envelope so far.
    root: Projection,
    /// Variables bound with `as`, innermost last, with the flows they hold.
    env: Vec<(&'t str, Vec<Flow>)>,
}

/// The key of a path part `.k`, `."k"` or `.["k"]`: a string with no interpolation.
pub(super) fn static_key(term: &Term<&str>) -> Option<Box<[u8]>> {
    let Term::Str(None, parts) = term else {
        return None;
    };
    let mut key = String::new();
    for part in parts {
        match part {
            StrPart::Str(s) => key.push_str(s),
            StrPart::Char(c) => key.push(*c),
            StrPart::Term(_) => return None,
        }
    }
    Some(key.into_bytes().into_boxed_slice())
}

fn with_step(flows: &[Flow], step: Step) -> Vec<Flow> {
    flows
        .iter()
        .map(|f| {
            let mut f = f.clone();
            f.push(step.clone());
            f
        })
        .collect()
}

impl<'t> Analysis<'t> {
    /// Everything under these flows is read.
    fn consume(&mut self, flows: &[Flow]) {
        for f in flows {
            self.root.demand(f, true);
        }
    }

    /// These flows' values are reached: their types are read.
    fn touch_all(&mut self, flows: &[Flow]) {
        for f in flows {
            self.root.demand(f, false);
        }
    }

    /// Flows out of `term` given flows into it; records what it reads on the way.
    fn flows(&mut self, term: &'t Term<&'t str>, input: &[Flow]) -> Vec<Flow> {
        let out = self.flows_of(term, input);
        if out.len() > MAX_FLOWS {
            self.consume(&out);
            return Vec::new();
        }
        out
    }

    fn flows_of(&mut self, term: &'t Term<&'t str>, input: &[Flow]) -> Vec<Flow> {
        match term {
            Term::Id => input.to_vec(),
            Term::Num(_) => Vec::new(),
            Term::Str(_, parts) => {
                for part in parts {
                    if let StrPart::Term(t) = part {
                        let f = self.flows(t, input);
                        self.consume(&f);
                    }
                }
                Vec::new()
            }
            Term::Arr(inner) => {
                if let Some(t) = inner {
                    let f = self.flows(t, input);
                    self.consume(&f);
                }
                Vec::new()
            }
            Term::Obj(entries) => {
                for (k, v) in entries {
                    let key = self.flows(k, input);
                    self.consume(&key);
                    match v {
                        Some(v) => {
                            let f = self.flows(v, input);
                            self.consume(&f);
                        }
                        // `{a}` is `{a: .a}`; `{$x}` is `{x: $x}`, consumed as the key above.
                        None => match static_key(k) {
                            Some(key) => {
                                let f = with_step(input, Step::Key(key));
                                self.consume(&f);
                            }
                            None if matches!(k, Term::Var(_)) => {}
                            None => self.consume(input),
                        },
                    }
                }
                Vec::new()
            }
            Term::Neg(t) => {
                let f = self.flows(t, input);
                self.consume(&f);
                Vec::new()
            }
            Term::BinOp(l, op, r) => self.binary(l, op, r, input),
            Term::IfThenElse(branches, otherwise) => {
                let mut out = Vec::new();
                for (cond, then) in branches {
                    // A condition is tested for truth: its flows' types are already read.
                    self.flows(cond, input);
                    out.extend(self.flows(then, input));
                }
                match otherwise {
                    Some(e) => out.extend(self.flows(e, input)),
                    None => out.extend_from_slice(input),
                }
                out
            }
            Term::TryCatch(t, catch) => {
                let out = self.flows(t, input);
                if catch.is_some() {
                    // An error's message can quote any value it met: a handler sees it.
                    self.root = Projection::Whole;
                }
                out
            }
            Term::Var(name) => self
                .env
                .iter()
                .rev()
                .find(|(v, _)| v == name)
                .map(|(_, f)| f.clone())
                .unwrap_or_default(),
            Term::Path(base, path) => {
                let mut current = self.flows(base, input);
                for (part, _optional) in &path.0 {
                    current = match part {
                        Part::Index(index) => match static_key(index) {
                            Some(key) => with_step(&current, Step::Key(key)),
                            None => {
                                let f = self.flows(index, input);
                                self.consume(&f);
                                self.consume(&current);
                                Vec::new()
                            }
                        },
                        Part::Range(None, None) => with_step(&current, Step::Each),
                        Part::Range(from, to) => {
                            for bound in [from, to].into_iter().flatten() {
                                let f = self.flows(bound, input);
                                self.consume(&f);
                            }
                            self.consume(&current);
                            Vec::new()
                        }
                    };
                    self.touch_all(&current);
                }
                current
            }
            Term::Call(name, args) => self.call(name, args, input),
            // Refused by the dialect; never analysed as anything less than everything.
            Term::Recurse | Term::Label(..) | Term::Break(_) | Term::Fold(..) | Term::Def(..) => {
                self.root = Projection::Whole;
                Vec::new()
            }
        }
    }

    fn binary(
        &mut self,
        l: &'t Term<&'t str>,
        op: &'t BinaryOp<&'t str>,
        r: &'t Term<&'t str>,
        input: &[Flow],
    ) -> Vec<Flow> {
        match op {
            BinaryOp::Pipe(None) => {
                let mid = self.flows(l, input);
                self.flows(r, &mid)
            }
            BinaryOp::Pipe(Some(pattern)) => {
                let bound = self.flows(l, input);
                let before = self.env.len();
                match pattern {
                    Pattern::Var(v) => self.env.push((*v, bound)),
                    destructured => {
                        self.consume(&bound);
                        self.bind_untracked(destructured, input);
                    }
                }
                let out = self.flows(r, input);
                self.env.truncate(before);
                out
            }
            BinaryOp::Comma | BinaryOp::Alt => {
                let mut out = self.flows(l, input);
                out.extend(self.flows(r, input));
                out
            }
            // Tested for truth; the result is a new boolean.
            BinaryOp::Or | BinaryOp::And => {
                self.flows(l, input);
                self.flows(r, input);
                Vec::new()
            }
            _ => {
                let a = self.flows(l, input);
                let b = self.flows(r, input);
                self.consume(&a);
                self.consume(&b);
                if !matches!(op, BinaryOp::Math(_) | BinaryOp::Cmp(_)) {
                    self.consume(input);
                }
                Vec::new()
            }
        }
    }

    /// Variables of a destructuring pattern hold parts of a value consumed whole.
    fn bind_untracked(&mut self, pattern: &'t Pattern<&'t str>, input: &[Flow]) {
        match pattern {
            Pattern::Var(v) => self.env.push((*v, Vec::new())),
            Pattern::Arr(items) => {
                for p in items {
                    self.bind_untracked(p, input);
                }
            }
            Pattern::Obj(entries) => {
                for (key, p) in entries {
                    let f = self.flows(key, input);
                    self.consume(&f);
                    self.bind_untracked(p, input);
                }
            }
        }
    }

    fn call(&mut self, name: &str, args: &'t [Term<&'t str>], input: &[Flow]) -> Vec<Flow> {
        match (name, args) {
            ("empty" | "true" | "false" | "null", []) => Vec::new(),
            // Truth and type tests: the input's type is already read.
            ("not", []) => Vec::new(),
            (
                "values" | "nulls" | "booleans" | "numbers" | "strings" | "arrays" | "objects"
                | "iterables" | "scalars",
                [],
            ) => input.to_vec(),
            ("select", [f]) => {
                self.flows(f, input);
                input.to_vec()
            }
            ("first", [f]) => self.flows(f, input),
            ("limit", [n, f]) => {
                let count = self.flows(n, input);
                self.consume(&count);
                self.flows(f, input)
            }
            // Whether `f` yields anything: its outputs' values are never looked at.
            ("isempty", [f]) => {
                self.flows(f, input);
                Vec::new()
            }
            ("any" | "all", []) => {
                let items = with_step(input, Step::Each);
                self.touch_all(&items);
                Vec::new()
            }
            ("any" | "all", [cond]) => {
                let items = with_step(input, Step::Each);
                self.touch_all(&items);
                self.flows(cond, &items);
                Vec::new()
            }
            ("any" | "all", [generator, cond]) => {
                let items = self.flows(generator, input);
                self.flows(cond, &items);
                Vec::new()
            }
            ("map", [f]) => {
                let items = with_step(input, Step::Each);
                self.touch_all(&items);
                let out = self.flows(f, &items);
                self.consume(&out);
                Vec::new()
            }
            // Anything else reads its input whole, and whatever its arguments yield.
            _ => {
                self.consume(input);
                for a in args {
                    let f = self.flows(a, input);
                    self.consume(&f);
                }
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(code: &str) -> Projection {
        let term = jaq_core::load::parse(code, |p| p.term()).expect("parses");
        Projection::of_expression(&term)
    }

    /// A projection written as nested (key, projection) pairs; `"[]"` is `each`.
    fn part(members: &[(&str, Projection)]) -> Projection {
        let mut m = Members::default();
        for (k, p) in members {
            if *k == "[]" {
                m.each = Some(Box::new(p.clone()));
            } else {
                m.fields.insert(k.as_bytes().into(), p.clone());
            }
        }
        Projection::Part(m).settled()
    }

    fn type_only() -> Projection {
        Projection::default()
    }

    #[test]
    fn a_comparison_reads_the_field_it_compares() {
        assert_eq!(
            reads(r#".payload.action == "opened""#),
            part(&[("payload", part(&[("action", Projection::Whole)]))])
        );
    }

    #[test]
    fn passing_a_value_on_reads_only_its_type() {
        assert_eq!(
            reads(".payload.pull_request | select(.draft) | .title | strings | test(\"WIP\")"),
            part(&[(
                "payload",
                part(&[(
                    "pull_request",
                    part(&[("draft", type_only()), ("title", Projection::Whole)])
                )])
            )])
        );
        assert_eq!(
            reads(".payload.merged // false"),
            part(&[("payload", part(&[("merged", type_only())]))])
        );
    }

    #[test]
    fn iteration_keeps_every_item_and_reads_what_each_needs() {
        assert_eq!(
            reads(r#".payload.pull_request.labels // [] | map(.name) | index("wip") != null"#),
            part(&[(
                "payload",
                part(&[(
                    "pull_request",
                    part(&[(
                        "labels",
                        part(&[("[]", part(&[("name", Projection::Whole)]))])
                    )])
                )])
            )])
        );
        assert_eq!(
            reads(r#"any(.payload.commits[]; .message | test("docs"))"#),
            part(&[(
                "payload",
                part(&[(
                    "commits",
                    part(&[("[]", part(&[("message", Projection::Whole)]))])
                )])
            )])
        );
    }

    #[test]
    fn variables_carry_what_they_were_bound_to() {
        assert_eq!(
            reads(r#".payload.sender.login as $who | any($params.trusted[]?; . == $who)"#),
            part(&[(
                "payload",
                part(&[("sender", part(&[("login", Projection::Whole)]))])
            )])
        );
    }

    #[test]
    fn whatever_can_see_a_whole_value_reads_it_whole() {
        for (code, path) in [
            (".payload | keys | length > 3", &["payload"][..]),
            (
                ".payload.repository | tojson | test(\"x\")",
                &["payload", "repository"],
            ),
            (".payload[$params.field] == 1", &["payload"]),
            (".payload.labels[0].name == \"bug\"", &["payload", "labels"]),
            (".payload == {}", &["payload"]),
            ("(.payload | to_entries | length) > 0", &["payload"]),
            (".payload | has(\"x\")", &["payload"]),
            ("[.payload.a] | length == 1", &["payload", "a"]),
        ] {
            let p = reads(code);
            let at = path.iter().try_fold(&p, |p, k| p.member(k.as_bytes()));
            assert!(at.is_some_and(Projection::is_whole), "{code}: {p:?}");
            // The value's siblings are not read.
            assert_eq!(p.member(b"headers"), None, "{code}");
        }
        assert!(reads(". | tojson | length > 0").is_whole());
        assert!(reads("try (.payload.a.b) catch (. | test(\"x\"))").is_whole());
    }

    #[test]
    fn a_key_and_an_iteration_of_the_same_object_read_both() {
        let p = reads(r#"(.payload.a.x == 1) and any(.payload.a[]; . == 2)"#);
        let a = p.member(b"payload").and_then(|p| p.member(b"a"));
        assert_eq!(a.and_then(|a| a.member(b"x")), Some(&Projection::Whole));
        assert_eq!(a.and_then(|a| a.member(b"other")), Some(&Projection::Whole));
    }

    #[test]
    fn merging_keeps_what_either_reads() {
        let mut p = reads(".payload.a == 1");
        p.merge(&reads(".payload.b | not"));
        assert_eq!(
            p,
            part(&[(
                "payload",
                part(&[("a", Projection::Whole), ("b", type_only())])
            )])
        );
        p.merge(&reads(".payload | length > 0"));
        assert!(p.member(b"payload").is_some_and(Projection::is_whole));
    }
}
