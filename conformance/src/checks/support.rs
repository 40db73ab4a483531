//! What the checks of every revision share: reading results and errors, listing tools,
//! choosing the tool calls a check makes, and the answers-before-a-marker pattern.

use serde_json::{Value, json};

use super::{Ctx, Outcome, Revision, Verdict};
use crate::session::{ServerProcess, SessionError, brief};

pub(super) fn result_of<'v>(response: &'v Value, what: &str) -> Result<&'v Value, Verdict> {
    match response.get("result") {
        Some(result) if response.get("error").is_none() => Ok(result),
        _ => fail!("expected a result for {what}, got {}", brief(response)),
    }
}

/// The error object of `response`, checking its code when `code` is given.
pub(super) fn error_of<'v>(
    response: &'v Value,
    code: Option<i64>,
    what: &str,
) -> Result<&'v Value, Verdict> {
    let Some(error) = response.get("error") else {
        let want = code.map_or("a JSON-RPC error".to_string(), |c| {
            format!("JSON-RPC error {c}")
        });
        fail!("expected {want} for {what}, got {}", brief(response))
    };
    if let Some(code) = code
        && error.get("code").and_then(Value::as_i64) != Some(code)
    {
        fail!(
            "expected error code {code} for {what}, got {}",
            brief(response)
        )
    }
    Ok(error)
}

pub(super) fn expect_empty_result(response: &Value, what: &str) -> Outcome {
    let result = result_of(response, what)?;
    if result.as_object().is_none_or(|o| !o.is_empty()) {
        fail!(
            "expected an empty result {{}} for {what}, got {}",
            brief(response)
        )
    }
    Ok(())
}

pub(super) fn ping(s: &mut ServerProcess, after: &str) -> Outcome {
    let response = s
        .call("ping", None)
        .map_err(|e| Verdict::Fail(format!("expected ping to be answered {after}, but: {e}")))?;
    result_of(&response, &format!("ping {after}"))?;
    Ok(())
}

/// Sends `payload` as it is, then a ping; returns what answered the payload (every answer
/// that came before the ping's) and, when the ping was not answered (the server exited or
/// fell silent), why. Answers are objects without `method`, or arrays (a batch answer).
pub(super) fn collect_answers(
    s: &mut ServerProcess,
    payload: &[u8],
) -> Result<(Vec<Value>, Option<SessionError>), Verdict> {
    s.send_raw(payload.to_vec())?;
    let ping_id = s.request("ping", None)?;
    let mut answers = Vec::new();
    loop {
        let message = match s.next_message_any() {
            Ok(m) => m,
            Err(e) => return Ok((answers, Some(e))),
        };
        if message.get("id") == Some(&ping_id) && message.get("method").is_none() {
            return Ok((answers, None));
        }
        if message.is_array() || (message.is_object() && message.get("method").is_none()) {
            answers.push(message);
        }
    }
}

/// [`collect_answers`], failing unless the server goes on serving.
pub(super) fn answers_before_ping(
    s: &mut ServerProcess,
    payload: &[u8],
    what: &str,
) -> Result<Vec<Value>, Verdict> {
    match collect_answers(s, payload)? {
        (answers, None) => Ok(answers),
        (_, Some(e)) => {
            fail!("expected the server to go on serving after {what} (a ping answered), but: {e}")
        }
    }
}

/// `answers` must be exactly one error object with `code`, whose id is null or
/// `allowed_id` (and present: a JSON-RPC response always has an id).
pub(super) fn single_error(
    answers: &[Value],
    code: i64,
    allowed_id: Option<&Value>,
    what: &str,
) -> Outcome {
    let [answer] = answers else {
        if answers.is_empty() {
            fail!("expected error {code} for {what}, got no answer")
        }
        fail!(
            "expected one error {code} for {what}, got {} answers: {}",
            answers.len(),
            brief(&Value::Array(answers.to_vec()))
        )
    };
    if answer.is_array() {
        fail!(
            "expected one error object {code} for {what}, got a batch answer {}",
            brief(answer)
        )
    }
    error_of(answer, Some(code), what)?;
    let Some(id) = answer.get("id") else {
        fail!(
            "expected \"id\": null in the error for {what} (a response always has an id), got {}",
            brief(answer)
        )
    };
    if !id.is_null() && Some(id) != allowed_id {
        let allowed = allowed_id.map_or(String::new(), |v| format!(" or {v}"));
        fail!(
            "expected id null{allowed} in the error for {what}, got {}",
            brief(answer)
        )
    }
    Ok(())
}

