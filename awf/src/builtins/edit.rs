//! Edit: literal search and replace in one text file, written back atomically. Ambiguity
//! is an error rather than a guess (AWF's Go Edit silently replaced the first of several
//! matches): the model is told how many matches there were and how to disambiguate.

use super::{BuiltinEnv, read, schema, write};
use mcpserver::Tool;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: String,
    pub old: String,
    pub new: String,
    #[serde(default)]
    pub replace_all: bool,
}

pub fn tool(_env: &BuiltinEnv) -> Tool {
    Tool::new(
        "Edit",
        "Replace literal text in a file inside the workspace root. `old` must occur \
                      exactly once unless replace_all is true; include enough surrounding lines \
                      to make it unique. The file is rewritten atomically.",
        {
            let mut s = schema(
                &[
                    (
                        "path",
                        "string",
                        "File path, relative to the root (or absolute inside it)",
                    ),
                    (
                        "old",
                        "string",
                        "The exact text to replace (whitespace matters)",
                    ),
                    ("new", "string", "The replacement text"),
                    (
                        "replace_all",
                        "boolean",
                        "Replace every occurrence (default false)",
                    ),
                ],
                &["path", "old", "new"],
            );
            s["properties"]["replace_all"]["default"] = false.into();
            s
        },
    )
    .annotations(serde_json::json!({"readOnlyHint": false, "destructiveHint": true}))
}

pub fn run(env: &BuiltinEnv, args: Args) -> Result<String, String> {
    if args.old.is_empty() {
        return Err(
            "old is empty; give the exact text to replace (use Write to create a file)".into(),
        );
    }
    if args.old == args.new {
        return Err("old and new are the same text; nothing would change".into());
    }
    let (text, path) = read::read_all(env, &args.path, env.limits.write_bytes)?;
    let count = text.matches(args.old.as_str()).count();
    if count == 0 {
        let hint = if text.contains(args.old.trim()) {
            " (it does occur with different leading/trailing whitespace; copy it exactly)"
        } else {
            " (Read the file to copy the exact text, including whitespace and indentation)"
        };
        return Err(format!("old text not found in \"{}\"{hint}", args.path));
    }
    if count > 1 && !args.replace_all {
        return Err(format!(
            "old text occurs {count} times in \"{}\"; add surrounding lines to `old` so it occurs \
             once, or set replace_all: true to replace all {count}",
            args.path
        ));
    }
    let updated = if args.replace_all {
        text.replace(args.old.as_str(), &args.new)
    } else {
        text.replacen(args.old.as_str(), &args.new, 1)
    };
    if updated.len() > env.limits.write_bytes {
        return Err(format!(
            "the edited file would be {} bytes, over the {}-byte limit",
            updated.len(),
            env.limits.write_bytes
        ));
    }
    write::atomic_write(env, &path, &args.path, updated.as_bytes())?;
    Ok(format!(
        "Replaced {count} occurrence{} in {}",
        if count == 1 { "" } else { "s" },
        env.workspace.show(&path)
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testutil;
    use super::*;

    fn edit(env: &BuiltinEnv, old: &str, new: &str, all: bool) -> Result<String, String> {
        run(
            env,
            Args {
                path: "f".into(),
                old: old.into(),
                new: new.into(),
                replace_all: all,
            },
        )
    }

    #[test]
    fn edit_rules() {
        let (_tmp, root) = testutil::root("edit");
        std::fs::write(root.join("f"), "a b a\n").unwrap();
        let env = testutil::env(&root);
        let e = edit(&env, "a", "x", false).unwrap_err();
        assert!(
            e.contains("occurs 2 times") && e.contains("replace_all"),
            "{e}"
        );
        assert!(
            edit(&env, "zzz", "x", false)
                .unwrap_err()
                .contains("not found")
        );
        assert!(edit(&env, "a", "a", false).unwrap_err().contains("same"));
        assert!(edit(&env, "", "a", false).unwrap_err().contains("empty"));
        assert_eq!(
            edit(&env, "b", "B", false).unwrap(),
            "Replaced 1 occurrence in f"
        );
        assert_eq!(
            edit(&env, "a", "x", true).unwrap(),
            "Replaced 2 occurrences in f"
        );
        assert_eq!(std::fs::read_to_string(root.join("f")).unwrap(), "x B x\n");
    }
}
