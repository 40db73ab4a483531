//! Measures what a plugin call costs on the wire: starts the `notes` example plugin the way
//! a host does (plugin_sdk::host), then times `Info` (the gRPC round trip alone) and
//! `Execute` (adds the JSON and blocking-thread hop) and prints percentiles.
//!
//! `cargo run -p plugin-sdk --example roundtrip [-- CALLS]` (after building the examples;
//! it looks for `notes` beside itself). Use `--release` for figures worth quoting.

use std::process::Stdio;
use std::time::{Duration, Instant};

use plugin_sdk::host;
use plugin_sdk::proto::operation_service_client::OperationServiceClient;
use plugin_sdk::proto::plugin_service_client::PluginServiceClient;
use plugin_sdk::proto::{ExecuteRequest, InfoRequest, ShutdownRequest};
use tokio::io::{AsyncBufReadExt, BufReader};

fn percentiles(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p) as usize];
    format!(
        "p50 {:>7.1} µs   p99 {:>7.1} µs",
        at(0.50).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let calls: usize = std::env::args().nth(1).map_or(Ok(2000), |a| a.parse())?;
    let notes = std::env::current_exe()?.with_file_name("notes");
    if !notes.exists() {
        return Err(format!(
            "{} not found; build it first: cargo build -p plugin-sdk --examples",
            notes.display()
        )
        .into());
    }
    let mut child = tokio::process::Command::new(&notes)
        .envs(host::handshake_env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .await?;
    let channel = host::connect(&host::parse_handshake(&line)?).await?;
    let mut plugin = PluginServiceClient::new(channel.clone());
    let mut ops = OperationServiceClient::new(channel);

    let add = ExecuteRequest {
        operation: "add".into(),
        arguments_json: r#"{"text":"warm up","tags":["a","b"],"meta":{"k":"v"}}"#.into(),
    };
    ops.execute(add).await?;
    let search = ExecuteRequest {
        operation: "search".into(),
        arguments_json: r#"{"query":"warm","tags":["a"],"limit":5}"#.into(),
    };

    let (mut info_times, mut execute_times) = (Vec::new(), Vec::new());
    for _ in 0..calls {
        let start = Instant::now();
        plugin.info(InfoRequest {}).await?;
        info_times.push(start.elapsed());
        let start = Instant::now();
        ops.execute(search.clone()).await?;
        execute_times.push(start.elapsed());
    }
    println!("{calls} calls each over the plugin's Unix socket");
    println!("info    {}", percentiles(info_times.clone()));
    println!("execute {}", percentiles(execute_times.clone()));
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    println!(
        "execute / info (p50): {:.2}",
        median(execute_times).as_secs_f64() / median(info_times).as_secs_f64()
    );

    plugin.shutdown(ShutdownRequest {}).await?;
    child.wait().await?;
    Ok(())
}
