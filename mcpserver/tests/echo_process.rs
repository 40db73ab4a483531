//! The echo example as a real subprocess over real pipes.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

use common::echo_binary;

use serde_json::{Value, json};

fn init_line(id: i64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).to_string()
}

fn call_line(id: i64, text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}}).to_string()
}

/// Writes `input` then closes stdin; returns every stdout line and the exit status.
fn run_with_input(input: Vec<u8>) -> (Vec<Value>, std::process::ExitStatus, String) {
    let mut child = Command::new(echo_binary())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        stdin.write_all(&input).unwrap();
    });
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    writer.join().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    let lines = stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {l:.200}"))
        })
        .collect();
    (lines, status, stderr)
}

#[test]
fn two_hundred_calls_written_at_once_then_end_of_input() {
    let mut input = init_line(0) + "\n";
    for id in 1..=200 {
        input += &call_line(id, &format!("message {id}"));
        input.push('\n');
    }
    let (lines, status, _) = run_with_input(input.into_bytes());
    assert!(status.success(), "{status}");
    assert_eq!(lines.len(), 201);
    for answer in &lines[1..] {
        let id = answer["id"].as_i64().unwrap();
        assert_eq!(
            answer["result"]["content"][0]["text"],
            format!("message {id}")
        );
    }
    let mut ids: Vec<i64> = lines.iter().map(|l| l["id"].as_i64().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, (0..=200).collect::<Vec<_>>());
}

#[test]
fn garbage_lines_get_errors_and_good_lines_answers() {
    let mut input = Vec::new();
    input.extend_from_slice((init_line(0) + "\n").as_bytes());
    let garbage: [&[u8]; 5] = [
        b"not json",
        b"{\"unterminated\":",
        b"\xff\xfe\xfd",
        b"[1,2]",
        b"null",
    ];
    for (i, g) in garbage.iter().enumerate() {
        input.extend_from_slice(g);
        input.push(b'\n');
        input.extend_from_slice((call_line(i as i64 + 1, "good") + "\n").as_bytes());
    }
    let (lines, status, _) = run_with_input(input);
    assert!(status.success());
    assert_eq!(lines.len(), 11);
    for pair in lines[1..].chunks(2) {
        assert_eq!(pair[0]["id"], Value::Null, "{}", pair[0]);
        assert!(pair[0]["error"]["code"] == -32700 || pair[0]["error"]["code"] == -32600);
        assert_eq!(pair[1]["result"]["content"][0]["text"], "good");
    }
}

#[test]
fn a_20_mib_line_gets_an_error_and_the_server_still_serves() {
    let mut input = (init_line(0) + "\n").into_bytes();
    input.extend_from_slice(call_line(1, &"x".repeat(20 << 20)).as_bytes());
    input.push(b'\n');
    input.extend_from_slice((call_line(2, "after") + "\n").as_bytes());
    let (lines, status, _) = run_with_input(input);
    assert!(status.success());
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1]["id"], Value::Null);
    assert!(
        lines[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too large")
    );
    assert_eq!(lines[2]["result"]["content"][0]["text"], "after");
}

#[test]
fn a_large_echo_round_trips() {
    let text = "é".repeat(1 << 19); // 1 MiB of two-byte characters
    let mut input = init_line(0) + "\n";
    input += &call_line(1, &text);
    input.push('\n');
    let (lines, status, _) = run_with_input(input.into_bytes());
    assert!(status.success());
    assert_eq!(
        lines[1]["result"]["content"][0]["text"].as_str().unwrap(),
        text
    );
}

#[test]
fn ping_is_answered_while_a_slow_call_runs_in_the_process() {
    let mut child = Command::new(echo_binary())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let slow = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 3000}}});
    writeln!(
        stdin,
        "{}\n{}\n{}",
        init_line(0),
        slow,
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    )
    .unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        v["id"], 2,
        "the ping comes before the 3 s call ends: {line}"
    );
    drop(stdin);
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&line).unwrap()["id"],
        1,
        "drained at end of input"
    );
    assert!(child.wait().unwrap().success());
}

/// While serving, the server holds duplicates of the client's pipes; a process one of
/// its handlers starts must not inherit them (the client would then wait for that
/// process to exit before it saw the end of the server's output).
#[cfg(target_os = "linux")]
#[test]
fn the_client_pipes_are_not_inherited_by_processes_handlers_start() {
    use std::os::fd::AsRawFd;

    let mut child = Command::new(echo_binary())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    writeln!(stdin, "{}", init_line(0)).unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"id\":0"), "{line}");

    let link = |path: String| {
        std::fs::read_link(path)
            .ok()
            .map(|p| p.display().to_string())
    };
    let ours = [
        link(format!("/proc/self/fd/{}", stdin.as_raw_fd())).unwrap(),
        link(format!("/proc/self/fd/{}", stdout.get_ref().as_raw_fd())).unwrap(),
    ];
    let mut held = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{}/fd", child.id())).unwrap() {
        let fd = entry.unwrap().file_name().into_string().unwrap();
        let Some(target) = link(format!("/proc/{}/fd/{fd}", child.id())) else {
            continue;
        };
        if fd.parse::<u32>().unwrap() > 2 && ours.contains(&target) {
            let info =
                std::fs::read_to_string(format!("/proc/{}/fdinfo/{fd}", child.id())).unwrap();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
                .unwrap();
            held.push((fd, target, flags & 0o2_000_000 != 0));
        }
    }
    // It does hold both pipes (so the check below looked at something)...
    assert!(held.iter().any(|(_, t, _)| *t == ours[0]), "{held:?}");
    assert!(held.iter().any(|(_, t, _)| *t == ours[1]), "{held:?}");
    // ...and every duplicate is closed on exec.
    assert!(
        held.iter().all(|(_, _, cloexec)| *cloexec),
        "inheritable: {held:?}"
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
