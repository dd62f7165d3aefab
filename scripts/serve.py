"""Serve a classifier over HTTP: `python scripts/serve.py --model DIR|CKPT [--port 8000]`."""

import sys

from tscratch.cli.serve import main

if __name__ == "__main__":
    sys.exit(main())
