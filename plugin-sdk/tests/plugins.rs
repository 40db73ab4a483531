//! The example plugins as real processes over real gRPC on their Unix socket: the
//! handshake, every rpc, failure modes, and each way a plugin is stopped.

mod support;

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use plugin_sdk::proto::{
    GetOperationRequest, InfoRequest, InitRequest, ListOperationsRequest, ShutdownRequest,
};
use plugin_sdk::{MAGIC_COOKIE_KEY, STDIN_LIFELINE_KEY};
use serde_json::{Value, json};
use support::{Running, example, manifest, start};
use tokio::io::AsyncBufReadExt;
use tonic::Code;

fn assert_cleaned_up(endpoint: &plugin_sdk::host::Endpoint) {
    let socket = endpoint.socket_path();
    assert!(!socket.exists(), "{} is left behind", socket.display());
    let dir = socket.parent().unwrap();
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

async fn shut_down(plugin: Running) -> support::Exited {
    plugin.plugin().shutdown(ShutdownRequest {}).await.unwrap();
    let endpoint = plugin.endpoint.clone();
    let exited = plugin.wait().await;
    assert!(
        exited.status.success(),
        "{:?}: {}",
        exited.status,
        exited.stderr
    );
    assert_cleaned_up(&endpoint);
    exited
}

#[test]
fn refuses_to_run_without_the_cookie() {
    for cookie in [None, Some("wrong")] {
        let mut command = std::process::Command::new(example("notes"));
        command.env_remove(MAGIC_COOKIE_KEY).stdin(Stdio::null());
        if let Some(value) = cookie {
            command.env(MAGIC_COOKIE_KEY, value);
        }
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{cookie:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{cookie:?}: printed on stdout");
        assert!(stderr.contains("must be started by awf"), "{stderr}");
        assert!(stderr.contains(MAGIC_COOKIE_KEY), "{stderr}");
    }
}

#[tokio::test]
async fn announces_a_private_unix_socket_and_nothing_else_on_stdout() {
    let plugin = start("notes", |_| {}).await;
    let socket = plugin.endpoint.socket_path().to_path_buf();
    assert!(std::fs::metadata(&socket).unwrap().file_type().is_socket());
    let dir_mode = std::fs::metadata(socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        dir_mode & 0o777,
        0o700,
        "socket directory mode {dir_mode:o}"
    );
    let exited = shut_down(plugin).await;
    assert_eq!(exited.stdout_after_handshake, "");
}

#[tokio::test]
async fn serves_when_tmpdir_is_too_long_for_a_socket_path() {
    // A real, writable TMPDIR whose path alone is 100 bytes: a socket directory in it would
    // make a socket path over the 107 bytes of `sun_path`.
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("long-{}-", std::process::id()));
    let pad = 100usize.saturating_sub(base.as_os_str().len()).max(1);
    let tmpdir = PathBuf::from(format!("{}{}", base.display(), "t".repeat(pad)));
    assert!(tmpdir.as_os_str().len() >= 100);
    std::fs::create_dir_all(&tmpdir).unwrap();
    let plugin = start("notes", |command| {
        command.env("TMPDIR", &tmpdir);
    })
    .await;
    let socket = plugin.endpoint.socket_path().to_path_buf();
    assert!(socket.as_os_str().len() <= 107, "{}", socket.display());
    assert!(std::fs::metadata(&socket).unwrap().file_type().is_socket());
    let dir_mode = std::fs::metadata(socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        dir_mode & 0o777,
        0o700,
        "socket directory mode {dir_mode:o}"
    );
    let info = plugin
        .plugin()
        .info(InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "notes");
    shut_down(plugin).await;
    std::fs::remove_dir(&tmpdir).unwrap();
}

#[tokio::test]
async fn info_matches_the_manifest() {
    for name in ["notes", "faulty"] {
        let plugin = start(name, |_| {}).await;
        let info = plugin
            .plugin()
            .info(InfoRequest {})
            .await
            .unwrap()
            .into_inner();
        // plugin.yaml is flat `key: value` lines; no YAML parser needed to read it back.
        let yaml = std::fs::read_to_string(manifest(name)).unwrap();
        let field = |key: &str| {
            yaml.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}:")))
                .unwrap_or_else(|| panic!("{name}/plugin.yaml has no {key}"))
                .trim()
                .to_string()
        };
        assert_eq!(info.name, field("name"));
        assert_eq!(info.version, field("version"));
        assert!(!info.description.is_empty() && !field("description").is_empty());
        shut_down(plugin).await;
    }
}

