//! `openai_compatible`: an agent step over HTTP Chat Completions, with the tools served
//! in-process by the same ToolRouter that `awf mcp-serve` uses.
