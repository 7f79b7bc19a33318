"""`python -m cwsandbox_emulator ARGS…`: the packaged `cwsandbox-emulator` binary with ARGS
(`python -m cwsandbox_emulator serve --listen 127.0.0.1:0`)."""

import os
import sys

from ._emulator import EmulatorError, binary


def main() -> None:
    try:
        path = binary()
    except EmulatorError as error:
        sys.exit(f"cwsandbox_emulator: {error}")
    # The binary replaces this interpreter: signals and the exit code are its own.
    os.execv(path, [path, *sys.argv[1:]])


if __name__ == "__main__":
    main()
