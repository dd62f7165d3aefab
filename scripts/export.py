"""Export a checkpoint as a folder anyone can load: `scripts/export.py --ckpt_path C --out DIR`."""

import sys

from tscratch.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
