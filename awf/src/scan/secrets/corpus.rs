//! The two corpora the secret scan is measured on (docs/scanning.md has the figures):
//! planted secrets, one of each kind in the contexts a tool result shows them in (made
//! here, random, never real), and ordinary text with none: this repository's sources
//! (their test modules left out: they plant secrets on purpose), crates from the cargo
//! registry, and real command outputs.

use std::path::{Path, PathBuf};

/// One planted secret: its kind, the text around it, and the secret itself.
pub struct Planted {
    pub kind: &'static str,
    pub text: String,
    pub secret: String,
}

/// A deterministic source of random characters (xorshift), so a failure repeats.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn of(&mut self, alphabet: &str, n: usize) -> String {
        let a = alphabet.as_bytes();
        (0..n)
            .map(|_| a[(self.next() % a.len() as u64) as usize] as char)
            .collect()
    }
}

const UPPER_DIGITS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// One sample of every kind, in a context where a tool result would show it.
pub fn planted() -> Vec<Planted> {
    let mut r = Random(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::new();
    let mut plant = |kind, secret: String, context: &dyn Fn(&str) -> String| {
        out.push(Planted {
            kind,
            text: context(&secret),
            secret,
        });
    };
    let key_body: String = (0..12).map(|_| r.of(B64, 64) + "\n").collect();
    plant(
        "private-key",
        format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{key_body}-----END OPENSSH PRIVATE KEY-----"),
        &|s| format!("$ cat ~/.ssh/id_ed25519\n{s}\n$ "),
    );
    plant(
        "aws-access-key-id",
        format!("AKIA{}", r.of(UPPER_DIGITS, 16)),
        &|s| format!("[default]\naws_access_key_id = {s}\nregion = eu-west-1\n"),
    );
    plant("aws-secret-access-key", r.of(B64, 40), &|s| {
        format!("[default]\naws_secret_access_key = {s}\n")
    });
    plant("github-token", format!("ghp_{}", r.of(ALNUM, 36)), &|s| {
        format!("{{\"auths\": {{\"github.com\": {{\"oauth_token\": \"{s}\"}}}}}}")
    });
    plant("gitlab-token", format!("glpat-{}", r.of(ALNUM, 20)), &|s| {
        format!("git clone https://oauth2:{s}@gitlab.com/group/project.git")
    });
    plant(
        "slack-token",
        format!("xoxb-{}-{}", r.of("0123456789", 12), r.of(ALNUM, 24)),
        &|s| format!("SLACK_BOT={s} ./notify.sh"),
    );
    plant(
        "slack-webhook",
        format!(
            "https://hooks.slack.com/services/T{}/B{}/{}",
            r.of(UPPER_DIGITS, 8),
            r.of(UPPER_DIGITS, 10),
            r.of(ALNUM, 24)
        ),
        &|s| format!("curl -X POST -d '{{\"text\":\"done\"}}' {s}"),
    );
    plant(
        "anthropic-key",
        format!("sk-ant-api03-{}", r.of(B64URL, 93)),
        &|s| format!("  \"env\": {{\"CLAUDE_KEY\": \"{s}\"}}"),
    );
    plant(
        "openai-key",
        format!("sk-proj-{}", r.of(B64URL, 48)),
        &|s| format!("client = OpenAI(api_key=\"{s}\")"),
    );
    plant(
        "google-api-key",
        format!("AIza{}", r.of(B64URL, 35)),
        &|s| format!("const firebaseConfig = {{ apiKey: \"{s}\", projectId: \"demo\" }};"),
    );
    plant("stripe-key", format!("sk_live_{}", r.of(ALNUM, 24)), &|s| {
        format!("Stripe.api_key = '{s}'")
    });
    plant("npm-token", format!("npm_{}", r.of(ALNUM, 36)), &|s| {
        format!("//registry.npmjs.org/:_authToken={s}\n")
    });
    plant(
        "jwt",
        format!(
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ{}.{}",
            r.of(B64URL, 40),
            r.of(B64URL, 43)
        ),
        &|s| format!("Set-Cookie: session={s}; HttpOnly; Path=/"),
    );
    plant("url-password", r.of(ALNUM, 20), &|s| {
        format!("DATABASE_URL=postgres://app:{s}@db.internal:5432/orders")
    });
    plant("bearer-token", r.of(B64URL, 32), &|s| {
        format!("> GET /v1/items HTTP/1.1\n> Authorization: Bearer {s}\n> Accept: */*")
    });
    plant("secret-assignment", r.of(ALNUM, 32), &|s| {
        format!("DJANGO_SECRET_KEY={s}\nDEBUG=false\n")
    });
    out
}

/// Scans the ordinary corpus with `find`: files read, bytes read, and each finding (a
/// false redaction: none of this holds a secret) as `where: kind: text`.
pub fn scan_ordinary(find: fn(&str) -> Vec<super::Found>) -> (usize, usize, Vec<String>) {
    let mut files = 0;
    let mut bytes = 0;
    let mut false_found = Vec::new();
    let mut take = |name: String, text: String| {
        files += 1;
        bytes += text.len();
        for f in find(&text) {
            false_found.push(format!("{name}: {}: {:?}", f.kind, &text[f.range.clone()]));
        }
    };
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for dir in [
        "awf/src",
        "mcpserver/src",
        "plugin-sdk/src",
        "conformance/src",
        "docs",
    ] {
        for path in walk(&repo.join(dir)) {
            if path.ends_with("scan/secrets/corpus.rs") {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(&path) {
                // A test module plants secrets on purpose.
                let kept = match text.find("#[cfg(test)]") {
                    Some(at) if path.extension().is_some_and(|e| e == "rs") => &text[..at],
                    _ => &text[..],
                };
                take(path.display().to_string(), kept.to_string());
            }
        }
    }
    for krate in registry_crates() {
        for path in walk(&krate.join("src")) {
            if let Ok(text) = std::fs::read_to_string(&path) {
                take(path.display().to_string(), text);
            }
        }
    }
    for (program, args) in [
        ("ls", &["-la", "/usr/bin", "/etc"][..]),
        ("ps", &["-eo", "pid,ppid,user,comm,args"]),
        ("git", &["log", "--stat", "-n", "400"]),
        ("dpkg", &["-l"]),
        ("cargo", &["tree", "--offline", "-p", "awf"]),
        ("df", &["-h"]),
        ("uname", &["-a"]),
    ] {
        if let Ok(out) = std::process::Command::new(program)
            .args(args)
            .current_dir(&repo)
            .output()
        {
            take(
                format!("`{program} {}`", args.join(" ")),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            );
        }
    }
    (files, bytes, false_found)
}

/// Crates of the cargo registry this workspace builds with (their sources are there once
/// it was built): a spread of parsers, networking, async and CLI code.
fn registry_crates() -> Vec<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .unwrap_or_default();
    let mut out = Vec::new();
    let Ok(indexes) = std::fs::read_dir(home.join("registry/src")) else {
        return out;
    };
    for index in indexes.flatten() {
        for entry in std::fs::read_dir(index.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            let wanted = [
                "serde_json-",
                "regex-automata-",
                "clap_builder-",
                "tokio-1",
                "ureq-3",
                "hyper-1",
                "tonic-0",
                "ignore-",
                "opentelemetry_sdk-",
                "h2-",
            ];
            if wanted.iter().any(|w| name.starts_with(w)) {
                out.push(entry.path());
            }
        }
    }
    out
}

/// Every text file under `dir` (sources, docs, configs), recursively.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
                ["rs", "md", "toml", "json", "yaml", "yml", "py", "txt"].contains(&e)
            }) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}
