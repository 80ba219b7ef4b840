//! An HTTP server on a loopback address for egress tests: `/hello` answers a greeting that
//! repeats the request line and its `Connection` header, `/redirect?to=URL` a 302 to `URL`.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serve on a free port of `ip` (a 127.0.0.0/8 address) until the runtime stops; its address.
pub async fn start(ip: &str) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(answer(s));
        }
    });
    Ok(addr)
}

async fn answer(mut s: tokio::net::TcpStream) {
    let mut buf = vec![0u8; 8192];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got).to_string();
    let line = text.lines().next().unwrap_or_default().to_string();
    let path = line.split(' ').nth(1).unwrap_or("/").to_string();
    let reply = if let Some(to) = path.strip_prefix("/redirect?to=") {
        format!(
            "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    } else {
        let connection = text
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("connection:"))
            .unwrap_or("none");
        let body =
            format!("hello from upstream; request line {line}; connection header {connection}\n");
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let _ = s.write_all(reply.as_bytes()).await;
    let _ = s.shutdown().await;
}
