//! `commcanary` binary: parse, run the command layer ([`commcanary::cli::command`]),
//! print the error chain, exit non-zero on failure.
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match commcanary::cli::Cli::try_parse() {
        Ok(c) => c,
        // validate's exit codes 1 and 2 are verdicts: its argument errors exit 3
        Err(e) if e.use_stderr() && std::env::args().nth(1).as_deref() == Some("validate") => {
            if commcanary::rank::is_lead_process() {
                let _ = e.print();
            }
            commcanary::rank::let_the_lead_print_first();
            return ExitCode::from(commcanary::validate::EXIT_COULD_NOT_RUN as u8);
        }
        Err(e) => e.exit(),
    };
    match commcanary::cli::command::run(cli, &mut std::io::stdout()) {
        Ok(code) => code,
        Err(e) => {
            commcanary::rank::print_fatal_error(&format!("{e:#}"));
            ExitCode::FAILURE
        }
    }
}
