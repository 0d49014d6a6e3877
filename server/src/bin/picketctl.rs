//! `picketctl`: take locks and operate a Picket cluster. See `picketctl --help` and
//! `docs/client.md`.

#[path = "../ctl/mod.rs"]
mod ctl;

fn main() -> std::process::ExitCode {
    ctl::main()
}
