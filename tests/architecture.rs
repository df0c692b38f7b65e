//! The house reads bottom-up: every module of `src/` stands on a floor, and uses only
//! its own floor and the floors below it; no two files depend on each other, directly
//! or around a circle, and neither do two top-level modules (a folder counts as one).
//!
//! A file depends on the modules its code names: `crate::a::b`, `super::c` (from
//! inside an inline module too), grouped imports (`crate::{a, b::{c, d}}`), in its test
//! modules as in its other code. A name that a module re-exports (`crate::TokenBucket`,
//! through `lib.rs`) counts as the module that defines it. Comments and documentation
//! do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The floors, bottom first, by top-level module (`""`: `lib.rs`, which re-exports).
const FLOORS: &[&[&str]] = &[
    // Time, quota, what a check answers, and what is reported of it.
    &[
        "sync", "clock", "quota", "decision", "settle", "limiter", "observe",
    ],
    // The algorithm contract with the state's shape, and the pure rules; the per-key
    // wrapper around any of them; one state with no map.
    &[
        "algorithm",
        "word",
        "window",
        "token_bucket",
        "gcra",
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "per_key",
        "direct",
    ],
    // The store and eviction; the keyed limiter, its builder and the product faces.
    &["store", "evict", "builder", "keyed", "baseline"],
    // Several checks on one request.
    &["policy"],
    // The edges.
    &["http", "redis", "wait"],
    // Limits from a file: the edges and policies, built from a configuration.
    &["config"],
    // The crate root, the guide (documentation only) and the verification hooks.
    &["", "guide", "loom_hooks", "shuttle_hooks"],
];

type Module = Vec<String>;

/// A module's path (`["keyed", "maintenance"]`) for each file under `src/`.
fn modules(dir: &Path, prefix: &[String], found: &mut BTreeMap<Module, String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            modules(&path, &[prefix, &[name]].concat(), found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let module = match name.as_str() {
                "mod" | "lib" => prefix.to_vec(),
                _ => [prefix, &[name]].concat(),
            };
            found.insert(module, fs::read_to_string(&path).unwrap());
        }
    }
}

