"""`python -m scaler.store`, kept for those who start a store by hand: the command line is scaler/cli/store.py."""

from scaler.cli.store import main

if __name__ == "__main__":
    main()
