//! A DNS server on loopback with scripted answers: what a test needs to show a resolver-side
//! check working (an allowed name, a denied one, a name that answers a public address and then a
//! private one).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::{RData, Record, RecordType, rdata};

/// A running server; stopped when dropped.
pub struct DnsServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    asked: Arc<Mutex<Vec<String>>>,
}

/// Each name's answers, in order: the n-th question for a name gets its n-th answer (the last
/// one once they run out). A name without answers is NXDOMAIN.
pub type Script = Vec<(&'static str, Vec<IpAddr>)>;

impl DnsServer {
    /// Start answering on a free UDP port of 127.0.0.1 (inside a tokio runtime).
    pub async fn start(script: Script) -> std::io::Result<DnsServer> {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
        let addr = socket.local_addr()?;
        let answers: HashMap<String, Vec<IpAddr>> = script
            .into_iter()
            .map(|(name, ips)| (name.trim_end_matches('.').to_ascii_lowercase(), ips))
            .collect();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let task = tokio::spawn(async move {
            let mut counts: HashMap<String, usize> = HashMap::new();
            let mut buf = vec![0u8; 4096];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                let Ok(question) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let reply = answer(&question, &answers, &mut counts, &log);
                if let Ok(bytes) = reply.to_vec() {
                    let _ = socket.send_to(&bytes, from).await;
                }
            }
        });
        Ok(DnsServer { addr, task, asked })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The names asked for (A questions), in order.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().map(|a| a.clone()).unwrap_or_default()
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn answer(
    question: &Message,
    answers: &HashMap<String, Vec<IpAddr>>,
    counts: &mut HashMap<String, usize>,
    asked: &Mutex<Vec<String>>,
) -> Message {
    let mut reply = Message::new();
    reply
        .set_id(question.id())
        .set_message_type(MessageType::Response)
        .set_op_code(question.op_code())
        .set_recursion_desired(question.recursion_desired())
        .set_recursion_available(true)
        .set_authoritative(true);
    let Some(q) = question.queries().first() else {
        reply.set_response_code(ResponseCode::FormErr);
        return reply;
    };
    reply.add_query(q.clone());
    let name = q
        .name()
        .to_ascii()
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let Some(ips) = answers.get(&name) else {
        reply.set_response_code(ResponseCode::NXDomain);
        return reply;
    };
    let wanted = q.query_type();
    if wanted == RecordType::A
        && let Ok(mut a) = asked.lock()
    {
        a.push(name.clone());
    }
    let n = counts.entry(format!("{name}/{wanted}")).or_default();
    let ip = ips[(*n).min(ips.len().saturating_sub(1))];
    *n += 1;
    let data = match (wanted, ip) {
        (RecordType::A, IpAddr::V4(v4)) => Some(RData::A(rdata::A(v4))),
        (RecordType::AAAA, IpAddr::V6(v6)) => Some(RData::AAAA(rdata::AAAA(v6))),
        _ => None,
    };
    if let Some(data) = data {
        // TTL 0: nothing may keep the answer; each connection asks again.
        reply.add_answer(Record::from_rdata(q.name().clone(), 0, data));
    }
    reply
}
