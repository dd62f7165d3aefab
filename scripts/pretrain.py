"""Pretrain the hand-written encoder as a masked language model: `--help` lists every option.

Examples:
    python scripts/pretrain.py                              # bbc_news train split, pretrain.yaml
    python scripts/pretrain.py --config pretrain_tiny       # seconds: a smoke run
    python scripts/pretrain.py --data.dataset my_texts/     # a folder of .txt files
    python scripts/pretrain.py --data.dataset corpus.txt --data.line_per_document true
    python scripts/pretrain.py --ckpt_path last             # resume the newest run
    python scripts/fit.py --model.init_from lightning_logs/version_0/checkpoints/last.ckpt
"""

import sys

from tscratch.cli.pretrain import main

if __name__ == "__main__":
    sys.exit(main())
