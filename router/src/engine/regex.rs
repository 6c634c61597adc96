//! jq's `test(re; flags)` with each compiled pattern kept for the next call.
//!
//! jaq-std defines `test` as `matches(re; flags) | any`, and its `matches` compiles the pattern
//! on every call and builds an object for every match and capture, which `any` then throws
//! away: a rule such as `test("\\[bot\\]$")` parsed and compiled its regex once per delivery
//! in every sandbox child. This native gives the same answers (tested against jaq-std's) from
//! a compiled pattern looked up first and `is_match`. `test` is the only regex filter the
//! routing dialect allows.
//!
//! The cache is per thread (a sandbox child evaluates on one) and bounded: a pattern taken
//! from a delivery could otherwise grow it without end, so long patterns are never kept and a
//! full cache starts over.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use jaq_core::native::{Fun, bome, run};
use jaq_core::{Bind, Cv, Error, ValR, ValXs};
use jaq_json::Val;
use jaq_std::ValT as _;
use regex_bites::bytes::{Regex, RegexBuilder};

use super::Data;

/// How many compiled patterns a thread keeps.
const CACHE_PATTERNS: usize = 256;
/// Patterns longer than this (bytes) are compiled each time, never kept.
const CACHE_PATTERN_BYTES: usize = 1024;

