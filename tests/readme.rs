//! The README is a user's guide that cannot go stale (issue 29):
//! - every CPU command of its code blocks runs, in order, as written, from a
//!   clean copy of the checkout, with the binary under test on `PATH`;
//! - it stays short, and every link and cited section of it and of `docs/`
//!   resolves.
//!
//! Code blocks are told apart by their fence's info string: ```` ```sh ````
//! is a CPU command block (run), ```` ```sh gpu ```` needs GPUs and
//! ```` ```sh install ```` builds or installs (the test runs against the
//! binary cargo built; `scripts/test.sh` would run this test again), both
//! skipped and named; ```` ```text ````, ```` ```toml ```` are not commands.
//! Any other tag fails, so that no block escapes by a new spelling.
mod common;
use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// One fenced code block: its info string, its first line number (1-based) and its lines.
struct Block {
    info: String,
    line: usize,
    lines: Vec<String>,
}

/// The fenced blocks of a Markdown text, and its heading lines outside blocks.
fn parse(md: &str) -> (Vec<Block>, Vec<String>) {
    let mut blocks = Vec::new();
    let mut headings = Vec::new();
    let mut open: Option<Block> = None;
    for (i, l) in md.lines().enumerate() {
        let t = l.trim_start();
        if t.starts_with("```") {
            match open.take() {
                Some(b) => blocks.push(b),
                None => {
                    open = Some(Block {
                        info: t.trim_start_matches('`').trim().to_string(),
                        line: i + 1,
                        lines: Vec::new(),
                    })
                }
            }
            continue;
        }
        match open.as_mut() {
            Some(b) => b.lines.push(l.to_string()),
            None if l.starts_with('#') => headings.push(l.trim_start_matches('#').trim().to_string()),
            None => {}
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    (blocks, headings)
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor of a Markdown file (duplicates numbered as GitHub numbers them).
fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for h in parse(md).1 {
        let s = slug(&h);
        let mut a = s.clone();
        let mut n = 0;
        while seen.contains(&a) {
            n += 1;
            a = format!("{s}-{n}");
        }
        seen.insert(a);
    }
    seen
}

/// The commands of a block: one per line, a trailing `\` joining lines, comments and blanks dropped.
fn commands(b: &Block) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for l in &b.lines {
        let t = l.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head.trim_end());
            cur.push(' ');
        } else {
            cur.push_str(t);
            out.push(std::mem::take(&mut cur));
        }
    }
    assert!(cur.is_empty(), "README block at line {}: a command ends in a backslash", b.line);
    out
}

/// The exit codes a command may end with: 0, or the numbers its trailing
/// `# exit …` comment lists (e.g. `# exit 0 pass, 1 fail, 2 inconclusive`).
fn allowed_exits(cmd: &str) -> Vec<i32> {
    match cmd.split_once("# exit") {
        None => vec![0],
        Some((_, tail)) => {
            let v: Vec<i32> = tail
                .split(|c: char| !c.is_ascii_digit())
                .filter(|w| !w.is_empty())
                .map(|w| w.parse().unwrap())
                .collect();
            assert!(!v.is_empty(), "{cmd}: an `# exit` comment lists no code");
            v
        }
    }
}

/// The `commcanary` subcommand path of a command line (`campaign run`, `canary compile`), if it runs one.
fn subcommand(cmd: &str) -> Option<Vec<String>> {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "commcanary")?;
    let path: Vec<String> = words[at + 1..]
        .iter()
        .take(2)
        .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .map(|w| w.to_string())
        .collect();
    (!path.is_empty()).then_some(path)
}

/// Whether the binary knows this subcommand (`commcanary help SUB [SUB2]`
/// succeeds; the second word counts only where SUB has subcommands of its own).
fn knows(bin_dir: &Path, path: &[String]) -> Result<(), String> {
    let help = |args: &[String]| {
        Command::new(bin_dir.join("commcanary")).arg("help").args(args).output().expect("binary runs")
    };
    let first = help(&path[..1]);
    if !first.status.success() {
        return Err(format!("`commcanary help {}` fails: {}", path[0], String::from_utf8_lossy(&first.stderr).trim()));
    }
    if path.len() == 2 && String::from_utf8_lossy(&first.stdout).contains("\nCommands:") {
        let second = help(path);
        if !second.status.success() {
            return Err(format!(
                "`commcanary help {}` fails: {}",
                path.join(" "),
                String::from_utf8_lossy(&second.stderr).trim()
            ));
        }
    }
    Ok(())
}

