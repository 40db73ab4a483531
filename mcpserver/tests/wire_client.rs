//! A client made of `mcpserver::wire` and nothing else (the public API only) talks to a
//! real `Server` over `memory::pair`: the handshake, listing, calls, notifications, the
//! error answers, and lines over the limit on either side.

use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::Duration;

use mcpserver::memory::{self, MemoryWriter};
use mcpserver::wire::{self, Frame, Incoming, LineReader};
use mcpserver::{CallContext, RequestId, Server, StopReason, Tool, ToolResult, codes};
use serde::Deserialize;
use serde_json::{Value, json};

/// Long enough never to fire on a healthy run; only there so a broken server fails the
/// test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(20);

/// What the client's reader got: a line, or a line over its limit (`None`).
type Received = Option<Vec<u8>>;

struct WireClient {
    to_server: Option<MemoryWriter>,
    frames: Receiver<Received>,
    serving: Option<JoinHandle<io::Result<StopReason>>>,
}

/// An answer as the test keeps it (`Incoming` borrows the line).
#[derive(Debug, PartialEq)]
enum Answer {
    Result(RequestId, Value),
    Error(Option<RequestId>, i64, String),
}

impl WireClient {
    /// Serves `server` on a thread; the client's reader keeps lines up to `max_line`.
    fn start(server: Server, max_line: usize) -> WireClient {
        let (client_end, server_end) = memory::pair();
        let serving = std::thread::spawn(move || {
            let (r, w) = server_end.split();
            server.serve(r, w)
        });
        let (from_server, to_server) = client_end.split();
        let (tx, frames) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = LineReader::new(from_server, max_line);
            loop {
                let received = match lines.read_frame() {
                    Ok(Frame::Line(line)) => Some(line.to_vec()),
                    Ok(Frame::TooLong) => None,
                    Ok(Frame::Eof) | Err(_) => return,
                };
                if tx.send(received).is_err() {
                    return;
                }
            }
        });
        WireClient {
            to_server: Some(to_server),
            frames,
            serving: Some(serving),
        }
    }

    fn out(&mut self) -> &mut MemoryWriter {
        self.to_server.as_mut().expect("input still open")
    }

    fn send_request(&mut self, id: &RequestId, method: &str, params: Option<&Value>) {
        wire::write_request(self.out(), id, method, params).unwrap();
    }

    fn notify(&mut self, method: &str, params: Option<&Value>) {
        wire::write_notification(self.out(), method, params).unwrap();
    }

    fn received(&mut self) -> Received {
        self.frames
            .recv_timeout(PATIENCE)
            .expect("the server should have written a line")
    }

    /// The next line, read as an answer.
    fn answer(&mut self) -> Answer {
        let line = self.received().expect("a line within the client's limit");
        match wire::classify_incoming(&line) {
            Incoming::Response { id, result } => {
                Answer::Result(id, serde_json::from_str(result.get()).unwrap())
            }
            Incoming::ErrorResponse {
                id, code, message, ..
            } => Answer::Error(id, code, message),
            other => panic!("not an answer: {other:?}"),
        }
    }

    /// Sends a request and returns its answer's result, which must be the next line.
    fn request(&mut self, id: i64, method: &str, params: Option<&Value>) -> Value {
        let id = RequestId::Number(id);
        self.send_request(&id, method, params);
        match self.answer() {
            Answer::Result(got, result) if got == id => result,
            other => panic!("{method}: expected the result of {id}, got {other:?}"),
        }
    }

    /// Sends a request and returns its error answer's code and message.
    fn refused(&mut self, id: &RequestId, method: &str, params: Option<&Value>) -> (i64, String) {
        self.send_request(id, method, params);
        match self.answer() {
            Answer::Error(Some(got), code, message) if got == *id => (code, message),
            other => panic!("{method}: expected an error answer to {id}, got {other:?}"),
        }
    }

    fn initialize(&mut self) -> Value {
        let params = json!({
            "protocolVersion": "2024-11-05",
            "capabilities": {},
            "clientInfo": {"name": "wire-client", "version": "1"}
        });
        let result = self.request(0, "initialize", Some(&params));
        self.notify("notifications/initialized", None);
        result
    }

    /// Closes the server's input; returns why serving ended, once every line was read.
    fn finish(mut self) -> StopReason {
        self.to_server = None;
        let reason = self.serving.take().unwrap().join().unwrap().unwrap();
        assert!(
            self.frames.recv_timeout(PATIENCE).is_err(),
            "a line after the end"
        );
        reason
    }
}

#[derive(Deserialize)]
struct EchoArgs {
    text: String,
}

