//! `ToolPolicy`: which of a step's tools its agent is offered (`mcp_proxy.tools` in a
//! workflow, `tools` in the mcp-serve config). A withheld tool is not listed, and a call
//! to it is refused with the policy's reason, never run.

use serde::Deserialize;

/// The tools a read-only step keeps: they look, never change anything.
pub const READ_ONLY_TOOLS: [&str; 3] = ["Read", "Glob", "Grep"];

#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ToolPolicy {
    /// Tools not offered (builtins by name, plugin tools as `<plugin>_<op>`).
    pub deny: Vec<String>,
    /// Offer Read, Glob and Grep only.
    pub read_only: bool,
}

impl ToolPolicy {
    /// Why `tool` is withheld, or None when it is offered; `looks_only` tells a tool that
    /// declares it changes nothing (a third-party tool's `readOnlyHint`), which a
    /// read-only step offers too.
    pub fn withheld(&self, tool: &str, looks_only: bool) -> Option<String> {
        if self.deny.iter().any(|d| d == tool) {
            return Some("this step's tool policy denies it (mcp_proxy.tools.deny)".into());
        }
        if self.read_only && !looks_only && !READ_ONLY_TOOLS.contains(&tool) {
            return Some(
                "this step's tool policy is read-only (mcp_proxy.tools.read_only: true offers \
                 Read, Glob, Grep and the tools of servers annotated readOnlyHint: true)"
                    .into(),
            );
        }
        None
    }

    /// Checks that every denied name is one of `known`; the error names them all.
    pub fn check_names<'a>(
        &self,
        known: impl IntoIterator<Item = &'a str> + Clone,
    ) -> Result<(), String> {
        for name in &self.deny {
            if !known.clone().into_iter().any(|k| k == name) {
                let known: Vec<&str> = known.into_iter().collect();
                return Err(format!(
                    "tools.deny names {name:?}, which is not a tool of this step; the step's tools \
                     are {}",
                    known.join(", ")
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_and_read_only_withhold_with_a_reason() {
        let p = ToolPolicy {
            deny: vec!["Grep".into()],
            read_only: true,
        };
        assert!(p.withheld("Read", false).is_none());
        assert!(
            p.withheld("Grep", false)
                .unwrap()
                .contains("mcp_proxy.tools.deny")
        );
        assert!(p.withheld("Bash", false).unwrap().contains("read-only"));
        assert!(
            p.withheld("notes_add", false)
                .unwrap()
                .contains("read-only")
        );
        assert!(p.withheld("github_get_issue", true).is_none());
        assert!(ToolPolicy::default().withheld("Bash", false).is_none());
    }

    #[test]
    fn unknown_denied_names_list_the_known_tools() {
        let p = ToolPolicy {
            deny: vec!["Bsh".into()],
            read_only: false,
        };
        let e = p.check_names(["Read", "Bash"]).unwrap_err();
        assert!(e.contains("\"Bsh\"") && e.contains("Read, Bash"), "{e}");
        assert!(p.check_names(["Bsh"]).is_ok());
    }
}
