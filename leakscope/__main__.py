"""``python -m leakscope``."""

from leakscope.cli import main

if __name__ == "__main__":
    main()
