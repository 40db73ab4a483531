//! A step's tool set: the builtins and the exposed plugin operations put in one name
//! space and assembled into one `mcpserver::Server`, the same for `awf mcp-serve` and for
//! the in-process HTTP provider. awf's own part is only what a user can get wrong across
//! sources: a name that is no valid MCP tool name or that two sources offer is a USER
//! error naming the sources, before any agent starts, and the step's [`ToolPolicy`] keeps
//! tools from the agent ([`mcpserver::ServerBuilder::withhold`]). Everything about a call
//! (dispatch, arguments, panics, cancellation, the hooks that observe it) is mcpserver's.

mod policy;

pub use policy::ToolPolicy;

use crate::error::{AwfError, codes};
use mcpserver::{BuildError, Server, ServerBuilder};
use std::collections::HashMap;
use std::sync::Arc;

/// Tools from one place, registered as mcpserver tools with their handlers.
pub trait ToolSource: Send + Sync {
    /// Where the tools come from, named in errors, log lines, audit records and spans:
    /// `builtin`, `plugin:<name>`.
    fn source(&self) -> &str;

    /// The tools' names, in the order they are listed.
    fn names(&self) -> Vec<String>;

    /// Registers on `builder` the tools that `offered` accepts.
    fn register(&self, builder: ServerBuilder, offered: &dyn Fn(&str) -> bool) -> ServerBuilder;

