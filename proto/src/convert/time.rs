//! Times on the wire (issue 49 item 5): every point in time the control API carries is a
//! `google.protobuf.Timestamp`. Control keeps times as milliseconds since the Unix epoch, and
//! the model's plans, provenance and trials as RFC 3339 text written by
//! [`switchboard_model::rfc3339_millis`]; these are the one set of conversions between the
//! three, so the server, the gateway and the command lines read one definition.
//!
//! A Timestamp from outside the process may hold anything: one outside what a Timestamp may
//! name (0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z) is refused, never clamped and
//! never a panic; `nanos` outside `0..1e9` is normalised into the seconds first. Times compare
//! at millisecond precision, as control stores them: a finer Timestamp is taken at its
//! millisecond (rounded down, towards the past).

use std::fmt;

pub use prost_types::Timestamp;

/// The first second a Timestamp may name: 0001-01-01T00:00:00Z.
pub const MIN_SECONDS: i64 = -62_135_596_800;
/// The last second a Timestamp may name: 9999-12-31T23:59:59Z.
pub const MAX_SECONDS: i64 = 253_402_300_799;

const NANOS_PER_SECOND: i128 = 1_000_000_000;
const NANOS_PER_MILLI: i128 = 1_000_000;

/// Why a time was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeError {
    /// Outside 0001-01-01T00:00:00Z..=9999-12-31T23:59:59.999999999Z (after normalising nanos).
    OutOfRange { seconds: i64, nanos: i32 },
    /// Not an RFC 3339 time.
    NotRfc3339(String),
    /// A request gave a bound both ways (the deprecated milliseconds and the Timestamp) and
    /// they name different milliseconds.
    Disagree {
        deprecated_ms: i64,
        timestamp_ms: i64,
    },
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeError::OutOfRange { seconds, nanos } => write!(
                f,
                "a Timestamp of {seconds} s and {nanos} ns is outside 0001-01-01T00:00:00Z to \
                 9999-12-31T23:59:59.999999999Z"
            ),
            TimeError::NotRfc3339(text) => write!(f, "{text:?} is not an RFC 3339 time"),
            TimeError::Disagree {
                deprecated_ms,
                timestamp_ms,
            } => write!(
                f,
                "the Timestamp ({}) and the deprecated milliseconds ({}) name different times: \
                 give one",
                switchboard_model::rfc3339_millis(*timestamp_ms),
                switchboard_model::rfc3339_millis(*deprecated_ms)
            ),
        }
    }
}

impl std::error::Error for TimeError {}

