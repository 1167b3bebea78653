//! Embeds the git commit and dirty state so `commcanary --version` and every shard
//! can say which source produced them.
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) if s.is_empty() => "clean",
        Some(_) => "dirty",
        None => "unknown",
    };
    println!("cargo:rustc-env=COMMCANARY_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=COMMCANARY_GIT_DIRTY={dirty}");
    // Where git keeps them: in a linked worktree (`git worktree add`) `.git` is a
    // file, HEAD and index live under the main repository's .git/worktrees/NAME
    // and the refs in its common directory; `.git/HEAD` would not exist there,
    // and the commit stamped at the first build would never be refreshed.
    for p in ["HEAD", "index", "refs/heads", "packed-refs"] {
        if let Some(path) = git(&["rev-parse", "--git-path", p]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    // An edit to the source changes the dirty state without touching git's
    // index, so the stamp is refreshed whenever the sources the crate is built
    // from change (cargo compares the newest mtime under a directory).
    for p in ["src", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={p}");
    }
}
