//! Reading a delivery's body at a pace: a sender that stalls or trickles is cut off, so a
//! slow client holds one connection, never a slot of the work every webhook shares (the
//! handler takes its work slot only after the body is read).

use std::time::Duration;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

/// How fast a body must arrive: within `grace` of the headers, plus one second per
/// `min_bytes_per_sec` bytes received so far. A forge posts its body at once; a
/// 25 MiB push at 64 KiB/s still fits.
#[derive(Clone, Copy, Debug)]
pub struct BodyPace {
    pub grace: Duration,
    pub min_bytes_per_sec: u64,
}

impl Default for BodyPace {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(5),
            min_bytes_per_sec: 64 * 1024,
        }
    }
}

/// Why a body was not read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Over the limit (declared or sent): 413.
    TooLarge,
    /// Slower than the pace: 408.
    TooSlow,
    /// The connection broke or the framing was bad: 400.
    Unreadable,
}

impl BodyPace {
    /// The time allowed for the first `received` bytes.
    fn allowed(&self, received: usize) -> Duration {
        let rate = self.min_bytes_per_sec.max(1) as f64;
        self.grace + Duration::from_secs_f64(received as f64 / rate)
    }
}

/// Reads `body` whole, at most `limit` bytes, at `pace`. `declared` is the Content-Length:
/// over the limit it is refused before a byte is read.
///
/// A body that arrives in one frame (a forge's usual delivery) is kept as the frame's own
/// bytes, not copied; one that arrives in several is read into one buffer sized by the
/// Content-Length: the body is copied at most once between the socket and the store (issue
/// 22), and held once.
pub async fn read(
    body: Body,
    limit: usize,
    declared: Option<u64>,
    pace: BodyPace,
) -> Result<Bytes, BodyError> {
    let declared = declared.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if declared.is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    // The first frame is kept as it came; a second starts the buffer the rest is read into
    // (sized by the Content-Length), so a big body is held once, never twice.
    let mut first: Option<Bytes> = None;
    let mut rest: Option<BytesMut> = None;
    let mut received = 0usize;
    let started = tokio::time::Instant::now();
    let mut body = body;
    loop {
        let deadline = started + pace.allowed(received);
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(BodyError::TooSlow),
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(BodyError::Unreadable),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if received + data.len() > limit {
            return Err(BodyError::TooLarge);
        }
        received += data.len();
        if data.is_empty() {
            continue;
        }
        match (&mut rest, first.take()) {
            (Some(buf), _) => buf.extend_from_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(head)) => {
                let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).max(received));
                buf.extend_from_slice(&head);
                buf.extend_from_slice(&data);
                rest = Some(buf);
            }
        }
    }
    Ok(match rest {
        Some(buf) => buf.freeze(),
        None => first.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn pace() -> BodyPace {
        BodyPace {
            grace: Duration::from_millis(100),
            min_bytes_per_sec: 1_000,
        }
    }

    fn chunks(parts: Vec<(u64, &'static [u8])>) -> Body {
        let stream = futures::stream::iter(parts).then(|(delay_ms, bytes)| async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            Ok::<_, std::io::Error>(Bytes::from_static(bytes))
        });
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn a_prompt_body_is_read_whole() {
        let body = chunks(vec![(0, b"{\"a\":"), (10, b"1}")]);
        assert_eq!(
            read(body, 100, Some(7), pace()).await,
            Ok(Bytes::from_static(b"{\"a\":1}"))
        );
    }

    #[tokio::test]
    async fn a_body_in_one_frame_is_kept_without_a_copy() {
        let sent = Bytes::from(vec![b'x'; 64 * 1024]);
        let body = Body::from(sent.clone());
        let read = read(body, 1 << 20, Some(64 * 1024), pace()).await;
        let read = read.expect("read");
        assert_eq!(read, sent);
        assert_eq!(read.as_ptr(), sent.as_ptr(), "the frame's own bytes");
    }

    #[tokio::test]
    async fn a_stalled_body_is_cut_off_after_the_grace() {
        let body = chunks(vec![(0, b"{"), (2_000, b"}")]);
        assert_eq!(read(body, 100, None, pace()).await, Err(BodyError::TooSlow));
    }

    #[tokio::test]
    async fn a_trickle_under_the_rate_is_cut_off() {
        // 20 bytes a second against a 1,000 B/s minimum: cut off soon after the grace.
        let parts: Vec<(u64, &'static [u8])> = (0..50).map(|_| (50, &b"x"[..])).collect();
        assert_eq!(
            read(chunks(parts), 100, None, pace()).await,
            Err(BodyError::TooSlow)
        );
    }

    #[tokio::test]
    async fn over_the_limit_declared_or_sent_is_too_large() {
        assert_eq!(
            read(chunks(vec![]), 10, Some(11), pace()).await,
            Err(BodyError::TooLarge)
        );
        let body = chunks(vec![(0, b"0123456789"), (0, b"x")]);
        assert_eq!(read(body, 10, None, pace()).await, Err(BodyError::TooLarge));
    }
}
