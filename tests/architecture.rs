//! The house reads bottom-up: no two files of `src/` depend on each other, directly
//! or around a circle. A file depends on the modules its code names (`crate::a::b`,
//! `super::c`); comments, documentation and test modules do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// A module's path (`["keyed", "reconfigure"]`) for each file under `src/`.
fn modules(dir: &Path, prefix: &[String], found: &mut BTreeMap<Vec<String>, String>) {
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

/// The code of a file: without comments and without its test module.
fn code(source: &str) -> String {
    let source = source
        .split("#[cfg(all(test, not(turnstile_loom)))]\nmod tests")
        .next()
        .unwrap();
    source
        .lines()
        .map(|line| line.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules that `module`'s code names, by their longest known prefix.
fn dependencies(
    module: &[String],
    code: &str,
    known: &BTreeMap<Vec<String>, String>,
) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    let mut resolve = |path: Vec<String>| {
        let longest = (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|prefix| known.contains_key(prefix));
        if let Some(target) = longest
            && !target.starts_with(module)
            && !module.starts_with(&target)
        {
            found.insert(target);
        }
    };
    for (anchor, base) in [
        ("crate::", vec![]),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
    ] {
        for (i, _) in code.match_indices(anchor) {
            let rest = &code[i + anchor.len()..];
            let path: Vec<String> = rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap()
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            resolve([base.clone(), path].concat());
        }
    }
    found
}

/// A circle of modules, if there is one.
fn circle(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    fn visit(
        node: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        path: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
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

#[test]
fn no_file_of_src_is_in_an_import_circle() {
    let mut known = BTreeMap::new();
    modules(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
        &[],
        &mut known,
    );
    assert!(
        known.contains_key(&vec!["keyed".to_owned()]),
        "found no modules"
    );
    let graph: BTreeMap<_, _> = known
        .iter()
        .map(|(module, source)| (module.clone(), dependencies(module, &code(source), &known)))
        .collect();
    assert!(
        graph[&vec!["keyed".to_owned()]].contains(&vec!["store".to_owned()]),
        "the scan sees imports"
    );
    if let Some(circle) = circle(&graph) {
        let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
        panic!("import circle: {}", names.join(" -> "));
    }
}