/// Milliseconds since the Unix epoch as a Timestamp (before 1970 too: `nanos` is never
/// negative).
pub fn from_millis(ms: i64) -> Timestamp {
    Timestamp {
        seconds: ms.div_euclid(1000),
        // 0..=999 ms: always fits.
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

/// `Some` of [`from_millis`], or `None` for `0`: for the deprecated fields where 0 said
/// "none" (a todo not claimed yet, a webhook with no stored event).
pub fn from_millis_nonzero(ms: i64) -> Option<Timestamp> {
    (ms != 0).then(|| from_millis(ms))
}

/// The Timestamp normalised (`nanos` in `0..1e9`), or why it names no time a Timestamp may.
pub fn normalised(ts: &Timestamp) -> Result<Timestamp, TimeError> {
    let total = i128::from(ts.seconds) * NANOS_PER_SECOND + i128::from(ts.nanos);
    let seconds = total.div_euclid(NANOS_PER_SECOND);
    let nanos = total.rem_euclid(NANOS_PER_SECOND);
    let out_of_range = TimeError::OutOfRange {
        seconds: ts.seconds,
        nanos: ts.nanos,
    };
    if seconds < i128::from(MIN_SECONDS) || seconds > i128::from(MAX_SECONDS) {
        return Err(out_of_range);
    }
    Ok(Timestamp {
        seconds: i64::try_from(seconds).map_err(|_| out_of_range.clone())?,
        nanos: i32::try_from(nanos).map_err(|_| out_of_range)?,
    })
}

/// The millisecond a Timestamp falls in (a finer one rounded down), or why it names no time.
pub fn to_millis(ts: &Timestamp) -> Result<i64, TimeError> {
    let n = normalised(ts)?;
    let millis = i128::from(n.seconds) * 1000 + i128::from(n.nanos) / NANOS_PER_MILLI;
    // Within the range checked above, milliseconds fit an i64 with room to spare.
    i64::try_from(millis).map_err(|_| TimeError::OutOfRange {
        seconds: ts.seconds,
        nanos: ts.nanos,
    })
}

/// [`to_millis`] of an optional Timestamp: `None` stays `None`.
pub fn to_millis_opt(ts: Option<&Timestamp>) -> Result<Option<i64>, TimeError> {
    ts.map(to_millis).transpose()
}

/// The milliseconds of an optional Timestamp where the model keeps a plain number: absent, or
/// one that names no time, is 0 (what the deprecated fields said for "none").
pub fn to_millis_or_zero(ts: Option<&Timestamp>) -> i64 {
    ts.and_then(|t| to_millis(t).ok()).unwrap_or(0)
}

/// RFC 3339 text (any offset, any fraction) as a Timestamp.
pub fn from_rfc3339(text: &str) -> Result<Timestamp, TimeError> {
    let parsed: Timestamp = text
        .parse()
        .map_err(|_| TimeError::NotRfc3339(text.to_string()))?;
    normalised(&parsed)
}

/// The Timestamp of a time kept as RFC 3339 text; `None` for empty text (where the text said
/// "none": a todo not claimed) and for text that is no time, which the text field alone
/// carries.
pub fn from_rfc3339_opt(text: &str) -> Option<Timestamp> {
    if text.is_empty() {
        return None;
    }
    from_rfc3339(text).ok()
}

/// A Timestamp as the RFC 3339 text the model keeps (`2026-11-29T23:59:10.123Z`: UTC, at the
/// millisecond), so a time read from a Timestamp is the same text control wrote.
pub fn to_rfc3339(ts: &Timestamp) -> Result<String, TimeError> {
    to_millis(ts).map(switchboard_model::rfc3339_millis)
}

/// The text of an optional Timestamp for the model's optional times: absent, or one that
/// names no time, is `None`.
pub fn to_rfc3339_opt(ts: Option<&Timestamp>) -> Option<String> {
    ts.and_then(|t| to_rfc3339(t).ok())
}

/// The same for the model's times that are always there: empty text when absent.
pub fn to_rfc3339_or_empty(ts: Option<&Timestamp>) -> String {
    to_rfc3339_opt(ts).unwrap_or_default()
}

/// A request's time bound given either way: as the deprecated milliseconds (`None`: not
/// given) and as the Timestamp. The millisecond it names, `None` for no bound; refused when
/// the Timestamp names no time or the two disagree.
pub fn request_bound(
    deprecated_ms: Option<i64>,
    timestamp: Option<&Timestamp>,
) -> Result<Option<i64>, TimeError> {
    let from_timestamp = to_millis_opt(timestamp)?;
    match (deprecated_ms, from_timestamp) {
        (Some(d), Some(t)) if d != t => Err(TimeError::Disagree {
            deprecated_ms: d,
            timestamp_ms: t,
        }),
        (_, Some(t)) => Ok(Some(t)),
        (d, None) => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(seconds: i64, nanos: i32) -> Timestamp {
        Timestamp { seconds, nanos }
    }

    #[test]
    fn millis_round_trip_before_and_after_1970() {
        for ms in [
            0,
            1,
            999,
            1000,
            1_800_000_030_123,
            -1,
            -999,
            -1000,
            -1001,
            -86_400_000 * 365,
        ] {
            let t = from_millis(ms);
            assert!((0..1_000_000_000).contains(&t.nanos), "{ms}: {t:?}");
            assert_eq!(to_millis(&t), Ok(ms), "{ms}");
        }
        assert_eq!(from_millis(-1), ts(-1, 999_000_000));
        assert_eq!(from_millis(1_500), ts(1, 500_000_000));
        assert_eq!(from_millis_nonzero(0), None);
        assert_eq!(from_millis_nonzero(-5), Some(ts(-1, 995_000_000)));
    }

    #[test]
    fn nanos_are_normalised_and_finer_times_round_down() {
        // 1 s and -1 ns: 0.999999999 s, in the millisecond 999.
        assert_eq!(normalised(&ts(1, -1)), Ok(ts(0, 999_999_999)));
        assert_eq!(to_millis(&ts(1, -1)), Ok(999));
        // 2.1 s written as 0 s and 2.1e9 ns.
        assert_eq!(to_millis(&ts(0, 2_100_000_000)), Ok(2_100));
        assert_eq!(to_millis(&ts(0, i32::MAX)), Ok(2_147));
        assert_eq!(to_millis(&ts(0, i32::MIN)), Ok(-2_148));
        // Before 1970 a sub-millisecond time rounds towards the past too.
        assert_eq!(to_millis(&ts(-1, 999_999)), Ok(-1000));
        assert_eq!(to_millis(&ts(0, 1_999_999)), Ok(1));
    }

    #[test]
    fn a_timestamp_out_of_range_is_refused_not_a_panic() {
        for bad in [
            ts(i64::MAX, 999_999_999),
            ts(i64::MIN, -999_999_999),
            ts(i64::MIN, 0),
            ts(MAX_SECONDS + 1, 0),
            ts(MIN_SECONDS - 1, 999_999_999),
            ts(MIN_SECONDS, -1),
            ts(MAX_SECONDS, 1_000_000_000),
        ] {
            assert_eq!(
                to_millis(&bad),
                Err(TimeError::OutOfRange {
                    seconds: bad.seconds,
                    nanos: bad.nanos
                }),
                "{bad:?}"
            );
            assert!(to_rfc3339(&bad).is_err());
            assert_eq!(to_rfc3339_opt(Some(&bad)), None);
        }
        assert_eq!(
            to_millis(&ts(MIN_SECONDS, 0)),
            Ok(MIN_SECONDS * 1000),
            "the first second is in range"
        );
        assert_eq!(
            to_millis(&ts(MAX_SECONDS, 999_999_999)),
            Ok(MAX_SECONDS * 1000 + 999)
        );
        let err = to_millis(&ts(i64::MAX, 0)).expect_err("out of range");
        assert!(err.to_string().contains("outside"), "{err}");
    }

    #[test]
    fn rfc3339_text_reads_as_the_timestamp_control_wrote() {
        let ms = 1_800_000_030_123;
        let text = switchboard_model::rfc3339_millis(ms);
        assert_eq!(text, "2027-01-15T08:00:30.123Z");
        assert_eq!(from_rfc3339(&text), Ok(from_millis(ms)));
        assert_eq!(to_rfc3339(&from_millis(ms)).as_deref(), Ok(text.as_str()));
        // Another offset and no fraction name the same instant.
        assert_eq!(
            from_rfc3339("2027-01-15T09:00:30+01:00").map(|t| to_millis(&t)),
            Ok(Ok(1_800_000_030_000))
        );
        // Before 1970.
        let before = switchboard_model::rfc3339_millis(-1);
        assert_eq!(before, "1969-12-31T23:59:59.999Z");
        assert_eq!(from_rfc3339(&before), Ok(ts(-1, 999_000_000)));
        assert_eq!(from_rfc3339_opt(""), None);
        assert_eq!(from_rfc3339_opt("<expires_at>"), None);
        assert_eq!(
            from_rfc3339("yesterday"),
            Err(TimeError::NotRfc3339("yesterday".into()))
        );
        assert_eq!(to_rfc3339_or_empty(None), "");
    }

    #[test]
    fn a_request_bound_is_read_either_way_and_both_must_agree() {
        assert_eq!(request_bound(None, None), Ok(None));
        assert_eq!(request_bound(Some(5), None), Ok(Some(5)));
        assert_eq!(request_bound(None, Some(&from_millis(7))), Ok(Some(7)));
        assert_eq!(request_bound(Some(7), Some(&from_millis(7))), Ok(Some(7)));
        // The same millisecond, finer: agrees.
        assert_eq!(request_bound(Some(7), Some(&ts(0, 7_500_000))), Ok(Some(7)));
        let err = request_bound(Some(7), Some(&from_millis(8))).expect_err("disagree");
        assert_eq!(
            err,
            TimeError::Disagree {
                deprecated_ms: 7,
                timestamp_ms: 8
            }
        );
        assert!(err.to_string().contains("give one"), "{err}");
        assert!(request_bound(None, Some(&ts(i64::MAX, 0))).is_err());
    }
}
