"""Write headlines with a trained encoder-decoder: `--help` lists every option.

Examples:
    python scripts/generate.py --ckpt_path CKPT "Shares in the firm rose 5% after ..."
    python scripts/generate.py --ckpt_path CKPT --file article.txt --num_beams 4
    cat articles.txt | python scripts/generate.py --ckpt_path CKPT --file - --per_line
"""

import sys

from tscratch.cli.generate import main

if __name__ == "__main__":
    sys.exit(main())
