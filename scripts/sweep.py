"""Hyperparameter search over fit.py: `python scripts/sweep.py --help` lists the options.

Examples:
    python scripts/sweep.py --n_trials 20 --timeout 3600      # default.yaml, packaged space
    python scripts/sweep.py --config tiny --n_trials 4 --trainer.max_epochs 2
    python scripts/sweep.py --space my_space.yaml --out sweeps/mine
    python scripts/fit.py --config lightning_logs/sweeps/default/best.yaml   # train the best
"""

import sys

from tscratch.cli.sweep import main

if __name__ == "__main__":
    sys.exit(main())