/// A copy of the checkout's files (tracked, and untracked ones git does not ignore), as a clone would have them.
fn clean_checkout(to: &Path) {
    let o = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .current_dir(ROOT)
        .output()
        .expect("git must be installed");
    assert!(o.status.success(), "git ls-files: {}", String::from_utf8_lossy(&o.stderr));
    for rel in o.stdout.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let rel = Path::new(std::str::from_utf8(rel).unwrap());
        let src = Path::new(ROOT).join(rel);
        if !src.is_file() {
            continue; // deleted in the working tree, or a submodule
        }
        let dst = to.join(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copying {}: {e}", rel.display()));
    }
}

#[test]
fn every_cpu_command_of_the_readme_runs_as_written_from_a_clean_checkout() {
    let readme = read("README.md");
    let (blocks, _) = parse(&readme);
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("checkout");
    clean_checkout(&repo);
    // The binary under test, by the name the README uses.
    let bin_dir = t.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    symlink(PathBuf::from(common::bin()).canonicalize().unwrap(), bin_dir.join("commcanary")).unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let (mut ran, mut skipped) = (0, Vec::new());
    for b in &blocks {
        match b.info.as_str() {
            "sh" => {}
            "sh gpu" | "sh install" => {
                for c in commands(b) {
                    eprintln!("readme: not run ({} block, line {}): {c}", b.info, b.line);
                }
                continue;
            }
            "text" | "toml" | "json" => continue,
            other => panic!(
                "README block at line {}: unknown tag {other:?} (use sh, sh gpu, sh install, text or toml)",
                b.line
            ),
        }
        for c in commands(b) {
            if let Some(sub) = subcommand(&c) {
                if let Err(why) = knows(&bin_dir, &sub) {
                    eprintln!(
                        "\n!!!!!!!! readme: SKIPPED, this binary has no `{}` yet: {c}\n!!!!!!!! because {why}\n",
                        sub.join(" ")
                    );
                    skipped.push(c);
                    continue;
                }
            }
            eprintln!("readme: line {}: {c}", b.line);
            let o = Command::new("timeout")
                .args(["900", "bash", "-o", "pipefail", "-c", &c])
                .current_dir(&repo)
                .env("PATH", &path)
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
                .output()
                .expect("bash and timeout run");
            let code = o.status.code().unwrap_or(-1);
            assert!(
                allowed_exits(&c).contains(&code),
                "README block at line {}: `{c}` exited {code} (allowed {:?})\nstdout:\n{}\nstderr:\n{}",
                b.line,
                allowed_exits(&c),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 5, "only {ran} README commands ran: the quickstarts must stay runnable on CPU");
    if !skipped.is_empty() {
        eprintln!(
            "\n!!!!!!!! readme: {} command(s) SKIPPED for subcommands this binary does not have:\n{}\n",
            skipped.len(),
            skipped.join("\n")
        );
    }
}

#[test]
fn the_helpers_read_blocks_commands_and_exit_codes() {
    let (blocks, headings) =
        parse("# A b\n```sh\n# c\nx \\\n  y\nz   # exit 0 pass, 2 maybe\n```\n## C: d\n```sh gpu\nq\n```\n");
    assert_eq!(headings, ["A b", "C: d"]);
    assert_eq!(blocks.len(), 2);
    assert_eq!(commands(&blocks[0]), ["x y", "z   # exit 0 pass, 2 maybe"]);
    assert_eq!(allowed_exits("z   # exit 0 pass, 2 maybe"), [0, 2]);
    assert_eq!(allowed_exits("z"), [0]);
    assert_eq!(blocks[1].info, "sh gpu");
    assert_eq!(slug("Quickstart: the CPU demo"), "quickstart-the-cpu-demo");
    assert_eq!(slug("`nccl-tests` in CommCanary"), "nccl-tests-in-commcanary");
    assert_eq!(subcommand("mpirun -n 2 commcanary replay-trace out/x -o y"), Some(vec!["replay-trace".to_string()]));
    assert_eq!(subcommand("commcanary canary compile out/x"), Some(vec!["canary".to_string(), "compile".to_string()]));
    assert_eq!(subcommand("commcanary join out/demo/runs/$(ls)"), Some(vec!["join".to_string()]));
    assert_eq!(subcommand("ls out"), None);
}

/// The Markdown files whose links and section names are checked.
fn documents() -> Vec<String> {
    let mut v = vec!["README.md".to_string()];
    for d in ["docs", "results-schema"] {
        let mut names: Vec<String> = std::fs::read_dir(Path::new(ROOT).join(d))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".md"))
            .map(|n| format!("{d}/{n}"))
            .collect();
        names.sort();
        v.extend(names);
    }
    v
}

