//! A minimal HTTP/1.1 keep-alive client for the benches that drive ingest: one connection per
//! simulated forge client. Shared by `#[path]` (benches have no library of their own).

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One keep-alive connection to ingest.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("connect to ingest");
        stream.set_nodelay(true).expect("nodelay");
        Conn {
            stream,
            buf: Vec::with_capacity(4096),
        }
    }

    /// Sends one request and reads its answer: (status, body).
    pub async fn round_trip(&mut self, request: &[u8]) -> (u16, Vec<u8>) {
        self.stream.write_all(request).await.expect("send");
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p;
            }
            let n = self.stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "ingest closed the connection mid-answer");
            self.buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line in {head:?}"));
        let length: usize = head
            .split("\r\n")
            .filter_map(|l| l.split_once(':'))
            .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no content-length in {head:?}"));
        let body_start = head_end + 4;
        while self.buf.len() < body_start + length {
            let n = self.stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "ingest closed the connection mid-answer");
            self.buf.extend_from_slice(&chunk[..n]);
        }
        (status, self.buf[body_start..body_start + length].to_vec())
    }
}
