//! The crate's layering rule: a file under `src/LAYER/` imports only from its
//! own layer and the layers before it (docs/ARCHITECTURE.md §2). The order is
//! declared here and in `src/lib.rs`'s docs; the test checks both agree, then
//! parses every `crate::` path outside `#[cfg(test)]` code. Inside a folder the
//! order is free, but its modules form no cycle: two siblings that need each
//! other are one module, or share a third. Also: no source file cites a design
//! document outside the repository.
use std::path::{Path, PathBuf};

/// Layers in dependency order.
const LAYERS: &[&str] =
    &["core", "evidence", "backend", "rank", "analysis", "campaign", "report", "canary", "validate", "cli"];

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without comments and without its `#[cfg(test)]` items
/// (tests may reach anywhere).
fn non_test_code(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i64> = None;
    let mut depth: i64 = 0;
    let mut pending_cfg_test = false;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let t = code.trim();
        if skip_depth.is_none() && t.starts_with("#[cfg(test)]") {
            pending_cfg_test = true;
            continue;
        }
        let opens = code.matches('{').count() as i64;
        let closes = code.matches('}').count() as i64;
        if pending_cfg_test && !t.is_empty() && !t.starts_with("#[") {
            pending_cfg_test = false;
            if opens > closes {
                skip_depth = Some(depth);
            }
            depth += opens - closes;
            continue;
        }
        if let Some(d) = skip_depth {
            depth += opens - closes;
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        depth += opens - closes;
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Top-level names a piece of code reaches through `crate::` (brace groups included).
fn crate_roots(code: &str) -> Vec<String> {
    let mut roots = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::` (macro-relative) or an identifier ending in `crate`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    roots.push(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            roots.push(name);
        }
    }
    roots
}

/// A file's module path under `src/` (`backend/cuda/mod.rs` → `backend::cuda`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut m: Vec<String> =
        rel.with_extension("").components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if m.last().is_some_and(|l| l == "mod") {
        m.pop();
    }
    m
}

/// Parse one use tree after a path prefix (`a::b::{c, d::e}`) into full paths.
fn use_tree(s: &[char], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    loop {
        while *i < s.len() && s[*i].is_whitespace() {
            *i += 1;
        }
        if *i < s.len() && s[*i] == '{' {
            *i += 1;
            loop {
                use_tree(s, i, &path, out);
                while *i < s.len() && s[*i].is_whitespace() {
                    *i += 1;
                }
                match s.get(*i) {
                    Some(',') => *i += 1,
                    Some('}') => {
                        *i += 1;
                        return;
                    }
                    _ => return,
                }
                while *i < s.len() && s[*i].is_whitespace() {
                    *i += 1;
                }
                if s.get(*i) == Some(&'}') {
                    *i += 1;
                    return;
                }
            }
        }
        let start = *i;
        while *i < s.len() && (s[*i].is_alphanumeric() || s[*i] == '_') {
            *i += 1;
        }
        if *i == start {
            break;
        }
        path.push(s[start..*i].iter().collect());
        if s.get(*i) == Some(&':') && s.get(*i + 1) == Some(&':') {
            *i += 2;
        } else {
            break;
        }
    }
    out.push(path);
}

/// Every module path a file's code names through `crate::`, `super::` or
/// `self::`, resolved against the module each line sits in (inline `mod x {`
/// blocks included).
fn referenced_paths(module: &[String], code: &str) -> Vec<Vec<String>> {
    // the module of every line: the file's, plus the inline modules open there
    let mut line_module = Vec::new();
    let mut stack: Vec<(String, i64)> = Vec::new();
    let mut depth: i64 = 0;
    for line in code.lines() {
        let t = line.trim_start();
        let decl = t.strip_prefix("pub(crate) ").or_else(|| t.strip_prefix("pub ")).unwrap_or(t);
        let opened =
            decl.strip_prefix("mod ").and_then(|r| r.trim_end().strip_suffix('{')).map(|n| n.trim().to_string());
        if let Some(name) = opened {
            stack.push((name, depth));
        }
        let mut m = module.to_vec();
        m.extend(stack.iter().map(|(n, _)| n.clone()));
        line_module.push(m);
        depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
        while stack.last().is_some_and(|(_, d)| depth <= *d) {
            stack.pop();
        }
    }
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut line = 0;
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        let at_word_start = i == 0
            || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == '$' || chars[i - 1] == ':');
        let here = &line_module[line.min(line_module.len() - 1)];
        let rest: String = chars[i..(i + 7).min(chars.len())].iter().collect();
        let mut base: Option<(Vec<String>, usize)> = None;
        if at_word_start && rest.starts_with("crate::") {
            base = Some((Vec::new(), 7));
        } else if at_word_start && rest.starts_with("self::") {
            base = Some((here.clone(), 6));
        } else if at_word_start && rest.starts_with("super::") {
            let mut m = here.clone();
            let mut j = i;
            while chars[j..].starts_with(&['s', 'u', 'p', 'e', 'r', ':', ':']) {
                m.pop();
                j += 7;
            }
            base = Some((m, j - i));
        }
        match base {
            Some((prefix, skip)) => {
                i += skip;
                use_tree(&chars, &mut i, &prefix, &mut out);
            }
            None => i += 1,
        }
    }
    out
}

/// Cycles among the modules of one folder: for every folder P, an edge a → b
/// between two of its child modules when code in a's subtree names a path
/// under P::b. Returns each cycle as `P: a → b → … → a`.
fn folder_cycles(files: &[(Vec<String>, String)]) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    // child modules of every folder, from the files and their inline modules
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    let mut edges: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut refs = Vec::new();
    for (module, code) in files {
        for k in 1..module.len() {
            children.entry(module[..k].to_vec()).or_default().insert(module[k].clone());
        }
        for r in referenced_paths(module, code) {
            refs.push((module.clone(), r));
        }
    }
    for (from, to) in &refs {
        // the deepest common folder P (at least one level deep: the layers themselves are ordered)
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if common == 0 || common >= from.len() || common >= to.len() {
            continue;
        }
        let p = from[..common].to_vec();
        if children.get(&p).is_some_and(|c| c.contains(&to[common])) {
            edges.entry(p).or_default().entry(from[common].clone()).or_default().insert(to[common].clone());
        }
    }
    let mut cycles = Vec::new();
    for (p, g) in &edges {
        // a depth-first search from every node finds each cycle through its smallest node
        for start in g.keys() {
            let mut stack = vec![(start.clone(), vec![start.clone()])];
            while let Some((node, path)) = stack.pop() {
                for next in g.get(&node).into_iter().flatten() {
                    if next == start {
                        cycles.push(format!("{}: {} → {start}", p.join("::"), path.join(" → ")));
                    } else if next > start && !path.contains(next) {
                        let mut longer = path.clone();
                        longer.push(next.clone());
                        stack.push((next.clone(), longer));
                    }
                }
            }
        }
    }
    cycles
}

#[test]
fn lib_docs_declare_the_same_order() {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    let lines: Vec<&str> = lib.lines().collect();
    let at =
        lines.iter().position(|l| l.contains("Layers, in dependency order:")).expect("src/lib.rs declares the order");
    // the list may wrap: a line that ends in an arrow goes on in the next doc line
    let mut order = lines[at].split(':').nth(1).unwrap().trim().to_string();
    for next in &lines[at + 1..] {
        if !(order.is_empty() || order.ends_with('→')) {
            break;
        }
        order = format!("{order} {}", next.trim_start_matches("//!").trim());
    }
    let declared: Vec<&str> = order.split('→').map(str::trim).collect();
    assert_eq!(declared, LAYERS, "src/lib.rs and tests/layering.rs must declare one order");
}

#[test]
fn no_file_imports_from_a_later_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mut faults = Vec::new();
    let mut checked = 0;
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let Some(first) = rel.components().next().and_then(|c| c.as_os_str().to_str()) else { continue };
        if rel.components().count() < 2 {
            // lib.rs and main.rs: the crate root may name every layer
            continue;
        }
        let mine = LAYERS
            .iter()
            .position(|l| *l == first)
            .unwrap_or_else(|| panic!("{}: folder {first} is not a declared layer", rel.display()));
        checked += 1;
        let code = non_test_code(&std::fs::read_to_string(f).unwrap());
        for root in crate_roots(&code) {
            match LAYERS.iter().position(|l| *l == root) {
                Some(theirs) if theirs > mine => {
                    faults.push(format!("{} (layer {first}) imports crate::{root}", rel.display()))
                }
                Some(_) => {}
                // crate-root macros (`crate::refuse!`) are defined in core
                None if root == "refuse" => {}
                None => faults.push(format!("{}: crate::{root} is not a layer", rel.display())),
            }
        }
    }
    assert!(checked > 30, "only {checked} files checked: is src/ laid out in layer folders?");
    assert!(faults.is_empty(), "imports against the layer order:\n{}", faults.join("\n"));
}

/// The evidence layer reads and writes records; it runs nothing: no file of
/// `src/evidence/` names MPI (the commands that run under MPI are `rank`'s).
#[test]
fn no_evidence_module_calls_mpi() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/evidence");
    let mut files = Vec::new();
    rs_files(&dir, &mut files);
    assert!(files.len() > 10, "only {} evidence files read", files.len());
    let faults: Vec<String> = files
        .iter()
        .filter(|f| mpi_crate_use(&non_test_code(&std::fs::read_to_string(f).unwrap())))
        .map(|f| f.display().to_string())
        .collect();
    assert!(faults.is_empty(), "evidence modules that use the MPI crate:\n{}", faults.join("\n"));
}

/// Whether `code` names the `mpi` crate itself (a path starting `mpi::`,
/// not a module of ours named `mpi` such as `commtrace::mpi::`).
fn mpi_crate_use(code: &str) -> bool {
    code.match_indices("mpi::").any(|(i, _)| {
        let before = code[..i].chars().next_back();
        !matches!(before, Some(c) if c == ':' || c.is_alphanumeric() || c == '_')
    })
}

#[test]
fn the_mpi_check_tells_the_crate_from_our_module() {
    assert!(mpi_crate_use("let w = mpi::initialize();"));
    assert!(mpi_crate_use("use mpi::topology::SimpleCommunicator;"));
    assert!(!mpi_crate_use("use crate::evidence::commtrace::mpi::MpiSummary;"));
    assert!(!mpi_crate_use("use super::mpi::MpiP2p;"));
    assert!(!mpi_crate_use("let x = commcanary_mpi::f();"));
}

#[test]
fn the_checker_sees_imports_and_skips_tests() {
    let code = non_test_code(
        "use crate::core::units;\nfn f() { crate::{cli::run, rank::x}; }\n#[cfg(test)]\nmod tests \
        {\n    use crate::cli;\n}\nmacro_rules! m { () => { $crate::core::x } }\n",
    );
    assert_eq!(crate_roots(&code), ["core", "cli", "rank"]);
}

/// The `src/` files as (module path, code without comments and tests).
fn src_modules() -> Vec<(Vec<String>, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files
        .iter()
        .map(|f| (module_of(f.strip_prefix(&src).unwrap()), non_test_code(&std::fs::read_to_string(f).unwrap())))
        .filter(|(m, _)| !m.is_empty() && m[0] != "lib" && m[0] != "main")
        .collect()
}

#[test]
fn no_folder_has_an_import_cycle() {
    let files = src_modules();
    assert!(files.len() > 30, "only {} files read", files.len());
    let cycles = folder_cycles(&files);
    assert!(
        cycles.is_empty(),
        "import cycles inside a folder (move the shared item to one side, or to a module both import):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_cycle_check_sees_a_cycle_and_nothing_else() {
    let f = |m: &str, code: &str| (m.split("::").map(String::from).collect::<Vec<_>>(), non_test_code(code));
    let tree = [
        f("campaign", "pub mod chain;\npub mod spec;\npub struct Policy;\n"),
        // spec ↔ chain, one side through a nested use group, the other through super::
        // spec ↔ chain, one side through a nested use group, the other through super::
        f(
            "campaign::chain",
            "use crate::campaign::{Policy, spec::{CampaignSpec, ConfigSpec}};\nuse \
            super::other::Thing;\n",
        ),
        f("campaign::spec", "fn argv() { super::chain::rank_arguments(); }\n"),
        // parent items, an inline module's super:: (other::chain, not campaign::chain) and a
        // test module are no edges; read wrongly, either would close other ↔ chain
        f(
            "campaign::other",
            "use super::Policy;\npub mod json {\n    use super::chain::Z;\n}\n#[cfg(test)]\nmod tests \
            {\n    use crate::campaign::chain::x;\n}\npub struct Thing;\n",
        ),
        // a three-module cycle in a deeper folder
        f("backend::cuda::a", "use crate::backend::cuda::b::X;\n"),
        f("backend::cuda::b", "use super::c::{self, Y};\n"),
        f("backend::cuda::c", "fn g() { crate::backend::cuda::a::h(); crate::core::units::x(); }\n"),
    ];
    let mut cycles = folder_cycles(&tree);
    cycles.sort();
    assert_eq!(cycles, ["backend::cuda: a → b → c → a", "campaign: chain → spec → chain"]);
    // and without the back edge, none
    let acyclic: Vec<_> =
        tree.iter().filter(|(m, _)| m.last().unwrap() != "spec" && m.last().unwrap() != "c").cloned().collect();
    assert!(folder_cycles(&acyclic).is_empty());
}

#[test]
fn no_source_cites_a_document_outside_the_repository() {
    let mut files = Vec::new();
    for d in ["src", "tests", "benches", "examples", "scripts"] {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(d);
        if p.is_dir() {
            rs_files(&p, &mut files);
        }
    }
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        // the needles are built so that this file does not contain them
        for needle in [concat!("SPEC", ".md"), concat!("SPEC ", "§"), concat!("the ", "SPEC")] {
            assert!(
                !text.contains(needle),
                "{} cites {needle:?}: cite docs/ARCHITECTURE.md or the original source",
                f.display()
            );
        }
    }
}
