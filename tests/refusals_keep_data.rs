//! Crafted shards and run records, re-planned or forged campaigns, a second
//! exec on a locked campaign, archives with links, and ranks that stop: each
//! is refused with a named code (`refused[CODE]`) or ends with a named
//! timeout, nothing already written is lost, and nothing crashes. (First
//! found by issue 13's adversarial probe; "Item N" below is that issue's.)
mod common;
use commcanary::core::fsutil;
use commcanary::evidence::shard::Shard;
use common::*;
use sha2::{Digest, Sha256};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

fn stderr_of(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Assert a refusal with `code`, exit 1, no panic or abort.
fn refused(o: &std::process::Output, code: &str) {
    let err = assert_refused(o, code);
    assert_eq!(o.status.code(), Some(1), "expected a refusal with {code} (exit 1), got {:?}\n{err}", o.status);
    assert!(!err.contains("panicked"), "{err}");
}

/// Seal header JSON and body bytes into a shard file exactly as an attacker could.
fn seal(version: u32, header: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = b"CCSHARD\x01".to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(body);
    let d = Sha256::digest(&out);
    out.extend_from_slice(b"CCSHA256");
    out.extend_from_slice(&d);
    out
}

fn rebind_digest(run: &Path, rank: u32, bytes: &[u8]) {
    let p = run.join("run.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    v["shards"][rank as usize]["sha256"] = fsutil::sha256_hex(bytes).into();
    v["shards"][rank as usize]["size_bytes"] = bytes.len().into();
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

fn copy_flat(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Replace rank `rank`'s shard with a re-sealed copy whose header JSON passed through `edit`.
fn reseal_header(run: &Path, rank: u32, edit: &dyn Fn(&mut serde_json::Value)) {
    let p = run.join(format!("rank-{rank:05}.shard"));
    let s = Shard::read(&p).unwrap();
    let mut h = serde_json::to_value(&s.header).unwrap();
    edit(&mut h);
    let body = s.encode().unwrap();
    // body bytes: re-encode through the public API, then take them from the sealed file
    let hlen = u64::from_le_bytes(body[12..20].try_into().unwrap()) as usize;
    let blen_at = 20 + hlen;
    let blen = u64::from_le_bytes(body[blen_at..blen_at + 8].try_into().unwrap()) as usize;
    let body_bytes = body[blen_at + 8..blen_at + 8 + blen].to_vec();
    let bytes = seal(s.header.format_version, &serde_json::to_vec(&h).unwrap(), &body_bytes);
    std::fs::write(&p, &bytes).unwrap();
    rebind_digest(run, rank, &bytes);
}

/// Item 7 (and 4's shard half): crafted, validly sealed shards and run records are refused, not crashed on.
#[test]
fn crafted_shards_and_run_records_are_refused_not_crashed_on() {
    let d = tempfile::tempdir().unwrap();
    let base = run_rank(4, &d.path().join("base"), &["--phases", "blocking", "--tokens", "2", "--layers", "2"]);
    ok(&cc(&["join", base.to_str().unwrap()]));

    // a string length of 2^40 inside the body
    let r = d.path().join("hugestr");
    copy_flat(&base, &r);
    let p = r.join("rank-00001.shard");
    let mut s = Shard::read(&p).unwrap();
    s.body.kernel_names = vec!["ZZZZZZZZZZZZ".into()];
    let sealed = s.encode().unwrap();
    let hlen = u64::from_le_bytes(sealed[12..20].try_into().unwrap()) as usize;
    let blen_at = 20 + hlen;
    let blen = u64::from_le_bytes(sealed[blen_at..blen_at + 8].try_into().unwrap()) as usize;
    let body = &sealed[blen_at + 8..blen_at + 8 + blen];
    let needle = [&[12u8][..], b"ZZZZZZZZZZZZ"].concat();
    let at = body.windows(needle.len()).position(|w| w == needle.as_slice()).expect("kernel name in body");
    let mut crafted = body[..at].to_vec();
    crafted.push(0xFD); // bincode varint: u64 follows
    crafted.extend_from_slice(&(1u64 << 40).to_le_bytes());
    crafted.extend_from_slice(&body[at + 1..]);
    let header = serde_json::to_vec(&s.header).unwrap();
    let bytes = seal(s.header.format_version, &header, &crafted);
    std::fs::write(&p, &bytes).unwrap();
    rebind_digest(&r, 1, &bytes);
    for cmd in [vec!["join", r.to_str().unwrap()], vec!["inspect", p.to_str().unwrap()]] {
        refused(&cc(&cmd), "OVER_LIMIT");
    }

    // members naming a rank outside the world
    let r = d.path().join("members-out");
    copy_flat(&base, &r);
    for rank in 0..4 {
        reseal_header(&r, rank, &|h| h["groups"][0]["members"] = serde_json::json!([0, 1, 2, 3, 7]));
    }
    refused(&cc(&["join", r.to_str().unwrap()]), "BAD_STRUCTURE");

    // a member listed three times (silent double counting)
    let r = d.path().join("members-dup");
    copy_flat(&base, &r);
    for rank in 0..4 {
        reseal_header(&r, rank, &|h| h["groups"][0]["members"] = serde_json::json!([0, 1, 2, 3, 3, 3]));
    }
    refused(&cc(&["join", r.to_str().unwrap()]), "BAD_STRUCTURE");

    // a run record with world_size 0
    let r = d.path().join("world0");
    copy_flat(&base, &r);
    let rp = r.join("run.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&rp).unwrap()).unwrap();
    v["world_size"] = 0.into();
    v["shards"] = serde_json::json!([]);
    std::fs::write(&rp, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    for f in std::fs::read_dir(&r).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|x| x == "shard") {
            std::fs::remove_file(f).unwrap();
        }
    }
    let rs = r.to_str().unwrap();
    refused(&cc(&["join", rs]), "BAD_STRUCTURE");
    refused(&cc(&["summarize", &format!("a={rs}")]), "BAD_STRUCTURE");
    refused(&cc(&["overlap", rs]), "BAD_STRUCTURE");
    let out = d.path().join("trace.json");
    refused(&cc(&["export", "chrome", rs, "-o", out.to_str().unwrap()]), "BAD_STRUCTURE");
    assert!(!out.exists());

    // item 4: one run given twice is one job, not two
    let bs = base.to_str().unwrap();
    refused(&cc(&["summarize", &format!("a={bs}"), &format!("a={bs}")]), "DUPLICATE_RUN");
    let alias = d.path().join("alias");
    symlink(&base, &alias).unwrap();
    refused(&cc(&["summarize", &format!("a={bs}"), &format!("b={}", alias.display())]), "DUPLICATE_RUN");
    // a missing run directory is named as missing, not as an incomplete run
    let o = cc(&["join", "/nonexistent-commcanary-run"]);
    assert!(assert_refused(&o, "NO_SUCH_INPUT").contains("no such run directory"));
}

/// A two-configuration spec; a one-round one (never analyzed in these tests)
/// is declared a `join_part`, which plan requires of a single round.
fn spec(dir: &Path, name: &str, tokens: u32, layers: u32, reps: u32) -> PathBuf {
    let p = dir.join(format!("{name}.toml"));
    let part = reps < 2;
    std::fs::write(
        &p,
        format!(
            r#"
name = "{name}"
backend = "cpu"
ranks = 2
repetitions = {reps}
join_part = {part}
seed = 1
[launcher]
kind = "mpirun"
args = ["--oversubscribe"]
[workload]
phases = "blocking"
tokens = {tokens}
layers = {layers}
iters = 3
[analysis]
tie_policy = "interval"
[[configs]]
name = "ring"
env = {{ OMPI_MCA_coll_libnbc_iallreduce_algorithm = "1" }}
[[configs]]
name = "binomial"
env = {{ OMPI_MCA_coll_libnbc_iallreduce_algorithm = "2" }}
"#
        ),
    )
    .unwrap();
    p
}

fn attempts_text(d: &Path) -> String {
    std::fs::read_to_string(d.join("attempts.jsonl")).unwrap_or_default()
}

/// Items 1 and 3: a re-planned directory is refused; a forged selection of
/// another manifest's runs is refused; a torn append is skipped, never rewritten.
#[test]
fn replanned_campaigns_and_torn_appends() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("c");
    let ds = d.to_str().unwrap();
    ok(&cc(&["campaign", "plan", spec(t.path(), "small", 2, 2, 1).to_str().unwrap(), "-o", ds]));
    ok(&cc_root(&["campaign", "exec", ds]));
    ok(&cc(&["campaign", "select", ds]));
    ok(&cc(&["campaign", "verify", ds]));
    let old_selection = std::fs::read(d.join("selection.json")).unwrap();

    // item 1: delete manifest and selection, plan a changed spec into the same directory
    std::fs::remove_file(d.join("manifest.json")).unwrap();
    std::fs::remove_file(d.join("manifest.sha256")).unwrap();
    std::fs::remove_file(d.join("selection.json")).unwrap();
    let big = spec(t.path(), "big", 6, 3, 1);
    refused(&cc(&["campaign", "plan", big.to_str().unwrap(), "-o", ds]), "CAMPAIGN_STATE");
    assert!(!d.join("manifest.json").exists(), "nothing was planned over the old runs");
    // an attacker puts the new manifest there by hand and forges the old selection onto it
    let fresh = t.path().join("fresh");
    ok(&cc(&["campaign", "plan", big.to_str().unwrap(), "-o", fresh.to_str().unwrap()]));
    for f in ["manifest.json", "manifest.sha256"] {
        std::fs::copy(fresh.join(f), d.join(f)).unwrap();
    }
    let new_sha = std::fs::read_to_string(d.join("manifest.sha256")).unwrap().trim().to_string();
    let mut sel: serde_json::Value = serde_json::from_slice(&old_selection).unwrap();
    sel["manifest_sha256"] = new_sha.into();
    std::fs::write(d.join("selection.json"), serde_json::to_vec_pretty(&sel).unwrap()).unwrap();
    let o = cc(&["campaign", "verify", ds]);
    assert_refused(&o, "STALE_MANIFEST");

    // item 3: a torn final line (as ENOSPC leaves it) is recognized, reported and skipped
    let t2 = t.path().join("torn");
    let t2s = t2.to_str().unwrap();
    ok(&cc(&["campaign", "plan", spec(t.path(), "torn", 2, 2, 2).to_str().unwrap(), "-o", t2s]));
    ok(&cc_root(&["campaign", "exec", t2s, "--cell", "1"]));
    let good = attempts_text(&t2);
    let torn = &good[..good.len() / 2];
    let mut f = std::fs::OpenOptions::new().append(true).open(t2.join("attempts.jsonl")).unwrap();
    std::io::Write::write_all(&mut f, torn.as_bytes()).unwrap();
    drop(f);
    let o = cc_root(&["campaign", "exec", t2s]);
    ok(&o);
    assert!(stderr_of(&o).contains("torn"), "the torn line is reported: {}", stderr_of(&o));
    let after = attempts_text(&t2);
    assert!(after.starts_with(&format!("{good}{torn}")), "nothing is rewritten");
    ok(&cc(&["campaign", "select", t2s]));
    ok(&cc(&["campaign", "verify", t2s]));

    // item 2: attempts that overlapped in time on one host are refused by verify
    let t3 = t.path().join("overlap");
    std::fs::create_dir_all(&t3).unwrap();
    for e in ["manifest.json", "manifest.sha256", "selection.json"] {
        std::fs::copy(t2.join(e), t3.join(e)).unwrap();
    }
    let status = std::process::Command::new("cp")
        .args(["-r", t2.join("runs").to_str().unwrap(), t3.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut recs: Vec<serde_json::Value> = after.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let first_start = recs[0]["started_unix_ms"].as_u64().unwrap();
    recs[1]["started_unix_ms"] = (first_start + 1).into();
    std::fs::write(t3.join("attempts.jsonl"), recs.iter().map(|r| r.to_string() + "\n").collect::<String>()).unwrap();
    let o = cc(&["campaign", "verify", t3.to_str().unwrap()]);
    assert_refused(&o, "OVERLAPPING_ATTEMPTS");
    // issue 27: under srun, exec's host is not where the ranks ran (exec --resume on a
    // login node, an array task's exec on the allocation's first node): two execs on
    // different hosts whose ranks ran on one node at once still overlap there
    recs[0]["host"] = "login-node".into();
    recs[1]["host"] = "compute-node-1".into();
    std::fs::write(t3.join("attempts.jsonl"), recs.iter().map(|r| r.to_string() + "\n").collect::<String>()).unwrap();
    let o = cc(&["campaign", "verify", t3.to_str().unwrap()]);
    assert_refused(&o, "OVERLAPPING_ATTEMPTS");
    let rank_host = recs[0]["shards"][0]["host"].as_str().unwrap().to_string();
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr_of(&o));
    assert!(said.contains(&format!("on the same host ({rank_host})")), "names the ranks' host: {said}");
}

/// Item 2: a second exec on a locked campaign is refused by name; select and archive too.
#[test]
fn a_second_exec_is_refused_while_the_first_holds_the_campaign() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("c");
    let ds = d.to_str().unwrap();
    ok(&cc(&["campaign", "plan", spec(t.path(), "lock", 40, 4, 2).to_str().unwrap(), "-o", ds]));
    let mut first = std::process::Command::new(bin())
        .args(["campaign", "exec", ds])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // wait until the first exec has its job running
    let t0 = std::time::Instant::now();
    while !d.join("runs").exists() && t0.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    refused(&cc_root(&["campaign", "exec", ds]), "LOCKED");
    refused(&cc_root(&["campaign", "exec", ds, "--cell", "2"]), "LOCKED");
    refused(&cc(&["campaign", "select", ds]), "LOCKED");
    let tar = t.path().join("c.tar");
    refused(&cc(&["campaign", "archive", ds, "-o", tar.to_str().unwrap()]), "LOCKED");
    // kill exec outright: its job's process group goes with it, and the next exec records the interruption
    first.kill().unwrap();
    first.wait().unwrap();
    let o = cc_root(&["campaign", "exec", ds]);
    ok(&o);
    let recs: Vec<serde_json::Value> = attempts_text(&d).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(recs.iter().any(|r| r["failure"].as_str().is_some_and(|f| f.contains("interrupted"))), "{recs:?}");
    let ids: Vec<&str> = recs.iter().map(|r| r["attempt_id"].as_str().unwrap()).collect();
    let uniq: std::collections::BTreeSet<&&str> = ids.iter().collect();
    assert_eq!(uniq.len(), ids.len(), "attempt ids are never reused: {ids:?}");
    ok(&cc(&["campaign", "select", ds]));
    ok(&cc(&["campaign", "verify", ds]));
}

/// Item 9: archive refuses links and an output inside the campaign; check-archive inspects members.
#[test]
fn archive_refuses_links_and_its_own_output_and_check_archive_inspects_members() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("c");
    let ds = d.to_str().unwrap();
    ok(&cc(&["campaign", "plan", spec(t.path(), "arc", 2, 2, 1).to_str().unwrap(), "-o", ds]));
    // output inside the campaign
    let inside = d.join("c.tar");
    refused(&cc(&["campaign", "archive", ds, "-o", inside.to_str().unwrap()]), "ARCHIVE_OUTPUT_INSIDE");
    assert!(!inside.exists());
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2, "no temporary file is left in the campaign");
    // a link to a secret outside
    let secret = t.path().join("secret.txt");
    std::fs::write(&secret, "do not archive").unwrap();
    symlink(&secret, d.join("notes.txt")).unwrap();
    let tar = t.path().join("c.tar");
    refused(&cc(&["campaign", "archive", ds, "-o", tar.to_str().unwrap()]), "ARCHIVE_LINK");
    std::fs::remove_file(d.join("notes.txt")).unwrap();
    // a symlink loop
    symlink(&d, d.join("loop")).unwrap();
    refused(&cc(&["campaign", "archive", ds, "-o", tar.to_str().unwrap()]), "ARCHIVE_LINK");
    std::fs::remove_file(d.join("loop")).unwrap();
    assert!(!tar.exists());
    ok(&cc_root(&["campaign", "exec", ds]));
    ok(&cc(&["campaign", "select", ds]));
    ok(&cc(&["campaign", "archive", ds, "-o", tar.to_str().unwrap()]));
    let desc = t.path().join("c.tar.descriptor.json");
    ok(&cc(&["campaign", "check-archive", tar.to_str().unwrap(), desc.to_str().unwrap()]));

    // an archive with a hostile member name, sealed into a matching descriptor
    for (name, kind) in
        [("../x", tar::EntryType::Regular), ("/abs", tar::EntryType::Regular), ("c/link", tar::EntryType::Symlink)]
    {
        let evil = t.path().join(format!("evil-{}.tar", name.replace('/', "_")));
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(if kind == tar::EntryType::Regular { 3 } else { 0 });
        h.set_mode(0o644);
        {
            let raw = h.as_old_mut();
            raw.name[..name.len()].copy_from_slice(name.as_bytes());
            if kind == tar::EntryType::Symlink {
                raw.linkname[..4].copy_from_slice(b"/etc");
            }
        }
        h.set_cksum();
        b.append(&h, if kind == tar::EntryType::Regular { &b"abc"[..] } else { &b""[..] }).unwrap();
        let bytes = b.into_inner().unwrap();
        std::fs::write(&evil, &bytes).unwrap();
        let mut dj: serde_json::Value = serde_json::from_slice(&std::fs::read(&desc).unwrap()).unwrap();
        dj["archive_size_bytes"] = bytes.len().into();
        dj["archive_sha256"] = fsutil::sha256_hex(&bytes).into();
        let ed = t.path().join(format!("evil-{}.json", name.replace('/', "_")));
        std::fs::write(&ed, serde_json::to_vec(&dj).unwrap()).unwrap();
        refused(&cc(&["campaign", "check-archive", evil.to_str().unwrap(), ed.to_str().unwrap()]), "ARCHIVE_MEMBER");
    }
}

/// Item 11: a stopped rank ends a CPU job with a collective-timeout message
/// instead of leaving its peers spinning forever.
#[test]
fn a_hung_cpu_peer_ends_the_job_with_a_message() {
    let d = tempfile::tempdir().unwrap();
    let t0 = std::time::Instant::now();
    let o = mpirun(
        2,
        &[
            "rank",
            "-q",
            "--backend",
            "cpu",
            "--phases",
            "blocking",
            "--tokens",
            "4",
            "--layers",
            "2",
            "--fault",
            "hang:1:3",
            "--collective-timeout-s",
            "3",
            "--out",
            d.path().to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    let err = stderr_of(&o);
    assert!(err.contains("collective timeout"), "{err}");
    assert!(t0.elapsed().as_secs() < 60, "took {:?}", t0.elapsed());
}

/// Item 11: `exec --cell-timeout-s` ends a cell's job that runs too long and records it failed.
#[test]
fn exec_ends_a_cell_that_outlives_its_timeout() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("c");
    let ds = d.to_str().unwrap();
    let sp = spec(t.path(), "slow", 2, 2, 1);
    let text = std::fs::read_to_string(&sp)
        .unwrap()
        .replace("name = \"binomial\"", "name = \"binomial\"\nargs = [\"--fault\", \"hang:1:3\"]");
    std::fs::write(&sp, text).unwrap();
    ok(&cc(&["campaign", "plan", sp.to_str().unwrap(), "-o", ds]));
    let t0 = std::time::Instant::now();
    let o = cc_root(&["campaign", "exec", ds, "--cell-timeout-s", "5"]);
    assert!(t0.elapsed().as_secs() < 90, "took {:?}", t0.elapsed());
    let _ = o;
    let recs: Vec<serde_json::Value> = attempts_text(&d).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let slow = recs.iter().find(|r| r["label"] == "binomial").expect("the slow cell is recorded");
    assert_eq!(slow["status"], "failed");
    assert!(slow["failure"].as_str().unwrap().contains("cell timeout"), "{slow}");
    assert!(recs.iter().any(|r| r["label"] == "ring" && r["status"] == "succeeded"));
}

/// Whether process `pid` still exists (and is not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
        .unwrap_or(false)
}

/// SIGKILL a process this test stopped, if it is still there.
fn kill_stopped(pid_file: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(pid_file).ok()?.trim().parse().ok()?;
    if alive(pid) {
        let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    Some(pid)
}

/// Item 11: a rank stopped with SIGSTOP (`COMMCANARY_TEST_STOP_AT`) at the
/// clock calibration, before the first phase or before the digest gather
/// ends the job: the others fail with `refused[COLLECTIVE_TIMEOUT]` naming
/// the operation, the phase and the peer when known, within the timeout,
/// with non-zero exit; the shards already written stay.
#[test]
fn a_stopped_rank_ends_the_others_with_a_named_timeout() {
    let limit_s = 8;
    for (point, expect) in [
        ("clock", &["ping-pong (clock calibration, start window)", "rank 1 is stopped"][..]),
        ("phase", &["barrier before the phase (phase blocking)"][..]),
        ("gather", &["gather of the shard digests (after the shards are written)"][..]),
    ] {
        let d = tempfile::tempdir().unwrap();
        let pid_file = d.path().join("stopped.pid");
        let (out, err) = (d.path().join("stdout"), d.path().join("stderr"));
        let t0 = std::time::Instant::now();
        let (guard, mut child) = mpirun_spawn(
            2,
            &[
                "rank",
                "-q",
                "--backend",
                "cpu",
                "--phases",
                "blocking",
                "--tokens",
                "4",
                "--layers",
                "2",
                "--clock-samples",
                "20",
                "--collective-timeout-s",
                &limit_s.to_string(),
                "--run-id",
                "r",
                "--out",
                d.path().join("out").to_str().unwrap(),
            ],
            &[("COMMCANARY_TEST_STOP_AT", point), ("COMMCANARY_TEST_STOP_PID_FILE", pid_file.to_str().unwrap())],
            &out,
            &err,
        );
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > std::time::Duration::from_secs(120) {
                kill_stopped(&pid_file);
                let _ = child.kill();
                panic!("{point}: the job still ran after 120 s: {}", std::fs::read_to_string(&err).unwrap_or_default());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let took = t0.elapsed();
        drop(guard);
        let stopped = kill_stopped(&pid_file);
        let text = std::fs::read_to_string(&err).unwrap();
        assert!(stopped.is_some(), "{point}: no rank stopped itself: {text}");
        assert!(!status.success(), "{point}: {text}");
        assert!(text.contains("refused[COLLECTIVE_TIMEOUT]"), "{point}: {text}");
        for e in expect {
            assert!(text.contains(e), "{point}: expected {e:?} in {text}");
        }
        assert!(took.as_secs() < limit_s + 60, "{point}: took {took:?}");
        if point == "gather" {
            // both shards were written before the gather; run.json never is
            let run = d.path().join("out").join("r");
            assert!(run.join("rank-00000.shard").exists() && run.join("rank-00001.shard").exists());
            assert!(!run.join("run.json").exists());
        }
    }
}

/// Item 11: `exec --cell-timeout-s` stops the job of a cell whose rank was
/// stopped with SIGSTOP (the collective timeout left at its 300 s default),
/// kills the stopped rank with it, and records the cell failed.
#[test]
fn exec_cell_timeout_ends_a_job_with_a_stopped_rank() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("c");
    let ds = d.to_str().unwrap();
    let pid_file = t.path().join("stopped.pid");
    let sp = spec(t.path(), "stopped", 2, 2, 1);
    let text = std::fs::read_to_string(&sp).unwrap().replace(
        "OMPI_MCA_coll_libnbc_iallreduce_algorithm = \"2\" }",
        &format!(
            "OMPI_MCA_coll_libnbc_iallreduce_algorithm = \"2\", COMMCANARY_TEST_STOP_AT = \"clock\", \
                COMMCANARY_TEST_STOP_PID_FILE = \"{}\" }}",
            pid_file.display()
        ),
    );
    std::fs::write(&sp, text).unwrap();
    ok(&cc(&["campaign", "plan", sp.to_str().unwrap(), "-o", ds]));
    let t0 = std::time::Instant::now();
    let o = cc_root(&["campaign", "exec", ds, "--cell-timeout-s", "5"]);
    let took = t0.elapsed();
    let pid: u32 = std::fs::read_to_string(&pid_file).expect("the rank stopped itself").trim().parse().unwrap();
    let still_there = alive(pid);
    kill_stopped(&pid_file);
    assert!(!still_there, "the stopped rank {pid} outlived its job: {}", stderr_of(&o));
    assert!(took.as_secs() < 90, "took {took:?}");
    let recs: Vec<serde_json::Value> = attempts_text(&d).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let stopped = recs.iter().find(|r| r["label"] == "binomial").expect("the stopped cell is recorded");
    assert_eq!(stopped["status"], "failed");
    assert!(stopped["failure"].as_str().unwrap().contains("cell timeout"), "{stopped}");
    assert!(recs.iter().any(|r| r["label"] == "ring" && r["status"] == "succeeded"));
}
