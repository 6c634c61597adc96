//! jq's `any(generator; condition)` and `all(generator; condition)` as natives.
//!
//! jaq defines them in jq (`isempty(g | cond or empty) | not`, with `isempty` built from
//! `first`), so every call builds a chain of closures and boxed iterators; in the router
//! bench the ten rules that call `any` (`any($params.trusted_humans[]?; . == $login)`) cost
//! 3–7 µs each against about 1 µs for a plain comparison. These natives give the same
//! answers (tested against jaq's definitions) in one loop: the first output of `generator`
//! whose condition yields a deciding value ends it, an error on the way is the answer, as
//! `first` makes it in jq. `any/0`, `any/1`, `all/0` and `all/1` are defined through these.

use jaq_core::box_iter::box_once;
use jaq_core::native::{Fun, run};
use jaq_core::{Bind, Cv, ValT as _, ValX, ValXs};
use jaq_json::Val;

use super::Data;

/// The natives `any/2` and `all/2`; jaq's definitions of them are left out ([`replaces`]).
pub(super) fn funs() -> impl Iterator<Item = Fun<Data>> {
    fn any(cv: Cv<'_, Data>) -> ValXs<'_, Val> {
        quantify(cv, true)
    }
    fn all(cv: Cv<'_, Data>) -> ValXs<'_, Val> {
        quantify(cv, false)
    }
    let args = || -> Box<[Bind]> { [Bind::Fun(()), Bind::Fun(())].into() };
    [
        run::<Data>(("any", args(), any)),
        run::<Data>(("all", args(), all)),
    ]
    .into_iter()
}

/// Whether a jaq definition is replaced by a native here.
pub(super) fn replaces(def: &jaq_core::load::parse::Def<&'static str>) -> bool {
    matches!(def.name, "any" | "all") && def.args.len() == 2
}

/// `any` (`decides` true: the first true condition answers true) or `all` (`decides`
/// false: the first false one answers false); with none, the other answer.
fn quantify(mut cv: Cv<'_, Data>, decides: bool) -> ValXs<'_, Val> {
    let (condition, condition_ctx) = cv.0.pop_fun();
    let (generator, generator_ctx) = cv.0.pop_fun();
    let answer = || -> ValX<'_, Val> {
        for x in generator.run((generator_ctx, cv.1)) {
            for c in condition.run((condition_ctx.clone(), x?)) {
                if c?.as_bool() == decides {
                    return Ok(Val::Bool(decides));
                }
            }
        }
        Ok(Val::Bool(!decides))
    };
    box_once(answer())
}

#[cfg(test)]
mod tests {
    use jaq_core::load::{Arena, File, Loader};
    use jaq_core::{Compiler, Ctx, Vars};

    use super::*;

    /// Every output of `code` over `input`, errors as their messages, compiled with jaq's own
    /// definitions (`native` false) or with the natives here.
    fn outputs(code: &str, input: &str, native: bool) -> Vec<String> {
        let defs = jaq_core::defs()
            .filter(|d| !native || !replaces(d))
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let funs = jaq_core::funs::<Data>()
            .chain(jaq_std::funs())
            .chain(jaq_json::funs())
            .chain(native.then(funs).into_iter().flatten());
        let arena = Arena::default();
        let modules = Loader::new(defs)
            .load(&arena, File { code, path: () })
            .expect("loads");
        let filter = Compiler::default()
            .with_funs(funs)
            .compile(modules)
            .expect("compiles");
        let input = jaq_json::read::parse_single(input.as_bytes()).expect("json");
        let ctx = Ctx::<Data>::new(&filter.lut, Vars::new([]));
        filter
            .id
            .run((ctx, input))
            .take(8)
            .map(|r| match r {
                Ok(v) => v.to_string(),
                Err(e) => format!("error: {e:?}"),
            })
            .collect()
    }

    #[test]
    fn answers_as_jaqs_definitions_do() {
        let inputs = [
            "[]",
            "[1, 2, 3]",
            "[null, false]",
            "[false, 1, \"x\"]",
            "{\"a\": 1, \"b\": null}",
            "\"not iterable\"",
            "null",
            "[[1], [], [2, 3]]",
        ];
        let codes = [
            "any(.[]; . == 2)",
            "all(.[]; . == 2)",
            "any(.[]?; .)",
            "all(.[]?; .)",
            "any",
            "all",
            "any(. == 1)",
            "all(. != null)",
            "any(.[]; .[])",
            "all(.[]; .[]?)",
            "any(.[]; error)",
            "all(.[]; error(\"x\"))",
            "any(1, error; . == 1)",
            "any(error, 1; . == 1)",
            "all(2, error; . == 1)",
            "any(.[]; empty)",
            "all(.[]; empty)",
            "any(.[]; (false, true))",
            "all(.[]; (true, false, error))",
            "[any(.[]?; length > 0), all(.[]?; type == \"array\")]",
            "any(.[]?; . as $x | any(.[]?; . == $x))",
            "all(empty; false)",
            "any(empty; true)",
        ];
        for input in inputs {
            for code in codes {
                assert_eq!(
                    outputs(code, input, true),
                    outputs(code, input, false),
                    "{code} over {input}"
                );
            }
        }
    }
}
