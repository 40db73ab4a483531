//! `github.*`, as AWF names them and their outputs: `get_issue`, `get_pr`, `create_issue`,
//! `create_pr`, `add_labels`, `list_comments`, `add_comment`, and `batch` (a list of them,
//! `concurrency` at a time, under a `strategy`), over GitHub's REST API
//! (`api_url`, default `https://api.github.com`, for GitHub Enterprise). The token is the
//! one the workflow passes (`token: "{{.env.GITHUB_TOKEN}}"`): awf never reads one from its
//! environment, or from `gh`, by itself. `repo` is `owner/name`, else the `origin` remote
//! of the directory the operation runs in. Requests go through the state's network.

use super::Outcome;
use crate::https::Reach;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// One operation.
pub fn run(op: &str, inputs: &Map<String, Value>, reach: &Reach, timeout: Duration) -> Outcome {
    if op == "batch" {
        return batch(inputs, reach, timeout);
    }
    match Api::new(op, inputs, reach, timeout).and_then(|api| api.run(op, inputs)) {
        Ok(outputs) => Outcome::ok(outputs),
        Err(why) => Outcome::failed(format!("github.{op}: {why}")),
    }
}

/// What every call of one operation shares.
struct Api<'a> {
    base: String,
    repo: String,
    headers: Vec<(String, String)>,
    reach: &'a Reach,
    timeout: Duration,
}

