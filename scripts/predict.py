"""Label texts with a trained model: `python scripts/predict.py --model SOURCE "text"`.

SOURCE: a fit.py checkpoint, an exported folder or its .onnx file (`--ckpt_path` also works).
"""

import sys

from tscratch.cli.predict import main

if __name__ == "__main__":
    sys.exit(main())