fn echo_server(max_message_size: usize) -> Server {
    let schema =
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    Server::builder("wire-test", "2.0")
        .max_message_size(max_message_size)
        .tool(
            Tool::new("echo", "Echo the text back", schema),
            |a: EchoArgs, _: &CallContext| Ok::<_, String>(ToolResult::text(a.text)),
        )
        .tool_raw(
            Tool::new("fail", "Always fails", json!({"type": "object"})),
            |_, _| Err::<ToolResult, _>("this tool always fails"),
        )
        .build()
        .unwrap()
}

#[test]
fn a_wire_client_initializes_lists_calls_and_is_refused_in_words() {
    let mut client = WireClient::start(echo_server(1 << 20), 1 << 20);

    let early = RequestId::String("early".into());
    let (code, message) = client.refused(&early, "tools/list", None);
    assert_eq!(code, codes::SERVER_NOT_INITIALIZED, "{message}");

    let init = client.initialize();
    assert_eq!(init["protocolVersion"], "2024-11-05");
    assert_eq!(
        init["serverInfo"],
        json!({"name": "wire-test", "version": "2.0"})
    );
    assert_eq!(init["capabilities"]["tools"]["listChanged"], false);

    // The notification got no answer: the next line answers the ping.
    assert_eq!(client.request(1, "ping", None), json!({}));

    let list = client.request(2, "tools/list", Some(&json!({})));
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "fail"]);

    // A string id comes back a string, a call's text comes back whole.
    let id = RequestId::String("3".into());
    client.send_request(
        &id,
        "tools/call",
        Some(&json!({"name": "echo", "arguments": {"text": "one\ntwo \"quoted\""}})),
    );
    match client.answer() {
        Answer::Result(got, result) => {
            assert_eq!(got, id);
            assert_eq!(result["content"][0]["text"], "one\ntwo \"quoted\"");
            assert_ne!(result["isError"], true);
        }
        other => panic!("{other:?}"),
    }
    let failed = client.request(
        4,
        "tools/call",
        Some(&json!({"name": "fail", "arguments": {}})),
    );
    assert_eq!(failed["isError"], true);
    assert_eq!(failed["content"][0]["text"], "this tool always fails");

    let (code, message) = client.refused(
        &RequestId::Number(5),
        "tools/call",
        Some(&json!({"name": "nope", "arguments": {}})),
    );
    assert_eq!(code, codes::INVALID_PARAMS);
    assert!(message.contains("unknown tool \"nope\""), "{message}");
    let (code, message) = client.refused(
        &RequestId::Number(6),
        "tools/call",
        Some(&json!({"name": "echo", "arguments": {"text": 5}})),
    );
    assert_eq!(code, codes::INVALID_PARAMS);
    assert!(message.contains("echo"), "{message}");
    let (code, _) = client.refused(&RequestId::Number(7), "resources/list", None);
    assert_eq!(code, codes::METHOD_NOT_FOUND);

    // A line that is not JSON (which `wire` cannot write): the server answers with a
    // null id, and the client reads that.
    client.out().write_all(b"this is not json\n").unwrap();
    assert!(matches!(
        client.answer(),
        Answer::Error(None, codes::PARSE_ERROR, _)
    ));

    // `shutdown` is answered, then the server stops reading and its output ends.
    assert_eq!(client.request(8, "shutdown", None), json!({}));
    assert_eq!(client.finish(), StopReason::Shutdown);
}

#[test]
fn lines_over_the_limit_are_refused_or_skipped_on_either_side_and_the_session_goes_on() {
    let mut client = WireClient::start(echo_server(1024), 512);
    client.initialize();

    // Over the server's limit: an error with a null id (the id was never read).
    let long = "x".repeat(2000);
    client.send_request(
        &RequestId::Number(1),
        "tools/call",
        Some(&json!({"name": "echo", "arguments": {"text": long}})),
    );
    match client.answer() {
        Answer::Error(None, code, message) => {
            assert_eq!(code, codes::INVALID_REQUEST);
            assert!(message.contains("1024 bytes"), "{message}");
        }
        other => panic!("{other:?}"),
    }

    // Within the server's limit, but its answer is over the client's: the reader skips
    // it whole and the next answer is read intact.
    let text = "y".repeat(800);
    client.send_request(
        &RequestId::Number(2),
        "tools/call",
        Some(&json!({"name": "echo", "arguments": {"text": text}})),
    );
    assert_eq!(
        client.received(),
        None,
        "an answer over 512 bytes is skipped"
    );
    let small = client.request(
        3,
        "tools/call",
        Some(&json!({"name": "echo", "arguments": {"text": "z"}})),
    );
    assert_eq!(small["content"][0]["text"], "z");
    assert_eq!(client.finish(), StopReason::EndOfInput);
}
