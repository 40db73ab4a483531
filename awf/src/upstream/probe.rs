//! Which revision a server speaks: the handshake era (`initialize` first, 2025-11-25 and
//! before) or revision 2026-07-28 (no handshake; every request names its revision in
//! `_meta`), told as the stdio binding's "Backward Compatibility" section says, and
//! remembered per server config for the rest of the process.
//!
//! The probe: `server/discover` first, with awf's `_meta`. A discovery result naming
//! 2026-07-28, or -32022 (unsupported version) whose `data.supported` names it, is a
//! modern server; -32022 naming only other modern revisions fails the start (the binding:
//! do not fall back); any other error, any other answer, or no answer within
//! [`PROBE_WAIT`] is a legacy server, which then gets exactly today's `initialize` and
//! `notifications/initialized`. A server that exits at the probe is started again and
//! spoken to with `initialize` alone. Silence is not death: after the probe's wait,
//! `initialize` gets the whole `start_timeout_seconds`, and a late answer still counts —
//! a slow modern-only server answers the probe late and refuses `initialize`, and is
//! modern; a slow legacy server answers `initialize`, and is legacy.

use super::client::{Answer, Client, Failure};
use super::config::ServerSpec;
use super::era::{Era, REVISION, meta};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the probe waits for an answer before `initialize` is sent too. Short: it is
/// paid in full only by a legacy server that says nothing before `initialize` (once per
/// server and process); a server slower than this still has its late answer read, and
/// the whole start deadline follows it.
pub const PROBE_WAIT: Duration = Duration::from_secs(3);

/// What a start ended with.
pub enum Negotiated {
    /// The era, and how it was told (for the log).
    Ready(Era, String),
    /// The server ended when probed: start it again and speak the handshake era (why).
    Restart(String),
}

/// Server configs whose era is known in this process: an `awf mcp-serve` starts a server
/// again after a crash, and `awf tools pin` once per server; the process is the widest
/// scope awf shares without a file of its own (each step's `awf mcp-serve` is a process).
static KNOWN: Mutex<Vec<(String, ServerSpec, Era)>> = Mutex::new(Vec::new());

/// The era told for this server config earlier in the process.
pub fn recall(name: &str, spec: &ServerSpec) -> Option<Era> {
    KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(n, s, _)| n == name && s == spec)
        .map(|(_, _, era)| *era)
}

/// Keeps the era of a server config that started.
pub fn remember(name: &str, spec: &ServerSpec, era: Era) {
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    known.retain(|(n, s, _)| !(n == name && s == spec));
    known.push((name.to_string(), spec.clone(), era));
}

/// Forgets it (a start with it failed: the next start probes again).
pub fn forget(name: &str, spec: &ServerSpec) {
    KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(n, s, _)| !(n == name && s == spec));
}

/// Tells the era of the server behind `client` (probing unless `known`), and opens it:
/// `initialize` for the handshake era. `probe_wait` is the probe's wait; `deadline` the
/// start's.
pub fn negotiate(
    client: &Client,
    deadline: Instant,
    known: Option<Era>,
    probe_wait: Duration,
) -> Result<Negotiated, Failure> {
    match known {
        Some(Era::Handshake) => {
            let version = client.initialize(deadline)?;
            Ok(Negotiated::Ready(
                Era::Handshake,
                format!("known from its earlier start; it answered initialize with {version}"),
            ))
        }
        Some(Era::Stateless) => {
            client.set_era(Era::Stateless);
            Ok(Negotiated::Ready(
                Era::Stateless,
                "known from its earlier start".into(),
            ))
        }
        None => probe(client, deadline, probe_wait),
    }
}

/// What an answer to the probe (or a refusal of `initialize`) says of the server.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// It speaks [`REVISION`] (how that was told).
    Modern(String),
    /// Legacy: `initialize` (why).
    Legacy(String),
    /// Modern, but no revision in common (why, for the user).
    Apart(String),
}

