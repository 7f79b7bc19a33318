//! The help a user reads: every option and argument says what it is, every command shows an
//! example, and the global options are listed under their own heading, apart from each command's.

use clap::CommandFactory;

use crate::Cli;

/// Every command of the tree, with its path (`cwsbx sandbox run`).
fn commands(command: &clap::Command, path: String, into: &mut Vec<(String, clap::Command)>) {
    for sub in command.get_subcommands() {
        let sub_path = format!("{path} {}", sub.get_name());
        into.push((sub_path.clone(), sub.clone()));
        commands(sub, sub_path, into);
    }
}

fn all_commands() -> Vec<(String, clap::Command)> {
    let mut cli = Cli::command();
    cli.build();
    let mut found = vec![("cwsbx".to_owned(), cli.clone())];
    commands(&cli, "cwsbx".to_owned(), &mut found);
    found
}

#[test]
fn every_option_and_argument_has_a_description() {
    let mut missing = Vec::new();
    for (path, command) in all_commands() {
        if path.split(' ').any(|part| part == "help") {
            continue;
        }
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{path}: {id}"));
            }
        }
    }
    assert!(missing.is_empty(), "without a description:\n{}", missing.join("\n"));
}

#[test]
fn every_command_shows_an_example() {
    let missing: Vec<String> = all_commands()
        .into_iter()
        .filter(|(path, _)| !path.split(' ').any(|part| part == "help"))
        .filter(|(_, command)| {
            let after = command.get_after_help().map(|help| help.to_string()).unwrap_or_default();
            let long = command.get_after_long_help().map(|help| help.to_string()).unwrap_or_default();
            !(after.contains("Example") || long.contains("Example"))
        })
        .map(|(path, _)| path)
        .collect();
    assert!(missing.is_empty(), "without an example:\n{}", missing.join("\n"));
}

#[test]
fn global_options_have_a_heading_of_their_own() {
    let mut cli = Cli::command();
    cli.build();
    let run = cli
        .find_subcommand_mut("sandbox")
        .and_then(|sandbox| sandbox.find_subcommand_mut("run"))
        .expect("sandbox run")
        .render_long_help()
        .to_string();
    let global = run.find(crate::GLOBAL).expect("a global options heading");
    for option in ["--base-url", "--api-key", "--output", "--control-plane-url"] {
        let at = run.find(option).unwrap_or_else(|| panic!("{option} in:\n{run}"));
        assert!(at > global, "{option} is listed with the command's own options:\n{run}");
    }
    let own = run.find("--cpu-request").expect("the command's own option");
    assert!(own < global, "the command's own options come first:\n{run}");
}
