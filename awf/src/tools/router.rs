//! `ToolRouter`: one name space over several providers. Names are checked when the router
//! is built (a bad or duplicate name is a USER error before any agent starts, never a
//! surprise at call time), and every call goes through the same observation path.

use super::{
    CallInfo, CallMeta, CallObserver, CallOutcome, CallStatus, Cancellation, ToolOutput,
    ToolPolicy, ToolProvider, ToolSpec,
};
use crate::error::{AwfError, codes};
use serde_json::Value;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// MCP clients disagree on what a tool name may hold; this is the set all of them accept
/// (Claude rejects dots, and one bad name hides every tool of a server in Claude Desktop).
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

struct Entry {
    spec: ToolSpec,
    provider: usize,
}

pub struct ToolRouter {
    providers: Vec<Box<dyn ToolProvider>>,
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    observer: Arc<dyn CallObserver>,
    session_id: String,
    next_call: AtomicU64,
    /// Tools the step's policy keeps from the agent, with why.
    withheld: Vec<(String, String)>,
}

impl ToolRouter {
    /// Builds the name space. `session_id` prefixes call ids so that several servers can
    /// share one audit file.
    pub fn new(
        providers: Vec<Box<dyn ToolProvider>>,
        observer: Arc<dyn CallObserver>,
        session_id: String,
    ) -> Result<ToolRouter, AwfError> {
        let mut entries = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        for (pi, provider) in providers.iter().enumerate() {
            for spec in provider.tools() {
                if !is_valid_tool_name(&spec.name) {
                    return Err(AwfError::new(
                        codes::INVALID_TOOL_NAME,
                        format!(
                            "tool name {:?} from {} is invalid: names must match ^[a-zA-Z0-9_-]{{1,64}}$ \
                             (no dots or spaces); rename the operation or leave it out of expose",
                            spec.name,
                            provider.source()
                        ),
                    ));
                }
                if let Some(&other) = by_name.get(&spec.name) {
                    let first = providers[entries_provider(&entries, other)].source();
                    return Err(AwfError::new(
                        codes::NAME_COLLISION,
                        format!(
                            "tool name {:?} is offered by both {} and {}; expose only one of them \
                             (or set intercept_builtins: false)",
                            spec.name,
                            first,
                            provider.source()
                        ),
                    ));
                }
                by_name.insert(spec.name.clone(), entries.len());
                entries.push(Entry { spec, provider: pi });
            }
        }
        Ok(ToolRouter {
            providers,
            entries,
            by_name,
            observer,
            session_id,
            next_call: AtomicU64::new(1),
            withheld: Vec::new(),
        })
    }

