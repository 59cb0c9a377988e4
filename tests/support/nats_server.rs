//! A real `nats-server` on 127.0.0.1 with a generated config, and the scratch
//! directories it and the tests write into. Shared by the integration tests
//! (`tests/support/mod.rs`) and the library's own unit tests that need a broker.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A scratch directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory under the system temp dir.
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "choria-prov-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `contents` to `name` inside the directory and returns its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(&path, contents).expect("write file");
        path
    }

    /// Writes an executable script.
    pub fn script(&self, name: &str, contents: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.write(name, contents);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`.
pub fn wait_for_port(port: u16, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The nats-server binary: `$NATS_SERVER`, then `PATH`, then the copy `make test`
/// installs under `target/tools`.
pub fn nats_server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("NATS_SERVER").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let search = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&search).chain([
        PathBuf::from("/usr/sbin"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/tools/bin"),
    ]) {
        let candidate = dir.join("nats-server");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!("no nats-server found: run the tests through `make test`, which installs one, or set NATS_SERVER")
}

/// A nats-server on 127.0.0.1 with a generated config, killed when dropped.
pub struct NatsServer {
    pub port: u16,
    child: Option<Child>,
    config: PathBuf,
    _dir: TempDir,
}

impl NatsServer {
    /// Starts a plain single-account server.
    pub fn start() -> NatsServer {
        NatsServer::with_config("")
    }

    /// Starts a server whose config file has `extra` appended after `listen`; `{dir}`
    /// in `extra` stands for the server's own scratch directory.
    pub fn with_config(extra: &str) -> NatsServer {
        let dir = TempDir::new("nats");
        let port = free_port();
        let extra = extra.replace("{dir}", &dir.path().display().to_string());
        let config = dir.write("nats.conf", &format!("listen: 127.0.0.1:{port}\n{extra}\n"));
        let mut server = NatsServer {
            port,
            child: None,
            config,
            _dir: dir,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = Command::new(nats_server_binary())
            .arg("-c")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        assert!(
            wait_for_port(self.port, Duration::from_secs(10)),
            "nats-server did not listen on 127.0.0.1:{} within 10s",
            self.port
        );
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (connections drop at once).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and config.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A hostile node's raw NATS connection: writes protocol lines the client library
/// would never write (header blocks that do not parse), which nats-server passes on.
pub struct RawPublisher {
    stream: std::net::TcpStream,
}

impl RawPublisher {
    /// Connects to `url` (`nats://127.0.0.1:<port>`) and says it sends headers.
    pub fn connect(url: &str) -> RawPublisher {
        use std::io::{BufRead, BufReader, Write};
        let address = url.trim_start_matches("nats://");
        let mut stream = std::net::TcpStream::connect(address).expect("raw connect");
        // Each forgery goes out at once (Nagle's algorithm held a second small write
        // for the first one's delayed ACK, about 40 ms).
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut info = String::new();
        BufReader::new(&stream).read_line(&mut info).unwrap();
        assert!(info.starts_with("INFO "), "{info}");
        stream
            .write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true}\r\n")
            .unwrap();
        let mut raw = RawPublisher { stream };
        raw.flush();
        raw
    }

    /// `HPUB subject` with `headers` as the header block, as they are.
    pub fn hpub(&mut self, subject: &str, headers: &[u8], payload: &[u8]) {
        use std::io::Write;
        let total = headers.len() + payload.len();
        let mut op = format!("HPUB {subject} {} {total}\r\n", headers.len()).into_bytes();
        op.extend_from_slice(headers);
        op.extend_from_slice(payload);
        op.extend_from_slice(b"\r\n");
        self.stream.write_all(&op).unwrap();
    }

    /// `PUB subject reply_to` with both as raw bytes (nats-server checks neither for
    /// UTF-8).
    pub fn publish(&mut self, subject: &[u8], reply_to: &[u8], payload: &[u8]) {
        use std::io::Write;
        let mut op = b"PUB ".to_vec();
        op.extend_from_slice(subject);
        op.push(b' ');
        op.extend_from_slice(reply_to);
        op.extend_from_slice(format!(" {}\r\n", payload.len()).as_bytes());
        op.extend_from_slice(payload);
        op.extend_from_slice(b"\r\n");
        self.stream.write_all(&op).unwrap();
    }

    /// Waits until the server has read everything sent (PING, PONG).
    pub fn flush(&mut self) {
        use std::io::{BufRead, BufReader, Write};
        self.stream.write_all(b"PING\r\n").unwrap();
        let mut reader = BufReader::new(&self.stream);
        let mut line = String::new();
        for _ in 0..10 {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line.starts_with("PONG") {
                return;
            }
            assert!(!line.starts_with("-ERR"), "nats-server refused: {line}");
        }
        panic!("no PONG from nats-server");
    }
}
