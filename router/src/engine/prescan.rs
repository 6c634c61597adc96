//! Cheap, total scans run before any parser sees tenant text.
//!
//! jaq's parser and JSON reader recurse without a limit and abort the process (SIGABRT,
//! which `catch_unwind` cannot catch) on deep enough input. These scans only count bytes
//! and never recurse, so they are safe on anything, including in a long-lived server.

/// Deepest bracket nesting accepted in an expression (`(`, `[`, `{`, `\(` and `if … end`).
pub const MAX_EXPRESSION_DEPTH: usize = 32;

pub use switchboard_model::body::{MAX_BODY_DEPTH, json_depth};

use super::config::MAX_EXPRESSION_BYTES;

/// Why an expression must not reach a parser, if it must not.
pub fn prescan_expression(text: &str) -> Option<(&'static str, String)> {
    if text.len() > MAX_EXPRESSION_BYTES {
        return Some((
            "expression_too_long",
            format!(
                "the expression is {} bytes; at most {MAX_EXPRESSION_BYTES} are allowed",
                text.len()
            ),
        ));
    }
    let depth = expression_depth(text);
    if depth > MAX_EXPRESSION_DEPTH {
        return Some((
            "expression_too_deep",
            format!(
                "the expression nests {depth} levels deep; at most {MAX_EXPRESSION_DEPTH} are allowed"
            ),
        ));
    }
    None
}

/// Nesting depth of a jq expression: brackets, string interpolations and `if … end`,
/// skipping string contents. Unbalanced text gets whatever depth it reached; the parser
/// reports it properly later.
pub fn expression_depth(text: &str) -> usize {
    let bytes = text.as_bytes();
    // A stack of what each open level is; strings inside interpolations nest too.
    #[derive(Clone, Copy, PartialEq)]
    enum Open {
        Bracket,
        Interpolation,
        If,
    }
    let mut stack: Vec<Open> = Vec::new();
    let mut max = 0usize;
    let mut in_string = false;
    let mut i = 0usize;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' if bytes.get(i + 1) == Some(&b'(') => {
                    stack.push(Open::Interpolation);
                    in_string = false;
                    i += 2;
                    max = max.max(stack.len());
                    continue;
                }
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'#' => {
                // A comment runs to the end of the line.
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => stack.push(Open::Bracket),
            b')' => {
                // The end of `\( … )` returns into the enclosing string.
                if let Some(Open::Interpolation) = stack.pop() {
                    in_string = true;
                }
            }
            b']' | b'}' => {
                stack.pop();
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let word = &bytes[start..i];
                let after_dot_or_dollar = start > 0 && matches!(bytes[start - 1], b'.' | b'$');
                if !after_dot_or_dollar {
                    if word == b"if" {
                        stack.push(Open::If);
                    } else if word == b"end"
                        && let Some(pos) = stack.iter().rposition(|o| *o == Open::If)
                    {
                        stack.truncate(pos);
                    }
                }
                max = max.max(stack.len());
                continue;
            }
            _ => {}
        }
        max = max.max(stack.len());
        i += 1;
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counts_brackets_interpolations_and_ifs() {
        assert_eq!(expression_depth(".payload.action == \"opened\""), 0);
        assert_eq!(expression_depth("(.a | [.b])"), 2);
        assert_eq!(expression_depth("\"a\\(.b | (.c))\""), 2);
        assert_eq!(
            expression_depth("if .a then (if .b then 1 else 2 end) else 3 end"),
            3
        );
        assert_eq!(expression_depth("\"((((\""), 0);
        assert_eq!(expression_depth(".end | .if"), 0);
        assert_eq!(expression_depth(&"(".repeat(900)), 900);
    }

    #[test]
    fn json_depth_skips_strings() {
        assert_eq!(json_depth(br#"{"a":[1,{"b":"[[[["}]}"#), 3);
        assert_eq!(json_depth(&b"[".repeat(5000)), 5000);
        assert_eq!(json_depth(b"not json"), 0);
    }

    proptest! {
        #[test]
        fn scans_are_total(s in ".*", b in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = expression_depth(&s);
            let _ = json_depth(&b);
        }
    }
}