    /// Applies a step's tool policy: withheld tools leave the name space (a call to one
    /// is refused with the policy's reason). A denied name that is no tool is an error
    /// naming the tools there are.
    pub fn with_policy(mut self, policy: &ToolPolicy) -> Result<ToolRouter, AwfError> {
        policy
            .check_names(self.entries.iter().map(|e| e.spec.name.as_str()))
            .map_err(|why| AwfError::new(codes::CONFIG_INVALID, why))?;
        let (kept, withheld): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut self.entries)
            .into_iter()
            .partition(|e| policy.withheld(&e.spec.name).is_none());
        self.withheld = withheld
            .into_iter()
            .filter_map(|e| Some((e.spec.name.clone(), policy.withheld(&e.spec.name)?)))
            .collect();
        self.by_name = kept
            .iter()
            .enumerate()
            .map(|(i, e)| (e.spec.name.clone(), i))
            .collect();
        self.entries = kept;
        Ok(self)
    }

    /// The tools the policy withholds, with why (for the MCP server to refuse them alike).
    pub fn withheld(&self) -> &[(String, String)] {
        &self.withheld
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Every tool, in provider order then the provider's order.
    pub fn tools(&self) -> impl Iterator<Item = &ToolSpec> {
        self.entries.iter().map(|e| &e.spec)
    }

    /// A fresh call id, `<session>-<n>`: unique across processes sharing an audit file.
    pub fn next_call_id(&self) -> String {
        let n = self.next_call.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.session_id)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Calls a tool, observed. Never panics: a panicking provider becomes an error output.
    pub fn call(
        &self,
        tool: &str,
        arguments: &Value,
        meta: CallMeta,
        cancel: &Cancellation,
    ) -> ToolOutput {
        let call_id = self.next_call_id();
        let entry = self.by_name.get(tool).map(|&i| &self.entries[i]);
        let source = entry.map_or("none", |e| self.providers[e.provider].source());
        let info = CallInfo {
            call_id,
            tool: tool.to_string(),
            source: source.to_string(),
            meta,
        };
        let observation = self.observer.started(&info, arguments);
        let started = Instant::now();
        let withheld = self.withheld.iter().find(|(name, _)| name == tool);
        let (status, output) = match entry {
            // The words the MCP server answers a call to a withheld tool with.
            None if let Some((name, why)) = withheld => (
                CallStatus::Rejected,
                ToolOutput::invalid_arguments(format!("tool \"{name}\" is not available: {why}")),
            ),
            None => (
                CallStatus::UnknownTool,
                ToolOutput::error(format!(
                    "unknown tool {tool:?}; available tools: {}",
                    self.entries
                        .iter()
                        .map(|e| e.spec.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            ),
            Some(e) => {
                let provider = &self.providers[e.provider];
                match catch_unwind(AssertUnwindSafe(|| provider.call(tool, arguments, cancel))) {
                    Ok(out) if out.invalid_arguments => (CallStatus::InvalidArguments, out),
                    Ok(out) if out.is_error && cancel.is_cancelled() => {
                        (CallStatus::Cancelled, out)
                    }
                    Ok(out) if out.is_error => (CallStatus::ToolError, out),
                    Ok(out) => (CallStatus::Ok, out),
                    Err(panic) => {
                        let msg = panic
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "unknown panic".into());
                        (
                            CallStatus::Panicked,
                            ToolOutput::error(format!("tool {tool} panicked: {msg}")),
                        )
                    }
                }
            }
        };
        let outcome = CallOutcome {
            status,
            duration: started.elapsed(),
            output: &output,
        };
        observation.finish(&info, &outcome);
        output
    }
}

fn entries_provider(entries: &[Entry], i: usize) -> usize {
    entries[i].provider
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{CallObservation, NoObserver};
    use serde_json::json;
    use std::sync::Mutex;

    struct Fake {
        source: &'static str,
        names: Vec<&'static str>,
    }

    impl ToolProvider for Fake {
        fn source(&self) -> &str {
            self.source
        }
        fn tools(&self) -> Vec<ToolSpec> {
            self.names
                .iter()
                .map(|n| ToolSpec {
                    name: n.to_string(),
                    description: "d".into(),
                    input_schema: json!({"type": "object"}),
                    annotations: None,
                })
                .collect()
        }
        fn call(&self, tool: &str, args: &Value, _c: &Cancellation) -> ToolOutput {
            if tool == "boom" {
                panic!("kaboom");
            }
            if args.get("fail").is_some() {
                return ToolOutput::error("failed");
            }
            ToolOutput::ok(format!("{}:{tool}", self.source))
        }
    }

    fn fake(source: &'static str, names: &[&'static str]) -> Box<dyn ToolProvider> {
        Box::new(Fake {
            source,
            names: names.to_vec(),
        })
    }

    #[test]
    fn routes_to_the_right_provider() {
        let r = ToolRouter::new(
            vec![fake("builtin", &["Read"]), fake("plugin:x", &["x_op"])],
            Arc::new(NoObserver),
            "s".into(),
        )
        .unwrap();
        let c = Cancellation::never();
        assert_eq!(
            r.call("x_op", &json!({}), CallMeta::default(), &c).text,
            "plugin:x:x_op"
        );
        assert_eq!(r.tools().count(), 2);
    }

    #[test]
    fn collisions_and_bad_names_fail_at_build() {
        let e = ToolRouter::new(
            vec![fake("builtin", &["Read"]), fake("plugin:x", &["Read"])],
            Arc::new(NoObserver),
            "s".into(),
        )
        .err()
        .unwrap();
        assert_eq!(e.code(), codes::NAME_COLLISION);
        assert!(e.message().contains("builtin") && e.message().contains("plugin:x"));
        let e = ToolRouter::new(vec![fake("p", &["a.b"])], Arc::new(NoObserver), "s".into())
            .err()
            .unwrap();
        assert_eq!(e.code(), codes::INVALID_TOOL_NAME);
    }

    #[test]
    fn a_policy_withholds_tools_and_refuses_calls_to_them() {
        let rec = Arc::new(Recorder::default());
        let r = ToolRouter::new(
            vec![fake("builtin", &["Read", "Bash", "Write"])],
            Arc::new(rec.clone()),
            "s".into(),
        )
        .unwrap()
        .with_policy(&ToolPolicy {
            deny: vec!["Write".into()],
            read_only: true,
        })
        .unwrap();
        assert_eq!(
            r.tools().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["Read"]
        );
        let out = r.call(
            "Bash",
            &json!({}),
            CallMeta::default(),
            &Cancellation::never(),
        );
        assert!(
            out.invalid_arguments && out.text.contains("read-only"),
            "{out:?}"
        );
        let out = r.call(
            "Write",
            &json!({}),
            CallMeta::default(),
            &Cancellation::never(),
        );
        assert!(out.text.contains("mcp_proxy.tools.deny"), "{out:?}");
        assert_eq!(
            rec.0
                .lock()
                .unwrap()
                .iter()
                .map(|c| c.1)
                .collect::<Vec<_>>(),
            [CallStatus::Rejected, CallStatus::Rejected]
        );
        let e = ToolRouter::new(
            vec![fake("builtin", &["Read"])],
            Arc::new(NoObserver),
            "s".into(),
        )
        .unwrap()
        .with_policy(&ToolPolicy {
            deny: vec!["Bsh".into()],
            read_only: false,
        })
        .err()
        .unwrap();
        assert!(
            e.message().contains("\"Bsh\"") && e.message().contains("Read"),
            "{e}"
        );
    }

    #[test]
    fn names_rule() {
        assert!(is_valid_tool_name("Read"));
        assert!(is_valid_tool_name("plug-in_op9"));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("a.b"));
        assert!(!is_valid_tool_name(&"a".repeat(65)));
    }

    #[derive(Default)]
    struct Recorder(Mutex<Vec<(String, CallStatus)>>);
    struct Rec(Arc<Recorder>);
    impl CallObserver for Arc<Recorder> {
        fn started(&self, _c: &CallInfo, _a: &Value) -> Box<dyn CallObservation> {
            Box::new(Rec(self.clone()))
        }
    }
    impl CallObservation for Rec {
        fn finish(self: Box<Self>, c: &CallInfo, o: &CallOutcome<'_>) {
            self.0.0.lock().unwrap().push((c.call_id.clone(), o.status));
        }
    }

    #[test]
    fn every_call_is_observed_with_its_status() {
        let rec = Arc::new(Recorder::default());
        let r = ToolRouter::new(
            vec![fake("builtin", &["Read", "boom"])],
            Arc::new(rec.clone()),
            "sess".into(),
        )
        .unwrap();
        let c = Cancellation::never();
        r.call("Read", &json!({}), CallMeta::default(), &c);
        r.call("Read", &json!({"fail": 1}), CallMeta::default(), &c);
        let out = r.call("boom", &json!({}), CallMeta::default(), &c);
        assert!(out.is_error && out.text.contains("kaboom"));
        let out = r.call("Nope", &json!({}), CallMeta::default(), &c);
        assert!(out.is_error && out.text.contains("Read, boom"));
        let got = rec.0.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![
                ("sess-1".to_string(), CallStatus::Ok),
                ("sess-2".to_string(), CallStatus::ToolError),
                ("sess-3".to_string(), CallStatus::Panicked),
                ("sess-4".to_string(), CallStatus::UnknownTool),
            ]
        );
    }
}
