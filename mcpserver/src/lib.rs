//! mcpserver
