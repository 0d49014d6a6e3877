//! `picketctl`: see the library's documentation (`src/lib.rs`), `picketctl --help` and
//! `docs/client.md`.

fn main() -> std::process::ExitCode {
    picketctl::main()
}
