//! The wheel's `cwsandbox-emulator`: the emulator crate's command.

fn main() -> std::process::ExitCode {
    cwsandbox_emulator::cli::main()
}
