//! What distlock makes from its own command line: shell completions, man
//! pages and the examples of `--help`.

mod common;

use std::process::Command;

use common::*;

/// The commands a user runs; the hidden ones must appear nowhere.
const COMMANDS: [&str; 8] = [
    "run",
    "status",
    "elect",
    "leader",
    "bench",
    "torture",
    "completions",
    "man",
];
const HIDDEN: [&str; 2] = ["__watchdog", "__torture-worker"];

fn stdout_of(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn bash_completion_completes_the_commands_and_their_flags() {
    let script = stdout_of(&["completions", "bash"]);
    assert!(script.contains("complete "), "{script}");
    for name in COMMANDS {
        assert!(script.contains(name), "{name} missing");
    }
    for name in HIDDEN {
        assert!(!script.contains(name), "hidden {name} offered");
    }
    // What bash offers after `distlock st<TAB>` and `distlock status --j<TAB>`.
    let complete = |words: &str| {
        let program = format!(
            "{script}\nCOMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))\n\
             _distlock distlock \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
             echo \"${{COMPREPLY[@]}}\""
        );
        let out = Command::new("bash")
            .args(["--norc", "-c", &program])
            .output()
            .expect("bash runs the completion script");
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(complete("distlock st").trim(), "status");
    assert_eq!(complete("distlock status --j").trim(), "--json");
}

#[test]
fn zsh_and_fish_completions_name_the_commands() {
    let zsh = stdout_of(&["completions", "zsh"]);
    assert!(zsh.starts_with("#compdef distlock"), "{zsh}");
    let fish = stdout_of(&["completions", "fish"]);
    assert!(fish.contains("complete -c distlock"), "{fish}");
    for name in COMMANDS {
        assert!(zsh.contains(name) && fish.contains(name), "{name} missing");
    }
    for name in HIDDEN {
        assert!(!zsh.contains(name) && !fish.contains(name), "hidden {name}");
    }
}

#[test]
fn a_shell_it_does_not_know_is_a_usage_error() {
    let out = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(stderr(&out).contains("bash"), "lists the shells");
}

#[test]
fn man_prints_a_roff_page_with_examples() {
    let page = stdout_of(&["man"]);
    assert!(page.starts_with('.'), "roff starts with a request: {page}");
    assert!(page.contains(".TH distlock 1 "), "{page}");
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH EXAMPLES",
        ".SH \"EXIT STATUS\"",
    ] {
        assert!(page.contains(section), "{section} missing:\n{page}");
    }
    assert!(page.contains("distlock\\-run(1)"), "points to the run page");
    for name in HIDDEN {
        assert!(!page.contains(&name.replace('-', "\\-")), "hidden {name}");
    }
    // Examples keep their lines: roff's no-fill mode around them.
    let examples = page.split(".SH EXAMPLES\n").nth(1).unwrap();
    assert!(examples.starts_with(".nf\n"), "{examples}");

    let run = stdout_of(&["man", "run"]);
    assert!(run.contains(".TH distlock-run 1 "), "{run}");
    assert!(run.contains("DISTLOCK_TOKEN") && run.contains("\\-\\-no\\-wait"));
}

#[test]
fn man_out_writes_a_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    stdout_of(&["man", "--out", out.to_str().unwrap()]);
    let mut pages: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    let mut expected: Vec<String> = COMMANDS.iter().map(|c| format!("distlock-{c}.1")).collect();
    expected.push("distlock.1".to_owned());
    expected.sort();
    assert_eq!(pages, expected);
    assert_eq!(read(&out.join("distlock.1")), stdout_of(&["man"]));

    let missing = Command::new(BIN).args(["man", "nope"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(64));
    assert!(
        stderr(&missing).contains("run, status"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn help_shows_examples_for_the_top_level_and_its_commands() {
    for (args, example) in [
        (&["--help"][..], "distlock run --name"),
        (&["run", "--help"], "--no-wait -- ./cleanup.sh"),
        (
            &["status", "--help"],
            "distlock status --name deploy --json",
        ),
        (
            &["elect", "--help"],
            "--name scheduler --again -- ./scheduler",
        ),
        (&["leader", "--help"], "--name api --watch --json"),
    ] {
        let help = stdout_of(args);
        let examples = help
            .split("Examples:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{args:?}: no Examples section:\n{help}"));
        assert!(examples.contains(example), "{args:?}:\n{help}");
        assert!(examples.starts_with("  "), "indented: {args:?}:\n{help}");
    }
    let status = stdout_of(&["status", "--help"]);
    assert!(
        status.contains("\"expires_in_ms\""),
        "the JSON shape: {status}"
    );
}
