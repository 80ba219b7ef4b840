//! A real trace collector for the OpenTelemetry suites: Jaeger v2 (an OpenTelemetry Collector
//! distribution, built by `tests/jaeger/build.sh`, named by `TOOLGATE_JAEGER_BIN`) with an OTLP/gRPC
//! receiver and in-memory storage on free loopback ports; traces are read back through its query
//! API (`/api/traces/<id>`).
//!
//! In CI a missing Jaeger fails the suite; elsewhere the suite says how to build one and skips.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running Jaeger.
pub struct TestJaeger {
    /// The OTLP/gRPC endpoint (`http://127.0.0.1:<port>`), for `--otlp-endpoint`.
    pub otlp: String,
    query: u16,
    child: Child,
    dir: tempfile::TempDir,
}

/// Whether a Jaeger binary is there; in CI its absence is a failure, never a skip.
pub fn have_jaeger() -> bool {
    crate::have(
        "TOOLGATE_JAEGER_BIN",
        "no Jaeger",
        "run tests/run.sh (or eval \"$(tests/jaeger/build.sh)\") for a collector",
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One span as the query API returns it.
#[derive(Debug, Clone)]
pub struct Span {
    /// Its name.
    pub name: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// Its parent's span id, if any.
    pub parent: Option<String>,
    /// Attributes (and status tags) as text.
    pub tags: Vec<(String, String)>,
    /// The service that sent it.
    pub service: String,
    /// How long it lasted.
    pub duration: Duration,
}

impl Span {
    /// The value of an attribute.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl TestJaeger {
    /// Start it, receiving on loopback; panics with its log if it does not come up.
    pub fn start() -> TestJaeger {
        TestJaeger::start_on("127.0.0.1")
    }

    /// Start it with its OTLP receiver on `host` (the test node's link address, for an operator
    /// that runs in a pod); its query API stays on loopback.
    pub fn start_on(host: &str) -> TestJaeger {
        let bin =
            PathBuf::from(std::env::var_os("TOOLGATE_JAEGER_BIN").expect("TOOLGATE_JAEGER_BIN"));
        let dir = tempfile::tempdir().expect("tempdir");
        let (otlp, query, query_grpc) = (free_port(), free_port(), free_port());
        let config = dir.path().join("jaeger.yaml");
        std::fs::write(
            &config,
            format!(
                r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics: {{level: none}}
    logs: {{level: warn}}
extensions:
  jaeger_query:
    storage: {{traces: memory}}
    http: {{endpoint: "127.0.0.1:{query}"}}
    grpc: {{endpoint: "127.0.0.1:{query_grpc}"}}
  jaeger_storage:
    backends:
      memory: {{memory: {{max_traces: 10000}}}}
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: "{host}:{otlp}"}}
exporters:
  jaeger_storage_exporter: {{trace_storage: memory}}
"#
            ),
        )
        .expect("config");
        let log = std::fs::File::create(dir.path().join("jaeger.log")).expect("log");
        let child = Command::new(&bin)
            .arg("--config")
            .arg(format!("file:{}", config.display()))
            .current_dir(dir.path())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("jaeger starts");
        let j = TestJaeger {
            otlp: format!("http://{host}:{otlp}"),
            query,
            child,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if j.get("/api/services").is_some()
                && std::net::TcpStream::connect((host, otlp)).is_ok()
            {
                return j;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("jaeger did not come up:\n{}", j.log());
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("jaeger.log")).unwrap_or_default()
    }

    /// A GET on the query API: the body of a 200 answer.
    fn get(&self, path: &str) -> Option<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.query)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n\r\n"
        )
        .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.1 200")
            .then(|| body.to_string())
            .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
    }

    /// The spans of a trace stored so far (none if it is not there yet).
    pub fn spans(&self, trace_id: &str) -> Vec<Span> {
        let Some(body) = self.get(&format!("/api/traces/{trace_id}")) else {
            return Vec::new();
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let text = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let mut out = Vec::new();
        for trace in v["data"].as_array().into_iter().flatten() {
            for s in trace["spans"].as_array().into_iter().flatten() {
                let service =
                    trace["processes"][s["processID"].as_str().unwrap_or_default()]["serviceName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                out.push(Span {
                    name: text(&s["operationName"]),
                    trace_id: text(&s["traceID"]),
                    span_id: text(&s["spanID"]),
                    parent: s["references"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|r| r["refType"] == "CHILD_OF")
                        .map(|r| text(&r["spanID"])),
                    tags: s["tags"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|t| (text(&t["key"]), text(&t["value"])))
                        .collect(),
                    service,
                    duration: Duration::from_micros(s["duration"].as_u64().unwrap_or_default()),
                });
            }
        }
        out
    }

    /// Wait until the trace holds a span that `done` accepts; all its spans then.
    pub fn wait_for(&self, trace_id: &str, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let spans = self.spans(trace_id);
            if done(&spans) {
                return spans;
            }
            if Instant::now() > deadline {
                panic!(
                    "trace {trace_id} never got the spans expected; it has {spans:#?}\njaeger log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for TestJaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
