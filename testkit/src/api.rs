//! The gRPC API as every suite drives it: bearer-token requests, a client that waits for the
//! server, waiting for a phase, following a call to its end.

use std::time::{Duration, Instant};

use futures::StreamExt;
use tonic::transport::Channel;
use toolgate_proto::v1 as pb;
use toolgate_proto::v1::toolgate_client::ToolgateClient;

/// A request carrying `token` as its bearer credential.
pub fn authorized<T>(token: &str, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Ok(v) = format!("Bearer {token}").parse() {
        r.metadata_mut().insert("authorization", v);
    }
    r
}

/// A client of the API at `addr` (`host:port`), once it answers (30 s at most).
pub async fn grpc_client(addr: &str) -> ToolgateClient<Channel> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Channel::from_shared(format!("http://{addr}"))
            .expect("url")
            .connect()
            .await
        {
            Ok(ch) => return ToolgateClient::new(ch),
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "the agent API never came up: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Poll a call until it reaches one of `phases` (90 s at most).
pub async fn wait_call(
    client: &mut ToolgateClient<Channel>,
    token: &str,
    id: &str,
    phases: &[&str],
) -> pb::Call {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let c = client
            .get_call(authorized(token, pb::GetCallRequest { id: id.into() }))
            .await
            .expect("get")
            .into_inner();
        if phases.contains(&c.phase.as_str()) {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "{id} stuck in {} waiting for {phases:?}: {:#?}",
            c.phase,
            c.conditions
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// WatchCall until the call's end: every event, in order.
pub async fn watch_events(
    client: &mut ToolgateClient<Channel>,
    token: &str,
    id: &str,
) -> Vec<pb::CallEvent> {
    let mut s = client
        .watch_call(authorized(token, pb::WatchCallRequest { id: id.into() }))
        .await
        .expect("watch")
        .into_inner();
    let mut all = Vec::new();
    while let Some(e) = s.next().await {
        let e = e.expect("event");
        let end = e.terminal;
        all.push(e);
        if end {
            break;
        }
    }
    all
}