/// `[text](target)` links of a Markdown text, outside code blocks.
fn links(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    for l in md.lines() {
        if l.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            continue;
        }
        let mut rest = l;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            match after.find(')') {
                Some(j) => {
                    out.push(after[..j].to_string());
                    rest = &after[j..];
                }
                None => break,
            }
        }
    }
    out
}

#[test]
fn the_readme_is_short_and_every_link_and_cited_section_resolves() {
    let readme = read("README.md");
    let n = readme.lines().count();
    assert!(n <= 350, "README.md has {n} lines: keep it a user's guide (at most 350), reference goes to docs/");
    let (_, headings) = parse(&readme);
    for h in ["Install", "Make a canary of your workload", "Record and validate a node", "Command map"] {
        assert!(headings.iter().any(|x| x == h), "README.md lacks the section {h:?}");
    }
    let mut broken = Vec::new();
    for doc in documents() {
        let text = read(&doc);
        let dir = Path::new(&doc).parent().unwrap().to_path_buf();
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f.to_string(), Some(a.to_string())),
                None => (target.clone(), None),
            };
            let file_rel = if file.is_empty() { PathBuf::from(&doc) } else { dir.join(&file) };
            let abs = Path::new(ROOT).join(&file_rel);
            if !abs.exists() {
                broken.push(format!("{doc}: link {target:?}: {} does not exist", file_rel.display()));
                continue;
            }
            if let Some(a) = anchor {
                let md = std::fs::read_to_string(&abs).unwrap_or_default();
                if !anchors(&md).contains(&a) {
                    broken
                        .push(format!("{doc}: link {target:?}: no section with anchor #{a} in {}", file_rel.display()));
                }
            }
        }
    }
    // Citations of a section by name, anywhere in the sources: `README, "Name"`,
    // `README.md's "Name"`, `docs/REFERENCE.md's "Name"`.
    for file in cited_files() {
        let text = std::fs::read_to_string(Path::new(ROOT).join(&file)).unwrap_or_default();
        for (_, doc, section) in citations(&text) {
            let md = read(&doc);
            if !parse(&md).1.contains(&section) {
                broken.push(format!("{file}: cites {doc}'s section {section:?}, which does not exist"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links or section names:\n{}", broken.join("\n"));
}

/// Source and documentation files that may cite a section.
fn cited_files() -> Vec<String> {
    let o = Command::new("git")
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .current_dir(ROOT)
        .output()
        .expect("git must be installed");
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .filter(|f| !f.starts_with("results/") && !f.starts_with("tests/data/") && *f != "tests/readme.rs")
        .filter(|f| [".rs", ".md", ".toml", ".sh", ".sbatch", ".py"].iter().any(|e| f.ends_with(e)))
        .map(str::to_string)
        .collect()
}

/// `(document, section)` for every `README, "X"` / `README.md's "X"` / `docs/F.md's "X"` / `docs/F.md, "X"`.
fn citations(text: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    let ends = text.match_indices(".md").map(|(i, _)| i + 3).chain(text.match_indices("README").map(|(i, _)| i + 6));
    for name_end in ends {
        if text[name_end..].starts_with(".md") {
            continue; // README.md: counted at its ".md"
        }
        let start = text[..name_end].rfind(|c: char| c.is_whitespace() || c == '`' || c == '(').map_or(0, |j| j + 1);
        let doc = match &text[start..name_end] {
            "README" | "README.md" => "README.md".to_string(),
            n if n.starts_with("docs/") => n.to_string(),
            _ => continue,
        };
        let rest = &text[name_end..];
        let rest = rest.strip_prefix('`').unwrap_or(rest);
        let Some(q) = rest.strip_prefix("'s \"").or_else(|| rest.strip_prefix(", \"")) else { continue };
        if let Some(end) = q.find('"') {
            out.push((start, doc, q[..end].to_string()));
        }
    }
    out.sort();
    out
}

#[test]
fn citations_are_found_in_every_spelling() {
    let c: Vec<(String, String)> = citations(
        "see README, \"Install\"; and docs/REFERENCE.md's \"Ranges of numbers\", `README.md`'s \"X\" \
            (README.md, \"Y\"), README \"nope\"",
    )
    .into_iter()
    .map(|(_, d, x)| (d, x))
    .collect();
    assert_eq!(
        c,
        [
            ("README.md".to_string(), "Install".to_string()),
            ("docs/REFERENCE.md".to_string(), "Ranges of numbers".to_string()),
            ("README.md".to_string(), "X".to_string()),
            ("README.md".to_string(), "Y".to_string()),
        ]
    );
}
