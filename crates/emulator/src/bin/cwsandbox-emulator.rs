//! The `cwsandbox-emulator` binary; the command is the library's [`cwsandbox_emulator::cli`].

fn main() -> std::process::ExitCode {
    cwsandbox_emulator::cli::main()
}
