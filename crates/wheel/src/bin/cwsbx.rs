//! The wheel's `cwsbx`: the CLI crate's command.

fn main() -> std::process::ExitCode {
    cwsbx::main()
}