/// `payload` must get exactly one error answer with `code` (see [`single_error`]), and the
/// server must go on serving.
pub(super) fn expect_single_error(
    s: &mut ServerProcess,
    payload: &[u8],
    code: i64,
    allowed_id: Option<&Value>,
    what: &str,
) -> Outcome {
    let answers = answers_before_ping(s, payload, what)?;
    single_error(&answers, code, allowed_id, what)
}

/// Every page of tools/list, following nextCursor (at most 1000 pages): each page's
/// result, checked to hold a tools array and a string or absent nextCursor.
pub(super) fn list_pages(s: &mut ServerProcess) -> Result<Vec<Value>, Verdict> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let params = cursor.as_ref().map(|c| json!({"cursor": c}));
        let response = s.call("tools/list", params)?;
        let result = result_of(&response, "tools/list")?;
        if !result.get("tools").is_some_and(Value::is_array) {
            fail!(
                "expected a tools array in the tools/list result, got {}",
                brief(result)
            )
        }
        pages.push(result.clone());
        match result.get("nextCursor") {
            None | Some(Value::Null) => return Ok(pages),
            Some(Value::String(c)) => cursor = Some(c.clone()),
            Some(other) => fail!("expected nextCursor to be a string or absent, got {other}"),
        }
    }
    fail!("expected pagination to end, got more than 1000 pages of tools")
}

/// All tools over all pages (see [`list_pages`]).
pub(super) fn list_all_tools(s: &mut ServerProcess) -> Result<Vec<Value>, Verdict> {
    Ok(list_pages(s)?
        .iter()
        .flat_map(|page| page["tools"].as_array().cloned().unwrap_or_default())
        .collect())
}

pub(super) fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The echo tool to call: its name, arguments and the text the answer must contain.
pub(super) struct EchoPlan {
    pub name: String,
    pub args: Value,
    pub expected_text: Option<String>,
    pub schema: Value,
    /// The tool as tools/list gave it.
    pub tool: Value,
}

pub(super) const ECHO_TEXT: &str = "conformance echo ✓ 42";

pub(super) fn echo_plan(ctx: &Ctx, s: &mut ServerProcess) -> Result<EchoPlan, Verdict> {
    let tools = list_all_tools(s)?;
    let name = ctx
        .config
        .echo_tool
        .clone()
        .unwrap_or_else(|| "echo".to_string());
    let tool = tools
        .iter()
        .find(|t| t.get("name").and_then(Value::as_str) == Some(&name));
    let Some(tool) = tool else {
        if ctx.config.echo_tool.is_some() {
            fail!(
                "expected tools/list to list the --echo-tool `{name}`, got {} tools without it",
                tools.len()
            )
        }
        return Err(Verdict::Skip(
            "no tool named `echo`; name one with --echo-tool".into(),
        ));
    };
    let schema = tool.get("inputSchema").cloned().unwrap_or(Value::Null);
    if let Some(args) = &ctx.config.echo_args {
        return Ok(EchoPlan {
            name,
            args: args.clone(),
            expected_text: first_string(args),
            schema,
            tool: tool.clone(),
        });
    }
    let args = derive_args(&name, &schema)?;
    let expected_text = args
        .as_object()
        .is_some_and(|a| a.values().any(|v| v == ECHO_TEXT))
        .then(|| ECHO_TEXT.to_string());
    Ok(EchoPlan {
        name,
        args,
        expected_text,
        schema,
        tool: tool.clone(),
    })
}

