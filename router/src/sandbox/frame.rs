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
