//! The approver's acknowledgement of a force-release: `--ack fenced|advisory`, or, without it
//! and at a terminal, a prompt that shows the request and the safety statement and asks the
//! operator to type the class kind.
//!
//! Typing the kind (not `y`) is the point: an approver who did not read whether the class is
//! fenced cannot answer by reflex. Anything else (a wrong word, an empty line, end of input)
//! refuses and nothing is sent to the server.

use std::io::{BufRead, Read, Write};

use picket_proto::proto;

use super::render::fenced_words;
use super::{Ack, CtlError};

/// Longest answer line read from the operator; a longer one is refused unread.
const ANSWER_LEN_MAX: usize = 64;

/// How the acknowledgement is obtained.
pub enum Confirm<'a> {
    /// From `--ack` (`None`: not given and no terminal to ask at).
    Flag(Option<Ack>),
    /// No `--ack` and stdin is a terminal: ask on `output`, read the answer from `input`.
    Prompt {
        input: &'a mut (dyn BufRead + Send),
        output: &'a mut (dyn Write + Send),
    },
}

impl Confirm<'_> {
    /// The acknowledgement for `request`, which must name its class kind; otherwise a
    /// [`CtlError::Refused`] that says what the kind is and how to acknowledge it.
    ///
    /// `key_now` is the key's inspection as text, shown by the prompt before the request.
    pub fn acknowledge(
        self,
        request: &proto::ForceReleaseInfo,
        key_now: &str,
    ) -> Result<Ack, CtlError> {
        let shown = Ack::from_fenced(request.fenced);
        let said = match self {
            Confirm::Flag(Some(ack)) if ack == shown => return Ok(ack),
            Confirm::Flag(Some(ack)) => format!(
                "You acknowledged --ack {}, which does not match.",
                ack.word()
            ),
            Confirm::Flag(None) => {
                "You did not say what you acknowledge (--ack was not given and stdin is not a \
                 terminal to ask at)."
                    .to_owned()
            }
            Confirm::Prompt { input, output } => match prompt(request, key_now, input, output)? {
                Some(ack) if ack == shown => return Ok(ack),
                Some(ack) => format!("You typed `{}`, which does not match.", ack.word()),
                None => "You did not type the class kind.".to_owned(),
            },
        };
        // The refusal states the kind and why it matters; it does not hand over the flag to
        // paste, which would turn "type the kind" into a rubber stamp.
        Err(CtlError::Refused(format!(
            "force-release #{} of {}/{} (token {}): the key's class is {}.\n{}\n{}\n{said}\n\
             Nothing was done. Read the above and the key's inspection (picketctl inspect {} \
             '{}'), then approve again at a terminal and type the class kind when asked, or pass \
             --ack with the kind you checked.",
            request.id,
            request.namespace,
            request.key,
            request.token,
            shown.word().to_uppercase(),
            fenced_words(request.fenced),
            request.safety,
            request.namespace,
            request.key,
        )))
    }
}