/// Arguments for tool `name` that fill the required properties of its input `schema`;
/// the string ones carry [`ECHO_TEXT`]. SKIP when a property is of a type we cannot fill.
pub(super) fn derive_args(name: &str, schema: &Value) -> Result<Value, Verdict> {
    let required: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut args = serde_json::Map::new();
    for prop in &required {
        let ty = schema
            .pointer(&format!("/properties/{prop}/type"))
            .and_then(Value::as_str);
        let value = match ty {
            Some("string") => json!(ECHO_TEXT),
            Some("integer") | Some("number") => json!(1),
            Some("boolean") => json!(true),
            _ => {
                return Err(Verdict::Skip(format!(
                    "cannot derive arguments for `{name}` (property `{prop}`); give --echo-args"
                )));
            }
        };
        args.insert(prop.clone(), value);
    }
    Ok(Value::Object(args))
}

pub(super) fn first_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => items.iter().find_map(first_string),
        Value::Object(map) => map.values().find_map(first_string),
        _ => None,
    }
}

/// What is wrong with a successful tools/call result: content must be an array of typed
/// items of a known shape, and isError, if present, the boolean `false`.
pub(super) fn call_result_problem(result: &Value) -> Option<String> {
    let Some(content) = result.get("content").and_then(Value::as_array) else {
        return Some(format!(
            "expected a content array in the tools/call result, got {}",
            brief(result)
        ));
    };
    for item in content {
        let ok = match item.get("type").and_then(Value::as_str) {
            Some("text") => item.get("text").is_some_and(Value::is_string),
            Some("image") | Some("audio") => {
                item.get("data").is_some_and(Value::is_string)
                    && item.get("mimeType").is_some_and(Value::is_string)
            }
            Some("resource") => item.get("resource").is_some_and(Value::is_object),
            Some(_) => true,
            None => false,
        };
        if !ok {
            return Some(format!(
                "expected content items of a known shape (text has a string text, …), got {}",
                brief(item)
            ));
        }
    }
    match result.get("isError") {
        None | Some(Value::Bool(false)) => None,
        Some(Value::Bool(true)) => Some(format!(
            "expected the echo call to succeed, got isError: true: {}",
            brief(result)
        )),
        Some(other) => Some(format!("expected isError to be a boolean, got {other}")),
    }
}

/// The texts of a tools/call result's text content items.
pub(super) fn texts_of(result: &Value) -> Vec<&str> {
    result
        .get("content")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|i| i.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// Calls the echo tool and fails unless a text content item holds the text it was given
/// (SKIP when the arguments hold no text to look for).
pub(super) fn expect_echo(s: &mut ServerProcess, plan: &EchoPlan) -> Result<Value, Verdict> {
    let Some(expected) = &plan.expected_text else {
        return Err(Verdict::Skip(
            "the echo arguments hold no string to look for".into(),
        ));
    };
    let response = call_tool(s, &plan.name, &plan.args)?;
    let result = result_of(&response, &format!("tools/call {}", plan.name))?;
    if !texts_of(result)
        .iter()
        .any(|t| t.contains(expected.as_str()))
    {
        fail!(
            "expected a text content containing {expected:?}, got {}",
            brief(result)
        )
    }
    Ok(result.clone())
}

pub(super) fn call_tool(s: &mut ServerProcess, name: &str, args: &Value) -> Result<Value, Verdict> {
    Ok(s.call("tools/call", Some(json!({"name": name, "arguments": args})))?)
}

/// Slow calls sent at once by the saturation checks: past the usual bounds of concurrent
/// calls (8 for mcpserver), so that a server that stops reading at its bound shows it.
pub(super) const SATURATING_CALLS: usize = 16;

pub(super) fn slow_call_params(ctx: &Ctx) -> Result<Value, Verdict> {
    match &ctx.config.slow_tool {
        Some(name) => Ok(json!({"name": name, "arguments": ctx.config.slow_args})),
        None => Err(Verdict::Skip(
            "no slow tool; name one with --slow-tool and --slow-args".into(),
        )),
    }
}

pub(super) fn is_date_version(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        let b = s.as_bytes();
        b.len() == 10
            && b[4] == b'-'
            && b[7] == b'-'
            && b.iter()
                .enumerate()
                .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
    })
}

