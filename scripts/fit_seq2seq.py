"""Train the hand-written encoder-decoder to write BBC News headlines: `--help` lists every option.

Examples:
    python scripts/fit_seq2seq.py                             # tscratch/configs/seq2seq.yaml
    python scripts/fit_seq2seq.py --config seq2seq_tiny       # seconds: a smoke run
    python scripts/fit_seq2seq.py --ckpt_path last            # resume the newest run
    python scripts/fit_seq2seq.py --model.init_from lightning_logs/version_0/checkpoints/last.ckpt
    python scripts/generate.py --ckpt_path CKPT "Article text..."
"""

import sys

from tscratch.cli.fit_seq2seq import main

if __name__ == "__main__":
    sys.exit(main())
