//! An agent loop with toolgate in the middle: the model sees only the tool view toolgate gives
//! for this step, its tool call (OpenAI format) becomes a governed call, and the recorded result
//! goes back to the model. The "model" here is scripted (one tool call, then an answer) so the
//! loop runs without a provider; put your model SDK's chat call in `scripted_model`'s place.
//!
//! ```text
//! cargo run -p toolgate-client --example agent_loop -- http://127.0.0.1:7070 "$TOOLGATE_TOKEN"
//! ```

use serde_json::{Value, json};
use toolgate_client::{Client, Tls};
use toolgate_proto::v1 as pb;

/// Asks for the serializer source through whatever name the view gave `file.read`, then answers.
fn scripted_model(messages: &[Value], tools: &[Value]) -> Value {
    if messages.last().and_then(|m| m["role"].as_str()) == Some("tool") {
        return json!({"role": "assistant", "content": "formatDate uses toISOString; the test expects local time."});
    }
    let name = tools
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .find(|n| n.starts_with("file__read"))
        .unwrap_or("file__read");
    json!({"role": "assistant", "tool_calls": [{"id": "t1", "type": "function",
        "function": {"name": name, "arguments": json!({"path": "src/serializer.ts"}).to_string()}}]})
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut argv = std::env::args().skip(1);
    let server = argv
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:7070".into());
    let token = argv.next().or_else(|| std::env::var("TOOLGATE_TOKEN").ok());
    let token = token.ok_or_else(|| anyhow::anyhow!("give a token: agent_loop SERVER TOKEN"))?;
    let mut tg = Client::connect(&server, &token, &Tls::default()).await?;

    let task = "find why the serializer test fails";
    let mut messages = vec![json!({"role": "user", "content": task})];
    let view = tg
        .view(pb::GetToolViewRequest {
            intent: task.into(),
            format: pb::ViewFormat::Openai.into(),
            max_tools: 6,
            ..Default::default()
        })
        .await?;
    // The provider payload: the `tools` list a chat completion request takes.
    let tools: Vec<Value> = serde_json::from_str(&view.payload_json)?;

    let reply = scripted_model(&messages, &tools);
    messages.push(reply.clone());
    for tc in reply["tool_calls"].as_array().into_iter().flatten() {
        // The provider name maps back to the tool (dots become "__").
        let tool = tc["function"]["name"]
            .as_str()
            .unwrap_or_default()
            .replace("__", ".");
        let call = tg
            .propose(pb::ProposeCallRequest {
                tool,
                args_json: tc["function"]["arguments"].as_str().unwrap_or("{}").into(),
                intent: Some(pb::Intent {
                    user_goal: task.into(),
                    current_task: task.into(),
                    action_type: "read".into(),
                    rationale_summary: "read the code under test".into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await?;
        // Follow the call to its end; the last event carries the call as it ended.
        let events = tg.watch(&call.id, |_| {}).await?;
        let done = match events.into_iter().last().and_then(|e| e.call) {
            Some(done) => done,
            None => tg.get(&call.id).await?,
        };
        let content = if done.phase == "Succeeded" {
            done.output_preview
        } else {
            format!("{}: {:?}", done.phase, done.reasons)
        };
        messages.push(json!({"role": "tool", "tool_call_id": tc["id"], "content": content}));
    }
    let reply = scripted_model(&messages, &tools);
    messages.push(reply);
    println!("{}", Value::Array(messages));
    Ok(())
}