#[tokio::test]
async fn lists_and_gets_operations_with_their_json_schemas() {
    let plugin = start("notes", |_| {}).await;
    let listed = plugin
        .operations()
        .list_operations(ListOperationsRequest {})
        .await
        .unwrap()
        .into_inner()
        .operations;
    let names: Vec<&str> = listed.iter().map(|op| op.name.as_str()).collect();
    assert_eq!(names, ["add", "search"]);

    let add = &listed[0];
    let input = add.input_schema().unwrap();
    assert_eq!(input["type"], "object");
    assert_eq!(input["properties"]["tags"]["type"], "array");
    assert_eq!(input["properties"]["tags"]["items"]["type"], "string");
    assert_eq!(input["properties"]["meta"]["type"], "object");
    let output = add
        .output_schema()
        .expect("add declares an output")
        .unwrap();
    assert_eq!(output["properties"]["id"]["type"], "integer");
    let search_output = listed[1].output_schema().unwrap().unwrap();
    assert_eq!(search_output["type"], "array");

    let got = plugin
        .operations()
        .get_operation(GetOperationRequest {
            name: "search".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(got, listed[1]);

    let missing = plugin
        .operations()
        .get_operation(GetOperationRequest {
            name: "delete".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    assert!(
        missing.message().contains("\"delete\"") && missing.message().contains("add, search"),
        "{}",
        missing.message()
    );
    shut_down(plugin).await;
}

#[tokio::test]
async fn executes_with_array_and_object_inputs() {
    let plugin = start("notes", |_| {}).await;
    plugin
        .plugin()
        .init(InitRequest {
            config: HashMap::new(),
        })
        .await
        .unwrap();
    for (text, tags) in [
        ("Buy milk", json!(["home", "shopping"])),
        ("Buy a drill", json!(["shopping"])),
        ("Call the bank", json!([])),
    ] {
        let added = plugin
            .execute(
                "add",
                json!({ "text": text, "tags": tags, "meta": { "source": "test" } }),
            )
            .await
            .unwrap();
        assert!(added.success, "{}", added.error);
        let note = added.data().unwrap().unwrap();
        assert_eq!(note["text"], text);
        assert_eq!(note["tags"], tags);
        assert_eq!(note["meta"], json!({ "source": "test" }));
    }

    let found = plugin
        .execute("search", json!({ "query": "buy", "tags": ["shopping"] }))
        .await
        .unwrap();
    assert!(found.success, "{}", found.error);
    assert_eq!(found.output, "#1 Buy milk\n#2 Buy a drill");
    let data = found.data().unwrap().unwrap();
    let ids: Vec<&Value> = data.as_array().unwrap().iter().map(|n| &n["id"]).collect();
    assert_eq!(ids, [&json!(1), &json!(2)]);

    let limited = plugin
        .execute("search", json!({ "query": "buy", "limit": 1 }))
        .await
        .unwrap();
    assert_eq!(
        limited.data().unwrap().unwrap().as_array().unwrap().len(),
        1
    );

    let home = plugin
        .execute("search", json!({ "query": "", "tags": ["home"] }))
        .await
        .unwrap();
    assert_eq!(home.output, "#1 Buy milk");
    shut_down(plugin).await;
}

#[tokio::test]
async fn bad_calls_are_answered_with_reasons() {
    let plugin = start("notes", |_| {}).await;

    let wrong_shape = plugin
        .execute("add", json!({ "text": "x", "tags": "not-an-array" }))
        .await
        .unwrap();
    assert!(!wrong_shape.success);
    assert!(
        wrong_shape.error.contains("invalid arguments"),
        "{}",
        wrong_shape.error
    );
    assert!(wrong_shape.data().is_none());

    let not_json = plugin.execute_raw("add", "{text: x").await.unwrap_err();
    assert_eq!(not_json.code(), Code::InvalidArgument);
    assert!(
        not_json.message().contains("not valid JSON"),
        "{}",
        not_json.message()
    );

    let unknown = plugin.execute("delete", json!({})).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    // Empty arguments mean {}: `search` then misses its required `query`.
    let empty = plugin.execute_raw("search", "").await.unwrap();
    assert!(
        !empty.success && empty.error.contains("query"),
        "{}",
        empty.error
    );
    shut_down(plugin).await;
}

#[tokio::test]
async fn init_passes_the_configuration() {
    let plugin = start("notes", |_| {}).await;
    let config = |value: &str| InitRequest {
        config: HashMap::from([("max_notes".to_string(), value.to_string())]),
    };
    let rejected = plugin.plugin().init(config("many")).await.unwrap_err();
    assert_eq!(rejected.code(), Code::InvalidArgument);
    assert!(
        rejected.message().contains("max_notes") && rejected.message().contains("\"many\""),
        "{}",
        rejected.message()
    );

    plugin.plugin().init(config("1")).await.unwrap();
    let first = plugin
        .execute("add", json!({ "text": "one" }))
        .await
        .unwrap();
    assert!(first.success, "{}", first.error);
    let second = plugin
        .execute("add", json!({ "text": "two" }))
        .await
        .unwrap();
    assert!(!second.success);
    assert!(second.error.contains("max_notes = 1"), "{}", second.error);
    shut_down(plugin).await;
}

#[tokio::test]
async fn errors_and_panics_are_failed_results_and_the_plugin_lives_on() {
    let plugin = start("faulty", |_| {}).await;
    let failed = plugin
        .execute("fail", json!({ "message": "disk on fire" }))
        .await
        .unwrap();
    assert!(!failed.success);
    assert_eq!(failed.error, "disk on fire");

    let panicked = plugin.execute("panic", json!({})).await.unwrap();
    assert!(!panicked.success);
    assert!(
        panicked
            .error
            .contains("panicked: faulty panicked on purpose"),
        "{}",
        panicked.error
    );

    let slept = plugin.execute("sleep", json!({ "ms": 10 })).await.unwrap();
    assert!(slept.success, "{}", slept.error);
    assert_eq!(slept.data().unwrap().unwrap(), json!({ "slept_ms": 10 }));
    let exited = shut_down(plugin).await;
    assert!(
        exited.stderr.contains("faulty panicked on purpose"),
        "{}",
        exited.stderr
    );
}

#[tokio::test]
async fn a_crash_mid_call_breaks_the_call() {
    let plugin = start("faulty", |_| {}).await;
    let broken = plugin.execute("crash", json!({})).await.unwrap_err();
    assert!(
        matches!(
            broken.code(),
            Code::Unavailable | Code::Unknown | Code::Internal
        ),
        "{broken:?}"
    );
    // Later calls fail too (how exactly depends on how far the reconnect gets).
    plugin.plugin().info(InfoRequest {}).await.unwrap_err();
    let endpoint = plugin.endpoint.clone();
    let exited = plugin.wait().await;
    assert_eq!(
        exited.status.signal(),
        Some(libc::SIGABRT),
        "{:?}",
        exited.status
    );
    // An aborted plugin cannot clean up: that falls to the host.
    assert!(endpoint.socket_path().exists());
    plugin_sdk::host::remove_socket(&endpoint).unwrap();
    assert_cleaned_up(&endpoint);
    plugin_sdk::host::remove_socket(&endpoint).unwrap();
}

#[tokio::test]
async fn faulty_can_print_a_garbage_handshake_for_host_tests() {
    let mut child = tokio::process::Command::new(example("faulty"))
        .envs(plugin_sdk::host::handshake_env())
        .env("FAULTY_BAD_HANDSHAKE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut line = String::new();
    tokio::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .await
        .unwrap();
    let err = plugin_sdk::host::parse_handshake(&line).unwrap_err();
    assert!(
        matches!(err, plugin_sdk::host::HandshakeError::Malformed { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("not an awf plugin"), "{err}");
    child.kill().await.unwrap();
}

#[tokio::test]
async fn a_slow_call_does_not_hold_up_others_and_does_not_hold_up_a_stop() {
    let plugin = start("faulty", |_| {}).await;
    let slow = {
        let plugin_ops = plugin.operations();
        tokio::spawn(async move {
            let mut ops = plugin_ops;
            ops.execute(plugin_sdk::proto::ExecuteRequest {
                operation: "sleep".into(),
                arguments_json: json!({ "ms": 600_000 }).to_string(),
            })
            .await
        })
    };
    plugin.logged("sleeping 600000 ms").await;
    // Answered while the sleep occupies a blocking thread.
    let info = plugin
        .plugin()
        .info(InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "faulty");
    let quick = plugin.execute("sleep", json!({ "ms": 1 })).await.unwrap();
    assert!(quick.success);
    assert!(!slow.is_finished());

    // SIGTERM: the plugin gives the sleeping call DRAIN_GRACE, then exits anyway, cleanly.
    plugin.signal(libc::SIGTERM);
    let endpoint = plugin.endpoint.clone();
    let exited = plugin.wait().await;
    assert_eq!(exited.status.code(), Some(0), "{}", exited.stderr);
    assert!(
        exited.stderr.contains("exiting without them"),
        "{}",
        exited.stderr
    );
    assert_cleaned_up(&endpoint);
    assert!(slow.await.unwrap().is_err(), "the cut-off call must fail");
}

#[tokio::test]
async fn stray_prints_after_the_handshake_go_to_stderr() {
    let plugin = start("faulty", |_| {}).await;
    let printed = plugin
        .execute("print", json!({ "text": "stray-line-7731" }))
        .await
        .unwrap();
    assert!(printed.success);
    let exited = shut_down(plugin).await;
    assert_eq!(exited.stdout_after_handshake, "");
    assert!(
        exited.stderr.contains("stray-line-7731"),
        "{}",
        exited.stderr
    );
}

#[tokio::test]
async fn shutdown_rpc_stops_the_plugin_and_removes_its_socket() {
    let plugin = start("notes", |_| {}).await;
    let exited = shut_down(plugin).await;
    assert!(
        exited.stderr.contains("stopping (ShutdownCall)"),
        "{}",
        exited.stderr
    );
}

#[tokio::test]
async fn sigterm_and_sigint_stop_the_plugin_cleanly() {
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let plugin = start("notes", |_| {}).await;
        // A connection is open, as it would be with a host.
        plugin.plugin().info(InfoRequest {}).await.unwrap();
        plugin.signal(signal);
        let endpoint = plugin.endpoint.clone();
        let exited = plugin.wait().await;
        assert_eq!(exited.status.code(), Some(0), "{name}: {}", exited.stderr);
        assert!(
            exited.stderr.contains(&format!("stopping ({name})")),
            "{}",
            exited.stderr
        );
        assert_cleaned_up(&endpoint);
    }
}

#[tokio::test]
async fn end_of_stdin_stops_the_plugin_when_the_host_asks_for_a_lifeline() {
    let mut plugin = start("notes", |command| {
        command
            .envs(plugin_sdk::host::handshake_env())
            .stdin(Stdio::piped());
    })
    .await;
    assert!(
        plugin_sdk::host::handshake_env().contains(&(STDIN_LIFELINE_KEY, "1")),
        "hosts using handshake_env get the lifeline"
    );
    plugin.plugin().info(InfoRequest {}).await.unwrap();
    // What the kernel does when the host dies: its end of the pipe closes.
    drop(plugin.child.stdin.take());
    let endpoint = plugin.endpoint.clone();
    let exited = plugin.wait().await;
    assert_eq!(exited.status.code(), Some(0), "{}", exited.stderr);
    assert!(
        exited.stderr.contains("stopping (HostGone)"),
        "{}",
        exited.stderr
    );
    assert_cleaned_up(&endpoint);
}

#[tokio::test]
async fn without_the_lifeline_a_closed_stdin_is_ignored() {
    // `start` gives the plugin /dev/null as stdin: end of file at once.
    let plugin = start("notes", |_| {}).await;
    plugin.plugin().info(InfoRequest {}).await.unwrap();
    plugin
        .execute("add", json!({ "text": "still here" }))
        .await
        .unwrap();
    shut_down(plugin).await;
}
