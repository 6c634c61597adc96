//! What a test does when a tool it drives is not installed here (Chromium, jq, a Python or
//! TypeScript client, axe-core, a server's files).
//!
//! Where the tool is missing, the README's test command still passes — it must on a fresh
//! machine with nothing installed — and the test says, on stderr, what it did not check. CI
//! installs every tool and sets `SWITCHBOARD_TEST_REQUIRE_TOOLS=1` (`.ci/run`), which turns
//! each such skip into a failure: a test that quietly checked nothing in CI would look green.

/// The variable `.ci/run` sets: every tool a test drives must be here.
pub const REQUIRE_TOOLS: &str = "SWITCHBOARD_TEST_REQUIRE_TOOLS";

/// Whether this run requires every tool (`SWITCHBOARD_TEST_REQUIRE_TOOLS` set and not `0`).
pub fn tools_required() -> bool {
    required(std::env::var(REQUIRE_TOOLS).ok().as_deref())
}

fn required(value: Option<&str>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// `what` (a test or a check) cannot run: `missing` is not here, `how` installs it. Says so
/// on stderr; panics instead when this run requires every tool.
#[track_caller]
pub fn skip(what: &str, missing: &str, how: &str) {
    if tools_required() {
        panic!("{what}: {missing} is not here and {REQUIRE_TOOLS} requires it; {how}");
    }
    eprintln!("{what}: SKIPPED: {missing} is not here; {how}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_set_variable_other_than_zero_requires_the_tools() {
        assert!(!required(None));
        assert!(!required(Some("")));
        assert!(!required(Some("0")));
        assert!(required(Some("1")));
        assert!(required(Some("yes")));
    }

    #[test]
    fn a_missing_tool_fails_where_tools_are_required() {
        let outcome = std::panic::catch_unwind(|| skip("a test", "a tool", "install it"));
        assert_eq!(outcome.is_err(), tools_required());
    }
}
