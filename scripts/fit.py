"""Train the hand-written Transformer classifier: `python scripts/fit.py --help` lists every option.

Examples:
    python scripts/fit.py                                   # bbc_news, the packaged default.yaml
    python scripts/fit.py --config tiny                     # tscratch/configs/tiny.yaml
    python scripts/fit.py --model.d_model 128 --trainer.max_epochs 5
    python scripts/fit.py --ckpt_path last                  # resume the newest run
    python scripts/fit.py --config minilm                   # fine-tune all-MiniLM-L6-v2
"""

import sys

from tscratch.cli.fit import main

if __name__ == "__main__":
    sys.exit(main())
