//! The `cwsbx` binary; the command lives in the library (`cwsbx::main`) so that the Python
//! wheel (crates/wheel) can carry the same command.

fn main() -> std::process::ExitCode {
    cwsbx::main()
}