/// Shows the request and asks for the class kind. `Some(ack)` when the operator typed
/// `fenced` or `advisory` (whether or not it matches), `None` for anything else.
fn prompt(
    request: &proto::ForceReleaseInfo,
    key_now: &str,
    input: &mut (dyn BufRead + Send),
    output: &mut (dyn Write + Send),
) -> Result<Option<Ack>, CtlError> {
    let shown = Ack::from_fenced(request.fenced);
    let io = |e: std::io::Error| CtlError::Io(format!("cannot ask for the acknowledgement: {e}"));
    write!(
        output,
        "{key_now}\nforce-release #{} of {}/{}\n  holder session {}, token {}\n  requested by {}: {:?}\n  \
         revoke the holder's session: {}\n\nclass kind: {}\n{}\n{}\n\nType `{}` to approve \
         (anything else refuses): ",
        request.id,
        request.namespace,
        request.key,
        request.holder_session_id,
        request.token,
        request.requester,
        request.reason,
        if request.revoke_session { "yes" } else { "no" },
        shown.word(),
        fenced_words(request.fenced),
        request.safety,
        shown.word(),
    )
    .map_err(io)?;
    output.flush().map_err(io)?;
    let mut answer = String::new();
    let read = Read::take(input, ANSWER_LEN_MAX as u64)
        .read_line(&mut answer)
        .map_err(io)?;
    if read == 0 {
        writeln!(output).map_err(io)?;
    }
    Ok(match answer.trim().to_ascii_lowercase().as_str() {
        "fenced" => Some(Ack::Fenced),
        "advisory" => Some(Ack::Advisory),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(fenced: bool) -> proto::ForceReleaseInfo {
        proto::ForceReleaseInfo {
            id: 7,
            namespace: "orders".into(),
            key: "invoice/42".into(),
            holder_session_id: 9,
            token: 31,
            requester: "alice".into(),
            reason: "INC-1: hung".into(),
            revoke_session: true,
            fenced,
            safety: "SAFETY STATEMENT".into(),
            ..Default::default()
        }
    }

    /// Runs the prompt with `typed` as the operator's input; answers the outcome and what was
    /// shown.
    fn ask(fenced: bool, typed: &str) -> (Result<Ack, CtlError>, String) {
        let mut input = std::io::Cursor::new(typed.as_bytes().to_vec());
        let mut output = Vec::new();
        let outcome = Confirm::Prompt {
            input: &mut input,
            output: &mut output,
        }
        .acknowledge(&request(fenced), "KEY NOW: holder ledger-writer\n");
        (outcome, String::from_utf8(output).unwrap())
    }

    fn refused(outcome: Result<Ack, CtlError>) -> String {
        match outcome {
            Err(CtlError::Refused(message)) => message,
            other => panic!("not refused by picketctl: {other:?}"),
        }
    }

    #[test]
    fn typing_the_class_kind_acknowledges_it_after_showing_the_safety_statement() {
        let (outcome, shown) = ask(true, "fenced\n");
        assert_eq!(outcome.unwrap(), Ack::Fenced);
        assert!(
            shown.starts_with("KEY NOW: holder ledger-writer"),
            "{shown}"
        );
        for part in [
            "force-release #7 of orders/invoice/42",
            "token 31",
            "alice",
            "INC-1: hung",
            "class kind: fenced",
            "FENCED",
            "SAFETY STATEMENT",
            "Type `fenced` to approve",
        ] {
            assert!(shown.contains(part), "prompt lacks {part:?}:\n{shown}");
        }
        let (outcome, shown) = ask(false, "  Advisory \r\n");
        assert_eq!(outcome.unwrap(), Ack::Advisory);
        assert!(shown.contains("class kind: advisory"), "{shown}");
        assert!(shown.contains("two writers"), "{shown}");
    }

    #[test]
    fn the_wrong_kind_or_anything_else_refuses() {
        let message = refused(ask(true, "advisory\n").0);
        assert!(message.contains("You typed `advisory`"), "{message}");
        assert!(message.contains("class is FENCED"), "{message}");
        // The refusal says the kind and why; it hands over no flag to paste.
        assert!(!message.contains("--ack fenced"), "{message}");
        for typed in ["y\n", "yes\n", "\n", "", "fenced-ish\n"] {
            let message = refused(ask(true, typed).0);
            assert!(message.contains("did not type"), "{typed:?}: {message}");
        }
        let message = refused(ask(false, "fenced\n").0);
        assert!(message.contains("class is ADVISORY"), "{message}");
        assert!(!message.contains("--ack advisory"), "{message}");
    }

    #[test]
    fn an_overlong_answer_is_not_read_in_full() {
        let typed = format!("{}fenced\n", "x".repeat(10 * ANSWER_LEN_MAX));
        let message = refused(ask(true, &typed).0);
        assert!(message.contains("did not type"), "{message}");
    }

    #[test]
    fn without_a_terminal_the_flag_decides_and_its_absence_names_ack() {
        assert_eq!(
            Confirm::Flag(Some(Ack::Fenced))
                .acknowledge(&request(true), "")
                .unwrap(),
            Ack::Fenced
        );
        let message = refused(Confirm::Flag(None).acknowledge(&request(true), ""));
        assert!(message.contains("--ack was not given"), "{message}");
        assert!(
            !message.contains("--ack fenced"),
            "no flag to paste: {message}"
        );
        assert!(message.contains("class is FENCED"), "{message}");
        let message = refused(Confirm::Flag(Some(Ack::Fenced)).acknowledge(&request(false), ""));
        assert!(message.contains("does not match"), "{message}");
    }
}
