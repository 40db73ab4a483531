//! What each provider's API paths cost, as the relay knows them: billable paths (model
//! turns, counted toward the step's budget and seen as `chat` spans), free ones (model
//! lists, token counting) and every other path, unlisted. With a budget set an unlisted
//! path is refused (batches, legacy completions, files: the relay cannot count what they
//! cost); without one it passes and is audited.

use super::usage::{self, Wire};

/// What one request path is to the step's budget.
#[derive(Debug, PartialEq)]
pub(super) enum Route {
    /// A model turn, and the model its path names.
    Billable(Wire, Option<String>),
    /// Costs nothing: listing models, counting tokens.
    Free,
    Unlisted,
}

/// The paths of a provider's API the relay knows, as named in refusals.
pub(super) fn listed(provider: &str) -> (&'static str, &'static str) {
    match provider {
        "anthropic" => ("POST /v1/messages", "/v1/messages/count_tokens, /v1/models"),
        "openai" => (
            "POST …/responses, …/chat/completions",
            "…/responses/input_tokens, …/models",
        ),
        "gcp.gemini" => (
            "POST …:generateContent, …:streamGenerateContent",
            "…:countTokens, …/models",
        ),
        _ => ("the model turns of its wire format", "none"),
    }
}

/// What `path` (after the step's route, query allowed) is on `provider`'s API.
pub(super) fn route(provider: &str, path: &str) -> Route {
    let bare = path.split(['?', '#']).next().unwrap_or_default();
    let bare = bare.strip_suffix('/').unwrap_or(bare);
    let mut segments = bare.rsplit('/');
    let last = segments.next().unwrap_or_default();
    let parent = segments.next();
    let grandparent = segments.next();
    if let Some((wire, model)) = usage::classify(path) {
        let speaks = match provider {
            "anthropic" => wire == Wire::AnthropicMessages,
            "openai" => matches!(wire, Wire::OpenAiResponses | Wire::ChatCompletions),
            "gcp.gemini" => wire == Wire::Gemini,
            _ => true,
        };
        return if speaks {
            Route::Billable(wire, model)
        } else {
            Route::Unlisted
        };
    }
    let free = match provider {
        "anthropic" => {
            bare.ends_with("/v1/messages/count_tokens")
                || (last == "models" && parent == Some("v1"))
                || (parent == Some("models") && grandparent == Some("v1"))
        }
        "openai" => {
            (last == "input_tokens" && parent == Some("responses"))
                || last == "models"
                || parent == Some("models")
        }
        "gcp.gemini" => match usage::split_method(last) {
            Some((_, method)) => method == "countTokens",
            None => last == "models" || parent == Some("models"),
        },
        _ => false,
    };
    if free { Route::Free } else { Route::Unlisted }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_provider_lists_its_billable_and_free_paths_and_nothing_else_passes_as_known() {
        let billable = |w| Route::Billable(w, None);
        let rows: &[(&str, &str, Route)] = &[
            (
                "anthropic",
                "/v1/messages",
                billable(Wire::AnthropicMessages),
            ),
            (
                "anthropic",
                "/v1/messages?beta=true",
                billable(Wire::AnthropicMessages),
            ),
            (
                "anthropic",
                "/v1/messages/count_tokens?beta=true",
                Route::Free,
            ),
            ("anthropic", "/v1/models", Route::Free),
            ("anthropic", "/v1/models/claude-sonnet-4-5", Route::Free),
            ("anthropic", "/v1/messages/batches", Route::Unlisted),
            (
                "anthropic",
                "/v1/messages/batches/msgbatch_1/results",
                Route::Unlisted,
            ),
            ("anthropic", "/v1/complete", Route::Unlisted),
            ("anthropic", "/v1/files", Route::Unlisted),
            ("anthropic", "/v1/chat/completions", Route::Unlisted),
            ("anthropic", "/", Route::Unlisted),
            ("openai", "/v1/responses", billable(Wire::OpenAiResponses)),
            (
                "openai",
                "/backend-api/codex/responses",
                billable(Wire::OpenAiResponses),
            ),
            (
                "openai",
                "/v1/chat/completions",
                billable(Wire::ChatCompletions),
            ),
            ("openai", "/v1/responses/input_tokens", Route::Free),
            ("openai", "/v1/models", Route::Free),
            ("openai", "/v1/models/gpt-5", Route::Free),
            ("openai", "/v1/completions", Route::Unlisted),
            ("openai", "/v1/batches", Route::Unlisted),
            ("openai", "/v1/embeddings", Route::Unlisted),
            ("openai", "/v1/messages", Route::Unlisted),
            (
                "gcp.gemini",
                "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
                Route::Billable(Wire::Gemini, Some("gemini-2.5-pro".into())),
            ),
            (
                "gcp.gemini",
                "/v1beta/models/gemini-2.5-pro:countTokens",
                Route::Free,
            ),
            ("gcp.gemini", "/v1beta/models", Route::Free),
            ("gcp.gemini", "/v1beta/models/gemini-2.5-pro", Route::Free),
            (
                "gcp.gemini",
                "/v1beta/models/gemini-2.5-pro:embedContent",
                Route::Unlisted,
            ),
            (
                "gcp.gemini",
                "/v1beta/models/gemini-2.5-pro:batchGenerateContent",
                Route::Unlisted,
            ),
            ("gcp.gemini", "/v1beta/files", Route::Unlisted),
        ];
        for (provider, path, want) in rows {
            assert_eq!(&route(provider, path), want, "{provider} {path}");
        }
    }
}