/// What is wrong with a tool definition of revision 2025-06-18 or later: beside a name and
/// an object input schema, the optional `title`, `annotations`, `outputSchema`, `icons`
/// (2025-11-25 on) and `execution` (2025-11-25) must have their types. The handshake
/// revisions restrict `outputSchema` to `type: "object"` at the root; 2026-07-28 allows
/// any schema.
pub(super) fn tool_problem(tool: &Value, revision: Revision) -> Option<String> {
    let problem = |what: &str| Some(format!("expected {what}, got {}", brief(tool)));
    let absent_or = |key: &str, ok: fn(&Value) -> bool| tool.get(key).is_none_or(ok);
    if !tool.get("name").is_some_and(Value::is_string) {
        return problem("every tool to have a string name");
    }
    if tool.pointer("/inputSchema/type") != Some(&json!("object")) {
        return problem("inputSchema to be an object schema ({\"type\": \"object\", …})");
    }
    for key in ["title", "description"] {
        if !absent_or(key, Value::is_string) {
            return problem(&format!("{key} to be a string when present"));
        }
    }
    if let Some(annotations) = tool.get("annotations") {
        let hints_ok = [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ]
        .iter()
        .all(|hint| annotations.get(hint).is_none_or(Value::is_boolean));
        let title_ok = annotations.get("title").is_none_or(Value::is_string);
        if !annotations.is_object() || !hints_ok || !title_ok {
            return problem(
                "annotations to be an object with a string title and boolean *Hint fields",
            );
        }
    }
    if let Some(schema) = tool.get("outputSchema") {
        let root_ok = match revision {
            Revision::V2026_07_28 => schema.is_object(),
            _ => schema.get("type") == Some(&json!("object")),
        };
        if !root_ok {
            return problem(match revision {
                Revision::V2026_07_28 => "outputSchema to be a JSON Schema object",
                _ => "outputSchema to be an object schema ({\"type\": \"object\", …}) at its root",
            });
        }
    }
    if revision >= Revision::V2025_11_25 && !absent_or("icons", icons_ok) {
        return problem(
            "icons to be an array of {src, mimeType?, sizes?: [string], theme?: light|dark}",
        );
    }
    if revision == Revision::V2025_11_25
        && let Some(execution) = tool.get("execution")
    {
        let task_support = execution.get("taskSupport");
        let ok = execution.is_object()
            && task_support.is_none_or(|t| {
                ["forbidden", "optional", "required"].contains(&t.as_str().unwrap_or_default())
            });
        if !ok {
            return problem(
                "execution to be an object whose taskSupport is forbidden, optional or required",
            );
        }
    }
    if !absent_or("_meta", Value::is_object) {
        return problem("_meta to be an object when present");
    }
    None
}

/// Whether `icons` is an array of well-formed icons (2025-11-25 on).
pub(super) fn icons_ok(icons: &Value) -> bool {
    icons.as_array().is_some_and(|icons| {
        icons.iter().all(|icon| {
            icon.get("src").is_some_and(Value::is_string)
                && icon.get("mimeType").is_none_or(Value::is_string)
                && icon
                    .get("sizes")
                    .is_none_or(|s| s.as_array().is_some_and(|s| s.iter().all(Value::is_string)))
                && icon
                    .get("theme")
                    .is_none_or(|t| t == "light" || t == "dark")
        })
    })
}