fn probe(client: &Client, deadline: Instant, wait: Duration) -> Result<Negotiated, Failure> {
    let probe = client.start("server/discover", Some(json!({ "_meta": meta() })))?;
    let answer = client.answer_by(&probe, deadline.min(Instant::now() + wait));
    let Some(answer) = answer else {
        return after_silence(client, deadline, &probe, wait);
    };
    if let Err(Failure::Gone(why)) = answer {
        return Ok(Negotiated::Restart(why));
    }
    match verdict(&answer) {
        Verdict::Modern(why) => {
            if let Ok(result) = answer {
                client.set_server_info(result);
            }
            client.set_era(Era::Stateless);
            Ok(Negotiated::Ready(Era::Stateless, why))
        }
        Verdict::Apart(why) => Err(Failure::Era(why)),
        Verdict::Legacy(why) => {
            let version = client.initialize(deadline)?;
            Ok(Negotiated::Ready(
                Era::Handshake,
                format!("{why}; it answered initialize with {version}"),
            ))
        }
    }
}

/// The probe went unanswered for its wait: `initialize` goes out, and whichever answer
/// tells first decides — `initialize`'s success (legacy), or its refusal by a server
/// that showed itself modern (by that refusal, or by its late discovery result).
fn after_silence(
    client: &Client,
    deadline: Instant,
    probe: &super::client::Pending,
    wait: Duration,
) -> Result<Negotiated, Failure> {
    let silent = format!(
        "it did not answer server/discover within {} s",
        wait.as_secs_f64()
    );
    let init = client.start("initialize", Some(super::client::initialize_params()))?;
    let mut late: Option<Answer> = None;
    loop {
        if late.is_none() {
            late = client.answer_by(probe, Instant::now());
        }
        let step = deadline.min(Instant::now() + Duration::from_millis(20));
        match client.answer_by(&init, step) {
            Some(Ok(result)) => {
                client.abandon(probe, None);
                let version = client.finish_initialize(result)?;
                return Ok(Negotiated::Ready(
                    Era::Handshake,
                    format!("{silent}; it answered initialize with {version}"),
                ));
            }
            Some(Err(Failure::Gone(why))) => {
                // Slow to start, then ended at the probe it read first: as on time.
                return Ok(Negotiated::Restart(why));
            }
            Some(Err(refused)) => {
                if late.is_none() {
                    // A server answers in order: its discovery result comes before its
                    // refusal, or soon after when it runs requests side by side.
                    late = client.answer_by(probe, deadline.min(Instant::now() + wait));
                }
                client.abandon(probe, None);
                let told = [
                    late.as_ref().map(verdict),
                    Some(verdict(&Err(refused.clone()))),
                ];
                for v in told.into_iter().flatten() {
                    match v {
                        Verdict::Modern(how) => {
                            if let Some(Ok(result)) = late {
                                client.set_server_info(result);
                            }
                            client.set_era(Era::Stateless);
                            return Ok(Negotiated::Ready(
                                Era::Stateless,
                                format!("it was slow to start; {how}, and refused initialize"),
                            ));
                        }
                        Verdict::Apart(why) => return Err(Failure::Era(why)),
                        Verdict::Legacy(_) => {}
                    }
                }
                return Err(refused);
            }
            None if Instant::now() >= deadline => {
                client.abandon(probe, None);
                client.abandon(&init, Some("the start's deadline passed"));
                return Err(Failure::TimedOut(Duration::ZERO));
            }
            None => {}
        }
    }
}

/// What one answer says: see the module's comment.
fn verdict(answer: &Answer) -> Verdict {
    let handshake = super::client::KNOWN_VERSIONS;
    let pick = |listed: &[&str], how: &str| {
        if listed.contains(&REVISION) {
            Verdict::Modern(format!("{how} naming {REVISION}"))
        } else if listed.iter().any(|v| handshake.contains(v)) {
            Verdict::Legacy(format!(
                "{how} naming only revisions of the handshake era ({})",
                listed.join(", ")
            ))
        } else {
            Verdict::Apart(format!(
                "it speaks revision {} and no other ({how}); awf speaks {REVISION} and the \
                 handshake revisions {}: use a version of the server that speaks one of them",
                listed.join(", "),
                handshake.join(", ")
            ))
        }
    };
    match answer {
        Ok(result) => match strings(result.get("supportedVersions")) {
            Some(listed) => pick(&listed, "it answered server/discover"),
            None => Verdict::Legacy(
                "it answered server/discover with something other than a discovery result".into(),
            ),
        },
        Err(Failure::Rpc {
            code: mcpserver::codes::UNSUPPORTED_PROTOCOL_VERSION,
            data,
            ..
        }) if strings(data.as_ref().and_then(|d| d.get("supported"))).is_some() => {
            let listed =
                strings(data.as_ref().and_then(|d| d.get("supported"))).unwrap_or_default();
            pick(&listed, "it answered with -32022 (unsupported version)")
        }
        Err(Failure::Rpc { code, .. }) => {
            Verdict::Legacy(format!("it answered server/discover with error {code}"))
        }
        Err(Failure::Gone(why)) => Verdict::Legacy(format!("it ended when probed ({why})")),
        Err(other) => Verdict::Legacy(format!("its answer to server/discover: {other}")),
    }
}

