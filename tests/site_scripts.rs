//! The site scripts act only on what is theirs: `sim-cluster.sh down`
//! removes (and kills what is recorded in) only a state directory that `up`
//! made and marked, and judges a recorded daemon by its pid *and* start
//! time; `validate-partition.sh` reads each node's result by its exact name,
//! never another node's whose name starts with it. Neither needs Slurm or
//! namespaces here: `down` refuses before it touches anything, `status` only
//! reads, and Slurm's `sinfo`/`sbatch` are stand-ins on PATH.
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn sim(state: &Path, cmd: &str) -> Output {
    Command::new("bash")
        .arg(format!("{ROOT}/scripts/dev/sim-cluster.sh"))
        .arg(cmd)
        .env("SIM_STATE", state)
        .output()
        .unwrap()
}

fn start_time(pid: u32) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(19).unwrap().to_string()
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 checks only that the process exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// A directory `up` did not make (a home, another tool's state, a typo),
/// holding files and a pids/ entry that names a live process in every
/// format: `down` refuses, kills nothing and removes nothing.
#[test]
fn sim_cluster_down_leaves_a_directory_up_did_not_make() {
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("sim-cluster.sh needs root; skipped");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let mut victim = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = victim.id();
    let variants: [(&str, String); 3] = [
        ("home", format!("{pid}\n")),
        ("other-tool", format!("{pid} {}\n", start_time(pid))),
        ("marked-wrongly", format!("{pid}\n")),
    ];
    for (name, line) in &variants {
        let state = t.path().join(name);
        std::fs::create_dir_all(state.join("pids")).unwrap();
        std::fs::create_dir_all(state.join("uts")).unwrap();
        std::fs::write(state.join("pids/victim"), line).unwrap();
        std::fs::write(state.join("precious.txt"), b"not the cluster's").unwrap();
        if *name == "marked-wrongly" {
            // a mark file that is not up's
            std::fs::write(state.join(".sim-cluster-state"), b"something else\n").unwrap();
        }
        let o = sim(&state, "down");
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{name}: refused\n{err}");
        assert!(err.contains("is not a state directory that 'sim-cluster.sh up' made"), "{name}: {err}");
        assert!(state.join("precious.txt").exists() && state.join("pids/victim").exists(), "{name}: nothing removed");
        assert!(alive(pid), "{name}: the recorded process was not killed");
    }
    // a symbolic link to a directory is not one up made either
    let link = t.path().join("link");
    symlink(t.path().join("home"), &link).unwrap();
    assert!(!sim(&link, "down").status.success());
    assert!(t.path().join("home/precious.txt").exists() && alive(pid));
    victim.kill().unwrap();
    victim.wait().unwrap();
}

/// A recorded daemon is the pid with its start time: `status` of a marked
/// state calls the recorded process running only while that very process
/// runs, not a later one with its pid (a wrong start time), nor a pid alone.
#[test]
fn sim_cluster_judges_a_recorded_daemon_by_pid_and_start_time() {
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("sim-cluster.sh needs root; skipped");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let state = t.path().join("state");
    std::fs::create_dir_all(state.join("pids")).unwrap();
    std::fs::write(state.join(".sim-cluster-state"), b"commcanary sim-cluster state v1\nmade by a test\n").unwrap();
    std::fs::write(state.join("nodes"), b"").unwrap();
    let mut d = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = d.id();
    let st: u64 = start_time(pid).parse().unwrap();
    for (name, line, running) in [
        ("same", format!("{pid} {st}"), true),
        ("reused", format!("{pid} {}", st + 1), false),
        ("pid-only", format!("{pid}"), false),
        ("garbage", "x y".to_string(), false),
    ] {
        std::fs::write(state.join("pids").join(name), line).unwrap();
        let o = sim(&state, "status");
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        let row = out.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {out}"));
        assert_eq!(row.ends_with("running"), running, "{name}: {row}");
        std::fs::remove_file(state.join("pids").join(name)).unwrap();
    }
    d.kill().unwrap();
    d.wait().unwrap();
}

/// `validate-partition.sh` with stand-ins for sinfo and sbatch: a node
/// whose job left no result is could-not-run, even when another node's name
/// starts with its own and that node passed; only the nodes that passed are
/// in the `scontrol ... state=resume` line. Several name shapes, with the job
/// id in sbatch's log and without it.
#[test]
fn validate_partition_reads_each_nodes_own_result() {
    for (short, long, job_in_log) in
        [("n1", "n1-2", true), ("gpu1", "gpu1-10", true), ("a", "a-1-1", true), ("n1", "n1-2", false)]
    {
        let t = tempfile::tempdir().unwrap();
        let bin = t.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("sinfo"), format!("#!/bin/bash\nprintf '%s idle\\n%s idle\\n' {short} {long}\n"))
            .unwrap();
        // the long-named node's job passes (job 124); the short one's leaves no result (job 101)
        std::fs::write(
            bin.join("sbatch"),
            format!(
                "#!/bin/bash\nfor a; do case $a in --nodelist=*) n=${{a#*=}};; esac; done\n\
                 if [ \"$n\" = {short} ]; then job=101; else job=124; fi\n\
                 {}\n\
                 if [ \"$n\" = {long} ]; then mkdir -p \"$VALIDATE_OUT/$n-$job\"; printf \
                     '{{\"verdict\":\"pass\",\"checks\":[]}}' > \"$VALIDATE_OUT/$n-$job/report.json\"; echo 0 > \
                         \"$VALIDATE_OUT/$n-$job.exit\"; echo log > \"$VALIDATE_OUT/$n-$job.out\"; fi\n",
                if job_in_log { "echo \"Submitted batch job $job\"" } else { ":" }
            ),
        )
        .unwrap();
        for f in ["sinfo", "sbatch"] {
            Command::new("chmod").arg("+x").arg(bin.join(f)).status().unwrap();
        }
        let out = t.path().join("out");
        let o = Command::new("bash")
            .arg(format!("{ROOT}/scripts/validate-partition.sh"))
            .args(["part", "/nonexistent-ref"])
            .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()))
            .env("VALIDATE_OUT", &out)
            .env("VALIDATE_TIMEOUT_S", "60")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        let what =
            format!("{short}/{long} (job id in log: {job_in_log})\n{text}\n{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(3), "{what}");
        let row = |n: &str| {
            text.lines()
                .find(|l| l.split_whitespace().next() == Some(n))
                .unwrap_or_else(|| panic!("row {n}: {what}"))
                .to_string()
        };
        assert!(row(short).contains("could-not-run"), "{what}");
        assert!(row(long).contains("pass"), "{what}");
        assert!(text.contains(&format!("scontrol update nodename={long} state=resume")), "{what}");
    }
}
