//! Statements that write many rows at once (issue 22): a group commit's events go in with one
//! `INSERT`, its decisions with one `UPDATE … FROM`, their todos with one `INSERT`, instead of
//! a statement (a round trip, a parse, an executor start) per delivery. On PostgreSQL that
//! per-statement work, not the data, was most of its CPU per delivery.
//!
//! The rows travel as a `WITH <name> (<columns>) AS (VALUES (…), (…))` list: portable to both
//! backends (SQLite names no columns of a bare `VALUES` subquery). So that each backend keeps
//! a handful of prepared statements rather than one per batch size, a batch is written in runs
//! whose lengths are powers of two ([`runs`]).

use std::fmt::Write as _;
use std::ops::Range;

/// `($1, $2, $3), ($4, $5, $6)` for `rows` = 2 and `width` = 3: the placeholders of a
/// `VALUES` list, numbered in the order they appear (SQLite numbers `$N` by first use).
pub(crate) fn values(rows: usize, width: usize) -> String {
    let mut sql = String::with_capacity(rows * width * 5);
    let mut n = 0;
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for col in 0..width {
            n += 1;
            let _ = write!(sql, "{}${n}", if col == 0 { "" } else { ", " });
        }
        sql.push(')');
    }
    sql
}

/// Splits `0..len` into runs whose lengths are powers of two, longest first, none over `max`
/// (itself a power of two, or it is rounded down to one): 13 → 8, 4, 1.
pub(crate) fn runs(len: usize, max: usize) -> Vec<Range<usize>> {
    let max = if max == 0 {
        1
    } else {
        1 << (usize::BITS - 1 - max.leading_zeros())
    };
    let mut out = Vec::new();
    let mut start = 0;
    while start < len {
        let left = len - start;
        let take = (1 << (usize::BITS - 1 - left.leading_zeros())).min(max);
        out.push(start..start + take);
        start += take;
    }
    out
}

/// The longest run one statement writes: 64 rows of at most 9 columns stay far below both
/// backends' limits on placeholders (SQLite 32,766, PostgreSQL 65,535).
pub(crate) const MAX_RUN: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_number_placeholders_in_order() {
        assert_eq!(values(1, 1), "($1)");
        assert_eq!(values(2, 3), "($1, $2, $3), ($4, $5, $6)");
    }

    #[test]
    fn runs_are_powers_of_two_in_order_covering_everything() {
        let lens = |len, max| {
            runs(len, max)
                .into_iter()
                .map(|r| r.len())
                .collect::<Vec<_>>()
        };
        assert_eq!(lens(0, 64), Vec::<usize>::new());
        assert_eq!(lens(1, 64), vec![1]);
        assert_eq!(lens(13, 64), vec![8, 4, 1]);
        assert_eq!(lens(64, 64), vec![64]);
        assert_eq!(lens(130, 64), vec![64, 64, 2]);
        assert_eq!(lens(7, 48), vec![4, 2, 1]);
        assert_eq!(lens(100, 48), vec![32, 32, 32, 4]);
        for len in 0..200 {
            let rs = runs(len, MAX_RUN);
            let mut next = 0;
            for r in &rs {
                assert_eq!(r.start, next);
                assert!(r.len().is_power_of_two() && r.len() <= MAX_RUN);
                next = r.end;
            }
            assert_eq!(next, len);
        }
    }
}