/// The native `test/2`; jaq-std's definition of it is left out ([`replaces`]).
pub(super) fn funs() -> impl Iterator<Item = Fun<Data>> {
    fn native(cv: Cv<'_, Data>) -> ValXs<'_, Val> {
        bome(test(cv))
    }
    let args: Box<[Bind]> = [Bind::Var(()), Bind::Var(())].into();
    std::iter::once(run::<Data>(("test", args, native)))
}

/// Whether a jq-std definition is replaced by a native here (`test(re; flags)`).
pub(super) fn replaces(def: &jaq_core::load::parse::Def<&'static str>) -> bool {
    def.name == "test" && def.args.len() == 2
}

/// The regex flags jq accepts (jaq-std's set and meanings). `g` (every match) is accepted and
/// changes nothing here: `test` needs one match.
#[derive(Copy, Clone, Default, PartialEq, Eq)]
struct Flags {
    /// n: ignore empty matches.
    ignore_empty: bool,
    /// i: case-insensitive.
    case_insensitive: bool,
    /// m (or p): `^` and `$` match at line ends.
    multi_line: bool,
    /// s (or p): `.` matches a newline.
    dot_all: bool,
    /// l: swap greed.
    lazy: bool,
    /// x: extended (whitespace and `#` comments ignored).
    extended: bool,
}

impl Flags {
    fn new(flags: &str) -> Result<Self, char> {
        let mut out = Self::default();
        for flag in flags.chars() {
            match flag {
                'g' => {}
                'n' => out.ignore_empty = true,
                'i' => out.case_insensitive = true,
                'm' => out.multi_line = true,
                's' => out.dot_all = true,
                'l' => out.lazy = true,
                'x' => out.extended = true,
                'p' => {
                    out.multi_line = true;
                    out.dot_all = true;
                }
                c => return Err(c),
            }
        }
        Ok(out)
    }

    /// The flags that change the compiled pattern (n only changes how it is used).
    fn compile_key(self) -> Self {
        Self {
            ignore_empty: false,
            ..self
        }
    }
}

/// Compiled patterns by pattern text, then by the flags that shaped them.
type Cache = HashMap<Box<str>, Vec<(Flags, Rc<Regex>)>>;

thread_local! {
    static COMPILED: RefCell<Cache> = RefCell::new(HashMap::new());
}

/// The compiled `pattern`, from the cache when it was compiled before on this thread.
fn compiled(pattern: &str, flags: Flags) -> Result<Rc<Regex>, regex_bites::Error> {
    let key = flags.compile_key();
    let cached = COMPILED.with(|c| {
        let cache = c.borrow();
        let by_flags = cache.get(pattern)?;
        by_flags
            .iter()
            .find(|(f, _)| *f == key)
            .map(|(_, regex)| Rc::clone(regex))
    });
    if let Some(regex) = cached {
        return Ok(regex);
    }
    let regex = Rc::new(
        RegexBuilder::new(pattern)
            .case_insensitive(key.case_insensitive)
            .multi_line(key.multi_line)
            .dot_matches_new_line(key.dot_all)
            .swap_greed(key.lazy)
            .ignore_whitespace(key.extended)
            .build()?,
    );
    if pattern.len() <= CACHE_PATTERN_BYTES {
        COMPILED.with(|c| {
            let mut cache = c.borrow_mut();
            if cache.len() >= CACHE_PATTERNS {
                cache.clear();
            }
            cache
                .entry(Box::from(pattern))
                .or_default()
                .push((key, Rc::clone(&regex)));
        });
    }
    Ok(regex)
}

fn as_str(v: &Val) -> Result<&str, Error<Val>> {
    v.try_as_utf8_bytes()
        .and_then(|s| core::str::from_utf8(s).map_err(Error::str))
}

/// The pattern and flags of a call, checked in jaq-std's order (flags, pattern), then the input.
fn pattern_of(cv: &mut Cv<'_, Data>) -> Result<(Rc<Regex>, Flags), Error<Val>> {
    let flags = cv.0.pop_var();
    let pattern = cv.0.pop_var();
    let flags = Flags::new(as_str(&flags)?)
        .map_err(|e| Error::str(format_args!("invalid regex flag: {e}")))?;
    let regex = compiled(as_str(&pattern)?, flags)
        .map_err(|e| Error::str(format_args!("invalid regex: {e}")))?;
    Ok((regex, flags))
}

/// `test(re; flags)`: true when `matches(re; flags)` would have a match.
fn test(mut cv: Cv<'_, Data>) -> ValR<Val> {
    let (regex, flags) = pattern_of(&mut cv)?;
    let input = cv.1.try_as_utf8_bytes()?;
    let found = if flags.ignore_empty {
        regex.find_iter(input).any(|m| !m.is_empty())
    } else {
        regex.is_match(input)
    };
    Ok(Val::from(found))
}

#[cfg(test)]
mod tests {
    use jaq_core::load::{Arena, File, Loader};
    use jaq_core::{Compiler, Ctx, Vars};
    use jaq_json::Val;

    use super::super::compile::{JqFilter, compile_expression};
    use super::Data;

    /// `code` compiled by jaq with its own standard library: the reference.
    fn stock(code: &str) -> JqFilter {
        let defs = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let funs = jaq_core::funs()
            .chain(jaq_std::funs())
            .chain(jaq_json::funs());
        let arena = Arena::default();
        let modules = Loader::new(defs)
            .load(&arena, File { code, path: () })
            .expect("reference parses");
        Compiler::default()
            .with_funs(funs)
            .with_global_vars(["$params"])
            .compile(modules)
            .expect("reference compiles")
    }

    /// Every output of `filter` on `input`, an error as its text.
    fn outputs(filter: &JqFilter, input: &Val) -> Vec<Result<String, String>> {
        let ctx = Ctx::<Data>::new(&filter.lut, Vars::new([Val::Null]));
        filter
            .id
            .run((ctx, input.clone()))
            .map(|out| out.map(|v| v.to_string()).map_err(|e| format!("{e:?}")))
            .collect()
    }

    fn json(text: &str) -> Val {
        jaq_json::read::parse_single(text.as_bytes()).expect("test input is JSON")
    }

    #[test]
    fn test_answers_as_jaq_std_does_for_every_pattern_flag_and_input() {
        let patterns = [
            r#""a""#,
            r#""^a""#,
            r#""a$""#,
            r#""""#,
            r#""a*""#,
            r#""^$""#,
            r#""\\[bot\\]$""#,
            r#""(?i)x""#,
            r#""é""#,
            r#""\\p{L}+""#,
            r#""^line2""#,
            r#""1.l""#,
            r#""a # comment""#,
            r#""(""#,
            r#""[z-a]""#,
            "1",
            "null",
            r#"("a", "b")"#,
        ];
        let flags = [
            r#""""#,
            r#""g""#,
            r#""n""#,
            r#""gn""#,
            r#""i""#,
            r#""x""#,
            r#""m""#,
            r#""s""#,
            r#""p""#,
            r#""l""#,
            r#""gi""#,
            r#""q""#,
            "null",
            "2",
            r#"("", "i")"#,
        ];
        let inputs = [
            r#""""#,
            r#""a""#,
            r#""bA""#,
            r#""[bot]""#,
            r#""dependabot[bot]""#,
            r#""héllo wörld""#,
            r#""line1\nline2""#,
            r#""X""#,
            "1",
            "null",
            "[\"a\"]",
        ];
        let mut compared = 0;
        for pattern in patterns {
            let one_arg = format!("[test({pattern})]");
            let (ours, reference) = (compile_expression(&one_arg), stock(&one_arg));
            let ours = ours.unwrap_or_else(|p| panic!("{one_arg} compiles: {p:?}"));
            for input in inputs {
                let input = json(input);
                assert_eq!(
                    outputs(&ours, &input),
                    outputs(&reference, &input),
                    "{one_arg} on {input}"
                );
                compared += 1;
            }
            for flag in flags {
                let code = format!("[test({pattern}; {flag})]");
                let ours =
                    compile_expression(&code).unwrap_or_else(|p| panic!("{code} compiles: {p:?}"));
                let reference = stock(&code);
                for input in inputs {
                    let input = json(input);
                    let (got, want) = (outputs(&ours, &input), outputs(&reference, &input));
                    // An error is an error either way (a rule faults); its text is not compared.
                    let shape = |r: &Vec<Result<String, String>>| -> Vec<Result<String, ()>> {
                        r.iter().map(|o| o.clone().map_err(|_| ())).collect()
                    };
                    assert_eq!(shape(&got), shape(&want), "{code} on {input}");
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, patterns.len() * inputs.len() * (1 + flags.len()));
    }

    #[test]
    fn a_pattern_compiled_with_other_flags_is_not_reused() {
        let filter =
            compile_expression(r#"[test("a"), test("a"; "i"), test("a"), test("a"; "gi")]"#)
                .expect("compiles");
        assert_eq!(
            outputs(&filter, &json(r#""A""#)),
            vec![Ok("[false,true,false,true]".to_string())]
        );
    }

    #[test]
    fn patterns_beyond_the_cache_bound_and_long_patterns_still_answer_right() {
        // More distinct patterns than the cache keeps, twice over, and one too long to keep.
        let filter = compile_expression(r#"[.[] | . as $n | "x\($n)y" | test("^x\($n)y$")] | all"#)
            .expect("compiles");
        let numbers: Vec<String> = (0..2 * super::CACHE_PATTERNS + 7)
            .map(|n| n.to_string())
            .collect();
        let input = json(&format!("[{}]", numbers.join(",")));
        assert_eq!(outputs(&filter, &input), vec![Ok("true".to_string())]);
        assert_eq!(outputs(&filter, &input), vec![Ok("true".to_string())]);

        let long = "b".repeat(super::CACHE_PATTERN_BYTES * 2);
        let filter = compile_expression(r#"[test("^\(.)$"), test("^\(.)$")]"#).expect("compiles");
        assert_eq!(
            outputs(&filter, &json(&format!("\"{long}\""))),
            vec![Ok("[true,true]".to_string())]
        );
    }
}
