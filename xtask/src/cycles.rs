//! Module import cycles inside one crate: which files name each other through `crate::`, in a
//! loop. A cycle on the stop path means no module of it can be read, changed or tested alone, so
//! the crates ARCHITECTURE.md holds acyclic are checked here (`check` in `lib.rs`).
//!
//! The reading is textual and deliberately simple: every `crate::<name>` (a `use crate::{…}`
//! group too) outside comments and before the file's `#[cfg(test)]` is an edge to the module
//! `<name>`, or, when `<name>` is a re-export of the crate root (`pub use module::Name` in
//! `lib.rs`), to the module it comes from. A file under `foo/` belongs to module `foo`; the
//! crate root itself is not a module here (it only declares and re-exports).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The import cycles among the modules of the crate whose sources are in `src`, each as its
/// modules in order (sorted, so the answer is stable). Empty means the modules form a DAG.
pub fn module_cycles(src: &Path) -> Vec<Vec<String>> {
    let graph = module_graph(src);
    strongly_connected(&graph)
        .into_iter()
        .filter(|component| {
            component.len() > 1
                || graph
                    .get(&component[0])
                    .is_some_and(|to| to.contains(&component[0]))
        })
        .collect()
}

/// `module -> modules it names`, self edges left out.
pub fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = crate::sources(src);
    let module_of = |file: &Path| -> Option<String> {
        let rel = file.strip_prefix(src).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?.to_string();
        if rel.components().count() > 1 {
            return Some(first);
        }
        let stem = first.strip_suffix(".rs")?.to_string();
        (stem != "lib" && stem != "main").then_some(stem)
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    let reexports =
        root_reexports(&std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let to = graph.entry(module.clone()).or_default();
        for name in crate_paths(&code_of(&text)) {
            let target = if modules.contains(&name) {
                Some(name)
            } else {
                reexports.get(&name).cloned()
            };
            if let Some(target) = target.filter(|t| *t != module) {
                to.insert(target);
            }
        }
    }
    graph
}

/// The text before `#[cfg(test)]`, without comment lines.
fn code_of(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment after every `crate::`, the members of a `crate::{…}` group included.
fn crate_paths(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `stopline_crate::` or the like
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut end = group.len();
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let mut depth = 0;
            let mut start = 0;
            let body = &group[..end];
            for (i, c) in body.char_indices().chain([(body.len(), ',')]) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(ident(body[start..i].trim()));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            names.push(ident(rest));
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// `Name -> module` for every `pub use module::…` of the crate root.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for statement in code_of(lib).split(';') {
        let Some(path) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            let name = item.rsplit(" as ").next().unwrap_or(item);
            let name = ident(name.rsplit("::").next().unwrap_or(name));
            if !name.is_empty() {
                out.insert(name, module.trim().to_string());
            }
        }
    }
    out
}

/// Tarjan's strongly connected components, each sorted.
fn strongly_connected(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    component.push(member.to_string());
                    if member == node {
                        break;
                    }
                }
                component.sort();
                self.out.push(component);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.out.sort();
    walk.out
}