/// The strings of a JSON array of strings.
fn strings(v: Option<&Value>) -> Option<Vec<&str>> {
    v?.as_array()?.iter().map(Value::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rpc(code: i64, data: Value) -> Answer {
        Err(Failure::Rpc {
            code,
            message: "m".into(),
            data: Some(data),
        })
    }

    #[test]
    fn a_discovery_result_or_a_version_error_naming_ours_is_modern() {
        let found = verdict(&Ok(
            json!({"supportedVersions": ["2026-07-28"], "capabilities": {}}),
        ));
        assert!(matches!(found, Verdict::Modern(_)), "{found:?}");
        let refused = verdict(&rpc(-32022, json!({"supported": ["2026-07-28"]})));
        assert!(matches!(refused, Verdict::Modern(_)), "{refused:?}");
    }

    #[test]
    fn a_modern_server_with_no_revision_in_common_is_not_spoken_to_with_initialize() {
        let v = verdict(&rpc(-32022, json!({"supported": ["2027-03-01"]})));
        let Verdict::Apart(why) = v else {
            panic!("{v:?}")
        };
        assert!(
            why.contains("2027-03-01") && why.contains(REVISION),
            "{why}"
        );
        let v = verdict(&Ok(json!({"supportedVersions": ["2027-03-01"]})));
        assert!(matches!(v, Verdict::Apart(_)), "{v:?}");
    }

    #[test]
    fn any_other_answer_is_legacy_whatever_its_code() {
        for code in [-32601, -32602, -32600, -32000, 1] {
            let v = verdict(&rpc(code, json!(null)));
            assert!(matches!(v, Verdict::Legacy(_)), "{code}: {v:?}");
        }
        // -32022 without the error's `supported` list is not the recognised modern error.
        let v = verdict(&Err(Failure::Rpc {
            code: -32022,
            message: "x".into(),
            data: None,
        }));
        assert!(matches!(v, Verdict::Legacy(_)), "{v:?}");
        let v = verdict(&Ok(json!({"protocolVersion": "2025-06-18"})));
        assert!(matches!(v, Verdict::Legacy(_)), "{v:?}");
        let v = verdict(&Err(Failure::Gone("its output ended".into())));
        assert!(matches!(v, Verdict::Legacy(_)), "{v:?}");
        let v = verdict(&rpc(-32022, json!({"supported": ["2025-06-18"]})));
        assert!(matches!(v, Verdict::Legacy(_)), "{v:?}");
    }

    #[test]
    fn the_era_is_remembered_per_server_config() {
        let spec = |cmd: &str| ServerSpec {
            command: vec![cmd.into()],
            url: None,
            headers: Default::default(),
            allow_private: false,
            scan: Default::default(),
            env: Default::default(),
            env_passthrough: vec![],
            sandbox: Default::default(),
            tools: Default::default(),
            rename: Default::default(),
            timeout_seconds: None,
            start_timeout_seconds: None,
            optional: false,
        };
        let (a, b) = (spec("era-test-a"), spec("era-test-b"));
        assert_eq!(recall("era-test", &a), None);
        remember("era-test", &a, Era::Stateless);
        assert_eq!(recall("era-test", &a), Some(Era::Stateless));
        assert_eq!(recall("era-test", &b), None, "another config probes afresh");
        assert_eq!(recall("era-other", &a), None);
        forget("era-test", &a);
        assert_eq!(recall("era-test", &a), None);
    }
}