impl<'a> Api<'a> {
    fn new(
        _op: &str,
        inputs: &Map<String, Value>,
        reach: &'a Reach,
        timeout: Duration,
    ) -> Result<Api<'a>, String> {
        let token = inputs
            .get("token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or(
                "pass the token in the state's inputs (`token: \"{{.env.GITHUB_TOKEN}}\"`): awf \
                 never reads one from its environment by itself",
            )?;
        let repo = match inputs.get("repo").and_then(Value::as_str) {
            Some(r) if r.split('/').count() == 2 => r.to_string(),
            Some(r) => return Err(format!("repo {r:?} is not owner/name")),
            None => origin_repo().ok_or(
                "no repo given, and the directory's git remote `origin` is no GitHub \
                 repository: give `repo: owner/name`",
            )?,
        };
        let base = inputs
            .get("api_url")
            .and_then(Value::as_str)
            .unwrap_or("https://api.github.com")
            .trim_end_matches('/')
            .to_string();
        Ok(Api {
            base,
            repo,
            headers: vec![
                ("Authorization".into(), format!("Bearer {token}")),
                ("Accept".into(), "application/vnd.github+json".into()),
                ("X-GitHub-Api-Version".into(), "2022-11-28".into()),
                ("Content-Type".into(), "application/json".into()),
            ],
            reach,
            timeout,
        })
    }

    /// `method path` with `body`: the answer's JSON, or why there is none.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}/repos/{}{path}", self.base, self.repo);
        let body = body.map(|b| b.to_string());
        let r = super::http::send(
            self.reach,
            method,
            &url,
            &self.headers,
            body.as_deref(),
            self.timeout,
        )?;
        let value: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        if !(200..300).contains(&r.status) {
            let said = value["message"].as_str().unwrap_or(r.body.as_str());
            return Err(format!(
                "GitHub answered {} to {method} {path}: {said}",
                r.status
            ));
        }
        Ok(value)
    }

    fn run(&self, op: &str, inputs: &Map<String, Value>) -> Result<Map<String, Value>, String> {
        let number = || {
            inputs
                .get("number")
                .and_then(|n| n.as_u64().or_else(|| n.as_str()?.parse().ok()))
                .ok_or("number is required (the issue's or pull request's)")
        };
        let text = |k: &str| inputs.get(k).and_then(Value::as_str);
        let list = |k: &str| inputs.get(k).cloned().unwrap_or(json!([]));
        let labels = |v: &Value| -> Value {
            v["labels"]
                .as_array()
                .map(|l| l.iter().map(|x| x["name"].clone()).collect())
                .unwrap_or(json!([]))
        };
        let out = match op {
            "get_issue" => {
                let v = self.call("GET", &format!("/issues/{}", number()?), None)?;
                json!({"number": v["number"], "title": v["title"], "body": v["body"],
                       "state": v["state"], "labels": labels(&v)})
            }
            "get_pr" => {
                let v = self.call("GET", &format!("/pulls/{}", number()?), None)?;
                json!({"number": v["number"], "title": v["title"], "body": v["body"],
                       "state": v["state"], "headRefName": v["head"]["ref"],
                       "baseRefName": v["base"]["ref"], "mergeable": v["mergeable"],
                       "mergedAt": v["merged_at"], "labels": labels(&v)})
            }
            "create_issue" => {
                let title = text("title").ok_or("title is required")?;
                let v = self.call(
                    "POST",
                    "/issues",
                    Some(json!({"title": title, "body": text("body").unwrap_or(""),
                                "labels": list("labels"), "assignees": list("assignees")})),
                )?;
                json!({"number": v["number"], "url": v["html_url"]})
            }
            "create_pr" => {
                let (title, head, base) = (
                    text("title").ok_or("title is required")?,
                    text("head").ok_or("head is required")?,
                    text("base").ok_or("base is required")?,
                );
                let body = json!({"title": title, "head": head, "base": base,
                    "body": text("body").unwrap_or(""),
                    "draft": inputs.get("draft").and_then(Value::as_bool).unwrap_or(false)});
                match self.call("POST", "/pulls", Some(body)) {
                    Ok(v) => json!({"number": v["number"], "url": v["html_url"],
                                    "already_exists": false}),
                    Err(why) if why.contains("already exists") => {
                        let owner = self.repo.split('/').next().unwrap_or("");
                        let open = self.call(
                            "GET",
                            &format!("/pulls?head={owner}:{head}&base={base}&state=open"),
                            None,
                        )?;
                        let pr = &open[0];
                        json!({"number": pr["number"], "url": pr["html_url"],
                               "already_exists": true})
                    }
                    Err(why) => return Err(why),
                }
            }
            "add_labels" => {
                let v = self.call(
                    "POST",
                    &format!("/issues/{}/labels", number()?),
                    Some(json!({"labels": list("labels")})),
                )?;
                let names: Vec<Value> = v
                    .as_array()
                    .map(|l| l.iter().map(|x| x["name"].clone()).collect())
                    .unwrap_or_default();
                json!({"labels": names})
            }
            "list_comments" => {
                let limit = inputs
                    .get("limit")
                    .and_then(Value::as_u64)
                    .unwrap_or(30)
                    .clamp(1, 100);
                let v = self.call(
                    "GET",
                    &format!("/issues/{}/comments?per_page={limit}", number()?),
                    None,
                )?;
                let comments: Vec<Value> = v
                    .as_array()
                    .map(|c| {
                        c.iter()
                            .map(|x| {
                                json!({"id": x["id"], "author": x["user"]["login"],
                                            "body": x["body"], "created_at": x["created_at"]})
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                json!({"total": comments.len(), "comments": comments})
            }
            "add_comment" => {
                let body = text("body").ok_or("body is required")?;
                let v = self.call(
                    "POST",
                    &format!("/issues/{}/comments", number()?),
                    Some(json!({"body": body})),
                )?;
                json!({"comment_id": v["id"], "url": v["html_url"]})
            }
            other => return Err(format!("operation \"github.{other}\" not found")),
        };
        let mut out = match out {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        // `fields: [...]` keeps only those outputs (AWF's).
        if let Some(fields) = inputs.get("fields").and_then(Value::as_array) {
            let keep: Vec<&str> = fields.iter().filter_map(Value::as_str).collect();
            if !keep.is_empty() {
                out.retain(|k, _| keep.contains(&k.as_str()));
            }
        }
        Ok(out)
    }
}

/// `github.batch` (AWF's): `operations`, a list of `{name: "github.add_labels", inputs:
/// {...}}` (each takes the batch's `token`, `repo` and `api_url` unless it gives its own),
/// run `concurrency` at a time (default 3); `strategy` `best_effort` (the default: never
/// fails), `all_succeed` (fails when one does) or `any_succeed` (fails when all do). Outputs
/// `total`, `succeeded`, `failed` and `results` (each `name`, `success`, `outputs`, `error`).
fn batch(inputs: &Map<String, Value>, reach: &Reach, timeout: Duration) -> Outcome {
    let ops: Vec<&Value> = inputs
        .get("operations")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let strategy = inputs
        .get("strategy")
        .and_then(Value::as_str)
        .unwrap_or("best_effort");
    if !["best_effort", "all_succeed", "any_succeed"].contains(&strategy) {
        return Outcome::failed(format!(
            "github.batch: strategy {strategy:?} is unknown; use best_effort, all_succeed or \
             any_succeed"
        ));
    }
    let concurrency = inputs
        .get("concurrency")
        .and_then(Value::as_u64)
        .unwrap_or(3)
        .clamp(1, 16) as usize;
    let one = |op: &Value| -> Value {
        let name = op["name"].as_str().unwrap_or("");
        let Some(short) = name.strip_prefix("github.").filter(|s| *s != "batch") else {
            return json!({"name": name, "success": false, "outputs": {},
                          "error": format!("operation {name:?} is no github operation")});
        };
        let mut own = op["inputs"].as_object().cloned().unwrap_or_default();
        for k in ["token", "repo", "api_url"] {
            if let (false, Some(v)) = (own.contains_key(k), inputs.get(k)) {
                own.insert(k.into(), v.clone());
            }
        }
        let done = run(short, &own, reach, timeout);
        json!({"name": name, "success": done.error.is_none(), "outputs": done.outputs,
               "error": done.error})
    };
    let mut results = Vec::new();
    for chunk in ops.chunks(concurrency) {
        let chunk_results: Vec<Value> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk.iter().map(|op| s.spawn(|| one(op))).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| json!({"success": false})))
                .collect()
        });
        results.extend(chunk_results);
    }
    let succeeded = results.iter().filter(|r| r["success"] == true).count();
    let failed = results.len() - succeeded;
    let mut outputs = Map::new();
    outputs.insert("total".into(), json!(results.len()));
    outputs.insert("succeeded".into(), json!(succeeded));
    outputs.insert("failed".into(), json!(failed));
    let first_failure = results.iter().find(|r| r["success"] != true).map(|r| {
        format!(
            "{}: {}",
            r["name"].as_str().unwrap_or("?"),
            r["error"].as_str().unwrap_or("")
        )
    });
    outputs.insert("results".into(), Value::Array(results));
    let error = match strategy {
        "all_succeed" if failed > 0 => {
            first_failure.map(|f| format!("github.batch: batch execution: operation {f}"))
        }
        "any_succeed" if succeeded == 0 && failed > 0 => {
            Some(format!("github.batch: all {failed} operations failed"))
        }
        _ => None,
    };
    Outcome { outputs, error }
}

/// `owner/name` of the `origin` remote of the current directory, when it is on GitHub.
fn origin_repo() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["remote", "get-url", "origin"])
        .output()
        .ok()?;
    let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let rest = url
        .strip_prefix("git@github.com:")
        .or_else(|| url.split_once("github.com/").map(|(_, r)| r))?;
    let repo = rest.trim_end_matches(".git");
    (repo.split('/').count() == 2).then(|| repo.to_string())
}