/// The code of a file: without comments (test modules stay).
fn code(source: &str) -> String {
    source
        .lines()
        .map(|line| line.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a use tree names, from the text that starts it (`a::b::{c, d::e}` and
/// the like); `X as Y` names `X`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let head_len = tree
        .find(|c: char| !(is_ident(c) || c == ':'))
        .unwrap_or(tree.len());
    let head = &tree[..head_len];
    let segments: Vec<String> = head
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let rest = &tree[head_len..];
    if !(head.ends_with("::") && rest.starts_with('{')) {
        return vec![segments];
    }
    let (mut depth, mut start, mut found) = (0, 1, Vec::new());
    for (i, c) in rest.char_indices() {
        match c {
            '{' => depth += 1,
            '}' | ',' if depth == 1 => {
                let part = rest[start..i].trim();
                if part == "self" {
                    found.push(segments.clone());
                } else if !part.is_empty() {
                    found.extend(
                        expand(part)
                            .into_iter()
                            .map(|tail| [segments.clone(), tail].concat()),
                    );
                }
                start = i + 1;
                if c == '}' {
                    break;
                }
            }
            '}' => depth -= 1,
            _ => {}
        }
    }
    found
}

/// For each byte of `code`, the inline modules (`mod tests { ... }`) it is in: a
/// `super::` there starts from the innermost.
fn inline_modules(code: &str) -> Vec<Vec<String>> {
    let (mut open, mut depth, mut at) = (Vec::<(String, usize)>::new(), 0usize, Vec::new());
    for (i, c) in code.char_indices() {
        match c {
            '{' => {
                depth += 1;
                let before = code[..i].trim_end();
                let name_start = before.rfind(|c: char| !is_ident(c)).map_or(0, |p| p + 1);
                if before[..name_start].trim_end().ends_with("mod") && name_start < before.len() {
                    open.push((before[name_start..].to_owned(), depth));
                }
            }
            '}' => {
                if open.last().is_some_and(|(_, d)| *d == depth) {
                    open.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        for _ in 0..c.len_utf8() {
            at.push(open.iter().map(|(name, _)| name.clone()).collect());
        }
    }
    at
}

/// Every path `code` (of `module`) names through `crate::` or `super::`, made
/// absolute (from the crate root).
fn named(module: &[String], code: &str) -> Vec<Vec<String>> {
    let inline = inline_modules(code);
    let mut found = Vec::new();
    for anchor in ["crate::", "super::"] {
        for (i, _) in code.match_indices(anchor) {
            if code[..i].ends_with(|c: char| is_ident(c) || c == ':') {
                continue;
            }
            for path in expand(&code[i..]) {
                let here = [module, &inline[i]].concat();
                if let Some(path) = absolute(&here, &path, None) {
                    found.push(path);
                }
            }
        }
    }
    found
}

/// `path`, as written in `module`, from the crate root: `None` for another crate's.
fn absolute(
    module: &[String],
    path: &[String],
    known: Option<&BTreeMap<Module, String>>,
) -> Option<Vec<String>> {
    match path.first().map(String::as_str) {
        Some("crate") => Some(path[1..].to_vec()),
        Some("self") => Some([module, &path[1..]].concat()),
        Some("super") => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = &module[..module.len().checked_sub(ups)?];
            Some([base, &path[ups..]].concat())
        }
        Some(child) => {
            let candidate = [module, &[child.to_owned()]].concat();
            known
                .is_some_and(|known| known.contains_key(&candidate))
                .then(|| [module, path].concat())
        }
        None => None,
    }
}

/// The names each module re-exports (`pub use`, `pub(crate) use`), with the path
/// each stands for.
fn reexports(known: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeMap<String, Vec<String>>> {
    let mut all = BTreeMap::new();
    for (module, source) in known {
        let code = code(source);
        let mut names = BTreeMap::new();
        for (i, _) in code.match_indices("pub") {
            let rest = code[i + 3..].trim_start();
            let rest = match rest.strip_prefix('(') {
                Some(scoped) => scoped[scoped.find(')').unwrap() + 1..].trim_start(),
                None => rest,
            };
            let Some(tree) = rest.strip_prefix("use ") else {
                continue;
            };
            let tree = &tree[..tree.find(';').unwrap()];
            let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
            for path in expand(&tree) {
                if let Some(path) = absolute(module, &path, Some(known))
                    && let Some(name) = path.last()
                {
                    names.insert(name.clone(), path);
                }
            }
        }
        all.insert(module.clone(), names);
    }
    all
}

/// The file that defines what `path` names: its longest known prefix, through
/// re-exports.
fn resolve(
    path: &[String],
    known: &BTreeMap<Module, String>,
    reexports: &BTreeMap<Module, BTreeMap<String, Vec<String>>>,
) -> Module {
    let mut path = path.to_vec();
    for _ in 0..16 {
        let n = (0..=path.len())
            .rev()
            .find(|&n| known.contains_key(&path[..n]))
            .unwrap();
        let module = path[..n].to_vec();
        match path
            .get(n)
            .and_then(|name| reexports[&module].get(name))
            .filter(|target| target[..] != path[..=n])
        {
            Some(target) => path = [target.clone(), path[n + 1..].to_vec()].concat(),
            None => return module,
        }
    }
    panic!("re-exports in a circle at {}", path.join("::"))
}

/// A circle in `graph`, if there is one.
fn circle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        node: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        path: &mut Vec<Module>,
        done: &mut BTreeSet<Module>,
    ) -> Option<Vec<Module>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            return Some(path[start..].to_vec());
        }
        if !done.insert(node.clone()) {
            return None;
        }
        path.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

fn floor(module: &[String]) -> usize {
    let top = module.first().map_or("", String::as_str);
    FLOORS
        .iter()
        .position(|floor| floor.contains(&top))
        .unwrap_or_else(|| panic!("`{top}` stands on no floor: add it to FLOORS"))
}

fn name(module: &[String]) -> String {
    match module.is_empty() {
        true => "lib".to_owned(),
        false => module.join("::"),
    }
}

/// Each file's dependencies on other files (never its own ancestors or descendants).
fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let mut known = BTreeMap::new();
    modules(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
        &[],
        &mut known,
    );
    let reexports = reexports(&known);
    known
        .iter()
        .map(|(module, source)| {
            let depends = named(module, &code(source))
                .iter()
                .map(|path| resolve(path, &known, &reexports))
                .filter(|target| !target.starts_with(module) && !module.starts_with(target))
                .collect();
            (module.clone(), depends)
        })
        .collect()
}

#[test]
fn the_scan_sees_imports_tests_and_reexports() {
    let graph = graph();
    let of = |module: &str| &graph[&module.split("::").map(str::to_owned).collect::<Vec<_>>()];
    let keyed = of("keyed");
    assert!(keyed.contains(&vec!["store".to_owned()]), "a plain import");
    // `use crate::{Decision, ...}`: through lib.rs's re-export to its file.
    assert!(
        keyed.contains(&vec!["decision".to_owned()]),
        "a grouped re-export"
    );
    // `super::*` and `super::super::` inside an inline test module.
    let expand = expand("crate::{a, b::{c, d as e}, self};");
    assert_eq!(
        expand,
        [
            vec!["crate", "a"],
            vec!["crate", "b", "c"],
            vec!["crate", "b", "d"],
            vec!["crate"]
        ]
    );
    let inline = inline_modules("mod a { mod b { x } y } z");
    assert_eq!(inline["mod a { mod b { ".len()], ["a", "b"]);
    assert_eq!(inline["mod a { mod b { x } ".len()], ["a"]);
    assert!(inline["mod a { mod b { x } y } ".len()].is_empty());
    let here = ["redis".to_owned(), "engine".to_owned()];
    let paths = named(&here, "mod tests { use super::super::config::X; }");
    assert_eq!(paths, [vec!["redis", "config", "X"]]);
}

#[test]
fn every_module_uses_only_its_floor_and_those_below() {
    let graph = graph();
    let mut upward = Vec::new();
    for (module, depends) in &graph {
        for target in depends {
            if floor(target) > floor(module) {
                upward.push(format!("{} -> {}", name(module), name(target)));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "{} imports run up the floors:\n{}",
        upward.len(),
        upward.join("\n")
    );
}

#[test]
fn no_file_of_src_is_in_an_import_circle() {
    let graph = graph();
    if let Some(circle) = circle(&graph) {
        let names: Vec<String> = circle.iter().map(|m| name(m)).collect();
        panic!("import circle: {}", names.join(" -> "));
    }
}

#[test]
fn no_top_level_module_is_in_an_import_circle() {
    let mut tops: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, depends) in graph() {
        let top = module.iter().take(1).cloned().collect::<Vec<_>>();
        for target in depends {
            let target_top = target.iter().take(1).cloned().collect::<Vec<_>>();
            if target_top != top && !top.is_empty() && !target_top.is_empty() {
                tops.entry(top.clone()).or_default().insert(target_top);
            }
        }
    }
    if let Some(circle) = circle(&tops) {
        let names: Vec<String> = circle.iter().map(|m| name(m)).collect();
        panic!("import circle among folders: {}", names.join(" -> "));
    }
}

/// Atomics come only through `sync.rs`, which swaps in loom's and shuttle's under their
/// cfgs: an atomic named straight from `std` (or `core`) elsewhere would be invisible
/// to the models, whose interleavings would then leave its orderings unchecked. Test
/// modules too, so that a model never meets a file that mixes both.
#[test]
fn atomics_come_only_through_sync() {
    let mut known = BTreeMap::new();
    modules(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
        &[],
        &mut known,
    );
    assert!(
        known.contains_key(&vec!["sync".to_owned()]),
        "the scan sees sync.rs"
    );
    let straight: Vec<String> = known
        .iter()
        .filter(|(module, _)| module.as_slice() != ["sync"])
        .filter(|(_, source)| {
            let code = code(source);
            ["std::sync::atomic", "core::sync::atomic"]
                .iter()
                .any(|path| code.contains(path))
        })
        .map(|(module, _)| name(module))
        .collect();
    assert!(
        straight.is_empty(),
        "atomics named outside sync.rs: {}",
        straight.join(", ")
    );
}