/// Arguments the echo tool must refuse: `--bad-args`, else `{}` when its schema requires a
/// property (SKIP when it requires none).
pub(super) fn bad_arguments(ctx: &Ctx, plan: &EchoPlan) -> Result<Value, Verdict> {
    match &ctx.config.bad_args {
        Some(bad) => Ok(bad.clone()),
        None if plan
            .schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty()) =>
        {
            Ok(json!({}))
        }
        None => Err(Verdict::Skip(
            "the echo tool requires nothing; give --bad-args".into(),
        )),
    }
}

/// The tool call of a structured-content check: the tool and the arguments to call it with.
pub(super) struct StructuredPlan {
    pub name: String,
    pub args: Value,
    pub output_schema: Value,
}

/// The tool to call for structured content: `--structured-tool` (which must declare an
/// outputSchema), else the echo tool when it declares one (SKIP when it does not).
pub(super) fn structured_plan(ctx: &Ctx, s: &mut ServerProcess) -> Result<StructuredPlan, Verdict> {
    let Some(name) = &ctx.config.structured_tool else {
        let echo = echo_plan(ctx, s)?;
        let Some(output_schema) = echo.tool.get("outputSchema") else {
            return Err(Verdict::Skip(format!(
                "the echo tool `{}` declares no outputSchema; name a tool that does with --structured-tool",
                echo.name
            )));
        };
        return Ok(StructuredPlan {
            output_schema: output_schema.clone(),
            name: echo.name,
            args: echo.args,
        });
    };
    let tools = list_all_tools(s)?;
    let Some(tool) = tools
        .iter()
        .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
    else {
        fail!(
            "expected tools/list to list the --structured-tool `{name}`, got {} tools without it",
            tools.len()
        )
    };
    let Some(output_schema) = tool.get("outputSchema") else {
        fail!(
            "expected the --structured-tool `{name}` to declare an outputSchema, got {}",
            brief(tool)
        )
    };
    let args = match &ctx.config.structured_args {
        Some(args) => args.clone(),
        None => derive_args(name, tool.get("inputSchema").unwrap_or(&Value::Null))?,
    };
    Ok(StructuredPlan {
        name: name.clone(),
        args,
        output_schema: output_schema.clone(),
    })
}

/// Calls the structured tool and fails unless its result carries `structuredContent` that
/// fits the tool's outputSchema (an object in the handshake revisions, any JSON value in
/// 2026-07-28), validated with [`crate::schema`]'s subset of JSON Schema.
pub(super) fn expect_structured(ctx: &Ctx, s: &mut ServerProcess) -> Result<Value, Verdict> {
    let plan = structured_plan(ctx, s)?;
    let response = call_tool(s, &plan.name, &plan.args)?;
    let result = result_of(&response, &format!("tools/call {}", plan.name))?;
    if result.get("isError") == Some(&json!(true)) {
        fail!(
            "expected `{}` called with {} to succeed, got isError: true: {}",
            plan.name,
            plan.args,
            brief(result)
        )
    }
    let Some(structured) = result.get("structuredContent") else {
        fail!(
            "expected structuredContent in the result of `{}`, which declares an outputSchema (servers MUST return conforming structured results), got {}",
            plan.name,
            brief(result)
        )
    };
    if ctx.revision < Revision::V2026_07_28 && !structured.is_object() {
        fail!(
            "expected structuredContent to be a JSON object ({} allows no other), got {}",
            ctx.revision,
            brief(structured)
        )
    }
    if let Err(mismatch) = crate::schema::validate(&plan.output_schema, structured) {
        fail!(
            "expected structuredContent of `{}` to fit its outputSchema, but {mismatch}: {}",
            plan.name,
            brief(structured)
        )
    }
    Ok(result.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_name_rule() {
        assert!(valid_tool_name("Read"));
        assert!(valid_tool_name("get-sum_2"));
        assert!(!valid_tool_name("fs.read"));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name(&"a".repeat(65)));
    }

    #[test]
    fn date_versions() {
        assert!(is_date_version(&json!("2024-11-05")));
        assert!(!is_date_version(&json!("2024-11")));
        assert!(!is_date_version(&json!(20241105)));
    }
}
