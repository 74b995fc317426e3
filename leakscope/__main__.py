"""``python -m leakscope``."""

import sys

from leakscope import interrupts

if __name__ == "__main__":
    interrupts.install()  # before the command's imports too (NOTE [Interrupts at any moment])
    try:
        from leakscope.cli import main
    except KeyboardInterrupt:
        interrupts.ending()
        sys.stderr.write("leakscope: interrupted\n")
        sys.exit(interrupts.exit_code())
    main()
