"""Label texts with a trained checkpoint: `python scripts/predict.py --ckpt_path CKPT "text"`."""

import sys

from tscratch.cli.predict import main

if __name__ == "__main__":
    sys.exit(main())
