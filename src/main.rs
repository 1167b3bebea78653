//! `commcanary` binary: parse, run the command layer ([`commcanary::cli::command`]),
//! print the error chain, exit non-zero on failure.
use clap::Parser;
use commcanary::cli::command;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match commcanary::cli::Cli::try_parse() {
        Ok(c) => c,
        // An argument error, met by every rank of a job alike: the lead prints
        // it at once; another rank waits for the launcher to stop the job and
        // prints it, tagged with its rank, only if it is still running (a lead
        // that never printed, or an error this rank alone met).
        // validate's exit codes 1 and 2 are verdicts: its argument errors exit 3.
        Err(e) if e.use_stderr() => {
            if commcanary::rank::is_lead_process() {
                let _ = e.print();
            } else {
                let text = e.render().to_string();
                commcanary::rank::print_fatal_error(text.trim_start_matches("error: ").trim_end());
            }
            let validate = std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new("validate"));
            return ExitCode::from(if validate { commcanary::validate::EXIT_COULD_NOT_RUN as u8 } else { 2 });
        }
        Err(e) => e.exit(),
    };
    match command::run(cli, &mut std::io::stdout()) {
        Ok(code) => code,
        Err(e) => {
            commcanary::rank::print_fatal_error(&format!("{e:#}"));
            ExitCode::FAILURE
        }
    }
}