    /// Tools among [`names`](Self::names) the source itself keeps from the agent, with
    /// why (a third-party tool its config denies, or one changed since it was pinned).
    fn withheld(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// True when `name` only looks (a third-party tool annotated `readOnlyHint: true`):
    /// a read-only step offers it besides Read, Glob and Grep.
    fn read_only(&self, _name: &str) -> bool {
        false
    }

    /// The name the tool has where it comes from, when it differs (a third-party
    /// server's own name of it).
    fn upstream_name(&self, _name: &str) -> Option<String> {
        None
    }

    /// Called once the server is built, with the gate that withholds its tools while it
    /// serves (a third-party tool that changes during the step).
    fn serving(&self, _gate: &mcpserver::ToolGate) {}
}

/// A step's tools, checked: one name space over its sources, with the policy applied.
pub struct ToolSet {
    sources: Vec<Box<dyn ToolSource>>,
    /// Every tool's name → its source, withheld tools included (their calls are audited
    /// with their source too).
    source_of: Arc<HashMap<String, String>>,
    /// The tools the agent is offered, in listing order.
    offered: Vec<String>,
    /// Tools the policy keeps from the agent, with why.
    withheld: Vec<(String, String)>,
}

impl ToolSet {
    /// Checks the names of every source (the MCP rule, no name offered twice) and the
    /// policy (every denied name is a tool of the step).
    pub fn new(
        sources: Vec<Box<dyn ToolSource>>,
        policy: &ToolPolicy,
    ) -> Result<ToolSet, AwfError> {
        let mut all: Vec<(String, usize)> = Vec::new();
        for (i, source) in sources.iter().enumerate() {
            for name in source.names() {
                if let Err(why) = mcpserver::check_name(&name) {
                    return Err(AwfError::new(
                        codes::INVALID_TOOL_NAME,
                        format!(
                            "{why} (a tool of {}); rename the operation or leave it out of expose",
                            source.source()
                        ),
                    ));
                }
                if let Some((_, first)) = all.iter().find(|(n, _)| *n == name) {
                    return Err(AwfError::new(
                        codes::NAME_COLLISION,
                        format!(
                            "tool name {name:?} is offered by both {} and {}; expose only one \
                             of them, rename a server's tool (servers.<name>.rename), or set \
                             intercept_builtins: false",
                            sources[*first].source(),
                            source.source()
                        ),
                    ));
                }
                all.push((name, i));
            }
        }
        policy
            .check_names(all.iter().map(|(n, _)| n.as_str()))
            .map_err(|why| AwfError::new(codes::CONFIG_INVALID, why))?;
        let mut offered = Vec::new();
        let mut withheld = Vec::new();
        let kept: Vec<Vec<(String, String)>> = sources.iter().map(|s| s.withheld()).collect();
        for (name, i) in &all {
            let own = kept[*i]
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, w)| w.clone());
            match own.or_else(|| policy.withheld(name, sources[*i].read_only(name))) {
                Some(why) => withheld.push((name.clone(), why)),
                None => offered.push(name.clone()),
            }
        }
        let source_of = all
            .into_iter()
            .map(|(name, i)| (name, sources[i].source().to_string()))
            .collect();
        Ok(ToolSet {
            sources,
            source_of: Arc::new(source_of),
            offered,
            withheld,
        })
    }

    /// The names of the tools the agent is offered, in listing order.
    pub fn offered(&self) -> &[String] {
        &self.offered
    }

    /// Every tool's name → its source (`builtin`, `plugin:<name>`).
    pub fn sources(&self) -> Arc<HashMap<String, String>> {
        self.source_of.clone()
    }

    /// Tool name → the name its source gives it, where the two differ (a third-party
    /// server's own name of a tool).
    pub fn upstream_names(&self) -> HashMap<String, String> {
        self.sources
            .iter()
            .flat_map(|s| {
                s.names()
                    .into_iter()
                    .filter_map(|n| Some((n.clone(), s.upstream_name(&n)?)))
            })
            .collect()
    }

    /// Registers the offered tools on `builder`, withholds the others, and builds the
    /// server.
    pub fn build(&self, mut builder: ServerBuilder) -> Result<Server, AwfError> {
        // Third-party tools may be withdrawn while the step runs: clients are told.
        if self
            .sources
            .iter()
            .any(|s| s.source().starts_with("server:"))
        {
            builder = builder.notify_list_changed(true);
        }
        let offered = |name: &str| self.offered.iter().any(|n| n == name);
        for source in &self.sources {
            builder = source.register(builder, &offered);
        }
        for (name, why) in &self.withheld {
            builder = builder.withhold(name.clone(), why.clone());
        }
        let server = builder.build().map_err(|e: BuildError| {
            AwfError::new(
                codes::INVALID_TOOL_NAME,
                format!("the tool set is invalid: {}", e.problems().join("; ")),
            )
        })?;
        let gate = server.tool_gate();
        for source in &self.sources {
            source.serving(&gate);
        }
        Ok(server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpserver::{
        CallContext, CallError, CallOutcome, CallStatus, Hooks, RequestId, Tool, ToolResult,
    };
    use serde_json::{Value, json};
    use std::sync::Mutex;

    /// A source whose tools answer `<source>:<tool>`, fail when asked to, and panic when
    /// named `boom`.
    struct Fake {
        source: &'static str,
        names: Vec<&'static str>,
    }

    impl ToolSource for Fake {
        fn source(&self) -> &str {
            self.source
        }

        fn names(&self) -> Vec<String> {
            self.names.iter().map(|n| n.to_string()).collect()
        }

        fn register(&self, mut b: ServerBuilder, offered: &dyn Fn(&str) -> bool) -> ServerBuilder {
            for &name in self.names.iter().filter(|n| offered(n)) {
                let source = self.source;
                b = b.tool(
                    Tool::new(name, "d", json!({"type": "object"})),
                    move |args: Value, _: &CallContext| {
                        if name == "boom" {
                            panic!("kaboom");
                        }
                        if args.get("fail").is_some() {
                            return Err(CallError::failed("failed"));
                        }
                        Ok(ToolResult::text(format!("{source}:{name}")))
                    },
                );
            }
            b
        }
    }

    fn fake(source: &'static str, names: &[&'static str]) -> Box<dyn ToolSource> {
        Box::new(Fake {
            source,
            names: names.to_vec(),
        })
    }

    /// Every call the hooks saw: (tool, status, error).
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(String, CallStatus, Option<String>)>>);

    impl Hooks for Recorder {
        fn call_finished(&self, ctx: &CallContext, outcome: &CallOutcome<'_>) {
            self.0.lock().unwrap().push((
                ctx.tool().to_string(),
                outcome.status,
                outcome.error.map(str::to_string),
            ));
        }
    }

    fn server(set: &ToolSet, hooks: &Arc<Recorder>) -> Server {
        set.build(Server::builder("t", "1").hooks(hooks.clone()))
            .unwrap()
    }

    fn call(server: &Server, tool: &str, args: Value) -> Result<ToolResult, CallError> {
        server.call(&CallContext::new(RequestId::Number(1), tool), &args)
    }

    #[test]
    fn routes_to_the_right_source_and_knows_every_source() {
        let set = ToolSet::new(
            vec![fake("builtin", &["Read"]), fake("plugin:x", &["x_op"])],
            &ToolPolicy::default(),
        )
        .unwrap();
        assert_eq!(set.offered(), ["Read", "x_op"]);
        assert_eq!(set.sources()["x_op"], "plugin:x");
        assert_eq!(set.sources()["Read"], "builtin");
        let server = server(&set, &Arc::default());
        let out = call(&server, "x_op", json!({})).unwrap();
        assert_eq!(out.first_text(), Some("plugin:x:x_op"));
        assert_eq!(server.tools().count(), 2);
    }

    #[test]
    fn collisions_and_bad_names_fail_at_assembly_naming_the_sources() {
        let e = ToolSet::new(
            vec![fake("builtin", &["Read"]), fake("plugin:x", &["Read"])],
            &ToolPolicy::default(),
        )
        .err()
        .unwrap();
        assert_eq!(e.code(), codes::NAME_COLLISION);
        assert!(
            e.message().contains("builtin") && e.message().contains("plugin:x"),
            "{e}"
        );
        let e = ToolSet::new(vec![fake("plugin:p", &["a.b"])], &ToolPolicy::default())
            .err()
            .unwrap();
        assert_eq!(e.code(), codes::INVALID_TOOL_NAME);
        // mcpserver's rule and words, and the source.
        assert!(
            e.message().contains("'.'") && e.message().contains("plugin:p"),
            "{e}"
        );
        let long = "a".repeat(65);
        let e = ToolSet::new(
            vec![fake("plugin:p", &[long.leak()])],
            &ToolPolicy::default(),
        )
        .err()
        .unwrap();
        assert_eq!(e.code(), codes::INVALID_TOOL_NAME);
    }

    #[test]
    fn a_policy_withholds_tools_and_refuses_calls_to_them() {
        let hooks = Arc::new(Recorder::default());
        let set = ToolSet::new(
            vec![fake("builtin", &["Read", "Bash", "Write"])],
            &ToolPolicy {
                deny: vec!["Write".into()],
                read_only: true,
            },
        )
        .unwrap();
        let server = server(&set, &hooks);
        assert_eq!(
            server.tools().map(|t| t.name()).collect::<Vec<_>>(),
            ["Read"]
        );
        // Withheld tools keep their source, for the audit of the refused calls.
        assert_eq!(set.sources()["Bash"], "builtin");
        let e = call(&server, "Bash", json!({})).unwrap_err();
        assert!(
            matches!(&e, CallError::InvalidArguments(why) if why.contains("read-only")),
            "{e:?}"
        );
        let e = call(&server, "Write", json!({})).unwrap_err();
        assert!(e.to_string().contains("mcp_proxy.tools.deny"), "{e}");
        assert_eq!(
            hooks
                .0
                .lock()
                .unwrap()
                .iter()
                .map(|c| c.1)
                .collect::<Vec<_>>(),
            [CallStatus::Rejected, CallStatus::Rejected]
        );
        let e = ToolSet::new(
            vec![fake("builtin", &["Read"])],
            &ToolPolicy {
                deny: vec!["Bsh".into()],
                read_only: false,
            },
        )
        .err()
        .unwrap();
        assert!(
            e.message().contains("\"Bsh\"") && e.message().contains("Read"),
            "{e}"
        );
    }

    #[test]
    fn every_call_is_observed_with_its_status() {
        let hooks = Arc::new(Recorder::default());
        let set = ToolSet::new(
            vec![fake("builtin", &["Read", "boom"])],
            &ToolPolicy::default(),
        )
        .unwrap();
        let server = server(&set, &hooks);
        call(&server, "Read", json!({})).unwrap();
        let out = call(&server, "Read", json!({"fail": 1})).unwrap();
        assert!(out.is_error && out.first_text() == Some("failed"));
        let out = call(&server, "boom", json!({})).unwrap();
        assert!(
            out.is_error && out.first_text().unwrap().contains("kaboom"),
            "{out:?}"
        );
        let e = call(&server, "Nope", json!({})).unwrap_err();
        assert!(e.to_string().contains("unknown tool \"Nope\""), "{e}");
        let got: Vec<(String, CallStatus)> = hooks
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(tool, status, _)| (tool.clone(), *status))
            .collect();
        assert_eq!(
            got,
            [
                ("Read".to_string(), CallStatus::Ok),
                ("Read".to_string(), CallStatus::ToolError),
                ("boom".to_string(), CallStatus::Panicked),
                ("Nope".to_string(), CallStatus::Rejected),
            ]
        );
    }
}
