//! The installed plugins as the workflow checks see them ([`PluginCatalog`]): found
//! through discovery, each started once to learn its operations, then stopped.

use super::{Discovery, PluginRuntime, discovery, start_all};
use crate::error::codes;
use crate::workflow::check::PluginCatalog;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The installed plugins, found through the plugin host's discovery (`AWF_PLUGINS_PATH`,
/// else `<root>/.awf/plugins` and the XDG data dir). A plugin is started once to learn its
/// operations, then stopped.
pub struct InstalledPlugins {
    root: PathBuf,
    discovery: Option<Discovery>,
    cache: HashMap<String, Result<Vec<String>, (&'static str, String)>>,
}

impl InstalledPlugins {
    pub fn new(root: &Path) -> Self {
        InstalledPlugins {
            root: root.to_path_buf(),
            discovery: None,
            cache: HashMap::new(),
        }
    }
}

impl PluginCatalog for InstalledPlugins {
    fn operations(&mut self, plugin: &str) -> Result<Vec<String>, (&'static str, String)> {
        if let Some(r) = self.cache.get(plugin) {
            return r.clone();
        }
        let discovery = self
            .discovery
            .get_or_insert_with(|| Discovery::scan(discovery::search_path(&self.root)));
        let result = match discovery.get(plugin) {
            None => {
                let known: Vec<&str> = discovery.plugins().map(|m| m.name.as_str()).collect();
                let why = discovery
                    .invalid(plugin)
                    .map(|e| format!(" (its directory is invalid: {})", e.message()))
                    .unwrap_or_default();
                Err((
                    codes::UNKNOWN_PLUGIN,
                    format!(
                        "no plugin named {plugin:?} is installed{why}; searched {}; found {}",
                        discovery.search_path_text(),
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                ))
            }
            Some(manifest) => {
                let started = PluginRuntime::new().map(|rt| {
                    start_all(&[manifest], &Arc::new(rt))
                        .pop()
                        .expect("one result per manifest")
                });
                match started.and_then(|r| r) {
                    Ok(p) => Ok(p.operations().iter().map(|o| o.name.clone()).collect()),
                    Err(e) => Err((e.code(), e.message().to_string())),
                }
            }
        };
        self.cache.insert(plugin.to_string(), result.clone());
        result
    }
}
