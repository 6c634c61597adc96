//! How big a delivery body may be, how deep it may nest, and how many bodies travel together.
//!
//! One definition shared by ingest (what it accepts), the router (what it evaluates) and every
//! caller that sends stored deliveries in chunks, so a body ingest took is never one a router
//! or a replay refuses.

use std::ops::Range;

/// The default body limit: GitHub sends payloads up to 25 MB and does not redeliver.
pub const DEFAULT_MAX_BODY_MB: usize = 25;
/// The most a deployment may allow (`--max-body-mb`); routers accept bodies up to this.
pub const MAX_BODY_MB_CEILING: usize = 64;
/// [`MAX_BODY_MB_CEILING`] in bytes.
pub const MAX_BODY_BYTES_CEILING: usize = MAX_BODY_MB_CEILING * 1024 * 1024;

/// Deepest nesting accepted in a delivery body before it is parsed as JSON: deeper bodies
/// reach rules as text (jaq's reader recurses without a limit).
pub const MAX_BODY_DEPTH: usize = 128;

/// Bodies in one message to a router or a sandbox child: a chunk stops growing once it holds
/// this many bytes, so a replay of big deliveries is many small calls, not one huge one.
pub const CHUNK_BYTES: usize = 32 * 1024 * 1024;

/// Nesting depth of a JSON text, skipping strings. Not a validator: it only bounds what
/// the JSON reader would recurse into. Never recurses, so it is safe on anything.
pub fn json_depth(bytes: &[u8]) -> usize {
    let mut depth = 0usize;
    let mut max = 0usize;
    let mut in_string = false;
    let mut i = 0usize;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    max = max.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        i += 1;
    }
    max
}

/// Splits items of the given sizes, in order, into consecutive ranges of at most `max_count`
/// items and, past the first item of each, at most `max_bytes` bytes: an item bigger than
/// `max_bytes` travels alone rather than not at all.
pub fn chunk_ranges(
    sizes: impl IntoIterator<Item = usize>,
    max_count: usize,
    max_bytes: usize,
) -> Vec<Range<usize>> {
    let max_count = max_count.max(1);
    let mut ranges = Vec::new();
    let (mut start, mut count, mut bytes) = (0usize, 0usize, 0usize);
    let mut end = 0usize;
    for size in sizes {
        if count > 0 && (count == max_count || bytes.saturating_add(size) > max_bytes) {
            ranges.push(start..end);
            (start, count, bytes) = (end, 0, 0);
        }
        count += 1;
        bytes = bytes.saturating_add(size);
        end += 1;
    }
    if count > 0 {
        ranges.push(start..end);
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_hold_at_most_the_count() {
        assert_eq!(chunk_ranges([1; 5], 2, 100), vec![0..2, 2..4, 4..5]);
        assert_eq!(chunk_ranges([1; 0], 2, 100), Vec::<Range<usize>>::new());
    }

    #[test]
    fn chunks_stop_growing_at_the_byte_bound_and_big_items_travel_alone() {
        assert_eq!(
            chunk_ranges([10, 10, 10, 50, 1, 1], 100, 25),
            vec![0..2, 2..3, 3..4, 4..6]
        );
    }
}
