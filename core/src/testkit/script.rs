//! The scripted-test format the Paxos and Node script runners share (`core/tests/paxos_scripts.rs`,
//! `core/tests/node_scripts.rs`), in the style of etcd raft's `testdata/*.txt`.
//!
//! A script is a list of blocks:
//!
//! ```text
//! # comment
//! command arg=value ...
//! ----
//! what the command produced, one line per event ("ok" when nothing)
//! ```
//!
//! This module is the format alone: parsing, the command line's arguments, and running a script
//! through a runner's `step` into the rewritten text and the differences. It reads and writes no
//! file (the runners' shared file wrapper is `core/tests/common/script.rs`), so what a runner
//! does with a command is all a runner holds.

use std::collections::BTreeMap;

/// One block: the command, the comments above it and the output the file expects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// The command's line number in the file (1-based).
    pub line: usize,
    /// The comment lines directly above the command, kept when the file is rewritten.
    pub comments: Vec<String>,
    pub command: String,
    pub expected: Vec<String>,
}

/// Parses a script. Panics, naming the line, on a command without its `----`, or on a `----`
/// inside an output (a command that lost its blank line and became output).
pub fn parse(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut comments = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with('#') {
            comments.push(line.to_string());
            continue;
        }
        let sep = lines.next().map(|(_, l)| l);
        assert_eq!(
            sep,
            Some("----"),
            "line {}: expected ---- after command",
            i + 1
        );
        let mut expected = Vec::new();
        while let Some((j, l)) = lines.peek() {
            if l.trim().is_empty() {
                break;
            }
            assert_ne!(
                *l,
                "----",
                "line {}: missing blank line before a command",
                j + 1
            );
            expected.push(l.to_string());
            lines.next();
        }
        blocks.push(Block {
            line: i + 1,
            comments: std::mem::take(&mut comments),
            command: line.to_string(),
            expected,
        });
    }
    blocks
}

/// A command line: its name and its `key=value` arguments (a bare word is a key with an empty
/// value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub name: String,
    pub args: BTreeMap<String, String>,
}

impl Line {
    pub fn parse(text: &str) -> Line {
        let mut parts = text.split_whitespace();
        let name = parts.next().expect("command name").to_string();
        let args = parts
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_string(), v.to_string())
            })
            .collect();
        Line { name, args }
    }

    pub fn has(&self, key: &str) -> bool {
        self.args.contains_key(key)
    }

    /// The value of `key=`; panics naming the command when it is missing.
    pub fn str(&self, key: &str) -> &str {
        self.args
            .get(key)
            .unwrap_or_else(|| panic!("{}: missing {key}=", self.name))
    }

    pub fn num(&self, key: &str) -> u64 {
        let v = self.str(key);
        v.parse()
            .unwrap_or_else(|_| panic!("{}: {key}={v} is not a number", self.name))
    }

    pub fn opt_num(&self, key: &str) -> Option<u64> {
        self.has(key).then(|| self.num(key))
    }

    /// `key=true`.
    pub fn flag(&self, key: &str) -> bool {
        self.args.get(key).is_some_and(|v| v == "true")
    }

    /// A comma-separated list of numbers, `key=1,2,3`.
    pub fn nums(&self, key: &str) -> Vec<u64> {
        let v = self.str(key);
        v.split(',')
            .map(|s| {
                s.parse()
                    .unwrap_or_else(|_| panic!("{}: {key}={v}: {s} is not a number", self.name))
            })
            .collect()
    }
}

/// What running a script gave: the file as it would be rewritten with what each command
/// produced, and one entry per block whose output differs from the file's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub rewritten: String,
    pub diffs: Vec<String>,
}

/// The prefix of a check's line that did not hold. Such a line is a difference from the file,
/// never written by an update.
pub const FAILED: &str = "FAILED";

/// Runs the blocks of `text` through `step` in order (`step` gets the block and `name:line` to
/// name it in panics). An empty output is `ok`. With `update`, a block whose output has a
/// `FAILED` line panics: a failed check is never written into the file.
pub fn run(
    name: &str,
    text: &str,
    update: bool,
    mut step: impl FnMut(&Block, &str) -> Vec<String>,
) -> Outcome {
    let mut out = Outcome::default();
    for block in parse(text) {
        let at = format!("{name}:{}", block.line);
        let mut got = step(&block, &at);
        if got.is_empty() {
            got.push("ok".into());
        }
        if update {
            assert!(
                !got.iter().any(|l| l.starts_with(FAILED)),
                "{at}: `{}` failed a check; not writing it:\n{}",
                block.command,
                got.join("\n")
            );
        }
        if got != block.expected {
            out.diffs.push(format!(
                "{at}: `{}`\n--- expected\n{}\n+++ got\n{}",
                block.command,
                block.expected.join("\n"),
                got.join("\n")
            ));
        }
        for c in &block.comments {
            out.rewritten.push_str(c);
            out.rewritten.push('\n');
        }
        out.rewritten
            .push_str(&format!("{}\n----\n{}\n\n", block.command, got.join("\n")));
    }
    out.rewritten = out.rewritten.trim_end().to_string() + "\n";
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "# first\n# two lines\nset x=1\n----\nok\n\nget x\n----\n1\n";

    #[test]
    fn parses_blocks_with_their_comments_and_lines() {
        let blocks = parse(SCRIPT);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].line, 3);
        assert_eq!(blocks[0].comments, ["# first", "# two lines"]);
        assert_eq!(blocks[0].expected, ["ok"]);
        assert_eq!(blocks[1].command, "get x");
        assert!(blocks[1].comments.is_empty());
    }

    #[test]
    #[should_panic(expected = "line 5: expected ---- after command")]
    fn a_command_without_its_separator_is_refused() {
        parse("a\n----\nok\n\nb\nc\n");
    }

    #[test]
    #[should_panic(expected = "line 4: missing blank line before a command")]
    fn a_separator_in_an_output_is_refused() {
        parse("a\n----\nb\n----\n");
    }

    #[test]
    fn lines_read_their_arguments() {
        let l = Line::parse("propose node=2 cmds=a,b wait=true ids=1,3 bare");
        assert_eq!(l.name, "propose");
        assert_eq!(l.num("node"), 2);
        assert!(l.flag("wait"));
        assert!(!l.flag("cmds"));
        assert_eq!(l.nums("ids"), [1, 3]);
        assert_eq!(l.opt_num("ttl"), None);
        assert!(l.has("bare"));
    }

    #[test]
    fn a_run_rewrites_the_file_and_names_each_difference() {
        let mut x = 0;
        let out = run("t.txt", SCRIPT, false, |b, _| {
            let l = Line::parse(&b.command);
            match l.name.as_str() {
                "set" => {
                    x = l.num("x") + 1;
                    vec![]
                }
                _ => vec![x.to_string()],
            }
        });
        assert_eq!(out.diffs.len(), 1, "{:?}", out.diffs);
        assert!(
            out.diffs[0].starts_with("t.txt:7: `get x`"),
            "{}",
            out.diffs[0]
        );
        assert_eq!(
            out.rewritten,
            "# first\n# two lines\nset x=1\n----\nok\n\nget x\n----\n2\n"
        );
    }

    #[test]
    #[should_panic(expected = "failed a check; not writing it")]
    fn an_update_never_writes_a_failed_check() {
        run("t.txt", "check\n----\nok\n", true, |_, _| {
            vec![format!("{FAILED}: no")]
        });
    }
}
