//! A `switchboard router` process started for a test or a benchmark, on a free loopback
//! port; killed (with its sandbox children, by PDEATHSIG) when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

pub struct RouterProcess {
    pub child: Child,
    /// `127.0.0.1:<port>`, as the router printed it.
    pub addr: String,
}

impl RouterProcess {
    /// Runs `exe router --listen 127.0.0.1:0 <extra…>` and waits for its address line.
    /// Panics (this is test support) when the router does not start.
    pub fn start(exe: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(exe)
            .args(["router", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env("SWITCHBOARD_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the router process starts");
        let stdout = child.stdout.take().expect("the router's stdout is piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the router prints its address");
        let addr = line
            .trim()
            .strip_prefix("router listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from the router: {line:?}"))
            .to_string();
        Self { child, addr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
