//! A real S3-compatible server for the suites: moto (`moto_server`, installed by tests/run.sh),
//! on a free port of the address given: loopback for the executor's own suite, the test node's
//! link address (`TOOLGATE_NODE_HOST_IP`) when pods must reach it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running moto server; killed when dropped.
pub struct Moto {
    child: Child,
    /// The address it listens on.
    pub host: String,
    /// Its port.
    pub port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    /// Start moto on a free port of `host` and wait until it answers.
    pub fn start(host: &str) -> Moto {
        let port = TcpListener::bind((host, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("no free port on {host}: {e}"));
        let server = Moto {
            child: Command::new("moto_server")
                .args(["-H", host, "-p", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("moto_server is not installed: run tests/run.sh, which installs it (pip install 'moto[server]')"),
            host: host.to_string(),
            port,
        };
        for _ in 0..100 {
            if TcpStream::connect((host, port)).is_ok() {
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("moto_server did not listen on {host}:{port}");
    }

    /// `http://host:port`.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{}", self.host, self.port)
    }

    /// One plain HTTP/1.1 request (moto accepts any credentials): the whole response.
    pub fn request(&self, method: &str, path: &str) -> Vec<u8> {
        let mut s = TcpStream::connect((self.host.as_str(), self.port)).expect("connect to moto");
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.host
        )
        .expect("send");
        let mut out = Vec::new();
        s.read_to_end(&mut out).expect("read");
        out
    }

    /// Create a bucket.
    pub fn create_bucket(&self, name: &str) {
        let created = self.request("PUT", &format!("/{name}"));
        assert!(
            created.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&created)
        );
    }

    /// The body of an object.
    pub fn object(&self, bucket: &str, key: &str) -> Vec<u8> {
        let got = self.request("GET", &format!("/{bucket}/{key}"));
        let split = got
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|i| i + 4)
            .expect("an HTTP response");
        assert!(
            got.starts_with(b"HTTP/1.1 200"),
            "GET /{bucket}/{key}: {}",
            String::from_utf8_lossy(&got[..split])
        );
        got[split..].to_vec()
    }

    /// The keys of every object in a bucket (ListObjectsV2, up to its first thousand).
    pub fn keys(&self, bucket: &str) -> Vec<String> {
        let listed = self.request("GET", &format!("/{bucket}?list-type=2"));
        let listed = String::from_utf8_lossy(&listed);
        assert!(
            listed.starts_with("HTTP/1.1 200"),
            "listing {bucket}: {listed}"
        );
        listed
            .split("<Key>")
            .skip(1)
            .filter_map(|k| k.split_once("</Key>").map(|(k, _)| k.to_string()))
            .collect()
    }
}
