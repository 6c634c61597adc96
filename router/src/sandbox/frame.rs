//! Framing on the child's pipes: a 4-byte little-endian length, then one protobuf message.

use prost::Message;
use std::io::{self, Read, Write};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// No frame is larger than this; a bigger length is a broken peer, not a request.
pub const MAX_FRAME_BYTES: usize = 512 * 1024 * 1024;

fn too_large(len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("frame of {len} bytes is over the limit"),
    )
}

/// Writes one frame (blocking side, used by the child).
pub fn write_frame<M: Message>(w: &mut impl Write, msg: &M) -> io::Result<()> {
    let len = msg.encoded_len();
    if len > MAX_FRAME_BYTES {
        return Err(too_large(len));
    }
    let mut buf = Vec::with_capacity(4 + len);
    buf.extend_from_slice(&(len as u32).to_le_bytes());
    msg.encode(&mut buf)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    w.write_all(&buf)
}

/// Reads one frame (blocking side); `Ok(None)` on a clean end of input.
pub fn read_frame<M: Message + Default>(r: &mut impl Read) -> io::Result<Option<M>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(too_large(len));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    M::decode(bytes::Bytes::from(buf))
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Writes one frame (async side, used by the parent).
pub async fn write_frame_async<M: Message>(
    w: &mut (impl AsyncWrite + Unpin),
    msg: &M,
) -> io::Result<()> {
    let len = msg.encoded_len();
    if len > MAX_FRAME_BYTES {
        return Err(too_large(len));
    }
    let mut buf = Vec::with_capacity(4 + len);
    buf.extend_from_slice(&(len as u32).to_le_bytes());
    msg.encode(&mut buf)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    w.write_all(&buf).await?;
    w.flush().await
}

/// Reads one frame (async side); an end of input is an error here: the child died.
pub async fn read_frame_async<M: Message + Default>(
    r: &mut (impl AsyncRead + Unpin),
) -> io::Result<M> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(too_large(len));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    M::decode(bytes::Bytes::from(buf)).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads frames from the async side and keeps what it has read of a frame across calls, so
/// `next` can be cancelled (as a branch of `select!`) and called again without losing data.
pub struct FrameReader<R> {
    inner: R,
    buf: bytes::BytesMut,
    chunk: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Reads from `inner` at most `chunk` bytes beyond the frame it needs at a time.
    pub fn new(inner: R, chunk: usize) -> Self {
        Self {
            inner,
            buf: bytes::BytesMut::with_capacity(chunk),
            chunk: chunk.max(4),
        }
    }

    /// The next frame; an end of input is an error (the peer died). Cancel safe.
    pub async fn next<M: Message + Default>(&mut self) -> io::Result<M> {
        use bytes::Buf;
        loop {
            if self.buf.len() >= 4 {
                let mut len = [0u8; 4];
                len.copy_from_slice(&self.buf[..4]);
                let len = u32::from_le_bytes(len) as usize;
                if len > MAX_FRAME_BYTES {
                    return Err(too_large(len));
                }
                if self.buf.len() >= 4 + len {
                    self.buf.advance(4);
                    let frame = self.buf.split_to(len).freeze();
                    return M::decode(frame)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
                }
                self.buf.reserve(4 + len - self.buf.len());
            } else {
                self.buf.reserve(self.chunk);
            }
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_proto::router::v1::{ChildDone, ChildResponse, child_response};

    fn done() -> ChildResponse {
        ChildResponse {
            response: Some(child_response::Response::Done(ChildDone {})),
        }
    }

    #[tokio::test]
    async fn a_frame_read_in_pieces_and_interrupted_is_not_lost() {
        let mut bytes = Vec::new();
        for _ in 0..3 {
            write_frame(&mut bytes, &done()).expect("writes");
        }
        let (mut tx, rx) = tokio::io::duplex(3);
        let mut reader = FrameReader::new(rx, 2);
        let writer = tokio::spawn(async move {
            for b in bytes {
                tx.write_all(&[b]).await.expect("writes");
                tokio::task::yield_now().await;
            }
        });
        let mut got = 0;
        while got < 3 {
            // Polled once and dropped whenever it would wait, i.e. cancelled at every byte:
            // every frame still arrives whole.
            match futures::FutureExt::now_or_never(reader.next::<ChildResponse>()) {
                Some(r) => {
                    assert_eq!(r.expect("a frame"), done());
                    got += 1;
                }
                None => tokio::task::yield_now().await,
            }
        }
        writer.await.expect("joins");
        assert!(reader.next::<ChildResponse>().await.is_err());
    }
}
