//! The egress gate: before the tool starts, proof that the call's NetworkPolicy is in force.
//!
//! Why: a NetworkPolicy enforcer programs a new pod's rules when it sees the pod, which can be a
//! second after its containers start (kube-router: ~1 s). Until then the pod reaches everything,
//! and a tool that connects in its first second escapes its policy. The runtime names addresses
//! that listen and that the policy refuses (the API server, on a cluster); the executor connects
//! to each until every one is refused, and fails closed otherwise. A cluster that enforces no
//! NetworkPolicy at all fails every such call the same way, instead of running it unfiltered.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use toolgate_contract::exec::EgressGate;

/// Longest single connection attempt: a policy that drops (rather than rejects) is in force
/// when a connection to a listening address goes unanswered this long.
const ATTEMPT: Duration = Duration::from_millis(250);
/// Pause between rounds while an address still answers.
const PAUSE: Duration = Duration::from_millis(20);

/// The call's NetworkPolicy was not in force within the gate's time.
#[derive(Debug, thiserror::Error)]
#[error(
    "the call's NetworkPolicy was not in force {within_ms} ms after the pod started: {address} (which the policy refuses) still accepted connections; is a NetworkPolicy enforcer running on the node? The tool did not start"
)]
pub struct NotEnforced {
    /// The address that answered.
    pub address: SocketAddr,
    /// How long the executor waited.
    pub within_ms: u64,
}

/// Wait until every address of the gate refuses a connection (or lets it time out). Returns how
/// long that took.
pub async fn wait_until_enforced(gate: &EgressGate) -> Result<Duration, NotEnforced> {
    let started = Instant::now();
    let deadline = started + Duration::from_millis(gate.within_ms);
    let mut answering: Vec<SocketAddr> = gate.refused.clone();
    loop {
        let mut still = Vec::with_capacity(answering.len());
        for address in answering {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = ATTEMPT.min(left.max(Duration::from_millis(1)));
            if let Ok(Ok(_connected)) =
                tokio::time::timeout(attempt, tokio::net::TcpStream::connect(address)).await
            {
                still.push(address);
            }
        }
        let Some(&address) = still.first() else {
            return Ok(started.elapsed());
        };
        if Instant::now() >= deadline {
            return Err(NotEnforced {
                address,
                within_ms: gate.within_ms,
            });
        }
        answering = still;
        tokio::time::sleep(PAUSE.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_address_that_answers_fails_the_gate_and_one_that_refuses_passes_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let err = wait_until_enforced(&EgressGate {
            refused: vec![closed, open],
            within_ms: 100,
        })
        .await
        .unwrap_err();
        assert_eq!(err.address, open);
        assert!(err.to_string().contains("not in force 100 ms"), "{err}");
        wait_until_enforced(&EgressGate {
            refused: vec![closed],
            within_ms: 100,
        })
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn the_gate_opens_once_the_address_stops_answering() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        // The "enforcer" arrives 150 ms in: the listener closes.
        let enforcer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            drop(listener);
        });
        let took = wait_until_enforced(&EgressGate {
            refused: vec![address],
            within_ms: 5000,
        })
        .await
        .unwrap();
        enforcer.join().unwrap();
        assert!(took >= Duration::from_millis(150), "{took:?}");
    }
}
